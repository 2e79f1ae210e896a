#!/usr/bin/env python3
"""Drives openclaw-benchmark and checks what it writes (docs/BENCHMARKS.md, docs/BENCHMARK_JSON.md).

Usage: check_benchmark.py <openclaw-benchmark> <case> [argument]; each case is one CTest test
(tests/benchmark/CMakeLists.txt). Cases:
  json            a quick run's --json validated against the documented schema; --config and a
                  NERVE_* variable recorded in the effective configuration with their origins (--threads's
                  as "api (--threads)"); W5's
                  variants carry their % of the STREAM add
  config_error    a bad --config fails with exit 2 and names the key, with --help and --list too (a
                  value only a context refuses included); a workload --only names that
                  cannot run fails the run (exit 1), and the table and the JSON say so
  usage           every usage error exits 2 before anything runs: options unknown or out of range,
                  unknown --scaling workloads, --trace without --html, a non-numeric --param or
                  --fail-over (nan, inf, 0x10), a --compare or --from-json file that is missing or
                  not a report (each of these with --help too: --help answers only when nothing else is
                  wrong, --config's file included), an option that means nothing to --list given with it,
                  an option's value that is one of the
                  options (--json --help), a --json or --html path that is not a regular file (a FIFO: the
                  output probe waited for a reader), a --compare or --from-json path that is a FIFO nobody
                  writes to (reading it waited for ever), a directory or a device, an empty --param list
                  or item, NERVE_TRACE naming a FIFO or a file that cannot be written (the error names
                  the variable; --help and --list too)
  param           --param sets W11's batching (recorded in the JSON, used by the run); a bad name
                  is a usage error, a value out of range fails the run, recorded as BENCHMARK_JSON.md
                  says and read back by --from-json
  runtimes        an unknown --runtimes name, or none, is a usage error (exit 2) naming it and listing
                  the valid ones; a known name in other case runs only that runtime's variants; one
                  that selects no variant of the workloads run verifies nothing: exit 1, verified false,
                  NOTHING VERIFIED on the page; --runtimes STREAM measures W5's device case's STREAM
                  variant too; W2's tasks are per sample (ten fibs with the cutoff)
  html            the --html page: every chart's SVG present, self-contained, timeline only with --trace
                  (a --trace that cannot be read, a FIFO nobody writes to or a directory included, leaves
                  it out with a warning naming it)
  chromium        the page loads in headless Chromium, every chart in its DOM, no console error
                  (exit 77, a CTest skip, when chromium is not installed)
  compare         an unchanged run compares "same +0%" and passes --fail-over; a figure planted 2x worse
                  is flagged and fails it, as a rate ten times lower does (900% worse), with the change and
                  the limit as precise as given; a planted improvement is flagged "better" and passes; a
                  corrupted report is a usage error that names the bad field and where it is; a report
                  is read through a pipe (<(...)); one that cannot be written names its option, file
                  and the system's reason, and leaves the other report written and announced
  closed_stdout   a run whose standard output is closed (`| head -1`) still writes its --json report (SIGPIPE
                  killed it) and exits 1, saying the table was lost; so do --list and --help
  fault <Wn>      the hidden --inject-fault corrupts nerve's result in Wn: the run must fail (exit 1),
                  in W6 W7 W10 W11 every nerve variant; without it the run passes, and W6's and W7's
                  nerve variants give their % of the multithreaded BLAS reference
Standard library only. Runs get an environment without NERVE_* variables.
"""
import errno
import html.parser
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

TIMEOUT_S = 100
QUICK = ["--quick", "--repeat", "1", "--warmup", "0", "--settle-ms", "0"]
SKIP = 77


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def clean_environment(nerve_environment=None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NERVE_")}
    environment.update(nerve_environment or {})
    return environment


def run(binary, *args, expect=0, nerve_environment=None, timeout=TIMEOUT_S, cwd=None, **options):
    """options: more of subprocess.run's (pass_fds, preexec_fn)."""
    try:
        result = subprocess.run([binary, *args], env=clean_environment(nerve_environment), capture_output=True, text=True,
                                timeout=timeout, cwd=cwd, **options)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"openclaw-benchmark {' '.join(args)} did not finish in {timeout} s")
    if expect is not None and result.returncode != expect:
        raise CheckFailed(f"openclaw-benchmark {' '.join(args)} exited {result.returncode}, expected {expect}\n"
                          f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")
    return result


# --- the JSON schema of docs/BENCHMARK_JSON.md -------------------------------------------------
NUMBER = (int, float)


def check_fields(obj, where, fields):
    check(isinstance(obj, dict), f"{where}: not an object")
    for name, kinds in fields.items():
        check(name in obj, f"{where}: missing \"{name}\"")
        check(isinstance(obj[name], kinds) and not (isinstance(obj[name], bool) and bool not in
                                                      (kinds if isinstance(kinds, tuple) else (kinds,))),
              f"{where}.{name}: {type(obj[name]).__name__} is not {kinds}")


def check_schema(doc):
    check_fields(doc, "document", {"schema": str, "tool": dict, "started_at": str, "duration_s": NUMBER,
                                   "verified": bool, "options": dict, "machine": dict, "versions": dict,
                                   "config": list, "workloads": list, "skipped": list, "scaling": list,
                                   "comparison": (list, type(None))})
    check(doc["schema"] == "openclaw.benchmark/1", f"schema {doc['schema']}")
    check_fields(doc["tool"], "tool", {"name": str, "version": str, "git_commit": str})
    check(re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?|unknown", doc["tool"]["git_commit"]) is not None,
          f"git_commit {doc['tool']['git_commit']!r}")
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["started_at"]) is not None, "started_at format")
    check_fields(doc["options"], "options", {"quick": bool, "threads": int, "repetitions": int, "warmup": int,
                                             "settle_ms": int, "only": list, "parameters": dict,
                                             "config_file": (str, type(None))})
    check(all(isinstance(v, str) for v in doc["options"]["parameters"].values()), "parameters: values")
    check_fields(doc["machine"], "machine", {"hostname": str, "cpu_model": str, "hardware_threads": int,
                                             "topology": dict})
    check_fields(doc["machine"]["topology"], "machine.topology",
                 {"description": str, "packages": int, "numa_nodes": int, "cores": int, "pus": int, "caches": list})
    for cache in doc["machine"]["topology"]["caches"]:
        check_fields(cache, "cache", {"level": int, "size_bytes": int})
    for name in ("nerve", "compiler", "oneTBB", "OpenMP", "OpenBLAS"):
        check(name in doc["versions"], f"versions.{name} missing")
        check(doc["versions"][name] is None or isinstance(doc["versions"][name], str), f"versions.{name} type")
    check(len(doc["config"]) > 10, "config: too few entries")
    for entry in doc["config"]:
        check_fields(entry, "config entry", {"key": str, "value": str, "origin": str})
    for w in doc["workloads"]:
        check_fields(w, "workload", {"id": str, "title": str, "size": str, "verified": bool, "duration_s": NUMBER,
                                     "load_average": dict, "measurements": list})
        check(re.fullmatch(r"W\d+", w["id"]) is not None, f"workload id {w['id']}")
        check_fields(w["load_average"], "load_average", {"before": NUMBER, "after": NUMBER})
        check(len(w["measurements"]) > 0, f"{w['id']}: no measurements")
        check(w["measurements"][0]["runtime"] == "nerve", f"{w['id']}: nerve is not first")
        for m in w["measurements"]:
            where = f"{w['id']} {m.get('variant')}"
            check_fields(m, where, {"case": str, "runtime": str, "variant": str, "value": NUMBER, "unit": str,
                                    "lower_is_better": bool, "min": NUMBER, "max": NUMBER, "mad": NUMBER,
                                    "samples": list, "tasks": int, "verified": bool, "note": str, "extra": dict,
                                    "nerve_speedup": (NUMBER, type(None))})
            check(m["min"] <= m["value"] <= m["max"], f"{where}: median outside min..max")
            check(m["mad"] >= 0 and len(m["samples"]) == doc["options"]["repetitions"], f"{where}: samples/MAD")
            check(all(isinstance(v, NUMBER) for v in m["extra"].values()), f"{where}: extra values")
        check(w["verified"] == all(m["verified"] for m in w["measurements"]), f"{w['id']}: verified flag")
    for s in doc["skipped"]:
        check_fields(s, "skipped", {"id": str, "title": str, "reason": str})
    for series in doc["scaling"]:
        check_fields(series, "scaling", {"workload": str, "case": str, "variant": str, "unit": str,
                                         "lower_is_better": bool, "points": list})
        for p in series["points"]:
            check_fields(p, "scaling point", {"threads": int, "value": NUMBER, "mad": NUMBER, "verified": bool})
    for c in doc["comparison"] or []:
        check_fields(c, "comparison", {"workload": str, "case": str, "variant": str, "runtime": str,
                                       "before": NUMBER, "after": NUMBER, "change": NUMBER, "threshold": NUMBER,
                                       "verdict": str})
        check(c["verdict"] in ("better", "worse", "same", "missing"), f"verdict {c['verdict']}")


