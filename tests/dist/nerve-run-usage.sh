#!/bin/bash
# nerve-run's command line: every malformed value is a usage error (exit 2, a message naming it)
# before mpirun starts, --help among them (a configuration that does not load, a --hostfile that
# cannot be written included), and --help alone prints the usage (exit 0).
# Usage: nerve-run-usage.sh NERVE-RUN
set -u
run=$1
export NERVE_MPIRUN=echo  # would print the command: it must never appear

expect_usage_error() {  # expect_usage_error FRAGMENT ARGS...
  local fragment=$1
  shift
  local out status
  out=$(timeout 10 "$run" "$@" 2>&1)  # 124: it hung
  status=$?
  if [ "$status" != 2 ]; then echo "FAIL: nerve-run $* exited $status (not 2): $out"; return; fi
  if ! grep -qF -- "$fragment" <<<"$out"; then echo "FAIL: nerve-run $*: '$out' lacks '$fragment'"; return; fi
  if grep -q 'ran-the-program' <<<"$out"; then echo "FAIL: nerve-run $* started mpirun"; fi
}

expect_usage_error "--config needs a file, not ''" --config "" /bin/echo ran-the-program
expect_usage_error "--hostfile needs a file, not ''" --hostfile "" /bin/echo ran-the-program
expect_usage_error "not '3abc'" -np 3abc /bin/echo ran-the-program
expect_usage_error "not '2.9'" -np 2.9 /bin/echo ran-the-program
expect_usage_error "not '99999999999999999999999'" -np 99999999999999999999999 /bin/echo ran-the-program
expect_usage_error "not '0'" -n 0 /bin/echo ran-the-program
expect_usage_error "not ''" -np "" /bin/echo ran-the-program
expect_usage_error "unknown option --bogus" --bogus /bin/echo ran-the-program
# Without -np, the total slots obey -np's bound too: 245 hosts of 4096 slots asked mpirun for
# 1,003,520 ranks.
NERVE_DISTRIBUTED_NODES=$(printf 'h%d:4096 ' $(seq 245)) expect_usage_error \
  "distributed.nodes gives 1003520 slots in all, more ranks than nerve-run starts (1000000): give -np" \
  --dry-run /bin/echo ran-the-program
# --help answers only when nothing else on the line is wrong, as in nerve-info and openclaw-benchmark:
# `--help --bogus` printed the usage and exited 0.
expect_usage_error "unknown option --bogus" --help --bogus /bin/echo ran-the-program
expect_usage_error "unknown option --bogus" -h --bogus
expect_usage_error "not '0'" --help -np 0 /bin/echo ran-the-program
# So is every check made after reading the line: a configuration that does not load, a hostfile that
# cannot be written (--help printed the usage and exited 0).
expect_usage_error "cannot open the configuration file" --help --config /nonexistent/nerve.yaml
expect_usage_error "cannot open the configuration file" --config /nonexistent/nerve.yaml --help /bin/echo ran-the-program
expect_usage_error "cannot write the hostfile /proc/no/such/dir/hosts" --help --hostfile /proc/no/such/dir/hosts
expect_usage_error "not '+4'" -np +4 /bin/echo ran-the-program
expect_usage_error "not ' 4'" -np " 4" /bin/echo ran-the-program
# An empty NERVE_MPIRUN is unset: the mpirun found at build time runs (--dry-run prints its command).
out=$(NERVE_MPIRUN= NERVE_DISTRIBUTED_NODES=localhost:1 "$run" --dry-run /bin/echo x 2>&1)
command_line=$(grep "/bin/echo x" <<<"$out")
if [ -z "$command_line" ] || [[ "$command_line" == " "* ]]; then
  echo "FAIL: NERVE_MPIRUN='' --dry-run: $out"
fi
# The --dry-run command can be pasted into a shell: words with blanks or quotes are quoted.
out=$(NERVE_DISTRIBUTED_NODES=localhost:1 "$run" --dry-run /bin/echo "two words" "it's" plain 2>&1)
if ! grep -qF "/bin/echo 'two words' 'it'\''s' plain" <<<"$out"; then
  echo "FAIL: --dry-run does not quote: $out"
fi
# An option given twice is reported, not "the last one wins".
expect_usage_error "-np given twice" -np 2 -n 3 /bin/echo ran-the-program
expect_usage_error "--config given twice" --config /dev/null --config /dev/null /bin/echo ran-the-program
expect_usage_error "--dry-run given twice" --dry-run --dry-run /bin/echo ran-the-program
(  # CTest sets distributed.nodes for the cases below: here there must be none
  unset NERVE_DISTRIBUTED_NODES
  expect_usage_error "distributed.nodes is empty" --hostfile "${TMPDIR:-/tmp}/nerve-run-usage-hosts" --dry-run \
    /bin/echo ran-the-program
  expect_usage_error "--hostfile needs a file, not ''" --hostfile "" /bin/echo ran-the-program
  expect_usage_error "distributed.nodes is empty" --help --hostfile "${TMPDIR:-/tmp}/nerve-run-usage-hosts"
)

