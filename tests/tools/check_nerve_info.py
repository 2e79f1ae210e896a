#!/usr/bin/env python3
"""Drives the nerve-info binary and checks its text and JSON output (docs/NERVE_INFO.md).

Usage: check_nerve_info.py <path to nerve-info> <case>; `--list` prints the cases. Each case is one
CTest test (tests/tools/CMakeLists.txt). Every run gets an environment without NERVE_* variables, plus
the ones the case sets, so that the caller's environment cannot change the outcome.
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 20
SYNTHETIC = "pack:2 numa:2 core:4 pu:1"  # 2 packages × 2 NUMA nodes × 4 cores = 16 cores
ORIGIN_SOURCES = {"default", "file", "environment", "api"}


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def run(binary, *args, env=None, expect_status=0, timeout=TIMEOUT_S):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NERVE_")}
    environment.update(env or {})
    result = subprocess.run([binary, *args], env=environment, capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != expect_status:
        raise CheckFailed(f"nerve-info {' '.join(args)} exited {result.returncode}, expected "
                          f"{expect_status}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}")
    return result


def run_json(binary, *args, env=None, timeout=TIMEOUT_S):
    output = run(binary, "--json", *args, env=env, timeout=timeout).stdout
    try:
        document = json.loads(output)
    except json.JSONDecodeError as error:
        raise CheckFailed(f"--json output does not parse: {error}\n{output[:2000]}")
    check_schema(document)
    return document


def section(text, heading):
    """The lines of the text output's section that starts with `heading`, up to the next blank line."""
    lines = text.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith(heading)]
    check(starts, f"no section '{heading}' in:\n{text}")
    end = next((index for index in range(starts[0], len(lines)) if not lines[index].strip()), len(lines))
    return lines[starts[0] + 1:end]


def config_entry(document, key):
    matches = [entry for entry in document["config"] if entry["key"] == key]
    check(len(matches) == 1, f"config has {len(matches)} entries for {key}")
    return matches[0]


def check_schema(document):
    """The shape every --json document has, whatever the configuration."""
    for field in ("schema", "version", "topology", "worker_pool", "workers", "config", "devices"):
        check(field in document, f"--json lacks '{field}'")
    check(document["schema"] == "nerve.info/1", f"schema is {document['schema']!r}")
    topology = document["topology"]
    for field in ("description", "synthetic", "pu_count", "packages", "numa_nodes", "cores", "caches",
                  "core_distances", "numa_distances"):
        check(field in topology, f"topology lacks '{field}'")
    cores = len(topology["cores"])
    check(cores >= 1, "topology.cores is empty")
    check(len(topology["core_distances"]) == cores, "core_distances is not cores × cores")
    workers = document["workers"]
    check(len(workers) == document["worker_pool"]["count"], "worker_pool.count != len(workers)")
    for index, worker in enumerate(workers):
        check(worker["index"] == index, f"workers[{index}].index is {worker['index']}")
        check(0 <= worker["core"] < cores, f"workers[{index}].core out of range")
        check(worker["application_thread"] == (index == 0), f"workers[{index}].application_thread")
        check(worker["bound"] == (worker["not_bound_reason"] is None), f"workers[{index}] bound/reason")
        check(worker["observed_cpus"] is None or isinstance(worker["observed_cpus"], list),
              f"workers[{index}].observed_cpus")
    check(len(document["config"]) >= 1, "config is empty")
    for entry in document["config"]:
        origin = entry["origin"]
        check(origin["source"] in ORIGIN_SOURCES, f"{entry['key']}: origin.source {origin['source']!r}")
        check(isinstance(entry["value"], str) and "text" in origin, f"{entry['key']}: value/origin.text")
        if origin["source"] == "file":
            check(origin["line"] >= 1 and origin["file"], f"{entry['key']}: file origin without file:line")
        if origin["source"] == "environment":
            check(origin["variable"].startswith("NERVE_"), f"{entry['key']}: env origin without variable")
    check(document["devices"][0]["kind"] == "cpu", "the first device is not the CPU workers")
    check(document["devices"][0]["count"] == len(workers), "CPU device count != workers")
    for position, device in enumerate(document["devices"][1:], start=1):
        check(device["index"] == position, f"accelerator {device['name']}: index {device['index']}, "
              f"listed at {position}")
        check(device["gpu_devices_index"] is None or
              (isinstance(device["gpu_devices_index"], int) and device["gpu_devices_index"] >= 0),
              f"accelerator {device['name']}: gpu_devices_index {device.get('gpu_devices_index')}")