def case_json(binary, directory):
    config = os.path.join(directory, "tuning.yaml")
    with open(config, "w") as f:
        f.write("scheduler:\n  spin_us: 120\n")
    out = os.path.join(directory, "run.json")
    # A NERVE_* variable applies on top of the file, and the report says where each value came from.
    run(binary, *QUICK, "--only", "W1,W3,W5", "--config", config, "--json", out,
        nerve_environment={"NERVE_SCHEDULER_POLICY": "eager"})
    with open(out) as f:
        doc = json.load(f)
    check_schema(doc)
    check([w["id"] for w in doc["workloads"]] == ["W1", "W3", "W5"], "workloads run")
    # W5's second figure (WORKLOADS.md): each variant's % of the STREAM add of the same run, in every
    # case (the CPU case lacked it).
    # N is against the STREAM variant's median (docs/BENCHMARKS.md, W5's STREAM reference).
    w5 = doc["workloads"][2]["measurements"]
    for m in w5:
        if m["runtime"] != "STREAM":
            share = re.search(r"(\d+)% of STREAM add", m["note"])
            check(share is not None, f"W5 {m['case']} / {m['variant']}: no % of STREAM add in its note {m['note']!r}")
            stream = [r for r in w5 if r["runtime"] == "STREAM" and r["case"] == m["case"]]
            check(len(stream) == 1, f"W5 {m['case']}: one STREAM variant, got {len(stream)}")
            expected = 100 * m["value"] / stream[0]["value"]
            check(abs(int(share.group(1)) - expected) <= 1,
                  f"W5 {m['case']} / {m['variant']}: {share.group(0)}, but its median over STREAM's is {expected:.1f}%")
    check(doc["verified"] and doc["options"]["config_file"] == config, "verified / config_file")
    spin = [e for e in doc["config"] if e["key"] == "scheduler.spin_us"]
    check(spin and spin[0]["value"] == "120" and spin[0]["origin"].startswith("file"), f"spin_us entry {spin}")
    policy = [e for e in doc["config"] if e["key"] == "scheduler.policy"]
    check(policy and policy[0]["value"] == "eager" and policy[0]["origin"].startswith("environment"),
          f"scheduler.policy entry {policy}")
    # --threads sets every nerve context's pool size through the API: the configuration says so.
    pool = [e for e in doc["config"] if e["key"] == "parallel.thread_pool_size"]
    # Its origin names the option, as a file's names the line and a variable's the variable ("api (api)").
    check(pool and pool[0]["value"] == str(doc["options"]["threads"]) and pool[0]["origin"] == "api (--threads)",
          f"parallel.thread_pool_size entry {pool} (threads {doc['options']['threads']})")
    # Text that is not UTF-8 (here the --config file's name, in the options and in each of its keys'
    # origins; a configuration value or the host name may be so too) is written as U+FFFD: the JSON
    # library threw on it while writing, and the whole report was lost (exit 1, no file).
    odd = os.path.join(directory, "tuning\udcff.yaml")  # the byte 0xff in the name (surrogateescape)
    with open(odd, "w") as f:
        f.write("scheduler:\n  spin_us: 20\n")
    odd_out, odd_page = os.path.join(directory, "odd.json"), os.path.join(directory, "odd.html")
    run(binary, *QUICK, "--threads", "1", "--only", "W3", "--config", odd, "--json", odd_out, "--html", odd_page,
        errors="replace")
    with open(odd_out, encoding="utf-8") as f:
        doc = json.load(f)
    check_schema(doc)
    check(doc["options"]["config_file"].endswith("tuning\ufffd.yaml"),
          f"config_file {doc['options']['config_file']!r}: the byte 0xff is not U+FFFD")
    # So in the page, which declares charset utf-8: it held the raw byte (black-box review).
    with open(odd_page, "rb") as f:
        page = f.read()
    try:
        page.decode("utf-8")
        check("tuning\ufffd.yaml".encode() in page, "the page does not name the configuration with U+FFFD")
    except UnicodeDecodeError as error:
        check(False, f"the page is not UTF-8: {error}")


