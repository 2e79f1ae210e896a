#include "config/key_registry.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "config/diagnostics.hpp"
#include "config/enum_names.hpp"
#include "config/suggest.hpp"

namespace nerve::config {
namespace {

using namespace std::chrono_literals;

bool equal_ignoring_case(std::string_view text, std::string_view lower_case) {
  return std::equal(text.begin(), text.end(), lower_case.begin(), lower_case.end(),
                    [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
}

// The words of memory.allocator. (They sit here rather than in enum_names.hpp only because this
// change owns the memory keys' rows and not that file; they can move there as they are.)
inline constexpr std::array<EnumName<MemoryAllocator>, 3> memory_allocator_names{{
    {"system", MemoryAllocator::system},
    {"jemalloc", MemoryAllocator::jemalloc},
    {"tcmalloc", MemoryAllocator::tcmalloc},
}};

// parse_numa_policy() reads memory.numa_policy: local, interleave or preferred:<node>. The node
// number is only checked for form here; the pool checks it against the topology, which the
// configuration layer does not have. Value types have no "word or word:number" kind, so the key is a
// string checked here; the ConfigError names the key and the value, and the loader adds where the
// value was set (apply functions are not told it).
NumaPolicy parse_numa_policy(std::string_view text) {
  constexpr std::string_view blanks = " \t\r\n";
  const auto first = text.find_first_not_of(blanks);
  text = first == std::string_view::npos ? std::string_view{}
                                         : text.substr(first, text.find_last_not_of(blanks) - first + 1);
  if (text.empty()) {  // `numa_policy:` with nothing after it: the empty string of a text key
    throw ConfigError("memory.numa_policy: no value given (expected local, interleave or preferred:<node>)",
                      "memory.numa_policy");
  }
  if (text == "local") return {NumaPolicy::Kind::local, 0};
  if (text == "interleave") return {NumaPolicy::Kind::interleave, 0};
  constexpr std::string_view prefix = "preferred:";
  if (text.starts_with(prefix)) {
    const std::string_view digits = text.substr(prefix.size());
    int node = -1;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), node);
    if (!digits.empty() && error == std::errc{} && end == digits.data() + digits.size() && node >= 0 &&
        node < 4096) {
      return {NumaPolicy::Kind::preferred, node};
    }
  }
  // Suggest for the word before ':' ("prefered:1" -> "preferred:1") or for the whole value.
  std::string hint;
  if (const auto colon = text.find(':'); colon != std::string_view::npos) {
    const std::vector<std::string> words{"preferred"};
    const std::string_view word = text.substr(0, colon);
    if (word != "preferred" && !did_you_mean(word, words).empty()) {
      hint = fmt::format(" (did you mean 'preferred{}'?)", text.substr(colon));
    }
  } else if (text == "preferred") {
    hint = " (preferred needs the node: preferred:0)";
  } else {
    const std::vector<std::string> words{"local", "interleave", "preferred"};
    hint = did_you_mean(text, words);
  }
  throw ConfigError(fmt::format("memory.numa_policy: {} is not local, interleave or preferred:<node> (a NUMA "
                                "node number 0..4095){}",
                                quote(text), hint),
                    "memory.numa_policy");
}

// parse_compression() reads distributed.compression: none, zstd or zstd:<threshold bytes>.
std::pair<Compression, std::size_t> parse_compression(std::string_view text) {
  constexpr std::string_view blanks = " \t\r\n";
  const auto first = text.find_first_not_of(blanks);
  text = first == std::string_view::npos ? std::string_view{}
                                         : text.substr(first, text.find_last_not_of(blanks) - first + 1);
  constexpr std::size_t default_threshold = 4096;
  if (text.empty()) {
    throw ConfigError(
        "distributed.compression: no value given (expected none, zstd or zstd:<threshold bytes>)",
        "distributed.compression");
  }
  if (text == "none") return {Compression::none, default_threshold};
  if (text == "zstd") return {Compression::zstd, default_threshold};
  constexpr std::string_view prefix = "zstd:";
  if (text.starts_with(prefix)) {
    const std::string_view digits = text.substr(prefix.size());
    std::uint64_t threshold = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), threshold);
    if (!digits.empty() && error == std::errc{} && end == digits.data() + digits.size() &&
        threshold <= (std::uint64_t{1} << 30)) {
      return {Compression::zstd, static_cast<std::size_t>(threshold)};
    }
  }
  const std::vector<std::string> words{"none", "zstd"};
  throw ConfigError(fmt::format("distributed.compression: {} is not none, zstd or zstd:<threshold bytes> "
                                "(0..1073741824){}",
                                quote(text), text.starts_with(prefix) ? "" : did_you_mean(text, words)),
                    "distributed.compression");
}

