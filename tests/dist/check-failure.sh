#!/usr/bin/env bash
# check-failure.sh <mpirun> <ranks> <program> <throw|die|barrier|escape|mismatch|rethrow|send_fails|transfer_fails> — a failure on rank 1 must end all ranks within
# 20 s (a bound for a loaded machine) with a non-zero status; `throw` must also print the failing task and rank.
set -uo pipefail
mpirun=$1 ranks=$2 program=$3 mode=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NERVE_DISTRIBUTED_COMMUNICATION_BACKEND=mpi NERVE_PARALLEL_THREAD_POOL_SIZE=2
start=$(date +%s%N)
output=$(timeout -s KILL 30 "$mpirun" -np "$ranks" --oversubscribe --bind-to none "$program" "$mode" 2>&1)
status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$output" | tail -n 30
echo "check-failure: exit status $status after ${elapsed_ms} ms"
if [[ $status -eq 0 ]]; then echo "FAIL: the job succeeded"; exit 1; fi
# (A rank killed by a signal makes mpirun exit 128 + signal too; a hang is told apart by the time.)
if ((elapsed_ms > 20000)); then echo "FAIL: the job took over 20 s to end (or hung until the 30 s timeout)"; exit 1; fi
if [[ $mode == throw ]] && ! grep -q "task 'boom' failed on rank 1: injected failure" <<<"$output"; then
  echo "FAIL: no clear error naming the task and rank"; exit 1
fi
if [[ $mode == barrier ]] && ! grep -q "rank 0: barrier: distributed run failed: task 'boom' failed on rank 1" <<<"$output"; then
  echo "FAIL: rank 0 did not leave its barrier with the failure"; exit 1
fi
if [[ $mode == mismatch ]] && ! grep -q "did not submit the same buffers and tasks" <<<"$output"; then
  echo "FAIL: no error saying the ranks submitted different buffers"; exit 1
fi
# The error names the buffer (number and name) and the task that reads it: it named neither.
if [[ $mode == mismatch ]] && ! grep -q "distributed: buffer 0 'tile' for task 'reader': payload 0 from rank 1 has 16 bytes; its replica on rank 0 has 32" <<<"$output"; then
  echo "FAIL: the size-mismatch error does not name the buffer and the task"; exit 1
fi
# The rank whose task threw gets that exception from its first wait_all(), Error(task_failed) after.
if [[ $mode == rethrow ]] && { ! grep -q "rank 0: PASS" <<<"$output" || grep -q "FAIL" <<<"$output"; }; then
  echo "FAIL: rank 0's first wait_all() did not rethrow its task's own exception"; exit 1
fi
# The job ends (it hung: rank 1 waited for the bytes for ever) with MPI's refusal said.
if [[ $mode == send_fails ]] && ! grep -q "sending 4 bytes to rank 1: distributed: MPI_Isend failed on rank 0" <<<"$output"; then
  echo "FAIL: the refused send is not what ended the job"; exit 1
fi
# The job ends (it succeeded: the failed send was taken for done) with MPI's report said.
if [[ $mode == transfer_fails ]] && ! grep -q "rank 0: sending to rank 1: distributed: a send (MPI_Test) failed on rank 0" <<<"$output"; then
  echo "FAIL: the failed send is not what ended the job"; exit 1
fi
if [[ $mode == escape ]] && ! grep -q "rank 1: the distributed Runtime was destroyed by an exception leaving its scope" <<<"$output"; then
  echo "FAIL: no error saying rank 1's Runtime was destroyed by an exception"; exit 1
fi
if [[ $mode == die ]] && ! grep -q "rank 1" <<<"$output"; then
  echo "FAIL: no error naming the rank that died"; exit 1
fi
echo PASS