def case_plain(binary):
    keys = [entry["key"] for entry in run_json(binary)["config"]]
    check("parallel.thread_pool_size" in keys and "scheduler.spin_us" in keys, f"config keys: {keys}")
    text = run(binary).stdout
    for heading in ("Topology", "Summary:", "Core distances", "NUMA distances", "Workers:", "Configuration",
                    "Host memory", "Devices", "CPU workers"):
        check(heading in text, f"plain output lacks '{heading}'")
    config_rows = {line.split()[0]: line for line in section(text, "Configuration")[1:]}
    for key in keys:
        check(key in config_rows, f"plain output lacks the key {key}")
        check(config_rows[key].rstrip().endswith("default"), f"{key} is not from 'default': {config_rows[key]}")


def case_json(binary):
    document = run_json(binary, "--set", "parallel.thread_pool_size=2")
    check(len(document["workers"]) == 2, f"{len(document['workers'])} workers, configured 2")
    check(not document["worker_pool"]["automatic"], "worker_pool.automatic with a configured size")
    automatic = run_json(binary)
    check(automatic["worker_pool"]["automatic"], "worker_pool.automatic is false by default")
    # Backends that found no device say why (the CUDA backend on a machine without a GPU, e.g.).
    notes = automatic.get("backend_notes")
    check(isinstance(notes, list) and all(isinstance(note, str) and ": " in note for note in notes),
          f"backend_notes is not a list of 'backend: reason': {notes}")
    check(config_entry(automatic, "parallel.thread_pool_size")["origin"]["source"] == "default",
          "thread_pool_size not from default")
    if not automatic["topology"]["synthetic"]:
        # On the real machine every worker but the application thread is bound to its core's PUs.
        for worker in automatic["workers"][1:]:
            if worker["bound"] and worker["observed_cpus"] is not None:
                check(sorted(worker["observed_cpus"]) == sorted(worker["pu_os_indices"]),
                      f"worker {worker['index']} runs on {worker['observed_cpus']}, bound to "
                      f"{worker['pu_os_indices']}")


def case_synthetic(binary):
    text = run(binary, "--synthetic", SYNTHETIC).stdout
    for expected in ("16 cores", "4 NUMA nodes", "Workers: 16", "not bound: synthetic topology"):
        check(expected in text, f"synthetic output lacks '{expected}'")
    document = run_json(binary, "--synthetic", SYNTHETIC)
    topology = document["topology"]
    check(topology["synthetic"] and len(topology["cores"]) == 16, "not 16 synthetic cores")
    check(len(topology["numa_nodes"]) == 4 and len(topology["packages"]) == 2, "not 2 packages, 4 nodes")
    check(len(document["workers"]) == 16, f"{len(document['workers'])} workers, expected 16")
    check(not any(worker["bound"] for worker in document["workers"]), "a worker is bound on a synthetic machine")
    check(sorted(worker["core"] for worker in document["workers"]) == list(range(16)), "workers share cores")
    origin = config_entry(document, "topology.synthetic")["origin"]
    check(origin["source"] == "api", f"--synthetic gives origin {origin}")
    # --synthetic "" is --set topology.synthetic= : the real machine, whatever the environment says.
    document = run_json(binary, "--synthetic", "", env={"NERVE_TOPOLOGY_SYNTHETIC": SYNTHETIC})
    check(not document["topology"]["synthetic"], "--synthetic '' left the environment's synthetic machine")
    origin = config_entry(document, "topology.synthetic")["origin"]
    check(origin["source"] == "api", f"--synthetic '' gives origin {origin}")


def case_probes_past_bounds(binary):
    # Every worker is observed whatever the submitter's back-pressure: spawned one at a time, the probes
    # past task_queue.max_in_flight (or a queue past per_device_queue_depth) had the application thread
    # run one inside spawn(), which held it for the probe's 2 s deadline; the probes never spawned left
    # their workers "not observed" (38 of 64 here).
    baseline_start = time.monotonic()
    run_json(binary, "--set", "parallel.thread_pool_size=64")
    baseline = time.monotonic() - baseline_start
    for bound in ("task_queue.max_in_flight=16", "task_queue.per_device_queue_depth=1"):
        for policy in ("locality_aware_stealing", "eager"):
            start = time.monotonic()
            document = run_json(binary, "--set", bound, "--set", "parallel.thread_pool_size=64", "--set",
                                f"scheduler.policy={policy}")
            elapsed = time.monotonic() - start
            missing = [worker["index"] for worker in document["workers"] if worker["observed_cpus"] is None]
            check(len(document["workers"]) == 64 and not missing,
                  f"{bound}, {policy}: workers not observed: {missing}")
            # The stall was the probes' 2 s deadline; the run without the bound is the measure of this
            # machine's speed (a loaded one, a sanitizer build).
            check(elapsed < baseline + 1.5, f"{bound}, {policy}: {elapsed:.2f} s, {baseline:.2f} s without it")