// for_each_item() calls `fn` with each item of a list value: items separated by commas or blanks
// (list keys are one scalar, so that one line of YAML or one environment variable holds them). A
// comma with no item before or after it ("0:2,,1:1", "a,") is an error, as for the list keys
// (value_type.cpp); an empty or blank value has no items.
template <class Fn>
void for_each_item(std::string_view text, std::string_view key, Fn&& fn) {
  constexpr std::string_view blanks = " \t\r\n";
  if (text.find_first_not_of(blanks) == std::string_view::npos) return;
  std::size_t field_start = 0;
  while (true) {
    const std::size_t comma = text.find(',', field_start);
    const std::string_view field = text.substr(
        field_start, comma == std::string_view::npos ? std::string_view::npos : comma - field_start);
    if (field.find_first_not_of(blanks) == std::string_view::npos) {
      throw ConfigError(
          fmt::format("{}: {} has an empty item (a comma with nothing before or after it)", key, quote(text)),
          std::string(key));
    }
    std::size_t position = 0;
    while (position < field.size()) {
      const std::size_t start = field.find_first_not_of(blanks, position);
      if (start == std::string_view::npos) break;
      std::size_t item_end = field.find_first_of(blanks, start);
      if (item_end == std::string_view::npos) item_end = field.size();
      fn(field.substr(start, item_end - start));
      position = item_end;
    }
    if (comma == std::string_view::npos) return;
    field_start = comma + 1;
  }
}

