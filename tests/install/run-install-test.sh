#!/usr/bin/env bash
# run-install-test.sh <build-dir> — tests nerve as users consume it.
#
# Installs <build-dir> into a temporary prefix (`cmake --install --prefix`), then builds and runs the
# consumer in consumer/ four ways: find_package(nerve CONFIG) with nerve::nerve and nerve::nerve_static,
# and a plain compiler command with `pkg-config nerve`, shared and static; then the C program in
# c_consumer/ linked statically from a C-only CMake project and with `pkg-config --static` and the C
# compiler; and, with $NERVE_TEST_CUDA_COMPILER (CTest passes the build's nvcc), the CUDA program in
# cuda_consumer/. The
# compilers are $CXX and $CC (CTest passes the build's own), else c++ and cc. NERVE_KEEP_INSTALL_TEST=1 keeps the temporary directory.
set -euo pipefail

build_dir=$(cd "${1:?usage: run-install-test.sh <build-dir>}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cxx=${CXX:-c++}
cc=${CC:-cc}
work=$(mktemp -d "${TMPDIR:-/tmp}/nerve-install-test.XXXXXX")
prefix=$work/prefix
log=$work/log

cleanup() {
  local status=$?
  if [[ $status -ne 0 ]]; then
    echo "install-test: FAILED; the last commands' output:"
    tail -n 60 "$log" 2>/dev/null || true
  fi
  if [[ "${NERVE_KEEP_INSTALL_TEST:-0}" == 1 ]]; then
    echo "install-test: kept $work"
  else
    rm -rf "$work"
  fi
  exit $status
}
trap cleanup EXIT

step() { echo "install-test: $*"; }
fail() {
  echo "install-test: error: $*" >&2
  exit 1
}
run() { "$@" >>"$log" 2>&1; }

# 1. Install.
step "installing $build_dir into $prefix"
run cmake --install "$build_dir" --prefix "$prefix"

config=$(find "$prefix" -name nerveConfig.cmake -print -quit)
pc=$(find "$prefix" -name nerve.pc -print -quit)
shared=$(find "$prefix" -name 'libnerve.so' -print -quit)
static=$(find "$prefix" -name 'libnerve.a' -print -quit)
[[ -n "$config" ]] || fail "no nerveConfig.cmake installed"
[[ -f "$(dirname "$config")/nerveConfigVersion.cmake" ]] || fail "no nerveConfigVersion.cmake installed"
[[ -n "$pc" ]] || fail "no nerve.pc installed"
[[ -n "$shared" ]] || fail "no libnerve.so installed"
[[ -n "$static" ]] || fail "no libnerve.a installed"
[[ -f "$prefix/include/nerve/error.hpp" ]] || fail "no include/nerve/error.hpp installed"
if find "$prefix/include" -type f ! -path '*/include/nerve/*' | grep -q .; then
  fail "headers outside include/nerve/ were installed: $(find "$prefix/include" -type f ! -path '*/include/nerve/*')"
fi
libdir=$(dirname "$shared")
grep -q "^prefix=$prefix\$" "$pc" || fail "nerve.pc does not name the install prefix $prefix: $(grep '^prefix=' "$pc")"
step "installed: ${config#"$prefix"/}, ${pc#"$prefix"/}, ${shared#"$prefix"/}, ${static#"$prefix"/}"

# expect_links <program> yes|no: whether the program loads the installed libnerve.so.
expect_links() {
  local program=$1 expected=$2 loaded
  loaded=$(LD_LIBRARY_PATH=$libdir ldd "$program" | grep 'libnerve\.so' || true)
  if [[ $expected == yes ]]; then
    [[ "$loaded" == *"$libdir/"* ]] || fail "$(basename "$program") does not load $libdir/libnerve.so: ${loaded:-nothing}"
  else
    [[ -z "$loaded" ]] || fail "$(basename "$program") should be static but loads: $loaded"
  fi
}
run_consumer() {
  local program=$1 output
  output=$(LD_LIBRARY_PATH=$libdir "$program" 2>&1) || fail "$(basename "$program") failed: $output"
  step "  $(basename "$program"): $output"
}

# 2. find_package(nerve CONFIG).
step "building the consumer with find_package(nerve CONFIG) ($cxx)"
run cmake -S "$here/consumer" -B "$work/cmake-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
found=$(sed -n 's/^nerve_DIR:PATH=//p' "$work/cmake-build/CMakeCache.txt")
[[ "$found" == "$prefix"/* ]] || fail "find_package found nerve at '$found', not in $prefix"
run cmake --build "$work/cmake-build"
expect_links "$work/cmake-build/consumer_shared" yes
expect_links "$work/cmake-build/consumer_static" no
run_consumer "$work/cmake-build/consumer_shared"
run_consumer "$work/cmake-build/consumer_static"

# 2b. A C-only project (project(... LANGUAGES C)) with nerve::nerve_static and nothing else.
step "building the C consumer with find_package(nerve CONFIG) and nerve::nerve_static ($cc)"
run cmake -S "$here/c_consumer" -B "$work/c-cmake-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
run cmake --build "$work/c-cmake-build"
expect_links "$work/c-cmake-build/c_consumer_static" no
run_consumer "$work/c-cmake-build/c_consumer_static"

# 3. pkg-config nerve, with a plain compiler command.
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
step "building the consumer with pkg-config nerve $(pkg-config --modversion nerve) ($cxx)"
cflags=$(pkg-config --cflags nerve)
libs=$(pkg-config --libs nerve)
static_libs=$(pkg-config --static --libs nerve | sed 's/-lnerve\b/-l:libnerve.a/')
run echo "pkg-config: cflags: $cflags; libs: $libs; static libs: $static_libs"
# shellcheck disable=SC2086 # pkg-config output is a list of words
run "$cxx" -std=c++20 "$here/consumer/consumer.cpp" $cflags $libs -o "$work/consumer_pkgconfig"
# shellcheck disable=SC2086
run "$cxx" -std=c++20 "$here/consumer/consumer.cpp" $cflags $static_libs -o "$work/consumer_pkgconfig_static"
# A C program with pkg-config --static and the C compiler: Libs.private names the C++ runtime.
# shellcheck disable=SC2086
run "$cc" "$here/c_consumer/c_consumer.c" $cflags $static_libs -o "$work/c_consumer_pkgconfig_static"
expect_links "$work/consumer_pkgconfig" yes
expect_links "$work/consumer_pkgconfig_static" no
run_consumer "$work/consumer_pkgconfig"
run_consumer "$work/consumer_pkgconfig_static"
expect_links "$work/c_consumer_pkgconfig_static" no
run_consumer "$work/c_consumer_pkgconfig_static"

# 4. A CUDA consumer, where nerve was built with a CUDA compiler: its .cu file includes nerve.hpp (C++20).
nvcc=${NERVE_TEST_CUDA_COMPILER:-}
if [[ -n "$nvcc" && -x "$nvcc" ]]; then
  step "building the CUDA consumer with find_package(nerve CONFIG) ($nvcc)"
  run cmake -S "$here/cuda_consumer" -B "$work/cuda-build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
  run cmake --build "$work/cuda-build"
  expect_links "$work/cuda-build/cuda_consumer" yes
  run_consumer "$work/cuda-build/cuda_consumer"
else
  step "no CUDA compiler in this build: the CUDA consumer is not built"
fi

step "PASS: the installed package works with find_package(nerve CONFIG) and pkg-config, shared and static, from C++ and C (and CUDA where built)"
