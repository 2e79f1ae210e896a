#!/usr/bin/env bash
# check-watchdog.sh <watchdog_fixture> gdb|signals — proves the test watchdog works.
#
# Runs the fixture (a test that hangs in two threads) with a 6 s NERVE_TEST_TIMEOUT and expects it to
# abort (exit 134) with "backtraces of all threads" and the hanging function's frame in both threads'
# stacks. `signals` sets NERVE_TEST_WATCHDOG_NO_GDB=1 to test the fallback that works without gdb.
set -uo pipefail

fixture=${1:?usage: check-watchdog.sh <fixture> gdb|signals}
mode=${2:?usage: check-watchdog.sh <fixture> gdb|signals}
case $mode in
  gdb) unset NERVE_TEST_WATCHDOG_NO_GDB ;;
  signals) export NERVE_TEST_WATCHDOG_NO_GDB=1 ;;
  *) echo "check-watchdog: unknown mode '$mode'" >&2; exit 2 ;;
esac
export NERVE_TEST_TIMEOUT=6

fail() {
  echo "check-watchdog: FAIL ($mode): $*"
  exit 1
}

# The outer timeout only guards against a watchdog that never fires.
output=$(timeout -k 5 45 "$fixture" 2>&1)
status=$?
printf '%s\n' "$output"
echo "----"

[[ $status -ne 0 ]] || fail "the hanging test exited 0"
[[ $status -ne 124 && $status -ne 137 ]] || fail "the watchdog never fired (the outer timeout killed the test)"
[[ $status -eq 134 ]] || fail "expected an abort (exit 134), got exit $status"
grep -q "backtraces of all threads" <<<"$output" || fail "no 'backtraces of all threads' header"
frames=$(grep -c "hang_in_watchdog_fixture" <<<"$output")
[[ $frames -ge 2 ]] || fail "expected hang_in_watchdog_fixture in both hanging threads' stacks, found $frames frame(s)"

if [[ $mode == gdb ]]; then
  if grep -q "^\*\*\* backtraces via gdb" <<<"$output" && ! grep -q "gdb printed no stack" <<<"$output"; then
    method="gdb"
  else
    method="the signal fallback (gdb missing or unable to attach here)"
  fi
else
  grep -q "backtraces via signals" <<<"$output" || fail "the signal fallback did not run"
  method="signals"
fi
echo "check-watchdog: PASS ($mode): aborted with every thread's stack, printed by $method"
