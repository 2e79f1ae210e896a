#!/usr/bin/env bash
# install-deps.sh — installs every Debian 12 package nerve needs to build, test and run its demo.
#
# Idempotent and non-interactive: it asks dpkg which packages are missing and only then runs
# `apt-get update` and `apt-get install`, so on a machine that has everything it touches no network.
# Runs as root; as another user it uses sudo when sudo exists, and otherwise stops with a message.
#
#   scripts/install-deps.sh            install what is missing
#   scripts/install-deps.sh --check    list what is missing; exit 1 if anything is
set -euo pipefail

packages=(
  # Toolchain and build
  build-essential cmake ninja-build pkg-config git
  # Debugging: the test watchdog attaches gdb to a hung test to print every thread's backtrace
  gdb
  # Clang (a second compiler, OpenMP for it) and the format/lint tools behind `make format` / `make tidy`
  clang clang-format clang-tidy libomp-dev
  # Topology discovery (library + lstopo for looking at a machine). hwloc.pc lists -ludev in its
  # Libs.private, so `pkg-config --static --libs nerve` (which requires hwloc) needs libudev-dev too.
  libhwloc-dev hwloc libudev-dev
  # Configuration files, reports and command lines, formatting
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  # Tests and micro-benchmarks (oneTBB is a rival in the benchmarks; GCC's own OpenMP is libgomp)
  libgtest-dev libgmock-dev libtbb-dev
  # Kernels in examples and benchmarks
  libopenblas-dev liblapacke-dev
  # OpenCL: ICD loader, headers, PoCL as the CPU platform the tests run on, clinfo to inspect it
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  # Distributed execution: Open MPI (library, headers, mpirun) and compression of its transfers
  libopenmpi-dev openmpi-bin libzstd-dev
  # Optional allocators (jemalloc, tcmalloc)
  libjemalloc-dev libgoogle-perftools-dev
  # JSON schema checks of stats, traces and reports
  python3
)
# Not installed, on purpose: chromium (~290 MB). The benchmark_chromium test loads openclaw-benchmark's
# HTML report in it when it is present and is skipped otherwise: `apt-get install chromium` to run it.

check_only=0
if [[ "${1:-}" == "--check" ]]; then
  check_only=1
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--check]" >&2
  exit 2
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install-deps: missing ${#missing[@]} package(s): ${missing[*]}"
if [[ $check_only -eq 1 ]]; then
  exit 1
fi

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install-deps: error: these packages are missing and installing them needs root;" >&2
    echo "install-deps: run this script as root (or install sudo), or install them yourself:" >&2
    echo "  apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: apt-get update"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