def case_usage(binary, directory):
    not_a_report = os.path.join(directory, "not-a-report.json")
    with open(not_a_report, "w") as f:
        f.write("{}\n")
    for args, says in ((["--repeat", "0"], "--repeat: '0' is out of range (1 to 1000)"),
                       (["--threads", "0"], "--threads: '0' is out of range (1 to 1024)"), (["--bogus"], "--bogus"),
                       # A count that is not a whole number is not "out of range" (CLI11's message).
                       (["--repeat", "3.5"], "--repeat: '3.5' is not a whole number"),
                       (["--threads", "abc"], "--threads: 'abc' is not a whole number"),
                       (["--threads", "2.0"], "--threads: '2.0' is not a whole number"),
                       (["--warmup", "1e1"], "--warmup: '1e1' is not a whole number"),
                       (["--settle-ms", "0x10"], "--settle-ms: '0x10' is not a whole number"),
                       (["--scaling", "W99"], "W99"), (["--trace", "t.json"], "--html"),
                       # Quoted as given (not upper-cased), with the way to ask for no scaling.
                       (["--scaling", "None"], "--scaling: no workload 'None' in this build (see --list; 'none'"),
                       (["--json", os.path.join(directory, "r"), "--html", os.path.join(directory, ".", "r")],
                        "same file"),
                       (["--param", "W11.max_batch=abc"], "not a (decimal) number"),
                       (["--param", "W11.rate=0x10"], "not a (decimal) number"),
                       (["--param", "W11.rate=nan"], "not a (decimal) number"),
                       (["--param", "W11.max_batch=1 6"], "a blank inside"),
                       (["--param", "W11.max_batch= 5"], "a blank inside"),
                       # An empty list or item is a mistake, as an empty --only is: it set nothing, silently.
                       (["--param", ""], "--param '' names no parameter"),
                       (["--param", " , "], "--param ' , ' names no parameter"),
                       (["--param", "W11.rate=100,"], "--param 'W11.rate=100,': an empty item"),
                       (["--param", "W11.rate=100,,W11.max_batch=2"], "an empty item"),
                       # CLI11 alone took nan (past its range check: the regression check was off),
                       # and hexadecimal.
                       (["--fail-over", "nan"], "--fail-over: 'nan' is not a (decimal) number"),
                       (["--fail-over", "NaN"], "--fail-over: 'NaN' is not a (decimal) number"),
                       (["--fail-over", "inf"], "--fail-over: 'inf' is not a (decimal) number"),
                       (["--fail-over", "0x10"], "--fail-over: '0x10' is not a (decimal) number"),
                       (["--fail-over", "-1"], "--fail-over: '-1' is out of range"),
                       (["--runtimes", ""], "names no runtime"),
                       (["--scaling", ","], "names no workload"),
                       # So is an empty item of the other lists: W5 and nerve were run, the rest dropped.
                       (["--runtimes", "nerve, ,oneTBB"], "--runtimes 'nerve, ,oneTBB': an empty item"),
                       (["--scaling", "W1,,W5"], "--scaling 'W1,,W5': an empty item"),
                       (["--compare", os.path.join(directory, "missing.json")], "missing.json"),
                       (["--compare", not_a_report], "not-a-report.json"),
                       (["--from-json", not_a_report], "not-a-report.json"),
                       (["--json", os.path.join(directory, "no-such-dir", "r.json")], "cannot write"),
                       (["--html", os.path.join(directory, "no-such-dir", "r.html")], "cannot write")):
        # --help is checked the same way: it printed the help (exit 0) whatever else was wrong once
        # CLI11's own checks passed.
        for first in ([], ["--help"]):
            result = run(binary, *first, *QUICK, "--only", "W1", *args, expect=2)
            check(says in result.stderr, f"{' '.join(first + args)}: the error does not say {says!r}: {result.stderr}")
            check("figures" not in result.stdout and "supported" not in result.stdout and "Usage:" not in result.stdout,
                  f"{' '.join(first + args)}: something ran, was listed or helped: {result.stdout}")
    # Nor may a report overwrite the configuration the run reads, --config's file or NERVE_CONFIG's
    # (however spelt): `--config tune.yaml --json tune.yaml` ran and replaced tune.yaml by the report.
    tune = os.path.join(directory, "tune.yaml")
    with open(tune, "w") as f:
        f.write("scheduler:\n  spin_us: 20\n")
    for output in ("--json", "--html"):
        for args, environment, named in (([output, tune, "--config", tune], None, "--config"),
                                         (["--config", tune, output, os.path.join(directory, ".", "tune.yaml")], None,
                                          "--config"),
                                         ([output, os.path.relpath(tune)], {"NERVE_CONFIG": tune}, "NERVE_CONFIG")):
            for first in ([], ["--help"]):
                result = run(binary, *first, *QUICK, "--only", "W1", *args, expect=2, nerve_environment=environment)
                says = f"{output} and {named} name the same file"
                check(says in result.stderr, f"{' '.join(first + args)}: the error does not say {says!r}: {result.stderr}")
                check(result.stdout == "", f"{' '.join(first + args)}: something ran: {result.stdout}")
    with open(tune) as f:
        check(f.read() == "scheduler:\n  spin_us: 20\n", "the configuration file was overwritten")
    # Nor a file the run's contexts write (perf.trace, perf.decision_log): `NERVE_TRACE=run.json ...
    # --json run.json` let the report and the first workload's trace overwrite each other.
    written = os.path.join(directory, "written.json")
    for output in ("--json", "--html"):
        for variable, key in (("NERVE_TRACE", "perf.trace"), ("NERVE_PERF_DECISION_LOG", "perf.decision_log")):
            for first in ([], ["--help"]):
                result = run(binary, *first, *QUICK, "--only", "W1", output, written, expect=2,
                             nerve_environment={variable: os.path.join(directory, ".", "written.json")})
                says = f"{output} and {key} name the same file"
                check(says in result.stderr, f"{variable} {output}: the error does not say {says!r}: {result.stderr}")
                check(result.stdout == "", f"{variable} {output}: something ran: {result.stdout}")
    # Nor a file a later context writes for them, <stem>.<context id><ext> beside it (docs/TRACING.md):
    # `NERVE_TRACE=tr.json ... --json tr.3.json` replaced W9's trace with the report. Other names pass.
    for variable, key in (("NERVE_TRACE", "perf.trace"), ("NERVE_PERF_DECISION_LOG", "perf.decision_log")):
        for name, refused in (("written.3.json", True), ("written.12.2.json", True), ("written.x.json", False),
                              ("written..json", False), ("written.3.json.bak", False)):
            result = run(binary, "--help", "--json", os.path.join(directory, name), expect=2 if refused else 0,
                         nerve_environment={variable: written})
            says = f"which a later context of the run writes for {key}"
            check((says in result.stderr) == refused, f"{variable} --json {name}: {result.stderr}")
    # --help answers only when nothing else on the line is wrong, wherever it stands (as in nerve-info
    # and nerve-run): `--help --bogus` exited 0.
    for args in (["--help", "--bogus"], ["--bogus", "--help"], ["-h", "--bogus"], ["--help", "stray"],
                 ["--help", "--threads", "0"]):
        result = run(binary, *args, expect=2)
        check(args[1] in result.stderr or args[-1] in result.stderr, f"{' '.join(args)}: {result.stderr}")
        check("Usage:" not in result.stdout, f"{' '.join(args)}: the help was printed: {result.stdout}")
    for args in (["--help"], ["-h", "--threads", "2", "--quick"]):
        check("--only" in run(binary, *args).stdout, f"{' '.join(args)}: no help")
    # So are the rest of the line's checks, the configuration it names included: --help answered them
    # all (exit 0) — `--help --only W99`, `--help --trace x.json`, `--help --compare /nonexistent`.
    polcy = os.path.join(directory, "polcy.yaml")
    with open(polcy, "w") as f:
        f.write("scheduler:\n  polcy: eager\n")
    for args, says in ((["--only", "W99"], "no workload 'W99'"), (["--json", ""], "empty"),
                       (["--trace", "x.json"], "--trace needs --html"), (["--fail-over", "5"], "--fail-over needs --compare"),
                       (["--runtimes", "bogus"], "'bogus'"), (["--param", "W1.bogus=1"], "no parameter 'bogus'"),
                       (["--compare", os.path.join(directory, "nonexistent.json")], "nonexistent.json"),
                       (["--config", polcy], "polcy")):
        for order in (["--help", *args], [*args, "--help"]):
            result = run(binary, *order, expect=2)
            check(says in result.stderr, f"{' '.join(order)}: the error does not say {says!r}: {result.stderr}")
            check(result.stdout == "", f"{' '.join(order)}: printed {result.stdout}")
    # An option's value that is one of the options is a mistake, not a file name: `--json --help` ran
    # the whole suite and wrote its report to a file named "--help".
    for option, needs in (("--json", "a path"), ("--html", "a path"), ("--compare", "a path"), ("--only", "workloads"),
                          ("--threads", "a number"), ("--param", "a parameter")):
        for other in ("--help", "-h", "--quick", "--only=W1"):
            result = run(binary, *QUICK, "--only", "W1", "--runtimes", "nerve", option, other, expect=2, cwd=directory)
            says = f"{option}: needs {needs}; got the option {other.split('=')[0]}"
            check(says in result.stderr, f"{option} {other}: the error does not say {says!r}: {result.stderr}")
            check(result.stdout == "", f"{option} {other}: something ran: {result.stdout}")
            check(not os.path.exists(os.path.join(directory, other)), f"{option} {other}: wrote a file {other}")
    # --list runs nothing and writes nothing: an option that means nothing to it is refused, as with
    # --from-json (`--list --json r.json` probed r.json for writing, then wrote nothing, exit 0).
    # --config applies, and a mistake in it stops the list.
    existing = os.path.join(directory, "existing.json")
    with open(existing, "w") as f:
        f.write("{}\n")
    for args in (["--quick"], ["--only", "W1"], ["--threads", "2"], ["--repeat", "1"], ["--warmup", "0"],
                 ["--settle-ms", "0"], ["--runtimes", "nerve"], ["--param", "W11.rate=100"],
                 ["--json", os.path.join(directory, "list.json")], ["--html", os.path.join(directory, "list.html")],
                 ["--trace", existing], ["--compare", existing], ["--fail-over", "5"], ["--scaling", "W1"],
                 ["--from-json", existing], ["--inject-fault", "W1"], ["--json", ""], ["--only", "W99"]):
        for order in (["--list", *args], [*args, "--list"], ["--help", "--list", *args]):
            result = run(binary, *order, expect=2)
            says = f"{args[0]} does not apply with --list"
            check(says in result.stderr, f"{' '.join(order)}: the error does not say {says!r}: {result.stderr}")
            check(result.stdout == "", f"{' '.join(order)}: listed or helped: {result.stdout}")
    check(not os.path.exists(os.path.join(directory, "list.json")), "--list --json left a file behind")
    check("supported" in run(binary, "--list", "--config", os.devnull).stdout, "--list --config: no list")
    result = run(binary, "--list", "--config", polcy, expect=2)
    check("polcy" in result.stderr and "supported" not in result.stdout, f"--list --config {polcy}: {result.stderr}")
    # An output that is not a regular file is refused before anything opens it: the probe of a FIFO
    # waited for a reader, for ever (regression), and a directory or a device cannot hold a report.
    fifo = os.path.join(directory, "fifo")
    os.mkfifo(fifo)
    fifo_link = os.path.join(directory, "fifo-link.json")
    os.symlink(fifo, fifo_link)
    for option, path, kind in (("--json", fifo, "a FIFO (named pipe)"), ("--html", fifo, "a FIFO (named pipe)"),
                               ("--json", fifo_link, "a FIFO (named pipe)"), ("--json", directory, "a directory"),
                               ("--html", os.devnull, "a character device")):
        result = run(binary, *QUICK, "--only", "W1", option, path, expect=2, timeout=30)
        says = f"{option} {path}: this is {kind}, not a regular file"
        check(says in result.stderr, f"{option} {path}: the error does not say {says!r}: {result.stderr}")
        check("figures" not in result.stdout, f"{option} {path}: something ran: {result.stdout}")
    # An input that is not a regular file, nor a pipe a writer holds open, is refused before anything
    # runs, --help or not: reading a FIFO nobody writes to waited for ever (regression), a directory
    # gave "basic_filebuf::underflow error reading the file" without the path.
    for option, path, says in (("--compare", fifo, "this is a FIFO (named pipe) and nothing was written to it"),
                               ("--from-json", fifo, "this is a FIFO (named pipe) and nothing was written to it"),
                               ("--compare", directory, "this is a directory, not a regular file"),
                               ("--from-json", os.devnull, "this is a character device, not a regular file")):
        for first in ([], ["--help"]):
            result = run(binary, *first, option, path, expect=2, timeout=30)
            check(f"{option} {path}: {says}" in result.stderr, f"{' '.join(first)} {option} {path}: {result.stderr}")
            check(result.stdout == "", f"{' '.join(first)} {option} {path}: printed {result.stdout}")
    # perf.trace is checked before the run as each workload's context checks it, the variable that set
    # it named: a FIFO there let the run start, each workload fail to make its context and exit 1.
    for variable, path, says in (("NERVE_TRACE", fifo, "perf.trace: '" + fifo + "' is a FIFO"),
                                 ("NERVE_PERF_TRACE", fifo, "is a FIFO"),
                                 ("NERVE_TRACE", os.path.join(directory, "no-such-dir", "t.json"),
                                  "perf.trace: cannot write")):
        # So are --help and --list, which answered (exit 0) past it.
        for args in ([*QUICK, "--only", "W1"], ["--help"], ["--list"]):
            result = run(binary, *args, expect=2, timeout=30, nerve_environment={variable: path})
            check(f"env {variable}: " in result.stderr and says in result.stderr,
                  f"{variable}={path} {' '.join(args)}: {result.stderr}")
            check(result.stdout == "", f"{variable}={path} {' '.join(args)}: ran, helped or listed: {result.stdout}")
    # The probe of a writable output leaves nothing behind.
    probe = os.path.join(directory, "probe.json")
    bad_config = os.path.join(directory, "bad.yaml")
    with open(bad_config, "w") as f:
        f.write("scheduler:\n  polcy: eager\n")
    result = run(binary, *QUICK, "--only", "W1", "--json", probe, "--config", bad_config, expect=2)
    check("polcy" in result.stderr, f"a bad --config after the probe: {result.stderr}")
    check(not os.path.exists(probe), "the output probe left a file behind")
    # An empty file name (an unset variable) is a usage error, not "skip that step".
    for option in ("--config", "--json", "--html", "--compare", "--from-json"):
        result = run(binary, *QUICK, "--only", "W1", option, "", expect=2)
        check(option in result.stderr and "empty" in result.stderr, f"{option} '': {result.stderr}")
        check("figures" not in result.stdout, f"{option} '': something ran: {result.stdout}")
    result = run(binary, *QUICK, "--only", "W1", "--html", os.path.join(directory, "r.html"), "--trace", "",
                 expect=2)
    check("--trace" in result.stderr and "empty" in result.stderr, f"--trace '': {result.stderr}")
    for empty in ("", ",", " , "):  # an empty selection is a mistake, not "everything"
        result = run(binary, *QUICK, "--only", empty, expect=2)
        check("names no workload" in result.stderr, f"--only {empty!r}: {result.stderr}")
        check("figures" not in result.stdout, f"--only {empty!r}: something ran: {result.stdout}")
    for listed in ("W1,,W5", "W1,"):  # an empty item too (W1 and W5 ran, the gap dropped)
        result = run(binary, *QUICK, "--only", listed, expect=2)
        check(f"--only '{listed}': an empty item" in result.stderr, f"--only {listed!r}: {result.stderr}")
        check("figures" not in result.stdout, f"--only {listed!r}: something ran: {result.stdout}")
    # A blank inside an id is reported, not squeezed out ("W1 0" ran W10).
    result = run(binary, *QUICK, "--only", "W1 0", expect=2)
    check("no workload 'W1 0'" in result.stderr, f"--only 'W1 0': {result.stderr}")
    # Outputs through links: a link to a file not written yet is that file (the same-file check), and
    # the probe of a dangling link leaves the link as it was (it removed the link, leaving its target).
    target = os.path.join(directory, "report.json")
    alias = os.path.join(directory, "alias.html")
    os.symlink("report.json", alias)
    result = run(binary, *QUICK, "--only", "W1", "--json", target, "--html", alias, expect=2)
    check("same file" in result.stderr, f"--html through a link to the --json file: {result.stderr}")
    dangling = os.path.join(directory, "dangling.json")
    os.symlink(os.path.join("results", "real.json"), dangling)
    os.mkdir(os.path.join(directory, "results"))
    result = run(binary, *QUICK, "--only", "W1", "--json", dangling, "--config", bad_config, expect=2)
    check(os.path.islink(dangling), "the output probe removed the link it was given")
    check(not os.path.exists(os.path.join(directory, "results", "real.json")),
          "the output probe left the link's target behind")


