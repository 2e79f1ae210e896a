// nerve-run — starts a distributed nerve program under mpirun with the right flags.
//
//   nerve-run [--config FILE] [-np N] [--hostfile PATH] [--dry-run] [--] PROGRAM [ARGS...]
//
// It loads the configuration as a Context would (defaults, FILE or NERVE_CONFIG, NERVE_* variables;
// an unknown key, a value of the wrong type or out of range is an error, exit 2) but makes no
// context: what depends on the machine (an accelerator gpu.devices names, a NUMA node) is checked
// by each rank's context on the machine it runs on, which need not be this one. It writes
// distributed.nodes to an MPI hostfile (`host slots=N` per line; PATH, or a temporary file
// nerve-run-hosts.XXXXXX in $TMPDIR, else /tmp, removed when mpirun exits, whatever its outcome),
// and runs
//
//   mpirun [--hostfile F] -np N [--oversubscribe] [--allow-run-as-root] --bind-to none
//          -x NERVE_DISTRIBUTED_COMMUNICATION_BACKEND=mpi [-x NERVE_CONFIG=FILE] [-x NERVE_*...]
//          PROGRAM ARGS...
//
// N defaults to the total slots of distributed.nodes (1 without nodes). --oversubscribe is added when
// N exceeds the slots (or no nodes are given), --allow-run-as-root when run as root. Every NERVE_*
// variable set here is forwarded to the ranks; NERVE_CONFIG as an absolute path, and --config FILE
// replaces it, for nerve-run and the ranks alike. nerve binds its own workers
// (parallel.thread_affinity), so mpirun must not bind ranks to one core each. --dry-run prints the
// hostfile and the command (it writes the hostfile only to a --hostfile PATH, never a temporary one);
// printed on a standard output that does not take it (closed, full), it is exit 1 with a note.
// The mpirun used is $NERVE_MPIRUN (when set and not empty), else the one found at build time.
// A PROGRAM that starts with '-' (after `--`, which ends nerve-run's options) reaches mpirun as
// ./PROGRAM, so that mpirun does not read it as an option of its own.
// --help prints the usage line (exit 0) when nothing else on the line is wrong (the configuration
// loaded and the --hostfile check above included), as in the other tools. So does the rest of their
// rule: an option's value that is one of the options is a usage error (`--hostfile --dry-run`; write
// `./--dry-run` for a file so named), and a --hostfile PATH where something other than a regular
// file is (a FIFO, a directory, /dev/null) is refused before anything opens it (common/files.hpp),
// and so is one that names the configuration file (--config's or NERVE_CONFIG's).
//
// mpirun runs as a child (fork + exec, then wait) so that the temporary hostfile can be removed after
// it; nerve-run exits with mpirun's status (127 if it could not be started; killed by a signal: the
// same signal). SIGTERM and SIGHUP sent to nerve-run are passed on to mpirun; SIGINT and SIGQUIT
// (which a terminal sends to mpirun too) only wait for it.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "nerve/config.hpp"
#include "nerve/error.hpp"

#include "common/files.hpp"
#include "common/option_value.hpp"
#include "common/standard_output.hpp"

extern char** environ;

namespace {

constexpr const char* usage_line =
    "usage: nerve-run [--config FILE] [-np N] [--hostfile PATH] [--dry-run] [--] PROGRAM [ARGS...]\n";

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr, "nerve-run: %s\n%s", message.c_str(), usage_line);
  std::exit(2);
}

// A rank count: all digits, 1 to 1,000,000 (mpirun's own limits are lower still).
constexpr long max_ranks = 1'000'000;
long parse_ranks(const char* text) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  // Digits only: strtol also takes blanks and a sign ("+4", " 4").
  if (*text < '0' || *text > '9' || end == text || *end != '\0' || errno == ERANGE || value < 1 ||
      value > max_ranks)
    usage(std::string("-np needs a whole number of ranks from 1 to 1000000, not '") + text + "'");
  return value;
}

volatile sig_atomic_t child_pid = 0;

