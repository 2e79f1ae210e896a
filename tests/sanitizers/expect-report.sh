#!/usr/bin/env bash
# expect-report.sh '<expected text>' <command...> — passes when the command fails (non-zero exit) and
# its output contains the expected sanitizer report.
set -uo pipefail
expected=${1:?usage: expect-report.sh <expected text> <command...>}
shift
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output" | head -n 40
echo "----"
if [[ $status -eq 0 ]]; then
  echo "expect-report: FAIL: '$*' exited 0; the sanitizer did not stop it"
  exit 1
fi
if ! grep -qF -- "$expected" <<<"$output"; then
  echo "expect-report: FAIL: no '$expected' in the output of '$*' (exit $status)"
  exit 1
fi
echo "expect-report: PASS: '$*' failed (exit $status) with '$expected'"