def case_large(binary):
    text = run(binary, "--synthetic", "pack:2 numa:2 core:10 pu:1", "--set", "parallel.thread_pool_size=4").stdout
    check("Core distances: not shown for 40 cores" in text, "a 40-core machine prints the core matrix")
    check("NUMA distances" in text, "the NUMA matrix is missing")


def case_capped(binary):
    # More cores than workers may be: the automatic count says it was capped (4098 cores, 4096 workers).
    # 4096 threads: seconds here, too slow under the sanitizers (CTest label nosan). A machine that
    # allows fewer threads skips it (CTest SKIP_RETURN_CODE 77).
    limit = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if limit != resource.RLIM_INFINITY and limit < 8192:
        print(f"skipped: RLIMIT_NPROC {limit} is under the 8192 threads this case may need")
        sys.exit(77)
    try:
        with open("/sys/fs/cgroup/pids.max") as f:
            pids = f.read().strip()
    except OSError:
        pids = "max"
    if pids != "max" and int(pids) < 8192:
        print(f"skipped: the cgroup's pids.max {pids} is under the 8192 threads this case may need")
        sys.exit(77)
    # Starting and joining 4096 threads takes seconds on an idle machine, many more on a loaded one
    # (it ran past 20 s beside two compilations): this case gets most of the test's 120 s.
    capped = run_json(binary, "--synthetic", "pack:2 core:2049 pu:1", timeout=100)["worker_pool"]
    check(capped["count"] == 4096 and "4098 cores" in capped["reason"] and "at most 4096 workers" in capped["reason"],
          f"the capped automatic count: {capped}")


def case_set(binary):
    text = run(binary, "--set", "parallel.thread_pool_size=3").stdout
    check("Workers: 3" in text and "parallel.thread_pool_size = 3 (api)" in text, "3 workers from api")
    # The host pools say how they were set up: allocator, NUMA policy, huge pages (memory.huge_pages).
    pools = run_json(binary, "--set", "memory.huge_pages=false", "--set", "memory.numa_policy=interleave")
    check(pools["host_memory"] and all("huge pages off" in pool and "numa_policy interleave" in pool
                                       for pool in pools["host_memory"]), f"host_memory: {pools['host_memory']}")
    default_pools = run_json(binary)["host_memory"]
    check(not any("huge pages off" in pool for pool in default_pools), f"huge pages on by default: {default_pools}")
    document = run_json(binary, "--set", "parallel.thread_pool_size=3", "--set", "scheduler.policy=eager")
    check(len(document["workers"]) == 3, "--set parallel.thread_pool_size=3 did not give 3 workers")
    for key, value in (("parallel.thread_pool_size", "3"), ("scheduler.policy", "eager")):
        entry = config_entry(document, key)
        check(entry["value"] == value and entry["origin"]["source"] == "api", f"{key}: {entry}")


def case_env(binary):
    environment = {"NERVE_SCHEDULER_SPIN_US": "7"}
    text = run(binary, env=environment).stdout
    check(any("scheduler.spin_us" in line and "env NERVE_SCHEDULER_SPIN_US" in line
              for line in text.splitlines()), "scheduler.spin_us is not shown from env")
    entry = config_entry(run_json(binary, env=environment), "scheduler.spin_us")
    check(entry["value"] == "7" and entry["origin"] == {"source": "environment",
                                                        "variable": "NERVE_SCHEDULER_SPIN_US",
                                                        "text": "env NERVE_SCHEDULER_SPIN_US"}, f"{entry}")
    ignored = config_entry(run_json(binary, "--no-env", env=environment), "scheduler.spin_us")
    check(ignored["origin"]["source"] == "default", f"--no-env still reads the environment: {ignored}")