// In nerve-run while mpirun runs: pass termination requests on to it; the wait then ends as it does.
void forward_signal(int signal_number) {
  if (signal_number == SIGTERM || signal_number == SIGHUP) {
    if (child_pid > 0) kill(static_cast<pid_t>(child_pid), signal_number);
  }
}

// run() runs `args` (null-terminated) as a child, waits for it and returns the wait status; -1 when
// it could not fork. A child that cannot exec says so and exits 127.
int run(std::vector<char*>& args) {
  // Installed before the fork so that no signal can end nerve-run before it has cleaned up; exec
  // resets handled signals to their defaults in the child.
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigemptyset(&action.sa_mask);
  for (const int signal_number : {SIGINT, SIGQUIT, SIGTERM, SIGHUP})
    sigaction(signal_number, &action, nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::signal(SIGPIPE, SIG_DFL);  // main() ignores it; an ignored signal would stay so across exec
    execvp(args[0], args.data());
    std::fprintf(stderr, "nerve-run: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  child_pid = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

// environment() is the value of the variable `name`, "" when it is unset or set but empty: a variable
// that expanded to nothing counts as unset, here as for the ranks (NERVE_MPI_THREAD_LEVEL,
// docs/DISTRIBUTED.md).
std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::string temporary_directory() {
  const std::string directory = environment("TMPDIR");
  return directory.empty() ? "/tmp" : directory;
}

// shell_quoted(): `word` as a POSIX shell would need it to stay one word (the --dry-run command can
// be pasted: "--hostfile my hosts" printed bare read as three words).
std::string shell_quoted(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || std::strchr("_@%+=:,./-", c) != nullptr;
  });
  if (plain) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

int main(int argc, char** argv) {
  nerve::tools::ignore_sigpipe();  // `nerve-run --dry-run ... | head -1`: exit 1 with a note, not killed
  std::string config_file;
  std::string hostfile;
  long ranks = 0;
  bool dry_run = false;
  int first = 1;
  // --help answers after every check of the line, and only if nothing on it is wrong: a mistake (a
  // bad option, a --config that does not load, a --hostfile with no distributed.nodes to write) is
  // a usage error with or without it, as in nerve-info and openclaw-benchmark
  // (tools/common/cli_usage.hpp). It needs no program, and writes no hostfile (a --hostfile path is
  // only probed).
  bool help = false;
  // An option given twice is a mistake to report (as openclaw-benchmark does), not a silent "last wins".
  std::vector<std::string> seen;
  const auto once = [&seen](const std::string& option) {
    if (std::find(seen.begin(), seen.end(), option) != seen.end()) usage(option + " given twice");
    seen.push_back(option);
  };
  // An option's value that is one of the options is a usage error, as in the other tools
  // (option_value.hpp): `--hostfile --dry-run PROGRAM` wrote a hostfile named "--dry-run" and ran
  // mpirun for real. `./--dry-run` names such a file.
  const auto value_of = [&](const std::string& option, const std::string& what) -> const char* {
    const char* value = argv[++first];
    const std::string error = nerve::tools::option_as_value(value, what, [](const std::string& name) {
      return name == "--config" || name == "-np" || name == "-n" || name == "--hostfile" ||
             name == "--dry-run" || name == "-h" || name == "--help" || name == "--";
    });
    if (!error.empty()) usage(option + ": " + error);
    return value;
  };
  for (; first < argc; ++first) {
    const std::string arg = argv[first];
    if (arg == "--config" || arg == "--hostfile" || arg == "--dry-run") once(arg);
    if (arg == "-np" || arg == "-n") once("-np");
    if (arg == "-h" || arg == "--help") {
      help = true;
    } else if (arg == "--config" && first + 1 < argc) {
      const char* path = value_of(arg, "a file");
      std::error_code error;
      config_file = std::filesystem::absolute(path, error).string();
      if (*path == '\0' || error) usage(std::string("--config needs a file, not '") + path + "'");
    } else if ((arg == "-np" || arg == "-n") && first + 1 < argc) {
      ranks = parse_ranks(value_of(arg, "a number of ranks"));
    } else if (arg == "--hostfile" && first + 1 < argc) {
      hostfile = value_of(arg, "a file");
      // An empty path (a variable that expanded to nothing) would quietly mean a temporary file.
      if (hostfile.empty()) usage("--hostfile needs a file, not ''");
    } else if (arg == "--dry-run") {
      dry_run = true;
    } else if (arg == "--") {
      ++first;
      break;
    } else if (arg == "--config" || arg == "-np" || arg == "-n" || arg == "--hostfile") {
      usage(arg + " needs a value");
    } else if (arg.starts_with("-")) {
      usage("unknown option " + arg);
    } else {
      break;
    }
  }
  if (first >= argc && !help) usage("no program given");
  // The hostfile may not overwrite the configuration it is made from (--config's file, else
  // NERVE_CONFIG's), however spelt (files.hpp): `--dry-run --config dist.yaml --hostfile dist.yaml`
  // wrote the hostfile over it.
  const std::string environment_config = environment("NERVE_CONFIG");
  for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"--config", config_file},
                                     {"NERVE_CONFIG", environment_config}}) {
    if (nerve::tools::same_file(hostfile, path))
      usage("--hostfile and " + std::string(option) + " name the same file (" + hostfile +
            "): --hostfile would overwrite it");
  }

  nerve::Settings settings;
  if (!config_file.empty()) settings.config_file(config_file, "--config");
  nerve::Config config;
  try {
    config = nerve::Config::load(settings);
  } catch (const nerve::Error& error) {
    std::fprintf(stderr, "nerve-run: %s\n", error.what());
    return 2;
  }

  long slots = 0;
  std::string hosts;
  for (const nerve::DistributedNode& node : config.distributed.nodes) {
    slots += node.slots;
    hosts += node.host + " slots=" + std::to_string(node.slots) + "\n";
  }
  // The default obeys -np's bound too: 300 hosts of 4096 slots asked mpirun for 1,228,800 ranks.
  if (ranks == 0 && slots > max_ranks) {
    usage("distributed.nodes gives " + std::to_string(slots) +
          " slots in all, more ranks than nerve-run starts (" + std::to_string(max_ranks) + "): give -np");
  }
  if (ranks == 0) ranks = slots > 0 ? slots : 1;
  if (!hostfile.empty() && slots == 0) {
    // --hostfile names where distributed.nodes is written, not a file for mpirun to read: with no
    // nodes it would be dropped without a word.
    usage("--hostfile " + hostfile +
          ": distributed.nodes is empty, so there is no hostfile to write (set distributed.nodes, "
          "or give mpirun its own --hostfile)");
  }
  // The hostfile is a regular file, new or replaced (files.hpp): a FIFO there blocked nerve-run, --help
  // included, until a reader came, and /dev/null gave mpirun an empty hostfile.
  if (const std::string error = nerve::tools::not_a_regular_file(hostfile); !error.empty()) {
    std::fprintf(stderr, "nerve-run: --hostfile %s: %s\n", hostfile.c_str(), error.c_str());
    return 2;
  }
  if (help) {
    // Not written for --help, but a path that cannot be is the usage error it is without it: only
    // probed (files.hpp), which leaves it as it was.
    if (const std::string error = hostfile.empty() ? "" : nerve::tools::cannot_write(hostfile);
        !error.empty()) {
      std::fprintf(stderr, "nerve-run: cannot write the hostfile %s: %s\n", hostfile.c_str(), error.c_str());
      return 2;
    }
    std::fputs(usage_line, stdout);
    return nerve::tools::stdout_lost("nerve-run", "the usage line is incomplete") ? 1 : 0;
  }

  // An empty NERVE_MPIRUN (a variable set to nothing) is unset, not a program named "".
  const std::string mpirun = environment("NERVE_MPIRUN");
  std::vector<std::string> command{mpirun.empty() ? NERVE_MPIRUN : mpirun};
  bool temporary_hostfile = false;       // created here: removed after the run
  bool temporary_hostfile_name = false;  // no --hostfile: with --dry-run, a name only
  if (slots > 0) {
    if (hostfile.empty()) {
      temporary_hostfile_name = true;
      std::string path = temporary_directory() + "/nerve-run-hosts.XXXXXX";
      if (!dry_run) {
        const int fd = mkstemp(path.data());
        if (fd < 0) {
          std::fprintf(stderr, "nerve-run: cannot create a temporary hostfile %s: %s\n", path.c_str(),
                       std::strerror(errno));
          return 2;
        }
        close(fd);
        temporary_hostfile = true;
      }
      hostfile = path;
    }
    if (!dry_run || !temporary_hostfile_name) {
      // Replaced whole (files.hpp): a write that fails leaves a --hostfile PATH as it was.
      try {
        nerve::tools::write_file(hostfile, hosts);
      } catch (const std::exception& error) {  // mpirun would only say "internal error" about it
        std::fprintf(stderr, "nerve-run: cannot write the hostfile %s\n", error.what());  // "PATH: why"
        if (temporary_hostfile) std::filesystem::remove(hostfile);
        return 2;
      }
    }
    command.insert(command.end(), {"--hostfile", hostfile});
  }
  command.insert(command.end(), {"-np", std::to_string(ranks)});
  if (slots == 0 || ranks > slots) command.emplace_back("--oversubscribe");
  if (geteuid() == 0) command.emplace_back("--allow-run-as-root");
  command.insert(command.end(), {"--bind-to", "none", "-x", "NERVE_DISTRIBUTED_COMMUNICATION_BACKEND=mpi"});
  // The ranks read the file nerve-run read (--config wins over the environment, as in Config::load),
  // absolute so that a rank's working directory does not matter.
  std::string forwarded_config = config_file;
  if (const std::string named = environment("NERVE_CONFIG"); forwarded_config.empty() && !named.empty())
    forwarded_config = std::filesystem::absolute(named).string();
  if (!forwarded_config.empty()) command.insert(command.end(), {"-x", "NERVE_CONFIG=" + forwarded_config});
  for (char** variable = environ; *variable != nullptr; ++variable) {
    const std::string entry = *variable;
    const std::string name = entry.substr(0, entry.find('='));
    if (name.starts_with("NERVE_") && name != "NERVE_DISTRIBUTED_COMMUNICATION_BACKEND" &&
        name != "NERVE_CONFIG" && name != "NERVE_MPIRUN") {
      command.insert(command.end(), {"-x", name});
    }
  }
  // mpirun takes the first word it does not know as the program: a program named "-x" (given after
  // `--`) read as mpirun's option -x. A name starting with '-' cannot be absolute: "./-x" is that file
  // in the working directory, where mpirun looks for a bare name too, and is no option to anyone.
  const std::string program = argv[first];
  command.push_back(program.starts_with("-") ? "./" + program : program);
  for (int i = first + 1; i < argc; ++i) command.emplace_back(argv[i]);

  if (dry_run) {
    if (!hosts.empty()) std::printf("# hostfile %s\n%s", hostfile.c_str(), hosts.c_str());
    for (const std::string& word : command) std::printf("%s ", shell_quoted(word).c_str());
    std::printf("\n");
    // What --dry-run is for is on its standard output: lost (`> /dev/full`), it exited 0.
    return nerve::tools::stdout_lost("nerve-run", "the command on it is incomplete") ? 1 : 0;
  }
  std::vector<char*> args;
  args.reserve(command.size() + 1);
  for (std::string& word : command) args.push_back(word.data());
  args.push_back(nullptr);
  const int status = run(args);
  if (temporary_hostfile) std::remove(hostfile.c_str());
  if (status < 0) {
    std::fprintf(stderr, "nerve-run: cannot run %s: %s\n", args[0], std::strerror(errno));
    return 127;
  }
  if (WIFSIGNALED(status)) {
    std::signal(WTERMSIG(status), SIG_DFL);
    std::raise(WTERMSIG(status));
    return 128 + WTERMSIG(status);
  }
  return WEXITSTATUS(status);
}