// parse_nodes() reads distributed.nodes: hosts separated by commas or blanks, each `host` or
// `host:slots` (slots 1..4096), e.g. "node1:4, node2:4". A text value: configuration values are
// scalars (value_type.hpp), and one line is also what an environment variable can hold. Two forms
// are refused with their own reason: a host starting with '-' ("-np:2"), which mpirun's launcher
// (ssh) would take for an option, and an IPv6 address ("::1", "[::1]:2"), which Open MPI's mpirun
// (4.1) does not launch on ("Node names must be composed of ... letters, digits, dots, and the hyphen",
// which also rules out '_', refused with the other malformed hosts).
std::vector<DistributedNode> parse_nodes(std::string_view text) {
  std::vector<DistributedNode> nodes;
  for_each_item(text, "distributed.nodes", [&](std::string_view item) {
    const auto refuse = [&](std::string_view why) {
      throw ConfigError(fmt::format("distributed.nodes: {} {}", quote(item), why), "distributed.nodes");
    };
    if (item.starts_with('-')) refuse("starts with '-': a host name cannot (it would read as an option)");
    // An IPv6 address: bracketed, or hex groups (IPv4 at the end allowed) with "::" or all eight of
    // them; other items with two colons ("node1:2:3") are malformed host:slots.
    const bool ipv6_text =
        item.find_first_not_of("0123456789abcdefABCDEF:.") == std::string_view::npos &&
        (item.find("::") != std::string_view::npos || std::count(item.begin(), item.end(), ':') == 7);
    if (item.starts_with('[') || ipv6_text) {
      refuse(
          "is an IPv6 address: not supported, as Open MPI's mpirun takes host names and IPv4 addresses "
          "only (give the host's name)");
    }
    DistributedNode node;
    const std::size_t colon = item.find(':');
    node.host = std::string(item.substr(0, colon));
    bool valid = !node.host.empty() &&
                 node.host.find_first_not_of(
                     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == std::string::npos;
    if (valid && colon != std::string_view::npos) {
      const std::string_view digits = item.substr(colon + 1);
      unsigned slots = 0;
      const auto [last, error] = std::from_chars(digits.data(), digits.data() + digits.size(), slots);
      valid = !digits.empty() && error == std::errc{} && last == digits.data() + digits.size() &&
              slots >= 1 && slots <= 4096;
      node.slots = slots;
    }
    if (!valid) {
      throw ConfigError(fmt::format("distributed.nodes: {} is not host or host:slots (a host name of "
                                    "letters, digits, dots and hyphens, or an IPv4 address; slots 1..4096)",
                                    quote(item)),
                        "distributed.nodes");
    }
    // mpirun refuses a hostfile naming a host twice ("multiple definitions of the slot count"):
    // refused here, where the key and its line can be named.
    for (std::size_t earlier = 0; earlier < nodes.size(); ++earlier) {
      if (nodes[earlier].host == node.host) {
        refuse(
            fmt::format("names host '{}' again (item {} did): list each host once, with all its slots "
                        "({}:N), as mpirun refuses a host defined twice",
                        node.host, earlier + 1, node.host));
      }
    }
    nodes.push_back(std::move(node));
  });
  return nodes;
}

// parse_gpu_stream_priorities() reads scheduler.gpu_stream_priorities: `N` (every CUDA device reserves
// N high-priority streams) or `device:N` items separated by commas or blanks, e.g. "0:2, 1:1"; N is
// 0..16. A YAML file may give seeds/000 §3.2's sequence of {device: 0, high_priority_streams: 2}
// maps instead: the records type writes each as "0:2".
std::vector<Config::Scheduler::GpuStreamPriority> parse_gpu_stream_priorities(std::string_view text) {
  std::vector<Config::Scheduler::GpuStreamPriority> entries;
  const auto number = [](std::string_view digits, unsigned limit, unsigned& out) {
    const auto [last, error] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    return !digits.empty() && error == std::errc{} && last == digits.data() + digits.size() && out <= limit;
  };
  for_each_item(text, "scheduler.gpu_stream_priorities", [&](std::string_view item) {
    Config::Scheduler::GpuStreamPriority entry;
    const std::size_t colon = item.find(':');
    bool valid = true;
    if (colon != std::string_view::npos) {
      unsigned device = 0;
      valid = number(item.substr(0, colon), 1023, device);
      entry.device = static_cast<int>(device);
    }
    valid = valid && number(colon == std::string_view::npos ? item : item.substr(colon + 1), 16,
                            entry.high_priority_streams);
    if (!valid) {
      throw ConfigError(fmt::format("scheduler.gpu_stream_priorities: {} is not N or device:N (a CUDA "
                                    "device number 0..1023, N high-priority streams 0..16), e.g. 0:2,1:1",
                                    quote(item)),
                        "scheduler.gpu_stream_priorities");
    }
    // One reservation per device, and one `N` for the others: a second would silently lose.
    for (const Config::Scheduler::GpuStreamPriority& earlier : entries) {
      if (earlier.device != entry.device) continue;
      throw ConfigError(
          entry.device == -1
              ? fmt::format("scheduler.gpu_stream_priorities: {} gives the count for every device twice",
                            quote(text))
              : fmt::format("scheduler.gpu_stream_priorities: {} names device {} twice", quote(text),
                            entry.device),
          "scheduler.gpu_stream_priorities");
    }
    entries.push_back(entry);
  });
  return entries;
}

// The backends that exist in the specification but not in this build.
std::vector<PlannedChoice> planned_backends() {
  std::vector<PlannedChoice> planned;
#if !NERVE_WITH_MPI
  planned.push_back({"mpi", "a build with MPI (install libopenmpi-dev, reconfigure with NERVE_WITH_MPI=ON)"});
#endif
  planned.push_back({"grpc", "a gRPC transport (not built: only mpi exists)"});
  planned.push_back({"nccl", "an NCCL-style transport (not built: only mpi exists)"});
  return planned;
}

std::vector<std::string_view> built_backends() {
  std::vector<std::string_view> names{"none"};
#if NERVE_WITH_MPI
  names.push_back("mpi");
#endif
  return names;
}

std::vector<KeySpec> build_key_table() {
  // Documentation order: docs/CONFIG.md, Config::entries and nerve-info list keys in this order.
  return {
      {"parallel.thread_pool_size", integer_type(0, 4096, "auto"), "auto",
       "CPU worker threads, counting the application thread while it waits; auto = allowed CPUs",
       [](Config& c, const ParsedValue& v) {
         c.parallel.thread_pool_size = static_cast<unsigned>(v.integer());
       }},
      {"parallel.thread_affinity", choice_type(names_of(thread_affinity_names)), "compact",
       "how workers are bound to cores: compact, scatter or none",
       [](Config& c, const ParsedValue& v) {
         c.parallel.thread_affinity = from_name(thread_affinity_names, v.string());
       }},
      {"parallel.deterministic_mode", boolean_type(), "false",
       "automatic grains split ranges the same way for every worker count (bit-identical reductions)",
       [](Config& c, const ParsedValue& v) { c.parallel.deterministic_mode = v.boolean(); }},
      {"scheduler.policy", choice_type(names_of(scheduler_policy_names)), "locality_aware_stealing",
       "which scheduler places ready tasks on workers and devices",
       [](Config& c, const ParsedValue& v) {
         c.scheduler.policy = from_name(scheduler_policy_names, v.string());
       }},
      {"scheduler.spin_us", integer_type(0, 1'000'000), "50",
       "microseconds an idle worker spins before it sleeps",
       [](Config& c, const ParsedValue& v) { c.scheduler.spin = std::chrono::microseconds{v.integer()}; }},
      {"scheduler.work_stealing_threshold", duration_type(0ns, 10s, 1us), "0",
       "how long a worker's own queues must stay empty before it steals",
       [](Config& c, const ParsedValue& v) {
         c.scheduler.work_stealing_threshold =
             std::chrono::duration_cast<std::chrono::microseconds>(v.duration());
       }},
      {"scheduler.topology_awareness", boolean_type(), "true",
       "thieves try victims in topology-distance order (false: random order)",
       [](Config& c, const ParsedValue& v) { c.scheduler.topology_awareness = v.boolean(); }},
      {"scheduler.numa_affinity", choice_type(names_of(numa_affinity_names)), "preferred",
       "whether tasks run on the NUMA node that holds their data: strict, preferred or none",
       [](Config& c, const ParsedValue& v) {
         c.scheduler.numa_affinity = from_name(numa_affinity_names, v.string());
       }},
      {"scheduler.gpu_stream_priorities", records_type("N or device:N", {"device", "high_priority_streams"}),
       "0",
       "high-priority streams per CUDA device for tasks of priority > 0: N (every device) or "
       "device:N,... (e.g. 0:2,1:1)",
       [](Config& c, const ParsedValue& v) {
         c.scheduler.gpu_stream_priorities = parse_gpu_stream_priorities(v.string());
       }},
      {"task_queue.type", choice_type(names_of(queue_type_names)), "lock_free_mpsc",
       "implementation of the per-device ready queues",
       [](Config& c, const ParsedValue& v) { c.task_queue.type = from_name(queue_type_names, v.string()); }},
      {"task_queue.per_device_queue_depth", integer_type(1, 1 << 20), "1024",
       "capacity of each device's ready queue; a full queue back-pressures the submitter",
       [](Config& c, const ParsedValue& v) {
         c.task_queue.per_device_queue_depth = static_cast<std::uint32_t>(v.integer());
       }},
      {"task_queue.max_in_flight", integer_type(16, 1 << 26), "262144",
       "submitted but unfinished tasks above which submit() helps run tasks or blocks",
       [](Config& c, const ParsedValue& v) {
         c.task_queue.max_in_flight = static_cast<std::uint32_t>(v.integer());
       }},
      {"memory.allocator", choice_type(names_of(memory_allocator_names)), "system",
       "where memory nodes get their big blocks: system (mmap), jemalloc or tcmalloc",
       [](Config& c, const ParsedValue& v) {
         c.memory.allocator = from_name(memory_allocator_names, v.string());
       }},
      {"memory.per_thread_pool_size", integer_type(0, std::int64_t{1} << 30), "1048576",
       "bytes of free chunks each thread keeps per memory pool (0 = no per-thread cache)",
       [](Config& c, const ParsedValue& v) {
         c.memory.per_thread_pool_size = static_cast<std::size_t>(v.integer());
       }},
      {"memory.global_pool", boolean_type(), "true",
       "threads share one central free list per size class (false: per-thread free lists only)",
       [](Config& c, const ParsedValue& v) { c.memory.global_pool = v.boolean(); }},
      {"memory.numa_policy", text_type(), "local",
       "where host pool memory goes: local (first touch), interleave or preferred:<node>",
       [](Config& c, const ParsedValue& v) { c.memory.numa_policy = parse_numa_policy(v.string()); }},
      {"memory.host_node_limit", integer_type(0, std::numeric_limits<std::int64_t>::max(), "none"), "0",
       "bytes of buffer data each host NUMA node's pool may hold (0 = no limit); beyond it a new "
       "buffer is an out_of_memory error",
       [](Config& c, const ParsedValue& v) {
         // Below this an empty pool cannot hold every buffer up to the limit: the block for a
         // buffer of 32-64 KiB is a 128 KiB slab (size_classes.hpp).
         constexpr std::size_t smallest = std::size_t{128} << 10;
         const auto limit = static_cast<std::size_t>(v.integer());
         if (limit != 0 && limit < smallest) {
           throw ConfigError(
               fmt::format("memory.host_node_limit: {} is below {} bytes, the smallest limit under "
                           "which a pool holds every buffer up to the limit (its blocks for "
                           "buffers of 32-64 KiB are 128 KiB)",
                           limit, smallest),
               "memory.host_node_limit");
         }
         c.memory.host_node_limit = limit;
       }},
      {"memory.huge_pages", boolean_type(), "true",
       "host blocks of 4 MiB and more use transparent huge pages (madvise MADV_HUGEPAGE)",
       [](Config& c, const ParsedValue& v) { c.memory.huge_pages = v.boolean(); }},
      {"gpu.devices", list_type("device indices or names, or 'all' or 'none'"), "all",
       "accelerator devices used: all, none, or indices / names (e.g. 0,2 or pthread)",
       [](Config& c, const ParsedValue& v) {
         c.gpu.devices.clear();
         std::string_view rest = v.string();
         while (!rest.empty()) {
           const auto comma = rest.find(',');
           c.gpu.devices.emplace_back(rest.substr(0, comma));
           rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
         }
         // Items are compared without regard to case (selection.cpp): `None` loads no driver either.
         if (c.gpu.devices.size() == 1 && equal_ignoring_case(c.gpu.devices[0], "none"))
           c.gpu.devices.clear();
       }},
      {"gpu.stream_count", integer_type(1, 16), "4",
       "queues (streams) per device for kernels (copies have one per direction)",
       [](Config& c, const ParsedValue& v) { c.gpu.stream_count = static_cast<unsigned>(v.integer()); }},
      {"gpu.max_pending_transfers", integer_type(1, 1024), "32",
       "copies in flight per device; further copies wait for one to finish",
       [](Config& c, const ParsedValue& v) {
         c.gpu.max_pending_transfers = static_cast<unsigned>(v.integer());
       }},
      {"gpu.peer_access", boolean_type(), "true",
       "device-to-device copies go direct when both devices share a driver context (else via host)",
       [](Config& c, const ParsedValue& v) { c.gpu.peer_access = v.boolean(); }},
      {"gpu.unified_memory", boolean_type(), "false",
       "CUDA devices keep buffers in managed memory (cudaMallocManaged), never more than is free",
       [](Config& c, const ParsedValue& v) { c.gpu.unified_memory = v.boolean(); }},
      {"gpu.async_prefetch", boolean_type(), "true",
       "with gpu.unified_memory, prefetch each access to the device ahead of its task (cudaMemPrefetchAsync)",
       [](Config& c, const ParsedValue& v) { c.gpu.async_prefetch = v.boolean(); }},
      {"gpu.cache_hints", boolean_type(), "true",
       "with gpu.unified_memory, advise the driver per access (cudaMemAdvise: read-mostly, preferred "
       "location)",
       [](Config& c, const ParsedValue& v) { c.gpu.cache_hints = v.boolean(); }},
      {"gpu.pin_host_buffers", boolean_type(), "true",
       "page-lock host copies of buffers of 1 MiB and more on their first CUDA transfer (DMA in place, "
       "no staging copy)",
       [](Config& c, const ParsedValue& v) { c.gpu.pin_host_buffers = v.boolean(); }},
      {"perf.trace", output_path_type(), "",
       "write a Chrome trace-event timeline (Perfetto, chrome://tracing) here when the context ends",
       [](Config& c, const ParsedValue& v) { c.perf.trace = v.string(); }},
      {"perf.record_tasks", boolean_type(), "false",
       "keep a record per task (device, times, bytes) for dump_perf_stats",
       [](Config& c, const ParsedValue& v) { c.perf.record_tasks = v.boolean(); }},
      {"perf.max_task_records", integer_type(0, std::int64_t{1} << 32), "1048576",
       "task records kept at most; later tasks are only counted",
       [](Config& c, const ParsedValue& v) {
         c.perf.max_task_records = static_cast<std::uint64_t>(v.integer());
       }},
      {"perf.models", boolean_type(), "false",
       "learn kernels' run times per device and data size, kept in perf.model_dir between runs",
       [](Config& c, const ParsedValue& v) { c.perf.models = v.boolean(); }},
      {"perf.model_dir", output_path_type("the default directory"), "",
       "where performance models are kept (empty: $XDG_CACHE_HOME/nerve/perfmodels, else "
       "$HOME/.cache/nerve/perfmodels, else $TMPDIR/nerve-perfmodels, else /tmp/nerve-perfmodels)",
       [](Config& c, const ParsedValue& v) { c.perf.model_dir = v.string(); }},
      {"perf.decision_log", output_path_type(), "",
       "write each heft placement decision (candidates, predicted finish times, why) here as JSON lines",
       [](Config& c, const ParsedValue& v) { c.perf.decision_log = v.string(); }},
      {"perf.enable_counters", boolean_type(), "false",
       "sample hardware counters (perf_event), else software counters, while the context lives",
       [](Config& c, const ParsedValue& v) { c.perf.enable_counters = v.boolean(); }},
      {"perf.counter_interval_ms", integer_type(1, 3'600'000), "100",
       "milliseconds between two counter samples",
       [](Config& c, const ParsedValue& v) {
         c.perf.counter_interval = std::chrono::milliseconds{v.integer()};
       }},
      {"distributed.communication_backend", choice_type(built_backends(), planned_backends()), "none",
       "how the ranks of a distributed run communicate: none (one process) or mpi",
       [](Config& c, const ParsedValue& v) {
         c.distributed.communication_backend = from_name(communication_backend_names, v.string());
       }},
      {"distributed.nodes", text_type(), "",
       "hosts of a distributed run for nerve-run's MPI hostfile: host[:slots], comma-separated",
       [](Config& c, const ParsedValue& v) { c.distributed.nodes = parse_nodes(v.string()); }},
      {"distributed.sync_interval", duration_type(0ns, 10s, 1us), "1ms",
       "longest time an outgoing message waits in a batch before it is sent",
       [](Config& c, const ParsedValue& v) {
         c.distributed.sync_interval = std::chrono::duration_cast<std::chrono::microseconds>(v.duration());
       }},
      {"distributed.batch_size", integer_type(1, 4096), "1",
       "small messages to one rank aggregated into one MPI message (1 = no batching)",
       [](Config& c, const ParsedValue& v) {
         c.distributed.batch_size = static_cast<std::uint32_t>(v.integer());
       }},
      {"distributed.compression", text_type(), "none",
       "payload compression: none, zstd or zstd:<threshold bytes> (default threshold 4096)",
       [](Config& c, const ParsedValue& v) {
         const auto [compression, threshold] = parse_compression(v.string());
         c.distributed.compression = compression;
         c.distributed.compression_threshold = threshold;
       }},
      {"topology.synthetic", text_type(), "",
       "an hwloc synthetic topology description used instead of the real machine",
       [](Config& c, const ParsedValue& v) { c.topology.synthetic = v.string(); }},
      {"topology.xml", readable_file_type(), "",
       "an hwloc XML topology file used instead of the real machine",
       [](Config& c, const ParsedValue& v) { c.topology.xml = v.string(); }},
  };
}

std::vector<PlannedKey> build_planned_key_table() {
  // Every key of SPEC.md exists now; a key announced before its feature is built goes here, with
  // what it arrives with.
  return {};
}

std::string_view section_of(std::string_view key) { return key.substr(0, key.find('.')); }

// suggestion() finds what a user probably meant by the unknown key `name`: a key whose last part is
// exactly `name` (someone wrote "policy" for "scheduler.policy"), else the nearest key by edit
// distance, else a key of another section with the same last part ("parallel.policy": the key is
// in the wrong section), else the keys of its section when the section exists (or `name` is one),
// else the nearest section. A section is never offered as if it were a key.
std::string suggestion(std::string_view name) {
  const std::vector<std::string> keys = all_key_names();
  const auto leaf = [](std::string_view key) { return key.substr(key.find('.') + 1); };
  for (const std::string& key : keys) {
    if (leaf(key) == name) return fmt::format(" (did you mean '{}'?)", key);
  }
  if (std::string keys_hint = did_you_mean(name, keys); !keys_hint.empty()) return keys_hint;
  if (name.find('.') != std::string_view::npos) {
    for (const std::string& key : keys) {
      if (leaf(key) == leaf(name)) return fmt::format(" (did you mean '{}'?)", key);
    }
  }
  const std::string_view section = section_of(name);
  const std::vector<std::string> sections = section_names();
  if (std::find(sections.begin(), sections.end(), section) != sections.end()) {
    std::string listed;
    for (const std::string& key : keys) {
      if (section_of(key) == section) listed += fmt::format("{}{}", listed.empty() ? "" : ", ", key);
    }
    return fmt::format(" ('{}' is a section; its keys are {})", section, listed);
  }
  if (auto match = closest_match(section, sections))
    return fmt::format(" (did you mean section '{}'?)", *match);
  return {};
}

}  // namespace