def case_file(binary):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "nerve.yaml")
        with open(path, "w") as file:
            file.write("# test configuration\nscheduler:\n  spin_us: 12\n  policy: eager\n")
        text = run(binary, "--config", path).stdout
        check(f"{path}:3" in text and f"{path}:4" in text, f"file:line origins missing:\n{text}")
        document = run_json(binary, "--config", path)
        entry = config_entry(document, "scheduler.spin_us")
        check(entry["value"] == "12" and entry["origin"]["source"] == "file", f"{entry}")
        check(entry["origin"]["file"] == path and entry["origin"]["line"] == 3, f"{entry}")
        # NERVE_CONFIG names a file too; --config takes precedence over it.
        via_env = config_entry(run_json(binary, env={"NERVE_CONFIG": path}), "scheduler.policy")
        check(via_env["origin"]["line"] == 4, f"NERVE_CONFIG: {via_env}")


def case_bad_key(binary):
    result = run(binary, "--set", "scheduler.polic=eager", expect_status=2)
    check("did you mean 'scheduler.policy'" in result.stderr, f"stderr: {result.stderr}")
    check(result.stdout == "", "a configuration error still printed a report")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "bad.yaml")
        with open(path, "w") as file:
            file.write("scheduler:\n  spin_us: 5\n  polcy: eager\n")
        result = run(binary, "--config", path, expect_status=2)
        check(f"{path}:3" in result.stderr and "did you mean" in result.stderr, f"stderr: {result.stderr}")
    result = run(binary, "--json", env={"NERVE_SCHEDULER_SPIN_US": "-1"}, expect_status=2)
    check("NERVE_SCHEDULER_SPIN_US" in result.stderr, f"stderr: {result.stderr}")
    run(binary, "--synthetic", "nonsense:3", expect_status=2)


def case_devices(binary):
    # Two numbers per accelerator: the context's (device 0 = the CPU workers) and gpu.devices' (0 = the
    # first accelerator found). Selecting one accelerator by its gpu.devices number opens it as device 1.
    result = run(binary, "--set", "gpu.devices=999", expect_status=2)
    check("gpu.devices: there is no accelerator 999" in result.stderr, f"stderr: {result.stderr}")
    accelerators = run_json(binary)["devices"][1:]
    if not accelerators:
        return  # no OpenCL platform or plugin here: nothing more to number
    last = accelerators[-1]
    check(last["gpu_devices_index"] is not None, f"no gpu.devices number for {last}")
    number = last["gpu_devices_index"]
    chosen = run_json(binary, "--set", f"gpu.devices={number}")["devices"][1:]
    check(len(chosen) == 1 and chosen[0]["name"] == last["name"] and chosen[0]["index"] == 1 and
          chosen[0]["gpu_devices_index"] == number, f"gpu.devices={number} opened {chosen}")
    text = run(binary, "--set", f"gpu.devices={number}").stdout
    check(f"device 1 (gpu.devices {number}): " in text, f"no 'device 1 (gpu.devices {number})' line in:\n{text}")


def backend_note(document, backend):
    """The backend_notes line of `backend` ("cuda: cudart ..."), or None."""
    notes = [note for note in document.get("backend_notes", []) if note.startswith(backend + ": ")]
    check(len(notes) <= 1, f"several backend_notes for {backend}: {notes}")
    return notes[0] if notes else None


def check_backend_without_devices(binary, backend, env):
    """`backend` found no device under `env`: nerve-info says why below the device list, and gpu.devices
    naming it is refused with that reason (not as a name no backend has)."""
    document = run_json(binary, env=env)
    check(not any(device.get("backend") == backend for device in document["devices"]),
          f"{backend} still lists devices with {env}")
    note = backend_note(document, backend)
    check(note is not None and "no device" in note, f"no backend_notes line for {backend} with {env}: "
          f"{document.get('backend_notes')}")
    text = run(binary, env=env).stdout
    check(f"  {note}" in text.splitlines(), f"the text output lacks the note '{note}':\n{text}")
    reason = note[len(backend) + 2:]
    result = run(binary, "--set", f"gpu.devices={backend}", env=env, expect_status=2)
    check(f"gpu.devices: the backend '{backend}' is in this build but found no device, and says why: {reason}"
          in result.stderr, f"gpu.devices={backend} with {env}: {result.stderr}")
    check("no accelerator or backend is named like" not in result.stderr, f"stderr: {result.stderr}")
    return reason


