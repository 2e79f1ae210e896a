#!/bin/bash
# nerve-run's command line: every malformed value is a usage error (exit 2, a message naming it)
# before mpirun starts, and --help prints the usage (exit 0). Usage: nerve-run-usage.sh NERVE-RUN
set -u
run=$1
export NERVE_MPIRUN=echo  # would print the command: it must never appear

expect_usage_error() {  # expect_usage_error FRAGMENT ARGS...
  local fragment=$1
  shift
  local out status
  out=$("$run" "$@" 2>&1)
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
expect_usage_error "not '+4'" -np +4 /bin/echo ran-the-program
expect_usage_error "not ' 4'" -np " 4" /bin/echo ran-the-program
(  # CTest sets distributed.nodes for the cases below: here there must be none
  unset NERVE_DISTRIBUTED_NODES
  expect_usage_error "distributed.nodes is empty" --hostfile "${TMPDIR:-/tmp}/nerve-run-usage-hosts" --dry-run \
    /bin/echo ran-the-program
  expect_usage_error "--hostfile needs a file, not ''" --hostfile "" /bin/echo ran-the-program
)

out=$("$run" --help 2>&1)
status=$?
[ "$status" = 0 ] || echo "FAIL: --help exited $status"
grep -q '^usage: nerve-run' <<<"$out" || echo "FAIL: --help printed '$out'"
out=$("$run" -np 2 --dry-run /bin/echo ran 2>&1) || echo "FAIL: a good -np was refused: $out"
grep -q -- '-np 2 ' <<<"$out" || echo "FAIL: -np 2 not passed on: $out"
echo "nerve-run-usage: done"