const std::vector<KeySpec>& key_table() {
  static const std::vector<KeySpec> table = build_key_table();
  return table;
}

const std::vector<PlannedKey>& planned_key_table() {
  static const std::vector<PlannedKey> table = build_planned_key_table();
  return table;
}

const KeySpec* find_key(std::string_view name) {
  const auto& table = key_table();
  const auto it = std::find_if(table.begin(), table.end(), [&](const KeySpec& k) { return k.name == name; });
  return it == table.end() ? nullptr : &*it;
}

const PlannedKey* find_planned_key(std::string_view name) {
  const auto& table = planned_key_table();
  const auto it =
      std::find_if(table.begin(), table.end(), [&](const PlannedKey& k) { return k.name == name; });
  return it == table.end() ? nullptr : &*it;
}

std::string unavailable_key_message(std::string_view name) {
  if (const PlannedKey* planned = find_planned_key(name)) {
    return fmt::format("configuration key '{}' is not available in this build yet: it arrives with {}", name,
                       planned->arrives_with);
  }
  if (name.find('.') != std::string_view::npos && !is_section(section_of(name))) {
    return fmt::format("unknown configuration key {}: there is no section {}{}", quote(name),
                       quote(section_of(name)), suggestion(name));
  }
  return fmt::format("unknown configuration key {}{}", quote(name), suggestion(name));
}