def case_opencl_without_device(binary):
    # Audit F3: the OpenCL backend said nothing when it found no device; F2: gpu.devices=opencl was then
    # refused as a name no backend has. Only where the OpenCL backend is built (tests/tools/CMakeLists.txt).
    with tempfile.TemporaryDirectory() as empty:
        # No platform: an ICD loader that reads its vendor files from an empty directory.
        reason = check_backend_without_devices(binary, "opencl", {"OCL_ICD_VENDORS": empty})
        check("no OpenCL platform" in reason and f"OCL_ICD_VENDORS={empty}" in reason, f"reason: {reason}")
    # A platform without a device: PoCL told to drive a device kind it does not have. Another vendor's
    # platform with devices makes this part moot.
    env = {"POCL_DEVICES": "nonexistentdev"}
    if not any(device.get("backend") == "opencl" for device in run_json(binary, env=env)["devices"]):
        reason = check_backend_without_devices(binary, "opencl", env)
        check("none with a device" in reason and "clGetDeviceIDs" in reason, f"reason: {reason}")
    # A name that is no backend at all keeps its message.
    result = run(binary, "--set", "gpu.devices=openclx", expect_status=2)
    check("no accelerator or backend is named like 'openclx'" in result.stderr, f"stderr: {result.stderr}")


def case_cuda_without_device(binary):
    # Audit F2: gpu.devices=cuda where the CUDA backend has no device (no driver, no GPU, or none
    # visible: CUDA_VISIBLE_DEVICES=-1 hides every GPU) names the backend and its reason. Only where the
    # CUDA backend is built.
    reason = check_backend_without_devices(binary, "cuda", {"CUDA_VISIBLE_DEVICES": "-1"})
    check(reason.startswith("cudart ") and "no device" in reason, f"reason: {reason}")


def case_usage(binary):
    result = run(binary, "--version")
    check(result.stdout.startswith("nerve-info ") and result.stdout.split()[1][0].isdigit(),
          f"--version: {result.stdout}")
    check("--synthetic" in run(binary, "--help").stdout, "--help does not list --synthetic")
    run(binary, "--set", "no_equals_sign", expect_status=2)
    run(binary, "--no-such-option", expect_status=2)
    # --help and --version do not hide a mistake elsewhere on the line.
    for args in (("--version", "--bogus"), ("--bogus", "--version"), ("--help", "--bogus"), ("--bogus", "--help"),
                 ("-h", "--bogus"), ("--version", "stray")):
        result = run(binary, *args, expect_status=2)
        check("--bogus" in result.stderr or "stray" in result.stderr, f"{args}: {result.stderr}")
    # Nor does a mistake found after parsing, or an option taken as another option's value: `--help
    # --set no_equals` printed the help (exit 0), `--config --json` read a file named "--json".
    with tempfile.TemporaryDirectory() as directory:
        bad_key = os.path.join(directory, "bad.yaml")
        with open(bad_key, "w") as f:
            f.write("scheduler:\n  polcy: eager\n")
        for args, says in ((("--help", "--set", "no_equals"), "expected key=value"),
                           (("--version", "--set", "no_equals"), "expected key=value"),
                           (("--set", "no_equals", "--help"), "expected key=value"),
                           # A key of blanks is no key, as "=x" is: it was "unknown configuration key ''".
                           (("--set", " =x"), "expected key=value, got ' =x'"),
                           (("--set", "\t =x"), "expected key=value"),
                           (("--help", "--config", os.path.join(directory, "missing.yaml")), "missing.yaml"),
                           (("--version", "--config", bad_key), "polcy"),
                           (("--help", "--set", "scheduler.polcy=eager"), "polcy"),
                           (("--config", "--json"), "--config: needs a path; got the option --json"),
                           (("--set", "--help"), "--set: needs a KEY=VALUE; got the option --help"),
                           (("--synthetic", "--version"), "got the option --version")):
            result = run(binary, *args, expect_status=2)
            check(says in result.stderr, f"{args}: the error does not say {says!r}: {result.stderr}")
            check(result.stdout == "", f"{args}: printed {result.stdout}")
    # Nor a synthetic or XML machine that hwloc refuses: only the topology's discovery reads them, which
    # --help and --version skipped (exit 0, where the report exits 2).
    with tempfile.TemporaryDirectory() as directory:
        not_xml = os.path.join(directory, "notes.txt")
        with open(not_xml, "w") as f:
            f.write("not an hwloc export\n")
        for args, says in ((("--help", "--synthetic", "bogus:3"), "bogus:3"),
                           (("--version", "--synthetic", "pack:1000 core:1000 pu:1000"), "more than 8192 PUs"),
                           (("--help", "--set", f"topology.xml={not_xml}"), not_xml),
                           (("--version", "--synthetic", "pack:1 core:2 pu:1", "--set", f"topology.xml={not_xml}"),
                            "both set"),
                           (("--help",), "bogus:3")):
            env = {"NERVE_TOPOLOGY_SYNTHETIC": "bogus:3"} if args == ("--help",) else None
            result = run(binary, *args, env=env, expect_status=2)
            check(says in result.stderr, f"{args}: the error does not say {says!r}: {result.stderr}")
            check(result.stdout == "", f"{args}: printed {result.stdout}")
            run(binary, *[arg for arg in args if arg not in ("--help", "--version")], env=env, expect_status=2)
        # A valid one is fine, and --no-env leaves the environment's bad one out.
        run(binary, "--help", "--synthetic", "pack:2 core:2 pu:1")
        run(binary, "--version", "--no-env", env={"NERVE_TOPOLOGY_SYNTHETIC": "bogus:3"})
    run(binary, "--version", "--json")  # other valid options are fine
    run(binary, "--set", "parallel.thread_pool_size=2", "--version")
    # An empty --config (an unset variable) is a mistake, not "use NERVE_CONFIG instead".
    with tempfile.TemporaryDirectory() as directory:
        fallback = os.path.join(directory, "fallback.yaml")
        with open(fallback, "w") as f:
            f.write("scheduler:\n  spin_us: 77\n")
        result = run(binary, "--config", "", env={"NERVE_CONFIG": fallback}, expect_status=2)
        check("--config" in result.stderr and "empty" in result.stderr, f"--config '': {result.stderr}")