def case_config_error(binary, directory):
    config = os.path.join(directory, "bad.yaml")
    with open(config, "w") as f:
        f.write("scheduler:\n  spin_usec: 5\n")
    result = run(binary, *QUICK, "--only", "W1", "--config", config, expect=2)
    check("spin_usec" in result.stderr, f"the error does not name the key: {result.stderr}")
    # Values only a context can check (devices, NUMA nodes the machine lacks) are found before anything
    # runs too, with the same exit status.
    for key, value in (("gpu.devices", "5"), ("memory.numa_policy", "preferred:3")):
        section, name = key.split(".")
        with open(config, "w") as f:
            f.write(f"{section}:\n  {name}: {value}\n")
        result = run(binary, *QUICK, "--only", "W1", "--config", config, expect=2)
        check(key in result.stderr and f"{config}:2" in result.stderr,
              f"{key}: {value}: the error does not name the key and its line: {result.stderr}")
        check("figures" not in result.stdout and "CHECK FAILED" not in result.stdout,
              f"{key}: {value}: something ran: {result.stdout}")
        # --help and --list make the run's checks: --list exited 0, calling the key's error "no OpenCL
        # device" in W12's line.
        for args in (["--help"], ["--list"]):
            result = run(binary, *args, "--config", config, expect=2)
            check(key in result.stderr and f"{config}:2" in result.stderr and result.stdout == "",
                  f"{' '.join(args)} {key}: {value}: {result.stderr}\n{result.stdout}")
    variable = "NERVE_MEMORY_NUMA_POLICY"
    for args in (["--help"], ["--list"]):
        result = run(binary, *args, expect=2, nerve_environment={variable: "preferred:3"})
        check(f"env {variable}: memory.numa_policy" in result.stderr and "no OpenCL device" not in result.stderr
              and result.stdout == "", f"{variable}=preferred:3 {' '.join(args)}: {result.stderr}\n{result.stdout}")
    # A plugin that cannot be loaded stops --list as it stops a run (an uncaught exception aborted it).
    plugins = os.path.join(directory, "plugins")
    os.mkdir(plugins)
    with open(os.path.join(plugins, "libnerve-backend-junk.so"), "w") as f:
        f.write("junk\n")
    for args in (["--list"], [*QUICK, "--only", "W1"]):
        result = run(binary, *args, expect=None, nerve_environment={"NERVE_PLUGIN_PATH": plugins})
        check(result.returncode in (1, 2) and "libnerve-backend-junk.so" in result.stderr
              and "terminate" not in result.stderr,
              f"{' '.join(args)} with a bad plugin: exit {result.returncode}: {result.stderr}")
    # A workload --only names that the machine cannot run fails the run (exit 1), saying why.
    with open(config, "w") as f:
        f.write("gpu:\n  devices: none\n")
    listing = run(binary, "--list", "--config", config)
    if any(line.startswith("W12 ") for line in listing.stdout.splitlines()):
        out = os.path.join(directory, "only.json")
        result = run(binary, *QUICK, "--only", "W1,W12", "--config", config, "--json", out, expect=1)
        check("W12 could not run here" in result.stderr, f"--only W12 without a device: {result.stderr}")
        # The table, its summary and the JSON say so too (they said "skipped", "every result verified").
        check(re.search(r"^W12 .*CHECK FAILED: could not run here: ", result.stdout, re.M) is not None
              and "every result verified" not in result.stdout, f"--only W12 without a device:\n{result.stdout}")
        with open(out) as f:
            doc = json.load(f)
        check_schema(doc)
        check(doc["verified"] is False and [s["id"] for s in doc["skipped"]] == ["W12"],
              f"--only W12 without a device: verified {doc['verified']}, skipped {doc['skipped']}")
        run(binary, "--from-json", out, expect=1)  # read back, it is still a failed run
    # A --config that opens no device leaves the device workloads nothing to run on: they are
    # skipped, as with NERVE_GPU_DEVICES=none (they used to open the OpenCL device regardless).
    with open(config, "w") as f:
        f.write("gpu:\n  devices: none\n")
    listing = run(binary, "--list", "--config", config)
    for line in listing.stdout.splitlines():
        if line.startswith("W12 "):
            check("not supported" in line, f"--config with gpu.devices: none lists W12 as runnable: {line}")
    out = os.path.join(directory, "nodevice.json")
    run(binary, *QUICK, "--only", "W5,W12", "--runtimes", "nerve", "--config", config, "--json", out, expect=1)
    with open(out) as f:
        doc = json.load(f)
    ran = [m["variant"] for w in doc["workloads"] for m in w["measurements"]]
    check(not any("OpenCL" in variant for variant in ran), f"a device variant ran with gpu.devices: none: {ran}")