# The configuration is checked as loading it checks (keys, types, ranges: exit 2, naming the key)
# but not against this machine: the ranks may run elsewhere (docs/DISTRIBUTED.md).
config_dir=$(mktemp -d)
trap 'rm -rf "$config_dir"' EXIT
printf 'scheduler:\n  spin_us: -5\n' >"$config_dir/range.yaml"
printf 'scheduler:\n  polcy: eager\n' >"$config_dir/key.yaml"
printf 'gpu:\n  devices: 5\nmemory:\n  numa_policy: preferred:3\n' >"$config_dir/machine.yaml"
expect_usage_error "scheduler.spin_us" --config "$config_dir/range.yaml" /bin/echo ran-the-program
expect_usage_error "scheduler.polcy" --config "$config_dir/key.yaml" /bin/echo ran-the-program
out=$("$run" --dry-run --config "$config_dir/machine.yaml" /bin/echo ran 2>&1) ||
  echo "FAIL: a configuration for other machines (gpu.devices: 5, preferred:3) was refused: $out"

# The hostfile may not overwrite the configuration it is made from, --config's file or NERVE_CONFIG's
# (however spelt): `--dry-run --config dist.yaml --hostfile dist.yaml` wrote the hostfile over it.
printf 'distributed:\n  nodes: "confighost:2"\n' >"$config_dir/dist.yaml"
cp "$config_dir/dist.yaml" "$config_dir/dist.yaml.before"
for help in "" --help; do
  expect_usage_error "--hostfile and --config name the same file ($config_dir/dist.yaml)" $help --dry-run \
    --config "$config_dir/dist.yaml" --hostfile "$config_dir/dist.yaml" /bin/echo ran-the-program
  expect_usage_error "--hostfile and --config name the same file" $help --config "$config_dir/dist.yaml" \
    --hostfile "$config_dir/./dist.yaml" /bin/echo ran-the-program
  (
    cd "$config_dir" || exit 1
    export NERVE_CONFIG=dist.yaml
    expect_usage_error "--hostfile and NERVE_CONFIG name the same file" $help --dry-run --hostfile ./dist.yaml \
      /bin/echo ran-the-program
  )
done
cmp -s "$config_dir/dist.yaml" "$config_dir/dist.yaml.before" || echo "FAIL: the hostfile overwrote the configuration"

# A hostfile whose write fails (here the file size limit) leaves the previous one as it was: it was
# truncated and written in place, half-written.
printf 'previous slots=1\n' >"$config_dir/hosts"
out=$(trap '' XFSZ; ulimit -f 0; NERVE_DISTRIBUTED_NODES=localhost:2 "$run" --dry-run --hostfile "$config_dir/hosts" \
  /bin/echo ran-the-program 2>&1)
status=$?
[ "$status" = 2 ] && grep -q "nerve-run: cannot write the hostfile $config_dir/hosts: cannot write this file" <<<"$out" ||
  echo "FAIL: a hostfile write past the size limit: exit status $status: '$out'"
[ "$(cat "$config_dir/hosts")" = "previous slots=1" ] || echo "FAIL: the failed write changed the previous hostfile"

out=$("$run" --help 2>&1)
status=$?
[ "$status" = 0 ] || echo "FAIL: --help exited $status"
grep -q '^usage: nerve-run' <<<"$out" || echo "FAIL: --help printed '$out'"
out=$("$run" -np 2 --help /bin/echo ran-the-program 2>&1)
status=$?
[ "$status" = 0 ] && grep -q '^usage: nerve-run' <<<"$out" || echo "FAIL: -np 2 --help PROGRAM: $status '$out'"
# --help with a --hostfile that can be written writes nothing there.
help_hosts="$config_dir/help-hosts"
out=$("$run" --help --hostfile "$help_hosts" 2>&1) || echo "FAIL: --help --hostfile (writable): $out"
[ -e "$help_hosts" ] && echo "FAIL: --help --hostfile left $help_hosts behind"
# A hostfile path where something other than a regular file is is refused, --help or not, before
# anything opens it: a FIFO blocked nerve-run until a reader came (--help too), /dev/null gave mpirun
# an empty hostfile.
mkfifo "$config_dir/fifo"
for hosts in "$config_dir/fifo" /dev/null "$config_dir"; do
  for help in "" --help; do
    expect_usage_error "--hostfile $hosts: this is a" $help --hostfile "$hosts" --dry-run /bin/echo ran-the-program
  done