def case_calibrate(binary):
    # --calibrate measures the bus between every pair of memory nodes (the OpenCL device's, where one
    # exists) and saves it where heft reads it; --json prints the saved links.
    with tempfile.TemporaryDirectory() as directory:
        result = run(binary, "--calibrate", "--set", f"perf.model_dir={directory}")
        check("Bus calibration" in result.stdout, f"--calibrate printed:\n{result.stdout}")
        saved = os.path.join(directory, "bus.json")
        document = json.loads(run(binary, "--calibrate", "--json", "--set", f"perf.model_dir={directory}").stdout)
        check(document["schema"] == "nerve.busmodel/1", f"schema: {document}")
        for link in document["links"]:
            check(link["latency_ns"] > 0 and link["bytes_per_second"] > 1e6, f"implausible link {link}")
        if document["links"]:
            check(os.path.exists(saved), "bus.json not saved")
            with open(saved) as file:
                check(json.load(file)["schema"] == "nerve.busmodel/1", "bus.json schema")
        check(document["saved"] is True, f"saved: {document}")
        # A model_dir that cannot be written: the matrix is printed, but the run fails (exit 1) saying so.
        not_a_directory = os.path.join(directory, "plain-file")
        with open(not_a_directory, "w") as file:
            file.write("x")
        result = run(binary, "--calibrate", "--set", f"perf.model_dir={not_a_directory}", expect_status=1)
        check("NOT saved to" in result.stdout, f"--calibrate claimed a save:\n{result.stdout}")
        check("not saved" in result.stderr, f"no error on stderr:\n{result.stderr}")


def case_calibrate_same_names(binary):
    # Two devices of one model: the matrix cut their names to the columns' widths (16 for rows, 18 for
    # columns), which left off the " (device 2)" that tells them apart. Rows and columns are numbered now,
    # and a legend names each memory node in full, as the Devices section does. Only with PoCL's
    # CPU device (tests/tools/CMakeLists.txt: NERVE_HAVE_OPENCL); elsewhere nothing to check.
    env = {"POCL_DEVICES": "pthread pthread"}
    devices = []
    if any(device.get("backend") == "opencl" for device in run_json(binary, env=env)["devices"]):
        devices = run_json(binary, "--set", "gpu.devices=opencl", env=env)["devices"]
    if len(devices) < 3:  # the CPU workers and two pthread devices
        print("skipped: PoCL does not give two pthread devices here")
        sys.exit(77)
    names = ["host"] + [device["memory_node_name"] for device in devices[1:]]
    check(len(set(names)) == len(names), f"memory node names alike: {names}")
    with tempfile.TemporaryDirectory() as directory:
        result = run(binary, "--calibrate", "--set", "gpu.devices=opencl", "--set", f"perf.model_dir={directory}",
                     env=env)
    lines = result.stdout.splitlines()
    legend = [line for line in lines if line.startswith("  memory node ")]
    check(legend == [f"  memory node {index}: '{name}'" for index, name in enumerate(names)],
          f"the legend does not name every memory node in full ({names}):\n{result.stdout}")
    header = next((index for index, line in enumerate(lines) if line.lstrip().startswith("from \\ to")), None)
    check(header is not None, f"no matrix header:\n{result.stdout}")
    columns = lines[header].split()[3:]
    rows = [line.split()[0] for line in lines[header + 1:header + 1 + len(names)]]
    expected = [str(index) for index in range(len(names))]
    check(columns == expected and rows == expected,
          f"rows {rows} and columns {columns} are not the memory nodes {expected}:\n{result.stdout}")


