# OpenClaw-Nerve — the developer entry points. `make help` lists them.
#
# The build is CMake + Ninja; this file only strings the steps together. Variables:
#   JOBS        parallel build and test jobs (default: the number of CPUs)
#   PREFIX      install prefix for `make install` (default /usr/local)
#   CMAKE_ARGS  extra arguments for every CMake configuration, e.g. CMAKE_ARGS=-DCMAKE_CXX_COMPILER=clang++
#   CTEST_ARGS  extra arguments for every ctest run, e.g. CTEST_ARGS="-L quick" or CTEST_ARGS="-R config"

JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX     ?= /usr/local
CMAKE_ARGS ?=
CTEST_ARGS ?=

BUILD_DIR  := build
TSAN_DIR   := build-tsan
ASAN_DIR   := build-asan

# A failing test binary prints its failures only, not the hundreds of tests that passed: CI keeps
# the end of a long log, and a failure must be in it.
export GTEST_BRIEF ?= 1

# Steps run in the order written (dependencies first); the parallelism is inside Ninja and ctest.
.NOTPARALLEL:
.DEFAULT_GOAL := help
SHELL := /bin/bash

SANITIZER_SUPPRESSIONS := $(CURDIR)/tests/sanitizers
# Sanitizer builds are lean: no benchmarks, no examples, no CUDA runtime (libcudart is not instrumented;
# the CUDA backend's host logic is still built and its fake-driver tests run: docs/BACKENDS.md);
# tests labelled `nosan` do not run under them,
# `noasan` not under AddressSanitizer (tests/dist/CMakeLists.txt says why).
# The library compiles in unity batches there (README.md, "Build time"): it is built three times in CI.
SANITIZER_CMAKE_ARGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNERVE_BUILD_BENCH=OFF -DNERVE_BUILD_EXAMPLES=OFF -DNERVE_WITH_CUDA=OFF \
                        -DNERVE_UNITY_LIBRARY=ON
# Sanitized runs are 5-20x slower: the random-DAG stress test uses 20,000 tasks per seed there (the
# full 100,000 run in the plain build).
SANITIZER_STRESS := NERVE_STRESS_TASKS=20000
TSAN_ENV := $(SANITIZER_STRESS) TSAN_OPTIONS="suppressions=$(SANITIZER_SUPPRESSIONS)/tsan.supp halt_on_error=1 second_deadlock_stack=1"
ASAN_ENV := $(SANITIZER_STRESS) ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:check_initialization_order=1" \
            LSAN_OPTIONS="suppressions=$(SANITIZER_SUPPRESSIONS)/lsan.supp:print_suppressions=0" \
            UBSAN_OPTIONS="suppressions=$(SANITIZER_SUPPRESSIONS)/ubsan.supp:print_stacktrace=1:halt_on_error=1"

# Sources that `make format` formats.
FORMAT_DIRS  := include src tests tools examples bench
FORMAT_FILES  = $(shell find $(FORMAT_DIRS) -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \
                  -o -name '*.c' -o -name '*.cu' \) 2>/dev/null | sort)

# configure <dir> <cmake arguments...>: configure a build directory (Ninja for a new one).
define configure
	@if [ -f $(1)/CMakeCache.txt ]; then cmake -S . -B $(1) $(2) $(CMAKE_ARGS); \
	 else cmake -S . -B $(1) -G Ninja $(2) $(CMAKE_ARGS); fi
endef

.PHONY: help deps build demo test test-tsan test-asan install format format-check tidy clean

help:
	@echo "make demo         install dependencies, build, and run the demo"
	@echo "make test         install dependencies, build (Release, $(BUILD_DIR)/) and run every test"
	@echo "make deps         install the Debian packages nerve needs (scripts/install-deps.sh)"
	@echo "make build        configure and build $(BUILD_DIR)/ (Release, Ninja)"
	@echo "make test-tsan    build $(TSAN_DIR)/ with ThreadSanitizer and run the tests"
	@echo "make test-asan    build $(ASAN_DIR)/ with AddressSanitizer + UBSan + LeakSanitizer and run the tests"
	@echo "make install      install $(BUILD_DIR)/ into PREFIX=$(PREFIX)"
	@echo "make format       clang-format every source file in place"
	@echo "make format-check fail if any source file is not clang-formatted"
	@echo "make tidy         clang-tidy the library sources (src/) against $(BUILD_DIR)/compile_commands.json"
	@echo "make clean        remove the build directories"
	@echo "Variables: JOBS=$(JOBS) PREFIX=$(PREFIX) CMAKE_ARGS='$(CMAKE_ARGS)' CTEST_ARGS='$(CTEST_ARGS)'"

deps:
	@scripts/install-deps.sh

build:
	$(call configure,$(BUILD_DIR),-DCMAKE_BUILD_TYPE=Release)
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The demo: what `make demo` shows a newcomer — the standard workload suite, quick sizes (under a
# minute on 2 cores), every result verified, next to its baselines; the table on the terminal and
# a self-contained HTML report (charts per workload, scaling over workers) in report.html.
# This recipe is the one place to change it.
BENCHMARK := $(BUILD_DIR)/tools/openclaw-benchmark/openclaw-benchmark
demo: deps build
	@if [ ! -x $(BENCHMARK) ]; then \
	  echo "make demo: $(BENCHMARK) was not built (needs libcli11-dev and NERVE_BUILD_BENCH=ON)" >&2; exit 1; \
	fi
	$(BENCHMARK) --quick --html report.html
	@echo "make demo: the report is $(CURDIR)/report.html — open it in a browser"

test: deps build
	ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j $(JOBS) $(CTEST_ARGS)

test-tsan: deps
	$(call configure,$(TSAN_DIR),-DNERVE_SANITIZE=thread $(SANITIZER_CMAKE_ARGS))
	cmake --build $(TSAN_DIR) -j $(JOBS)
	$(TSAN_ENV) ctest --test-dir $(TSAN_DIR) --output-on-failure --no-tests=error -j $(JOBS) -LE nosan $(CTEST_ARGS)

test-asan: deps
	$(call configure,$(ASAN_DIR),-DNERVE_SANITIZE=address $(SANITIZER_CMAKE_ARGS))
	cmake --build $(ASAN_DIR) -j $(JOBS)
	$(ASAN_ENV) ctest --test-dir $(ASAN_DIR) --output-on-failure --no-tests=error -j $(JOBS) -LE 'nosan|noasan' $(CTEST_ARGS)

install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

format:
	@clang-format -i $(FORMAT_FILES)
	@echo "make format: formatted $(words $(FORMAT_FILES)) files"

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES)
	@echo "make format-check: $(words $(FORMAT_FILES)) files are formatted"

# Findings are errors. Headers under include/ and src/ are checked through the files that include them.
tidy:
	$(call configure,$(BUILD_DIR),-DCMAKE_BUILD_TYPE=Release)
	@find src -name '*.cpp' | sort | xargs -r -P $(JOBS) -n 4 \
	  clang-tidy -p $(BUILD_DIR) --quiet --warnings-as-errors='*'
	@echo "make tidy: no findings"

clean:
	rm -rf $(BUILD_DIR) $(TSAN_DIR) $(ASAN_DIR) build-gpu
