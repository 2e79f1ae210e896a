#!/usr/bin/env bash
# cholesky_ranks_vs_workers.sh <cholesky_mpi> [n] [tile] [repeats] — the distributed Cholesky on
# 2 ranks x 1 worker against 1 rank x 2 workers, in the same run, alternating, best of `repeats`.
# Prints both, the ratio of wall times and of GFLOP per CPU-second, and the bytes moved.
# (docs/DISTRIBUTED.md has the numbers and how to read them on a shared machine.)
set -euo pipefail
program=${1:?usage: cholesky_ranks_vs_workers.sh <cholesky_mpi> [n] [tile] [repeats]}
n=${2:-8192} tile=${3:-512} repeats=${4:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NERVE_DISTRIBUTED_COMMUNICATION_BACKEND=mpi
mpirun=${NERVE_MPIRUN:-mpirun}
best() { sort -t' ' -k1,1g | head -n1; }
declare -A wall efficiency line
for layout in "1 2" "2 1"; do
  read -r ranks workers <<<"$layout"
  results=()
  for ((r = 0; r < repeats; ++r)); do
    out=$(NERVE_PARALLEL_THREAD_POOL_SIZE=$workers "$mpirun" -np "$ranks" --bind-to none "$program" --n "$n" --tile "$tile")
    echo "$out"
    seconds=$(sed -E 's/.*: ([0-9.]+) s,.*/\1/' <<<"$out")
    per_cpu=$(sed -E 's/.*\(([0-9.]+) GFLOP per cpu-second.*/\1/' <<<"$out")
    results+=("$seconds $per_cpu")
  done
  best_line=$(printf '%s\n' "${results[@]}" | best)
  wall[$ranks]=${best_line% *}
  efficiency[$ranks]=${best_line#* }
done
echo "best wall time: 1 rank x 2 workers ${wall[1]} s, 2 ranks x 1 worker ${wall[2]} s"
awk -v a="${wall[1]}" -v b="${wall[2]}" -v c="${efficiency[1]}" -v d="${efficiency[2]}" 'BEGIN {
  printf "ratio (1x2 time / 2x1 time): %.2f; GFLOP per cpu-second: 1x2 %.2f, 2x1 %.2f (ratio %.2f)\n", a / b, c, d, d / c }'