def case_runtimes(binary, directory):
    # An unknown name, or none at all (an empty selection is a mistake, not "every runtime").
    for runtimes, says in (("bogus", "'bogus'"), ("nerve,bogus", "'bogus'"), ("", "names no runtime"),
                           (",", "names no runtime"), (" , ", "names no runtime")):
        bad = run(binary, *QUICK, "--only", "W1", "--runtimes", runtimes, expect=2)
        check(says in bad.stderr, f"--runtimes {runtimes!r}: the error does not say {says!r}: {bad.stderr}")
        for valid in ("nerve", "oneTBB", "OpenMP", "naive", "BLAS", "STREAM"):
            check(valid in bad.stderr, f"--runtimes {runtimes!r}: the error does not list {valid}: {bad.stderr}")
        check("figures" not in bad.stdout, f"--runtimes {runtimes!r}: something ran: {bad.stdout}")
    # A selection that keeps no variant of the workloads run measures nothing: the run verified
    # nothing and must not say it did (it wrote verified: true and exited 0).
    nothing = os.path.join(directory, "nothing.json")
    page = os.path.join(directory, "nothing.html")
    result = run(binary, *QUICK, "--only", "W1", "--runtimes", "BLAS", "--json", nothing, "--html", page,
                 "--scaling", "none", expect=1)
    check("NOTHING VERIFIED" in result.stderr and "no figure was measured" in result.stderr,
          f"--only W1 --runtimes BLAS: {result.stderr}")
    # The page gives the reason in the words of stderr and the table (it said "Nothing was verified").
    with open(page) as f:
        check("NOTHING VERIFIED: no figure was measured" in f.read(), "--only W1 --runtimes BLAS: the page's verdict")
    check("NOTHING VERIFIED" in result.stdout and "every result verified" not in result.stdout,
          f"--only W1 --runtimes BLAS:\n{result.stdout}")
    with open(nothing) as f:
        doc = json.load(f)
    check(doc["verified"] is False and [(w["id"], w["verified"], w["measurements"]) for w in doc["workloads"]]
          == [("W1", False, [])], f"--only W1 --runtimes BLAS: verified {doc['verified']}, {doc['workloads']}")
    run(binary, "--from-json", nothing, expect=1)  # read back, it is still no pass
    # One workload that measured nothing among others that did fails the run as well: `--only W1,W5
    # --runtimes STREAM` said "every result verified", exit 0 and verified: true next to W1's false.
    # So does one --only does not name (here none does: every workload runs, most without STREAM).
    for only in (["--only", "W1,W5"], []):
        partial = os.path.join(directory, "partial.json")
        result = run(binary, *QUICK, *only, "--runtimes", "STREAM", "--json", partial, expect=1)
        check("W1 MEASURED NOTHING" in result.stderr, f"{only} --runtimes STREAM: {result.stderr}")
        # BENCHMARKS.md's words, in the workload's own line too (it said "NOTHING MEASURED").
        check("MEASURED NOTHING" in result.stdout and "NOTHING MEASURED" not in result.stdout and
              "every result verified" not in result.stdout, f"{only} --runtimes STREAM:\n{result.stdout}")
        with open(partial) as f:
            doc = json.load(f)
        verdicts = {w["id"]: w["verified"] for w in doc["workloads"]}
        check(doc["verified"] is False and verdicts["W1"] is False and verdicts["W5"] is True,
              f"{only} --runtimes STREAM: verified {doc['verified']}, {verdicts}")
        run(binary, "--from-json", partial, expect=1)
        stream = {m["variant"] for w in doc["workloads"] if w["id"] == "W5" for m in w["measurements"]}
    # A runtime's variants are all measured when --runtimes names it alone: W5's device case (with an
    # OpenCL device) has a STREAM variant of its own, which ran only when nerve was selected too.
    both = os.path.join(directory, "both.json")
    run(binary, *QUICK, "--only", "W5", "--runtimes", "nerve,STREAM", "--json", both)
    with open(both) as f:
        doc = json.load(f)
    expected = {m["variant"] for m in doc["workloads"][0]["measurements"] if m["runtime"] == "STREAM"}
    check(stream == expected, f"--runtimes STREAM measured {stream}, --runtimes nerve,STREAM {expected}")
    out = os.path.join(directory, "run.json")
    run(binary, *QUICK, "--only", "W1,W2", "--runtimes", "NERVE", "--json", out)
    with open(out) as f:
        doc = json.load(f)
    runtimes = {m["runtime"] for w in doc["workloads"] for m in w["measurements"]}
    check(runtimes == {"nerve"}, f"--runtimes NERVE ran {runtimes}")
    # W2's `tasks` are per sample as planned (BENCHMARK_JSON.md): with the cutoff a sample is ten fibs
    # (BENCHMARKS.md), and it said one fib's.
    def calls(n, cutoff):
        return 1 if n < cutoff else 1 + calls(n - 1, cutoff) + calls(n - 2, cutoff)
    for m in doc["workloads"][1]["measurements"]:
        n = int(re.match(r"fib\((\d+)\)", m["case"]).group(1))
        expected = 10 * calls(n, 20) if "cutoff" in m["case"] else calls(n, 2)
        check(m["tasks"] == expected, f"W2 {m['case']}: tasks {m['tasks']}, expected {expected} per sample")


def case_param(binary, directory):
    listed = run(binary, "--list").stdout
    if "W11" not in listed or "not supported" in [l for l in listed.splitlines() if l.startswith("W11")][0]:
        print("W11 is not supported in this build: skipped")
        return SKIP
    out = os.path.join(directory, "run.json")
    run(binary, *QUICK, "--only", "W11", "--runtimes", "nerve", "--param", " W11.max_batch=8, w11.rate=4000 ",
        "--param", "W11.max_wait_us=300", "--json", out)
    with open(out) as f:
        doc = json.load(f)
    check_schema(doc)
    check(doc["options"]["parameters"] == {"W11.max_batch": "8", "W11.rate": "4000", "W11.max_wait_us": "300"},
          f"parameters recorded: {doc['options']['parameters']}")
    w11 = doc["workloads"][0]
    check("batches <= 8 rows / <= 300 us" in w11["size"] and "requests at 4,000/s" in w11["size"],
          f"size: {w11['size']}")
    batching = [m for m in w11["measurements"] if m["variant"] == "nerve dynamic batching"][0]
    check(batching["extra"]["mean batch"] <= 8, f"mean batch {batching['extra']['mean batch']} > max_batch 8")
    # A name the workload does not read, or a workload that does not exist: usage errors.
    bad = run(binary, *QUICK, "--only", "W11", "--param", "W11.max_batches=8", expect=2)
    check("max_batches" in bad.stderr and "max_batch" in bad.stderr, f"bad name: {bad.stderr}")
    run(binary, *QUICK, "--param", "W99.x=1", expect=2)
    # A value out of range: the workload cannot run, which fails the run.
    not_run = os.path.join(directory, "not-run.json")
    out_of_range = run(binary, *QUICK, "--only", "W11", "--runtimes", "nerve", "--param", "W11.max_batch=0",
                       "--json", not_run, expect=1)
    check("W11.max_batch" in out_of_range.stdout + out_of_range.stderr, "out-of-range value not named")
    # The record of a workload that did not run is not a figure (below): the summary counted it as one
    # ("1 workload(s), 1 figure ... 1 FAILED VERIFICATION"), and it is no "nothing measured" either.
    summary = [line for line in out_of_range.stdout.splitlines() if line.startswith("1 workload(s), ")]
    check(summary and summary[0].startswith("1 workload(s), 0 figures in ") and
          summary[0].endswith(": 1 FAILED VERIFICATION"), f"the summary line: {summary}")
    check("NOTHING" not in out_of_range.stdout + out_of_range.stderr,
          f"a workload that did not run is 'nothing measured':\n{out_of_range.stdout}\n{out_of_range.stderr}")
    # The JSON records it as docs/BENCHMARK_JSON.md says, one record that is not a figure (the schema's
    # "samples: options.repetitions of them" did not say so), and --from-json reads it back.
    with open(not_run) as f:
        w11 = json.load(f)["workloads"][0]
    check(w11["size"] == "" and w11["verified"] is False and len(w11["measurements"]) == 1, f"W11 not run: {w11}")
    record = w11["measurements"][0]
    note = record.pop("note")
    check("W11.max_batch" in note, f"the record's note: {note}")
    check(record == {"case": "run", "runtime": "nerve", "variant": "(the workload did not run)", "value": 0,
                     "unit": "", "lower_is_better": True, "min": 0, "max": 0, "mad": 0, "samples": [], "tasks": 0,
                     "verified": False, "extra": {}, "nerve_speedup": None}, f"the record of W11 not run: {record}")
    again = run(binary, "--from-json", not_run, "--compare", not_run, "--json", os.path.join(directory, "again.json"),
                expect=1)
    check("CHECK FAILED" in again.stdout and "W11.max_batch" in again.stdout, f"--from-json: {again.stdout}")
    check("1 workload(s), 0 figures in " in again.stdout, f"--from-json counted the record as a figure: {again.stdout}")
    with open(os.path.join(directory, "again.json")) as f:
        check([c["verdict"] for c in json.load(f)["comparison"]] == ["missing"], "the record compared as a figure")
    # A fraction for a count is not truncated: it fails the run the same way.
    fraction = run(binary, *QUICK, "--only", "W11", "--runtimes", "nerve", "--param", "W11.max_batch=1.5", expect=1)
    check("whole number" in fraction.stdout + fraction.stderr, "a fractional max_batch was accepted")


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.charts, self.external, self.scripts, self.headings = [], [], 0, []
        self._heading = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg" and "chart" in (attrs.get("class") or "").split():
            self.charts.append(attrs.get("data-chart"))
        if tag == "script":
            self.scripts += 1
        for name in ("src", "href"):
            if name in attrs and not (attrs[name] or "").startswith("#"):
                self.external.append(attrs[name])
        if tag in ("h2", "h3"):
            self._heading = ""

    def handle_data(self, data):
        if self._heading is not None:
            self._heading += data

    def handle_endtag(self, tag):
        if tag in ("h2", "h3") and self._heading is not None:
            self.headings.append(self._heading)
            self._heading = None


def expected_charts(doc):
    charts = []
    for w in doc["workloads"]:
        index = 0
        cases = []
        for m in w["measurements"]:
            if m["case"] not in cases:
                cases.append(m["case"])
        for case in cases:
            charts.append(f"{w['id']}-{index}")
            index += 1
            if any("p99 latency ms" in m["extra"] for m in w["measurements"] if m["case"] == case):
                charts.append(f"{w['id']}-{index}")
                index += 1
    charts += [f"scaling-{s['workload']}" for s in doc["scaling"]]
    return charts