def doc_text():
    """docs/NERVE_INFO.md, its lines joined and blanks collapsed, so that a phrase may span lines."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "NERVE_INFO.md")
    with open(path) as file:
        return " ".join(file.read().split())


def case_closed_stdout(binary):
    # Output that cannot be written (a full device, a closed standard output or pipe) is exit 1 with a note on
    # stderr, as for --help: the report, --json and --calibrate exited 1 without a word.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NERVE_")}
    with tempfile.TemporaryDirectory() as directory:
        for args in ([], ["--json"], ["--calibrate", "--set", f"perf.model_dir={directory}"], ["--help"],
                     ["--version"]):
            # "pipe": a reader that quit before the first write (`nerve-info | head -0`); the child gets
            # the default SIGPIPE back, as from a shell: it was killed by it, silently.
            for lost in ("full", "closed", "pipe"):
                reader, writer = os.pipe()
                os.close(reader)
                with open("/dev/full", "w") as full:
                    result = subprocess.run([binary, *args], env=environment,
                                            stdout=writer if lost == "pipe" else full, stderr=subprocess.PIPE,
                                            text=True, timeout=TIMEOUT_S,
                                            preexec_fn=(lambda: os.close(1)) if lost == "closed" else None)
                os.close(writer)
                check(result.returncode == 1 and "nerve-info: the standard output was closed early" in result.stderr,
                      f"nerve-info {' '.join(args)} with stdout {lost}: exit status {result.returncode}, "
                      f"stderr {result.stderr!r}")
                # The note says what was lost, in the words docs/NERVE_INFO.md gives: it said "the report
                # on it" for all, where --help printed "the text on it" and --calibrate "the matrix on it".
                note = next(line for line in result.stderr.splitlines() if "closed early" in line)
                what = note.split("closed early: ", 1)[1]
                check(f"`{what}`" in doc_text() or f"{what}`" in doc_text(),
                      f"nerve-info {' '.join(args)}: the note {note!r} is not the one docs/NERVE_INFO.md gives")


def case_pipe_reader(binary):
    # A reader that quits early is seen only by a write that fails. `nerve-info | head -1`: the default
    # report fits in the pipe, is written whole before head quits, and the exit status is 0 without a note
    # (docs/NERVE_INFO.md presented it as the example of exit 1). A report larger than the pipe is cut
    # short by such a reader: exit 1, with the note.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NERVE_")}

    def first_line_then_quit(args, after_exit=False):
        """Reads one line and quits, as `head -1` does: at once, or (after_exit) only once nerve-info
        has exited — which `head` usually is, for a report that fits in the pipe, but not always (stdio
        writes a report in a few write()s)."""
        process = subprocess.Popen([binary, *args], env=environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        process.stdout.readline()
        if after_exit:
            process.wait(timeout=TIMEOUT_S)
        process.stdout.close()
        stderr = process.stderr.read().decode()
        return process.wait(timeout=TIMEOUT_S), stderr

    report = run(binary).stdout
    if len(report.encode()) < 32 * 1024:  # well inside a pipe's 64 KiB: written whole before the reader quits
        status, stderr = first_line_then_quit([], after_exit=True)
        check(status == 0 and "closed early" not in stderr,
              f"nerve-info | head -1 with a {len(report)}-byte report: exit {status}, stderr {stderr!r}")
    # 256 cores: a core matrix of 65536 numbers, megabytes of JSON.
    status, stderr = first_line_then_quit(["--json", "--synthetic", "pack:2 core:128 pu:1", "--set",
                                           "parallel.thread_pool_size=2"])
    check(status == 1 and "nerve-info: the standard output was closed early" in stderr,
          f"nerve-info --json (megabytes) | head -1: exit {status}, stderr {stderr!r}")
    # The documentation says as much: wherever it shows `| head -1`, it says that this exits 0.
    sentences = [sentence for sentence in doc_text().split(". ") if "| head -1`" in sentence]
    check(sentences and all("exits 0" in sentence for sentence in sentences),
          f"docs/NERVE_INFO.md presents `nerve-info | head -1` as exiting otherwise than 0: {sentences}")


def run_bytes(binary, *args):
    """Runs nerve-info with arguments that may hold any byte; its output as bytes."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NERVE_")}
    result = subprocess.run([binary, *args], env=environment, capture_output=True, timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise CheckFailed(f"nerve-info {args!r} exited {result.returncode}\n{result.stderr!r}")
    return result.stdout


def case_escaped_values(binary):
    # A value (or file name) with control characters went into the Configuration table raw: a newline
    # broke its row, an ESC sequence coloured the terminal, a byte that is not UTF-8 went out as it was.
    # They are written visibly now; --json keeps the value (JSON escapes; U+FFFD for the stray byte).
    odd = b"x\xffy\nz\x1b[31mRED\x7f\xc2\x9b\\n\xc3\xa9\xe2\x80\xaeR\xe2\x80\xa8L"
    shown = "x\\xffy\\nz\\x1b[31mRED\\x7f\\u009b\\\\n\u00e9\\u202eR\\u2028L"
    with tempfile.TemporaryDirectory() as directory:
        config = os.path.join(directory, "odd\tname\n.yaml")
        with open(config, "w") as file:
            file.write("scheduler:\n  spin_us: 12\n")
        output = run_bytes(binary, "--config", config, "--set", b"perf.model_dir=" + odd)
        try:
            text = output.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CheckFailed(f"the text output is not UTF-8: {error}")
        layout = {0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
        controls = sorted({c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f
                           or ord(c) in layout})
        check(not controls, f"the text output holds control characters {controls!r}")
        rows = section(text, "Configuration")
        origin_column = rows[0].index("origin")  # the header's: every row's origin starts there
        for row in rows[1:]:
            check(len(row.split()) >= 3, f"a broken row: {row!r}")
        row = next(row for row in rows if row.split()[0] == "perf.model_dir")
        check(row.split()[1] == shown, f"perf.model_dir shows {row.split()[1]!r}, expected {shown!r}")
        check(row[origin_column:].rstrip() == "api", f"the origin column moved: {row!r}")
        spin = next(row for row in rows if row.split()[0] == "scheduler.spin_us")
        escaped_file = config.replace("\t", "\\t").replace("\n", "\\n")
        check(spin[origin_column:].rstrip() == f"{escaped_file}:2", f"the file origin: {spin!r}")
        entry = config_entry(json.loads(run_bytes(binary, "--json", "--set", b"perf.model_dir=" + odd)),
                             "perf.model_dir")
        check(entry["value"] == "x\ufffdy\nz\x1b[31mRED\x7f\x9b\\n\u00e9\u202eR\u2028L", f"--json: {entry['value']!r}")
        # The topology tree's first line names the XML file: it went out raw (a newline split the line).
        if shutil.which("lstopo-no-graphics"):
            xml = os.path.join(directory, "odd\x1b[31m\nname.xml")
            with open(xml, "wb") as file:
                file.write(subprocess.run(["lstopo-no-graphics", "--input", "pack:1 core:2 pu:1", "--of", "xml"],
                                          check=True, capture_output=True).stdout)
            text = run_bytes(binary, "--set", "topology.xml=" + xml).decode("utf-8")
            machine = section(text, "Topology")[0]
            check("\x1b" not in machine and "2 core(s), 2 PU(s)" in machine, f"the tree's first line: {machine!r}")
            check("odd\\x1b[31m\\nname.xml" in machine, f"the XML file's name is not escaped: {machine!r}")


CASES = {name[len("case_"):]: function for name, function in globals().items() if name.startswith("case_")}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--list":
        print("\n".join(CASES))
        return 0
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(f"usage: {sys.argv[0]} <nerve-info> <{'|'.join(CASES)}>", file=sys.stderr)
        return 2
    try:
        CASES[sys.argv[2]](sys.argv[1])
    except CheckFailed as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    print(f"{sys.argv[2]}: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