const KeySpec& resolve_key(std::string_view name, const ConfigOrigin& origin) {
  if (const KeySpec* spec = find_key(name)) return *spec;
  throw_config_error(origin, name, unavailable_key_message(name));
}

bool is_section(std::string_view name) {
  const auto sections = section_names();
  return std::find(sections.begin(), sections.end(), name) != sections.end();
}

void throw_unknown_section(std::string_view name, const ConfigOrigin& origin) {
  throw_config_error(
      origin, name,
      fmt::format("unknown configuration section {}{}", quote(name), did_you_mean(name, section_names())));
}

std::vector<std::string> section_names() {
  std::vector<std::string> sections;
  auto add = [&](std::string_view key) {
    const std::string section(section_of(key));
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) sections.push_back(section);
  };
  for (const KeySpec& key : key_table()) add(key.name);
  for (const PlannedKey& key : planned_key_table()) add(key.name);
  return sections;
}

std::vector<std::string> all_key_names() {
  std::vector<std::string> names;
  for (const KeySpec& key : key_table()) names.emplace_back(key.name);
  for (const PlannedKey& key : planned_key_table()) names.emplace_back(key.name);
  return names;
}

std::string environment_variable_name(std::string_view key) {
  std::string name = "NERVE_";
  for (char c : key) {
    if (c == '.') {
      name += '_';
    } else if (c >= 'a' && c <= 'z') {
      name += static_cast<char>(c - 'a' + 'A');
    } else {
      name += c;
    }
  }
  return name;
}

}  // namespace nerve::config