def make_report(binary, directory, trace):
    page, out = os.path.join(directory, "report.html"), os.path.join(directory, "run.json")
    args = [*QUICK, "--only", "W1,W5", "--scaling", "W1", "--html", page, "--json", out]
    if trace:
        args += ["--trace", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample_trace.json")]
    run(binary, *args)
    with open(out) as f:
        doc = json.load(f)
    charts = expected_charts(doc) + (["trace-timeline"] if trace else [])
    return page, charts


def case_html(binary, directory):
    for trace in (True, False):
        page, charts = make_report(binary, directory, trace)
        parser = Page()
        with open(page, encoding="utf-8") as f:
            parser.feed(f.read())
        check(sorted(parser.charts) == sorted(charts), f"charts {parser.charts}, expected {charts}")
        check(len(charts) >= 3, f"too few charts: {charts}")
        check(not parser.external and parser.scripts == 0, f"not self-contained: {parser.external}")
        check(("Timeline excerpt" in parser.headings) == trace, f"timeline section with trace={trace}")
        check("Scaling over workers" in parser.headings, "no scaling section")
    # --scaling names what to time, whether or not --only runs it; the default list is narrowed to --only.
    for scaling, expected in ((["--scaling", "W1"], ["W1"]), ([], [])):
        page, out = os.path.join(directory, "scaled.html"), os.path.join(directory, "scaled.json")
        run(binary, *QUICK, "--only", "W3", "--runtimes", "nerve", *scaling, "--html", page, "--json", out)
        with open(out) as f:
            scaled = [series["workload"] for series in json.load(f)["scaling"]]
        check(scaled == expected, f"--only W3 {' '.join(scaling)}: scaled {scaled}, expected {expected}")
    # A trace that cannot be read (read after the run) costs the page its timeline, not the run.
    page, report = os.path.join(directory, "no-trace.html"), os.path.join(directory, "no-trace.json")
    result = run(binary, *QUICK, "--only", "W1", "--scaling", "none", "--html", page, "--json", report,
                 "--trace", os.path.join(directory, "missing-trace.json"))
    check("warning" in result.stderr and "missing-trace.json" in result.stderr, f"no warning: {result.stderr}")
    with open(page, encoding="utf-8") as f:
        check("Not shown" in f.read(), "the page does not say why the timeline is missing")
    # So does a --trace that is not a regular file, with a warning naming it: a FIFO nobody writes to
    # hung the report for ever (regression), a directory's warning did not say which path.
    fifo = os.path.join(directory, "trace-fifo")
    os.mkfifo(fifo)
    for trace, says in ((fifo, "this is a FIFO (named pipe) and nothing was written to it"),
                        (directory, "this is a directory, not a regular file")):
        page = os.path.join(directory, "special-trace.html")
        result = run(binary, "--from-json", report, "--html", page, "--trace", trace, timeout=30)
        check(f"warning: --trace {trace}: {says}" in result.stderr, f"--trace {trace}: {result.stderr}")
        with open(page, encoding="utf-8") as f:
            check("Not shown" in f.read(), f"--trace {trace}: the page does not say why the timeline is missing")
    # The documented recipe: NERVE_TRACE=trace.json with --trace trace.json shows the first workload's
    # timeline (the configuration probe and the device check made earlier contexts that took the name).
    trace = os.path.join(directory, "recipe-trace.json")
    page = os.path.join(directory, "recipe.html")
    result = run(binary, *QUICK, "--only", "W3", "--scaling", "none", "--runtimes", "nerve", "--html", page,
                 "--trace", trace, nerve_environment={"NERVE_TRACE": trace})
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    check(any(event.get("ph") == "X" for event in events), f"{trace} has no task: {result.stderr[-2000:]}")
    with open(page, encoding="utf-8") as f:
        check("Timeline excerpt" in f.read(), "the recipe's page has no timeline")
    # Plain progress (not a terminal): one line per workload and case, however many repetitions.
    result = run(binary, *QUICK[:1], "--repeat", "3", "--warmup", "0", "--settle-ms", "0", "--only", "W1,W2",
                 "--scaling", "none")
    cases = [line for line in result.stdout.splitlines() if "   case " in line]
    check(len(cases) >= 3 and len(cases) == len(set(cases)), f"case lines missing or repeated: {cases}")


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def case_chromium(binary, directory):
    browser = find_chromium()
    if browser is None:
        print("chromium is not installed: skipped (apt-get install chromium)")
        return SKIP
    page, charts = make_report(binary, directory, True)
    profile = tempfile.mkdtemp(dir=directory)
    result = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                             "--disable-component-update", "--disable-sync", "--no-first-run",
                             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom",
                             "file://" + os.path.abspath(page)],
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    check(result.returncode == 0, f"chromium exited {result.returncode}\n{result.stderr[-3000:]}")
    parser = Page()
    parser.feed(result.stdout)
    check(sorted(parser.charts) == sorted(charts), f"DOM charts {parser.charts}, expected {charts}")
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    check(not console, "console messages:\n" + "\n".join(console))