done
# An option's value that is one of the options is a usage error, as in nerve-info and
# openclaw-benchmark: `--hostfile --dry-run PROGRAM` wrote a hostfile named "--dry-run" and ran
# mpirun for real. `./--dry-run` names such a file.
(
  cd "$config_dir" || exit 1
  expect_usage_error "--hostfile: needs a file; got the option --dry-run" --hostfile --dry-run /bin/echo ran-the-program
  expect_usage_error "--config: needs a file; got the option --dry-run" --config --dry-run /bin/echo ran-the-program
  expect_usage_error "--config: needs a file; got the option --hostfile" --config --hostfile=h /bin/echo ran-the-program
  expect_usage_error "-np: needs a number of ranks; got the option --help" -np --help /bin/echo ran-the-program
  expect_usage_error "--hostfile: needs a file; got the option -h" --help --hostfile -h
  [ -e ./--dry-run ] && echo "FAIL: --hostfile --dry-run wrote a file named --dry-run"
  printf 'distributed:\n  nodes: "dashhost:1"\n' >./--dry-run
  out=$(env -u NERVE_DISTRIBUTED_NODES "$run" --config ./--dry-run --dry-run /bin/echo ran 2>&1)
  grep -q 'dashhost slots=1' <<<"$out" || echo "FAIL: --config ./--dry-run did not read that file: $out"
)
# A program named like an option, given after `--`, reaches mpirun as a program: "-x" went to mpirun
# as its option -x. "./-x" is that file in the working directory; other names pass as they are.
out=$(NERVE_DISTRIBUTED_NODES=localhost:1 "$run" --dry-run -- -x --flag 2>&1) || echo "FAIL: -- -x: $out"
grep -qE -- " \./-x --flag $" <<<"$out" || echo "FAIL: -- -x did not reach mpirun as ./-x: $out"
out=$(NERVE_DISTRIBUTED_NODES=localhost:1 "$run" --dry-run -- prog -x 2>&1) || echo "FAIL: -- prog: $out"
grep -qE -- " prog -x $" <<<"$out" || echo "FAIL: -- prog -x changed: $out"
out=$("$run" -np 2 --dry-run /bin/echo ran 2>&1) || echo "FAIL: a good -np was refused: $out"
grep -q -- '-np 2 ' <<<"$out" || echo "FAIL: -np 2 not passed on: $out"
# --dry-run's output lost (a full device, a closed standard output) is exit 1 with a note, as --help's
# is: it exited 0 with nothing printed.
for help in "" --help; do
  for lost in full closed pipe; do
    if [ $lost = full ]; then
      out=$(NERVE_DISTRIBUTED_NODES=localhost:1 "$run" --dry-run $help /bin/echo x 2>&1 >/dev/full)
    elif [ $lost = pipe ]; then  # a reader that quit early: SIGPIPE killed nerve-run, silently
      out=$(NERVE_DISTRIBUTED_NODES=localhost:1 python3 -c 'import os, subprocess, sys
reader, writer = os.pipe()
os.close(reader)
sys.exit(subprocess.run(sys.argv[1:], stdout=writer).returncode % 256)' "$run" --dry-run $help /bin/echo x 2>&1)
    else
      out=$(NERVE_DISTRIBUTED_NODES=localhost:1 "$run" --dry-run $help /bin/echo x 2>&1 >&-)
    fi
    status=$?
    [ "$status" = 1 ] && grep -q "nerve-run: the standard output was closed early" <<<"$out" ||
      echo "FAIL: --dry-run $help, stdout $lost: exit status $status: '$out'"
  done
done
# nerve-run ignores SIGPIPE for itself; the mpirun it starts gets the default back (an ignored
# signal stays ignored across exec, and every rank would inherit it).
launcher=$(mktemp)
printf '#!/bin/sh\ngrep SigIgn /proc/$$/status\n' >"$launcher"
chmod +x "$launcher"
out=$(NERVE_MPIRUN=$launcher "$run" -np 1 /bin/true 2>&1)
rm -f "$launcher"
ignored=$(awk '{print $2}' <<<"$out")
[[ $ignored =~ ^[0-9a-f]+$ ]] && (((0x$ignored & 0x1000) == 0)) ||
  echo "FAIL: the launcher started with SIGPIPE ignored (SigIgn: '$out')"
echo "nerve-run-usage: done"
