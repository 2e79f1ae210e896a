#!/usr/bin/env python3
"""Drives nerve-bench-core (bench/core_main.cpp) and checks what it prints (docs/BENCHMARKS.md).

Usage: check_bench_core.py <nerve-bench-core> <case>; each case is one CTest test. Cases:
  w8     a quick W8 run: per case, a goal line for each nerve variant (the runtime's pool and the public
         MemoryPool) against the fastest allocator, and in the summary each variant's row carries its
         own goal's ratio (its figure over the fastest allocator's), not the other variant's
  usage  --help prints the usage on stdout and exits 0; an unknown option exits 2 with the usage on
         stderr
Standard library only. Runs get an environment without NERVE_* variables.
"""
import os
import re
import subprocess
import sys

TIMEOUT_S = 100
QUICK = ["--quick", "--repeat", "1", "--warmup", "0", "--settle-ms", "0"]


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def run(tool, arguments):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NERVE_")}
    return subprocess.run([tool] + arguments, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=environment)


def number(text):
    return float(text.replace(",", ""))


def case_w8(tool):
    done = run(tool, QUICK + ["--only", "W8"])
    check(done.returncode == 0, f"W8 run exited {done.returncode}: {done.stderr[-2000:]}")
    out = done.stdout
    variants = sorted(("nerve pool", "nerve MemoryPool"))
    # "goal <variant> <= 0.5x ... (<case>): nerve / <baseline> = <ratio> — met|NOT MET"
    goals = re.findall(r"goal (nerve pool|nerve MemoryPool) <= 0\.5x [^(]*\(([^)]*)\): nerve / (.+?) = ([0-9.]+)",
                       out)
    cases = sorted({case for _, case, _, _ in goals})
    check(len(cases) >= 2, f"expected W8 goal lines for at least two cases, got {goals!r}\n{out}")
    for case in cases:
        judged = sorted(variant for variant, c, _, _ in goals if c == case)
        check(judged == variants, f"case {case!r}: goal lines for {judged}, expected both variants")
    # The summary: a first row per nerve figure (| W8 | case | figure | baseline | figure | ratio | goal |)
    # followed by one row per further baseline (|  |  |   | baseline | figure | ratio |  |).
    rows = []  # (case, nerve figure, {baseline: figure}, goal cell)
    for line in out.splitlines():
        if not line.startswith("| "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] not in ("W8", ""):
            continue
        if cells[0] == "W8":
            rows.append((cells[1], number(cells[2].split()[0]), {}, cells[6]))
        if rows:
            rows[-1][2][cells[3]] = number(cells[4].split()[0])
    check(len(rows) == 2 * len(cases), f"expected {2 * len(cases)} summary rows, got {len(rows)}:\n{out}")
    for case in cases:
        named = []
        for row_case, figure, baselines, goal_cell in rows:
            if row_case != case:
                continue
            goal = re.match(r"(nerve pool|nerve MemoryPool) <= .*: ([0-9.]+), ", goal_cell)
            check(goal is not None, f"case {case!r}: a summary row without its goal: {goal_cell!r}")
            named.append(goal.group(1))
            # The goal shown is this row's own: its ratio is this row's figure over the goal's baseline.
            [(_, _, baseline, ratio)] = [g for g in goals if g[0] == goal.group(1) and g[1] == case]
            check(baseline in baselines, f"case {case!r}: baseline {baseline!r} not in the summary")
            own = figure / baselines[baseline]
            check(abs(own - float(ratio)) <= 0.02 * max(1.0, own),
                  f"case {case!r}: the row of figure {figure} shows the goal of {goal.group(1)} "
                  f"(ratio {ratio}), but its own ratio to {baseline} is {own:.2f}")
        check(sorted(named) == variants, f"case {case!r}: summary rows carry the goals of {named}")


def case_usage(tool):
    done = run(tool, ["--help"])
    check(done.returncode == 0, f"--help exited {done.returncode}")
    check("usage: nerve-bench-core" in done.stdout, f"--help printed no usage on stdout: {done.stdout!r}")
    done = run(tool, ["--bogus"])
    check(done.returncode == 2, f"--bogus exited {done.returncode}, expected 2")
    check("usage: nerve-bench-core" in done.stderr, f"--bogus printed no usage on stderr: {done.stderr!r}")


def main():
    tool, case = sys.argv[1], sys.argv[2]
    try:
        {"w8": case_w8, "usage": case_usage}[case](tool)
    except CheckFailed as failure:
        print(f"FAILED ({case}): {failure}")
        return 1
    print(f"passed ({case})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