def case_compare(binary, directory):
    base = os.path.join(directory, "base.json")
    run(binary, *QUICK, "--only", "W1,W3", "--json", base)
    # Unchanged: every figure "same", --fail-over passes.
    same = run(binary, "--from-json", base, "--compare", base, "--fail-over", "10",
               "--json", os.path.join(directory, "same.json"), "--html", os.path.join(directory, "same.html"))
    with open(os.path.join(directory, "same.json")) as f:
        doc = json.load(f)
    check_schema(doc)
    check(doc["comparison"] and all(c["verdict"] == "same" for c in doc["comparison"]), "unchanged run not 'same'")
    check(" same " in same.stdout, "the table shows no 'same' mark")
    # An unchanged figure is "+0%", as every change is signed: a time's read "same -0%" (-0.0).
    with open(os.path.join(directory, "same.html")) as f:
        page = f.read()
    for where, text in (("the table", same.stdout), ("the page", page)):
        check("-0%" not in text and "same +0%" in text, f"{where}: an unchanged figure is not 'same +0%':\n{text}")
    # Planted regression: the baseline's W3 nerve figure halved, so this run looks 2x slower.
    with open(base) as f:
        planted = json.load(f)
    nerve = [m for w in planted["workloads"] if w["id"] == "W3" for m in w["measurements"] if m["runtime"] == "nerve"][0]
    nerve["value"] /= 2
    path = os.path.join(directory, "planted.json")
    with open(path, "w") as f:
        json.dump(planted, f)
    # --from-json runs nothing: an option that shapes a run is a usage error, not silently ignored.
    for args in (["--quick"], ["--only", "W1"], ["--threads", "2"], ["--runtimes", "nerve"]):
        ignored = run(binary, "--from-json", base, *args, expect=2)
        check(args[0] in ignored.stderr and "--from-json" in ignored.stderr, f"{args}: {ignored.stderr}")
    worse = run(binary, "--from-json", base, "--compare", path, "--fail-over", "20", expect=3)
    check("REGRESSION" in worse.stderr and "worse +" not in worse.stdout and "worse -100%" in worse.stdout,
          f"regression not reported:\n{worse.stdout}\n{worse.stderr}")
    run(binary, "--from-json", base, "--compare", path)  # without --fail-over it is reported, not fatal
    # "X% worse" is the same slowdown for a rate as for a time: a rate that fell to a tenth is 900%
    # worse, as a time ten times longer is. It was (before - after) / before, 90% at most, never 100%:
    # --fail-over could not catch a rate that fell tenfold. Two hand-made reports: W3's nerve figure
    # made a rate, ten times higher in the baseline.
    with open(base) as f:
        rate = json.load(f)
    figure = [m for w in rate["workloads"] if w["id"] == "W3" for m in w["measurements"] if m["runtime"] == "nerve"][0]
    figure["lower_is_better"] = False
    rate_now, rate_before = os.path.join(directory, "rate-now.json"), os.path.join(directory, "rate-before.json")
    with open(rate_now, "w") as f:
        json.dump(rate, f)
    figure["value"] *= 10
    with open(rate_before, "w") as f:
        json.dump(rate, f)
    slower = run(binary, "--from-json", rate_now, "--compare", rate_before, "--fail-over", "500", expect=3)
    check("worse -900%" in slower.stdout and "900% worse" in slower.stderr,
          f"a rate ten times lower is not 900% worse:\n{slower.stdout}\n{slower.stderr}")
    # The message gives the figure and the limit as precisely as they were: "5% worse (limit 5%)" was
    # printed for 5.45% over a limit of 5.4%. (One repetition: no MAD, so the noise limit is the 5% floor.)
    figure["lower_is_better"] = True
    with open(rate_now, "w") as f:
        json.dump(rate, f)
    figure["value"] /= 1.0545
    with open(rate_before, "w") as f:
        json.dump(rate, f)
    slight = run(binary, "--from-json", rate_now, "--compare", rate_before, "--fail-over", "5.4", expect=3)
    check("is 5.45% worse than in" in slight.stderr and "(limit 5.4%)" in slight.stderr,
          f"--fail-over 5.4, 5.45% worse: {slight.stderr}")
    run(binary, "--from-json", rate_now, "--compare", rate_before, "--fail-over", "5.5")
    # The noise limit judges that slowdown too, for a rate as for a time: with a noisy baseline (MAD 40
    # of 100: a threshold of 1.2), a rate that fell to a tenth was "same -900%" (its relative fall,
    # 0.9, is under 1.2) while a time ten times as long was "worse" (black-box review).
    for lower_is_better in (False, True):
        figure["lower_is_better"] = lower_is_better
        figure["value"], figure["mad"] = (10.0 if not lower_is_better else 1000.0), 0.0
        with open(rate_now, "w") as f:
            json.dump(rate, f)
        figure["value"], figure["mad"] = 100.0, 40.0
        with open(rate_before, "w") as f:
            json.dump(rate, f)
        noisy = run(binary, "--from-json", rate_now, "--compare", rate_before, "--fail-over", "10", expect=3)
        check("worse -900%" in noisy.stdout,
              f"lower_is_better {lower_is_better}: ten times slower beyond a 1.2 noise limit:\n{noisy.stdout}")
    # A figure the baseline lacks is "missing", with the 5 % floor as its threshold (BENCHMARK_JSON.md:
    # the threshold is at least 5 %; it was 0).
    del rate["workloads"][[w["id"] for w in rate["workloads"]].index("W3")]
    with open(rate_before, "w") as f:
        json.dump(rate, f)
    missing_json = os.path.join(directory, "missing.json")
    table = run(binary, "--from-json", rate_now, "--compare", rate_before, "--json", missing_json).stdout
    check(" missing" in table and "(new)" not in table, f"the table does not mark W3's figures missing:\n{table}")
    with open(missing_json) as f:
        entries = [c for c in json.load(f)["comparison"] if c["workload"] == "W3"]
    check(entries and all(c["verdict"] == "missing" and c["threshold"] == 0.05 for c in entries),
          f"missing figures: {entries}")
    # --json (or --html) naming the baseline, however spelt, would overwrite it: a usage error.
    with open(base, "rb") as f:
        recorded = f.read()
    for output in ("--json", "--html"):
        for spelling in (os.path.relpath(base), os.path.join(directory, ".", "base.json")):
            clash = run(binary, "--from-json", base, "--compare", base, output, spelling, expect=2)
            check("--compare name the same file" in clash.stderr, f"{output} {spelling}: {clash.stderr}")
    # Nor may an output overwrite the --from-json report or the --trace file (a link to it counts too).
    link = os.path.join(directory, "link.json")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(base, link)
    for args, named in ((["--html", base], "--from-json"), (["--json", link], "--from-json"),
                        (["--html", os.path.join(directory, "t.html"), "--trace", os.path.join(directory, "t.html")],
                         "--trace")):
        clash = run(binary, "--from-json", base, *args, expect=2)
        check(f"{named} name the same file" in clash.stderr, f"{args}: {clash.stderr}")
    with open(base, "rb") as f:
        check(f.read() == recorded, "the baseline was overwritten")
    # A pipe its writer holds open is an input, as `--from-json <(zcat base.json.gz)` gives it.
    cat = subprocess.Popen(["cat", base], stdout=subprocess.PIPE)
    try:
        piped = run(binary, "--from-json", f"/dev/fd/{cat.stdout.fileno()}", pass_fds=(cat.stdout.fileno(),))
    finally:
        cat.stdout.close()
        cat.wait()
    check("W1" in piped.stdout and "W3" in piped.stdout, f"--from-json through a pipe: {piped.stdout}")
    # A report through a link replaces the file the link names, a dangling link's too: it was replaced
    # by a file of its own, and the target never made (black-box review).
    dangling = os.path.join(directory, "dangling-report.json")
    os.symlink("made-through-link.json", dangling)
    run(binary, "--from-json", base, "--json", dangling)
    made = os.path.join(directory, "made-through-link.json")
    check(os.path.islink(dangling) and os.path.isfile(made), "a dangling --json link was replaced, its target not made")
    with open(made) as f:
        check(json.load(f)["workloads"], "the link's target holds no report")
    # A report that cannot be written at the end is an error naming its option, its file and the
    # system's reason (exit 1): a --json directory removed during the run said only "cannot write
    # <path>". Here the file outgrows the file size limit after the probe found it writable.
    # The report it was to replace is left whole, with nothing beside it: the file was truncated, then
    # written in place, and the failed write left half a report where a good one had been.
    for option in ("--json", "--html"):
        output = os.path.join(directory, "too-big")
        run(binary, "--from-json", base, option, output)
        with open(output, "rb") as f:
            previous = f.read()
        result = run(binary, "--from-json", base, option, output, expect=1, preexec_fn=file_size_limit(2048))
        says = f"{option} {output}: cannot write this file: {os.strerror(errno.EFBIG)}"
        check(says in result.stderr, f"{option} past the file size limit: the error does not say {says!r}: {result.stderr}")
        with open(output, "rb") as f:
            check(f.read() == previous, f"{option} past the file size limit: the previous report was not kept "
                                        f"({os.path.getsize(output)} bytes, were {len(previous)})")
        left = [name for name in os.listdir(directory) if name.startswith("too-big.")]
        check(not left, f"{option} past the file size limit: left behind {left}")
    # A report replaced keeps the file's permissions, and one written through a link replaces the file
    # the link names (the link stays).
    private = os.path.join(directory, "private.json")
    with open(private, "w") as f:
        f.write("{}\n")
    os.chmod(private, 0o600)
    through = os.path.join(directory, "through.json")
    os.symlink("private.json", through)
    run(binary, "--from-json", base, "--json", through)
    check(os.path.islink(through), "a report written through a link replaced the link")
    check(os.stat(private).st_mode & 0o777 == 0o600, f"the report's permissions: {os.stat(private).st_mode & 0o777:o}")
    with open(private) as f:
        check_schema(json.load(f))
    # One report that cannot be written keeps neither the other from being written nor its line from
    # being printed: a --json that failed left the --html unwritten, an --html that failed left out the
    # "JSON report:" line. The file size limit falls between the two files' sizes; a report padded with
    # samples (the page shows none) makes the JSON the bigger one.
    with open(base) as f:
        padded = json.load(f)
    padded["workloads"][0]["measurements"][0]["samples"] += [1.0] * 20000
    padded_path = os.path.join(directory, "padded.json")
    with open(padded_path, "w") as f:
        json.dump(padded, f)
    for report, fails, written in ((base, "--html", "--json"), (padded_path, "--json", "--html")):
        paths = {option: os.path.join(directory, "both" + option[2:]) for option in ("--json", "--html")}
        run(binary, "--from-json", report, "--json", paths["--json"], "--html", paths["--html"])
        sizes = {option: os.path.getsize(path) for option, path in paths.items()}
        check(sizes[written] < sizes[fails], f"{report}: report sizes {sizes}: the test cannot split them")
        for path in paths.values():
            os.remove(path)
        result = run(binary, "--from-json", report, "--json", paths["--json"], "--html", paths["--html"], expect=1,
                     preexec_fn=file_size_limit((sizes[written] + sizes[fails]) // 2))
        says = f"{fails} {paths[fails]}: cannot write this file: {os.strerror(errno.EFBIG)}"
        check(says in result.stderr, f"{fails} past the limit: the error does not say {says!r}: {result.stderr}")
        check(os.path.getsize(paths[written]) == sizes[written], f"{fails} failed: {written} was not written")
        announced = f"{written[2:].upper()} report: {paths[written]}"
        check(announced in result.stdout, f"{fails} failed: no {announced!r} line:\n{result.stdout}")
    # A limit that is not a number is a usage error, not a check that never fires.
    nan = run(binary, "--from-json", base, "--compare", path, "--fail-over", "nan", expect=2)
    check("--fail-over" in nan.stderr and "REGRESSION" not in nan.stderr, f"--fail-over nan: {nan.stderr}")
    # Planted improvement: the baseline figure doubled; flagged better, passes.
    nerve["value"] *= 4
    with open(path, "w") as f:
        json.dump(planted, f)
    better = run(binary, "--from-json", base, "--compare", path, "--fail-over", "20")
    check("better +" in better.stdout, f"improvement not reported:\n{better.stdout}")
    # A file that is not a report is a usage error however it is wrong, and the error says where.
    for corrupt, says in BAD_REPORTS:
        with open(base) as f:
            doc = json.load(f)
        corrupt(doc)
        bad = os.path.join(directory, "bad.json")
        with open(bad, "w") as f:
            json.dump(doc, f)
        for args in (["--from-json", bad], ["--from-json", base, "--compare", bad]):
            result = run(binary, *args, expect=2)
            check("bad.json" in result.stderr and all(fragment in result.stderr for fragment in says),
                  f"{' '.join(args)}: the error does not say {says}: {result.stderr}")
            check("figures" not in result.stdout, f"{' '.join(args)}: a report was printed: {result.stdout}")


def file_size_limit(size):
    """A preexec_fn: the child's files cannot grow past `size` bytes (its write fails, EFBIG, where a
    directory removed during the run would fail it, after the probe found the file writable)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails (EFBIG) instead of killing
    return limit


# Ways a --compare or --from-json file is not a report (applied to a quick run of W1 and W3), and
# what the error must say.
BAD_REPORTS = (
    # A null (or any non-array) "workloads" once read as no workloads: nothing to compare, exit 0.
    (lambda doc: doc.update(workloads=None), ['field "workloads": expected an array, found null']),
    (lambda doc: doc.update(skipped={}), ['field "skipped": expected an array, found an object']),
    (lambda doc: doc["workloads"][0].update(measurements=3),
     ['workloads[0] "W1" field "measurements": expected an array, found 3']),
    # A wrong or missing field is named with the workload and measurement it is in.
    # (The last of W1's measurements: how many there are depends on the baselines this build has.)
    (lambda doc: doc["workloads"][0]["measurements"][-1].update(mad="x"),
     ['workloads[0] "W1" measurements[', 'field "mad": expected a number, found a string']),
    (lambda doc: doc["workloads"][1]["measurements"][0].pop("unit"),
     ['workloads[1] "W3" measurements[0] "', ': missing field "unit"']),
    (lambda doc: doc["options"].update(threads=2.5), ['options field "threads": expected a whole number, found 2.5']),
    (lambda doc: doc["machine"]["topology"].pop("pus"), ['machine topology: missing field "pus"']),
    # Every documented field is checked, those a report read back recomputes or does not keep included
    # (they were read past: a file without them was taken for a report).
    (lambda doc: doc.pop("verified"), ['missing field "verified"']),
    (lambda doc: doc.update(verified="yes"), ['field "verified": expected true or false, found a string']),
    (lambda doc: doc.pop("comparison"), ['missing field "comparison"']),
    (lambda doc: doc.update(comparison="x"), ['field "comparison": expected an array or null, found a string']),
    (lambda doc: doc.update(comparison=[{"workload": "W1", "case": "c", "variant": "v", "runtime": "nerve",
                                         "before": 1, "after": 1, "change": 0, "threshold": 0.05, "verdict": "meh"}]),
     ['comparison[0] "W1 / c / v" field "verdict": expected better, worse, same or missing, found "meh"']),
    (lambda doc: doc.update(comparison=[{"workload": "W1", "case": "c", "variant": "v", "runtime": "nerve"}]),
     ['comparison[0] "W1 / c / v": missing field "before"']),
    (lambda doc: doc["tool"].pop("name"), ['tool: missing field "name"']),
    (lambda doc: doc["options"].pop("parameters"), ['options: missing field "parameters"']),
    (lambda doc: doc["options"].pop("config_file"), ['options: missing field "config_file"']),
    (lambda doc: doc["options"].update(config_file=3), ['options field "config_file": expected a string or null, found 3']),
    (lambda doc: doc["versions"].pop("OpenMP"), ['versions: missing field "OpenMP"']),
    (lambda doc: doc["versions"].update(nerve=1), ['versions field "nerve": expected a string or null, found 1']),
    (lambda doc: doc["workloads"][0].update(verified=None),
     ['workloads[0] "W1" field "verified": expected true or false, found null']),
    (lambda doc: doc["workloads"][0]["measurements"][-1].update(nerve_speedup="x"),
     ['workloads[0] "W1" measurements[', 'field "nerve_speedup": expected a number or null, found a string']),
    (lambda doc: doc["workloads"][0]["measurements"][0].pop("nerve_speedup"),
     ['workloads[0] "W1" measurements[0] "', ': missing field "nerve_speedup"']),
)


def closed_stdout_run(binary, directory, *args):
    """Runs openclaw-benchmark with its standard output closed before anything is written to it
    (`... | head -0`); returns (exit status, stderr). Python's subprocess gives the child SIGPIPE's
    default action, which the tool must ignore."""
    with open(os.path.join(directory, "stderr.txt"), "w+") as stderr:
        process = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, stderr=stderr, env=clean_environment())
        process.stdout.close()
        try:
            status = process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            raise CheckFailed(f"openclaw-benchmark {' '.join(args)} did not finish in {TIMEOUT_S} s")
        stderr.seek(0)
        return status, stderr.read()


def case_closed_stdout(binary, directory):
    # Writing the progress raised SIGPIPE, which killed the run before it wrote its report: the
    # report must be written, with the run's verdict, and the exit status say that the table was
    # lost (it was 0, as if the user had seen it).
    out = os.path.join(directory, "run.json")
    status, errors = closed_stdout_run(binary, directory, *QUICK, "--only", "W1", "--runtimes", "nerve", "--json", out)
    check(status == 1, f"with stdout closed: exit status {status} (-{signal.SIGPIPE} is SIGPIPE), not 1: {errors}")
    check(os.path.exists(out), "with stdout closed: no JSON report")
    with open(out) as f:
        doc = json.load(f)
    check_schema(doc)
    check(doc["verified"] and [w["id"] for w in doc["workloads"]] == ["W1"], f"with stdout closed: {doc['workloads']}")
    check("standard output was closed" in errors, f"with stdout closed: no note on stderr: {errors}")
    # A run that failed keeps its own status.
    status, errors = closed_stdout_run(binary, directory, *QUICK, "--only", "W1", "--runtimes", "nerve",
                                       "--inject-fault", "W1")
    check(status == 1 and "FAILED" in errors, f"a failed run with stdout closed: {status}: {errors}")
    # The list and the help, with nothing else to show for them, failed silently (exit 0).
    for args in (["--list"], ["--help"]):
        status, errors = closed_stdout_run(binary, directory, *args)
        check(status == 1 and "standard output was closed" in errors,
              f"{' '.join(args)} with stdout closed: exit status {status}: {errors}")


def case_fault(binary, directory, workload):
    listed = {line.split()[0]: "not supported" not in line for line in run(binary, "--list").stdout.splitlines() if line}
    check(workload in listed, f"{workload} is not in the registry (--list)")
    if not listed[workload]:
        print(f"{workload} is not supported in this build: skipped")
        return SKIP
    faulty = os.path.join(directory, "fault.json")
    result = run(binary, *QUICK, "--only", workload, "--runtimes", "nerve", "--inject-fault", workload,
                 "--json", faulty, expect=1)
    check("CHECK FAILED" in result.stdout and "FAILED" in result.stderr, f"no failure reported:\n{result.stdout}")
    check(f"  {workload} " in result.stderr, f"stderr does not name {workload}: {result.stderr}")
    if workload in EVERY_NERVE_VARIANT_FAULTED:
        # The fault reaches every nerve variant's own check (W6's scheduler policies and device cases
        # included): one that still verifies does not corrupt its result, or does not check it.
        with open(faulty) as f:
            doc = json.load(f)
        for m in doc["workloads"][0]["measurements"]:
            check(m["runtime"] != "nerve" or not m["verified"],
                  f"{workload} {m['case']} / {m['variant']}: verified despite --inject-fault")
    # And the same run without the fault passes; W6 and W7 with their multithreaded BLAS reference,
    # whose % every nerve variant of its cases gives in its note (WORKLOADS.md's second figure).
    reference = SHARE_OF.get(workload)
    clean = os.path.join(directory, "clean.json")
    run(binary, *QUICK, "--only", workload, "--runtimes", "nerve,BLAS" if reference else "nerve", "--json", clean)
    if reference:
        with open(clean) as f:
            doc = json.load(f)
        cases = {m["case"] for m in doc["workloads"][0]["measurements"] if m["runtime"] == "BLAS"}
        check(cases, f"{workload}: no BLAS reference measured")
        for m in doc["workloads"][0]["measurements"]:
            if m["case"] in cases and m["runtime"] == "nerve":
                check(re.search(rf"\d+% of {reference}", m["note"]) is not None,
                      f"{workload} {m['case']} / {m['variant']}: no % of {reference} in its note {m['note']!r}")


# The workloads whose every nerve variant corrupts its result under --inject-fault.
EVERY_NERVE_VARIANT_FAULTED = {"W6", "W7", "W10", "W11"}
# The multithreaded BLAS reference of W6 and W7 (WORKLOADS.md: "% of ... in the same run").
SHARE_OF = {"W6": "LAPACK dpotrf", "W7": "BLAS dgemm"}


CASES = {"json": case_json, "config_error": case_config_error, "usage": case_usage, "runtimes": case_runtimes,
         "param": case_param,
         "html": case_html,
         "chromium": case_chromium, "compare": case_compare, "closed_stdout": case_closed_stdout}


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, case = sys.argv[1], sys.argv[2]
    if os.sep in binary:  # some runs are made in the temporary directory (cwd)
        binary = os.path.abspath(binary)
    with tempfile.TemporaryDirectory() as directory:
        try:
            if case == "fault":
                status = case_fault(binary, directory, sys.argv[3])
            else:
                status = CASES[case](binary, directory)
        except CheckFailed as failure:
            print(f"FAILED: {failure}")
            return 1
    print(f"{case}: passed" if status is None else f"{case}: skipped")
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
