#!/usr/bin/env python3
"""The real-GPU check (tests/gpu/README.md): gpulens-agent against nvidia-smi on one machine.

Run through check.sh. Standard library only: the GPU machine has a Python but nothing can be
installed there. Read-only towards the GPU: it never changes MIG mode, clocks, persistence or
any other setting; the only thing it starts on the GPU is the load program (or nothing).

Phases, each recorded in the report whatever the others did:
  1. machine    driver, CUDA driver version, GPU models, MIG mode (nvidia-smi)
  2. idle       one agent cycle and one nvidia-smi query, field by field
  3. load       the load program holds memory and keeps the SMs busy; the same comparison,
                then per process: the load's pid with non-zero SM utilization and the memory
                it allocated, against nvidia-smi --query-compute-apps
  4. mig        on a GPU already in MIG mode: instances against nvidia-smi -L / mig -lgi,
                and per-instance utilization absent rather than zero
  5. footprint  the agent's own CPU and RSS at 1 Hz while it runs for a while, shipping to a
                sink on 127.0.0.1 that stores nothing; then `gpulens-agent bench` (one cycle's
                CPU time against the real driver, and what each NVML reading's calls cost:
                report.json's bench.calls, report.txt's [bench] table)
  6. replay     the same bench on the fake NVML at the bar's shape (8 GPUs, 64 processes),
                each NVML function charged what it cost here: the agent's 0.5 % bar with
                this driver's latencies (report.json's fake_with_these_costs)

The comparison functions at the top are what the suite tests against the fake NVML and
recorded nvidia-smi output (agent/tests/it/gpu_check.rs runs this whole script so).
"""

import csv
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------------------------
# Agreement rules, one per field both sides report. `tolerance(agent, smi)` is the largest
# difference accepted; the reason says why. Both are read within about a second of each other
# (the agent's cycle, then nvidia-smi); values that NVML averages or samples over a window can
# differ by what changes within that window.
# ---------------------------------------------------------------------------------------------


def _pct_points(points):
    return lambda a, s: points


def _abs_or_rel(absolute, relative):
    return lambda a, s: max(absolute, relative * max(abs(a), abs(s)))


# (report name, agent field in the GPU sample or inventory, nvidia-smi --query-gpu field,
#  how to turn the agent's value into nvidia-smi's unit, tolerance, rule in words)
GPU_FIELDS = [
    ("name", "inventory.model", "name", None, None, "identical text"),
    ("pci_bus_id", "inventory.pci_bus_id", "pci.bus_id", None, None, "identical (case-insensitive)"),
    ("mig_mode", "inventory.mig_enabled", "mig.mode.current", None, None,
     "identical: Enabled = true"),
    ("memory_total_mib", "mem_total_bytes", "memory.total", lambda b: b / MIB,
     _abs_or_rel(1, 0), "within 1 MiB (nvidia-smi rounds to MiB)"),
    ("memory_used_mib", "mem_used_bytes", "memory.used", lambda b: b / MIB,
     _abs_or_rel(64, 0.01),
     "within 64 MiB or 1 % (allocations can move between the two reads)"),
    ("utilization_gpu_pct", "gpu_util", "utilization.gpu", lambda r: r * 100,
     _pct_points(10),
     "within 10 points: NVML reports the share of its last sampling window (1/6 s to 1 s) "
     "in which a kernel ran, and the two reads fall in different windows"),
    ("utilization_memory_pct", "mem_util", "utilization.memory", lambda r: r * 100,
     _pct_points(10), "within 10 points (same window as utilization.gpu)"),
    ("temperature_c", "temp_c", "temperature.gpu", None, _abs_or_rel(2, 0),
     "within 2 degrees C"),
    ("power_w", "power_w", "power.draw", None, _abs_or_rel(30, 0.15),
     "within 30 W or 15 %: nvidia-smi's power.draw is a 1-s average on recent drivers, "
     "the agent's reading the driver's current one"),
    ("sm_clock_mhz", "sm_clock_mhz", "clocks.current.sm", None, _abs_or_rel(60, 0.05),
     "within 60 MHz or 5 % (boost moves in 15-MHz steps under load)"),
    ("mem_clock_mhz", "mem_clock_mhz", "clocks.current.memory", None, _abs_or_rel(1, 0),
     "within 1 MHz (memory clock is fixed while the GPU is active)"),
    ("ecc_corrected_volatile", "ecc_corrected", "ecc.errors.corrected.volatile.total", None,
     _abs_or_rel(0, 0), "identical counter"),
    ("ecc_uncorrected_volatile", "ecc_uncorrected", "ecc.errors.uncorrected.volatile.total",
     None, _abs_or_rel(0, 0), "identical counter"),
    ("throttle_reasons", "throttle_reasons", "clocks_event_reasons.active", None, None,
     "identical bitmask, except GPU idle (0x1) and SW power cap (0x4), which the driver "
     "flips within milliseconds"),
]

# Fields asked of nvidia-smi --query-gpu (older drivers call the last one
# clocks_throttle_reasons.active; each is probed first, unknown ones are skipped).
SMI_QUERY = [
    "timestamp", "index", "uuid", "name", "pci.bus_id", "driver_version", "mig.mode.current",
    "memory.total", "memory.used", "utilization.gpu", "utilization.memory", "temperature.gpu",
    "power.draw", "clocks.current.sm", "clocks.current.memory",
    "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
    "clocks_event_reasons.active", "clocks_throttle_reasons.active",
]

VOLATILE_THROTTLE_BITS = 0x1 | 0x4
# PCIe throughput: NVML counts over a 20-ms window, nvidia-smi dmon over its own; both are
# instantaneous and bursty, so they agree when both are small or within a factor of two.
PCIE_RULE = "both under 100 MB/s, or within a factor of 2 (20-ms windows, read at different times)"


def parse_number(text):
    """A number from nvidia-smi's CSV ('81559 MiB', '631.95 W', '59'); None for [N/A] etc."""
    t = text.strip()
    if not t or t.startswith("[") or t in ("N/A", "Not Supported"):
        return None
    m = re.match(r"^(-?0x[0-9A-Fa-f]+|-?[0-9]+(?:\.[0-9]+)?)", t)
    if not m:
        return None
    v = m.group(1)
    return int(v, 16) if v.lower().lstrip("-").startswith("0x") else float(v)


def parse_csv(text):
    """nvidia-smi --format=csv output: one dict per row, keyed by field name without the
    unit that the header appends ('memory.total [MiB]' -> 'memory.total')."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        return []
    header = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
    return [dict(zip(header, (c.strip() for c in r))) for r in rows[1:]]


def agent_value(cycle, gpu_uuid, field):
    """A field of the agent's `sample --once --format json` output for one GPU."""
    if field.startswith("inventory."):
        inv = next((g for g in cycle.get("inventory", []) if g["uuid"] == gpu_uuid), None)
        return None if inv is None else inv.get(field.split(".", 1)[1])
    sample = next((g for g in cycle.get("snapshot", {}).get("gpus", [])
                   if g["gpu_uuid"] == gpu_uuid), None)
    return None if sample is None else sample.get(field)


def compare_gpu(cycle, smi_row):
    """Field-by-field agreement for one GPU: a list of result dicts."""
    uuid = smi_row.get("uuid", "")
    out = []
    for name, afield, sfield, convert, tolerance, rule in GPU_FIELDS:
        sraw = smi_row.get(sfield)
        if sfield == "clocks_event_reasons.active" and sraw is None:
            sraw = smi_row.get("clocks_throttle_reasons.active")
        a = agent_value(cycle, uuid, afield)
        r = {"field": name, "agent": a, "nvidia_smi": sraw, "rule": rule}
        if a is None and (sraw is None or parse_number(sraw) is None and tolerance is not None):
            r["result"] = "neither reports it"
        elif a is None:
            r["result"] = "only nvidia-smi reports it"
        elif sraw is None or (tolerance is not None and parse_number(sraw) is None):
            r["result"] = "only the agent reports it"
        elif name == "name":
            r["result"] = "agree" if a == sraw else "DIFFER"
        elif name == "pci_bus_id":
            r["result"] = "agree" if a.upper() == sraw.upper() else "DIFFER"
        elif name == "mig_mode":
            r["result"] = "agree" if a == (sraw == "Enabled") else "DIFFER"
        elif name == "throttle_reasons":
            s = parse_number(sraw)
            if s is None:
                r["result"] = "only the agent reports it"
            else:
                r["agent"] = f"0x{int(a):016X}"
                diff = int(a) ^ int(s)
                r["result"] = ("agree" if diff == 0 else
                               "agree (volatile bits)" if diff & ~VOLATILE_THROTTLE_BITS == 0
                               else "DIFFER")
        else:
            av = convert(a) if convert else float(a)
            sv = parse_number(sraw)
            tol = tolerance(av, sv)
            r["agent"] = round(av, 3)
            r["difference"] = round(av - sv, 3)
            r["tolerance"] = round(tol, 3)
            r["result"] = "agree" if abs(av - sv) <= tol + 1e-9 else "DIFFER"
        out.append(r)
    return out


def compare_pcie(cycle, gpu_uuid, dmon_row):
    """The agent's PCIe rx/tx against one `nvidia-smi dmon -s t` line (MB/s)."""
    out = []
    for name, afield, dfield in (("pcie_rx_mb_s", "pcie_rx_bytes_per_s", "rxpci"),
                                 ("pcie_tx_mb_s", "pcie_tx_bytes_per_s", "txpci")):
        a = agent_value(cycle, gpu_uuid, afield)
        s = None if dmon_row is None else parse_number(dmon_row.get(dfield, ""))
        r = {"field": name, "agent": None if a is None else round(a / 1e6, 1),
             "nvidia_smi": s, "rule": PCIE_RULE}
        if a is None or s is None:
            r["result"] = ("neither reports it" if a is None and s is None else
                           "only the agent reports it" if s is None else
                           "only nvidia-smi reports it")
        else:
            am = a / 1e6
            small = am < 100 and s < 100
            ratio_ok = min(am, s) > 0 and max(am, s) / min(am, s) <= 2
            r["result"] = "agree" if small or ratio_ok else "DIFFER"
        out.append(r)
    return out


def parse_dmon(text):
    """`nvidia-smi dmon` output: rows keyed by the column names of its first header line."""
    cols, rows = None, []
    for line in text.splitlines():
        if line.startswith("#"):
            if cols is None:
                cols = line.lstrip("#").split()
            continue
        parts = line.split()
        if cols and len(parts) == len(cols):
            rows.append(dict(zip(cols, parts)))
    return rows


def compare_process(cycle, apps, pid, allocated_mib):
    """The load's row in the agent's processes against nvidia-smi's compute apps."""
    procs = [p for p in cycle.get("snapshot", {}).get("processes", []) if p["pid"] == pid]
    smi = [a for a in apps if parse_number(a.get("pid", "")) == pid]
    r = {"pid": pid, "allocated_mib": allocated_mib, "checks": []}

    def check(what, ok, detail):
        r["checks"].append({"check": what, "result": "agree" if ok else "DIFFER",
                            "detail": detail})

    check("the agent lists the pid", bool(procs), f"{len(procs)} row(s)")
    check("nvidia-smi lists the pid", bool(smi), f"{len(smi)} row(s)")
    if procs:
        p = procs[0]
        sm = p.get("sm_util")
        check("non-zero SM utilization", sm is not None and sm > 0,
              f"sm_util = {sm}")
        used = p.get("mem_used_bytes")
        used_mib = None if used is None else used / MIB
        check("holds at least the memory it allocated",
              used_mib is not None and used_mib >= allocated_mib,
              f"agent {None if used_mib is None else round(used_mib)} MiB, "
              f"allocated {allocated_mib} MiB (plus the CUDA context)")
        if smi:
            s = parse_number(smi[0].get("used_gpu_memory", ""))
            check("memory equals nvidia-smi's used_gpu_memory (within 1 MiB)",
                  s is not None and used_mib is not None and abs(used_mib - s) <= 1,
                  f"agent {None if used_mib is None else round(used_mib, 1)} MiB, "
                  f"nvidia-smi {s} MiB")
    r["result"] = "agree" if all(c["result"] == "agree" for c in r["checks"]) else "DIFFER"
    return r


def parse_mig_list(text):
    """MIG devices from `nvidia-smi -L`: (gpu index, profile, uuid)."""
    out, gpu = [], None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+):", line)
        if m:
            gpu = int(m.group(1))
            continue
        m = re.match(r"^\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[^)]+)\)", line)
        if m and gpu is not None:
            out.append((gpu, m.group(1), m.group(2)))
    return out


def compare_mig(cycle, smi_list_text):
    """The agent's MIG instances against `nvidia-smi -L`; per-instance utilization must be
    absent (NVML has none under MIG), not zero."""
    listed = parse_mig_list(smi_list_text)
    inv = cycle.get("inventory", [])
    agent = [(g["index"], m["profile"], m.get("uuid")) for g in inv
             for m in g.get("mig_instances", [])]
    checks = []
    checks.append({
        "check": "same MIG devices (GPU index, profile, UUID)",
        "result": "agree" if sorted(agent) == sorted(listed) else "DIFFER",
        "detail": f"agent {sorted(agent)}; nvidia-smi -L {sorted(listed)}"})
    mig_gpus = {g["uuid"] for g in inv if g.get("mig_enabled")}
    samples = [g for g in cycle.get("snapshot", {}).get("gpus", []) if g["gpu_uuid"] in mig_gpus]
    zeros = [g["gpu_uuid"] for g in samples if "gpu_util" in g]
    checks.append({
        "check": "GPU utilization of MIG GPUs absent, not 0",
        "result": "agree" if not zeros else "DIFFER",
        "detail": f"reported for {zeros}" if zeros else f"absent for {len(samples)} GPU(s)"})
    procs = [p for p in cycle.get("snapshot", {}).get("processes", [])
             if p["gpu_uuid"] in mig_gpus]
    bad = [p["pid"] for p in procs if "sm_util" in p]
    checks.append({
        "check": "per-process SM utilization inside MIG absent, not 0",
        "result": "agree" if not bad else "DIFFER",
        "detail": f"reported for pids {bad}" if bad else f"absent for {len(procs)} process(es)"})
    return checks


# ---------------------------------------------------------------------------------------------
# Running things
# ---------------------------------------------------------------------------------------------


class Run:
    def __init__(self, out_dir):
        self.out = out_dir
        self.raw = os.path.join(out_dir, "raw")
        os.makedirs(self.raw, exist_ok=True)
        self.agent = os.environ.get("GPU_CHECK_AGENT", "gpulens-agent")
        self.load = os.environ.get("GPU_CHECK_LOAD", "gpulens-gpu-load")
        self.smi = os.environ.get("GPU_CHECK_NVIDIA_SMI", "nvidia-smi")
        self.report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "problems": []}

    def keep(self, name, text):
        with open(os.path.join(self.raw, name), "w") as f:
            f.write(text)

    def cmd(self, name, argv, timeout=60, env=None):
        """Runs argv; keeps its output under raw/NAME; returns (exit status, stdout)."""
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                               env=env)
            self.keep(name, f"$ {' '.join(argv)}\n# exit {p.returncode}\n{p.stdout}\n"
                            f"# stderr\n{p.stderr}")
            return p.returncode, p.stdout, p.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            self.keep(name, f"$ {' '.join(argv)}\n# failed: {e}\n")
            return None, "", str(e)

    def problem(self, text):
        print(f"problem: {text}", file=sys.stderr)
        self.report["problems"].append(text)

    def agent_cycle(self, name):
        status, out, err = self.cmd(name, [self.agent, "sample", "--once", "--format", "json"])
        if status != 0:
            self.problem(f"gpulens-agent sample --once failed ({status}): {err.strip()[:500]}")
            return None
        try:
            return json.loads(out)
        except ValueError as e:
            self.problem(f"gpulens-agent printed no JSON: {e}")
            return None

    def smi_fields(self):
        """The SMI_QUERY fields this nvidia-smi knows (each probed once)."""
        known = []
        for f in SMI_QUERY:
            status, _, _ = self.cmd(f"probe-{f}.txt",
                                    [self.smi, f"--query-gpu={f}", "--format=csv"], timeout=20)
            if status == 0:
                known.append(f)
        return known

    def smi_gpus(self, name, fields):
        status, out, err = self.cmd(name, [self.smi, f"--query-gpu={','.join(fields)}",
                                           "--format=csv"])
        if status != 0:
            self.problem(f"nvidia-smi --query-gpu failed ({status}): {err.strip()[:300]}")
            return []
        return parse_csv(out)

    def dmon(self, name):
        status, out, _ = self.cmd(name, [self.smi, "dmon", "-c", "1", "-s", "t"], timeout=30)
        rows = parse_dmon(out) if status == 0 else []
        return {int(r["gpu"]): r for r in rows if r.get("gpu", "").isdigit()}

    def compare_round(self, label, fields):
        cycle = self.agent_cycle(f"agent-{label}.json")
        gpus = self.smi_gpus(f"smi-{label}.csv", fields)
        dmon = self.dmon(f"dmon-{label}.txt")
        results = []
        if cycle is None:
            return None, results
        for row in gpus:
            idx = parse_number(row.get("index", "")) or 0
            fields_out = compare_gpu(cycle, row)
            fields_out += compare_pcie(cycle, row.get("uuid"), dmon.get(int(idx)))
            results.append({"gpu": row.get("uuid"), "index": int(idx), "fields": fields_out})
        return cycle, results


class Sink(http.server.BaseHTTPRequestHandler):
    """A collector stand-in for the footprint phase: takes every batch, stores nothing."""
    batches = 0

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        self.rfile.read(n)
        Sink.batches += 1
        body = b'{"status":"stored","rows":0}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


MAPPING_START = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def rss_by_mapping(smaps_text, top=8):
    """A process's resident memory by what it maps, from /proc/PID/smaps: each file by its
    name (all its mappings together), anonymous memory by kind ([heap], [stack], [anonymous]
    for the rest); KiB, the largest first, the `top` largest."""
    sizes, name = {}, None
    for line in smaps_text.splitlines():
        if MAPPING_START.match(line):
            fields = line.split(None, 5)
            path = fields[5].strip() if len(fields) > 5 else ""
            if path.endswith(" (deleted)"):
                path = path[: -len(" (deleted)")]
            if not path:
                name = "[anonymous]"
            elif path.startswith("["):
                name = "[stack]" if path.startswith("[stack") else path
            else:
                name = os.path.basename(path)
        elif line.startswith("Rss:") and name is not None:
            sizes[name] = sizes.get(name, 0) + int(line.split()[1])
    ordered = sorted(((k, v) for k, v in sizes.items() if v > 0), key=lambda kv: -kv[1])
    return [{"mapping": k, "rss_kib": v} for k, v in ordered[:top]]


def footprint(run, seconds):
    """The agent's CPU and RSS at 1 Hz while it samples every second and ships to the sink."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state = os.path.join(run.out, "agent-state")
    os.makedirs(state, exist_ok=True)
    env = dict(os.environ, GPULENS_TOKEN="gpu-check")
    argv = [run.agent, "run", "--collector", f"http://127.0.0.1:{server.server_address[1]}",
            "--state-dir", state, "--listen", "off", "--interval", "1s"]
    log = open(os.path.join(run.raw, "agent-run.log"), "w")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    points, prev, first = [], None, None
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds and p.poll() is None:
            time.sleep(1)
            try:
                stat = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
                cpu = (int(stat[11]) + int(stat[12])) / tick
                rss = int(open(f"/proc/{p.pid}/statm").read().split()[1]) * page
            except (OSError, IndexError, ValueError):
                break
            now = time.monotonic()
            if first is None:
                first = (now, cpu)
            if prev is not None:
                points.append({"t": round(now - start, 1),
                               "cpu_percent": round(100 * (cpu - prev[1]) / (now - prev[0]), 2),
                               "rss_mib": round(rss / MIB, 1)})
            prev = (now, cpu)
        # Where the resident memory sits at the end (the real libnvidia-ml is most of it).
        try:
            smaps = open(f"/proc/{p.pid}/smaps").read()
            run.keep("agent-smaps.txt", smaps)
            by_mapping = rss_by_mapping(smaps)
        except OSError:
            by_mapping = []
    finally:
        stop(p)
        server.shutdown()
        log.close()
    if not points:
        run.problem("the agent did not run long enough to measure (see raw/agent-run.log)")
        return None
    cpus = sorted(x["cpu_percent"] for x in points)
    # The kernel counts CPU time in ticks (10 ms: 1 % of a second), so one second's share is
    # coarse; the whole window's is not.
    mean = 100 * (prev[1] - first[1]) / max(prev[0] - first[0], 1e-9)
    return {"seconds": seconds, "points": points, "batches_received": Sink.batches,
            "cpu_percent_mean": round(mean, 3),
            "cpu_percent_median": cpus[len(cpus) // 2], "cpu_percent_max": cpus[-1],
            "rss_mib_max": max(x["rss_mib"] for x in points),
            "rss_by_mapping": by_mapping,
            "exit_status_before_stop": p.returncode if p.returncode not in (None, -15) else None}


def stop(proc):
    """Ends a program the check started, `proc` (None: nothing to end): asked, then killed
    after 10 s."""
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def start_load(run, memory_mib, seconds):
    """Starts the load; returns (process, its ready line) or (None, why)."""
    expect = os.environ.get("GPU_CHECK_EXPECT_PID")
    if expect:  # the suite: the fixture already has a busy process; no GPU here
        return None, {"pid": int(expect), "memory_bytes": int(
            os.environ.get("GPU_CHECK_EXPECT_MIB", "0")) * MIB, "stand_in": True}
    argv = [run.load, "--memory-mib", str(memory_mib), "--duty", "100",
            "--seconds", str(seconds)]
    try:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        return None, f"cannot start {run.load}: {e}"
    line = p.stdout.readline()
    try:
        ready = json.loads(line)
        if ready.get("event") == "ready":
            return p, ready
    except ValueError:
        pass
    p.wait(30)
    return None, f"{run.load} exited {p.returncode}: {line.strip()} {p.stderr.read().strip()[:500]}"


def driver_calls(bench_text):
    """The bench's table of driver calls (what each NVML reading cost on this driver, the
    costliest first) as records: [{reading, calls_per_cycle, us_per_call (wall),
    cpu_us_per_call, share_of_cycle, nvml_function}]."""
    calls, inside = [], False
    for line in bench_text.splitlines():
        if "driver calls per cycle" in line:
            inside = True
            continue
        if not inside:
            continue
        m = re.match(r"\s+([a-z_]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+) %\s+(\S+)$",
                     line)
        if m:
            calls.append({"reading": m.group(1), "calls_per_cycle": float(m.group(2)),
                          "us_per_call": float(m.group(3)),
                          "cpu_us_per_call": float(m.group(4)),
                          "share_of_cycle": float(m.group(5)) / 100,
                          "nvml_function": m.group(6)})
        elif calls:
            break
    return calls


def latency_profile(bench_text):
    """The bench's replay of this driver's costs on the fake NVML (GPULENS_FAKE_NVML_LATENCY:
    each NVML function at the mean CPU time of one call of the readings it serves, `+` the
    wait beyond it where the driver waited), or None."""
    m = re.search(r"GPULENS_FAKE_NVML_LATENCY=(\S+)", bench_text)
    return m.group(1) if m else None


BENCH_NUMBERS = (("cpu_ms_per_cycle", r"CPU time per cycle:\s*([0-9.]+) ms"),
                 ("wall_ms_per_cycle", r"\(wall ([0-9.]+) ms\)"),
                 ("core_percent_at_1hz", r"share of one core at 1000 ms:\s*([0-9.]+) %"),
                 ("peak_rss_mib", r"peak RSS \(VmHWM\):\s*([0-9.]+) MiB"))


def bench_numbers(bench_text):
    out = {}
    for key, pat in BENCH_NUMBERS:
        m = re.search(pat, bench_text)
        out[key] = float(m.group(1)) if m else None
    return out


def fake_bench(run, profile, cycles):
    """The agent's cycle at the bar's shape (the fake NVML with 8 GPUs and 64 processes) charged
    `profile`, this driver's measured cost per NVML call (CPU, and the wait beyond it where the
    driver waits): its share of a core at 1 Hz is the agent's 0.5 % bar with a real driver's
    latencies (issue 78)."""
    fake = os.environ.get("GPU_CHECK_FAKE_NVML", os.path.join(HERE, "bin", "libfake_nvml.so"))
    root = os.path.dirname(os.path.dirname(HERE))
    fixture = os.path.join(root, "testing/fake-nvml/fixtures/h100x8-64proc-steady.json")
    procs = os.path.join(root, "agent/tests/fixtures/proc-64")
    if profile is None:
        run.problem("the bench printed no latency profile to replay on the fake NVML")
        return None
    missing = [p for p in (fake, fixture, procs) if not os.path.exists(p)]
    if missing:
        run.problem(f"cannot replay this driver's costs on the fake NVML: {', '.join(missing)} "
                    "missing (tests/gpu/build.sh builds the fake into tests/gpu/bin)")
        return None
    env = dict(os.environ, GPULENS_FAKE_NVML_FIXTURE=fixture, GPULENS_FAKE_NVML_LATENCY=profile,
               GPULENS_LOG="warn")
    status, text, err = run.cmd("agent-bench-fake.txt",
                                [run.agent, "bench", "--cycles", cycles, "--nvml-lib", fake,
                                 "--node", "bench", "--proc-root", procs],
                                timeout=300, env=env)
    out = {"profile": profile, "gpus": 8, "processes": 64}
    out.update(bench_numbers(text))
    if status != 0 or out["cpu_ms_per_cycle"] is None:
        run.problem(f"the bench on the fake NVML failed ({status}): {err.strip()[:300]}")
    return out


def text_report(rep):
    lines = [f"gpulens real-GPU check, {rep['started']}"]
    m = rep.get("machine", {})
    lines.append(f"driver {m.get('driver')}, CUDA driver {m.get('cuda_driver')}, "
                 f"GPUs: {', '.join(m.get('gpus', [])) or 'none'}")
    for label in ("idle", "load"):
        for g in rep.get(label, []):
            lines.append(f"\n[{label}] GPU {g['index']} {g['gpu']}")
            lines.append(f"  {'field':<26} {'agent':>22} {'nvidia-smi':>22}  result")
            for f in g["fields"]:
                lines.append(f"  {f['field']:<26} {str(f['agent'])[:22]:>22} "
                             f"{str(f['nvidia_smi'])[:22]:>22}  {f['result']}")
    p = rep.get("process")
    if isinstance(p, dict):
        lines.append(f"\n[process] pid {p['pid']}: {p['result']}")
        for c in p["checks"]:
            lines.append(f"  {c['check']:<58} {c['result']:<7} {c['detail']}")
    elif p:
        lines.append(f"\n[process] {p}")
    for c in rep.get("mig", []) or []:
        lines.append(f"[mig] {c['check']}: {c['result']} ({c['detail']})")
    fp = rep.get("footprint")
    if fp:
        lines.append(f"\n[footprint] {fp['seconds']} s at 1 Hz: CPU {fp['cpu_percent_mean']} % "
                     f"of a core over the window (busiest second {fp['cpu_percent_max']} %), "
                     f"RSS max {fp['rss_mib_max']} MiB, {fp['batches_received']} batches shipped")
        if fp.get("rss_by_mapping"):
            lines.append("  RSS at the end by mapping: " + ", ".join(
                f"{m['mapping']} {m['rss_kib'] / 1024:.1f} MiB" for m in fp["rss_by_mapping"]))
    b = rep.get("bench")
    if b and b.get("cpu_ms_per_cycle") is not None:
        lines.append(f"[bench] {b['cycles']} cycles: {b['cpu_ms_per_cycle']} ms CPU a cycle "
                     f"(wall {b['wall_ms_per_cycle']} ms), peak RSS {b['peak_rss_mib']} MiB")
        if b.get("calls"):
            lines.append("[bench] driver calls per cycle, the costliest first "
                         "(reading, calls, µs per call, of it CPU, share of the cycle):")
            for c in b["calls"]:
                lines.append(f"  {c['reading']:<22} {c['calls_per_cycle']:>8.2f} "
                             f"{c['us_per_call']:>10.1f} {c.get('cpu_us_per_call', 0):>10.1f} "
                             f"{c['share_of_cycle'] * 100:>7.1f} %  "
                             f"{c.get('nvml_function', '-')}")
    f = rep.get("fake_with_these_costs")
    if f and f.get("cpu_ms_per_cycle") is not None:
        lines.append(f"[bench on the fake NVML, {f['gpus']} GPUs x {f['processes']} processes, "
                     f"charged this driver's costs] {f['cpu_ms_per_cycle']} ms CPU a cycle, "
                     f"{f['core_percent_at_1hz']} % of a core at 1 Hz (bar 0.5 %)")
        lines.append(f"  GPULENS_FAKE_NVML_LATENCY={f['profile']}")
    s = rep.get("summary", {})
    lines.append(f"\nsummary: {s.get('agree', 0)} agree, {s.get('differ', 0)} differ, "
                 f"{s.get('one_side', 0)} reported by one side only; "
                 f"{len(rep['problems'])} problem(s)")
    for pr in rep["problems"]:
        lines.append(f"  problem: {pr}")
    return "\n".join(lines) + "\n"


def summarize(rep):
    agree = differ = one = 0
    for label in ("idle", "load"):
        for g in rep.get(label, []):
            for f in g["fields"]:
                if f["result"].startswith("agree"):
                    agree += 1
                elif f["result"] == "DIFFER":
                    differ += 1
                elif f["result"].startswith("only"):
                    one += 1
    checks = []
    if isinstance(rep.get("process"), dict):
        checks += rep["process"]["checks"]
    checks += rep.get("mig") or []
    for c in checks:
        if c["result"] == "agree":
            agree += 1
        else:
            differ += 1
    rep["summary"] = {"agree": agree, "differ": differ, "one_side": one}


def main():
    if len(sys.argv) != 2:
        print("usage: check.py OUT_DIR", file=sys.stderr)
        return 64
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    run = Run(out)
    rep = run.report
    load_mib = int(os.environ.get("GPU_CHECK_LOAD_MIB", "2048"))
    footprint_s = int(os.environ.get("GPU_CHECK_FOOTPRINT_SECONDS", "60"))

    # 1. The machine.
    status, text, err = run.cmd("smi-q.txt", [run.smi, "-q"])
    if status is None:
        run.problem(f"nvidia-smi cannot run: {err}")
    m = {}
    for key, pat in (("driver", r"Driver Version\s*:\s*(\S+)"),
                     ("cuda_driver", r"CUDA Version\s*:\s*(\S+)")):
        mm = re.search(pat, text or "")
        m[key] = mm.group(1) if mm else None
    _, ltext, _ = run.cmd("smi-L.txt", [run.smi, "-L"])
    m["gpus"] = re.findall(r"^GPU \d+: (.+?) \(UUID", ltext, re.M)
    m["mig_enabled"] = re.findall(r"MIG Mode\s*\n\s*Current\s*:\s*(\S+)", text or "")
    rep["machine"] = m
    fields = run.smi_fields()
    rep["nvidia_smi_fields"] = fields

    # 2. Idle.
    cycle, rep["idle"] = run.compare_round("idle", fields)

    # 3. Under load.
    proc, ready = start_load(run, load_mib, 40)
    if isinstance(ready, str):
        run.problem(f"no GPU load: {ready}")
    else:
        rep["load_program"] = ready
        time.sleep(0 if ready.get("stand_in") else 4)
        cycle, rep["load"] = run.compare_round("load", fields)
        _, apps_text, _ = run.cmd("smi-apps.csv", [
            run.smi, "--query-compute-apps=pid,used_gpu_memory,gpu_uuid", "--format=csv"])
        if cycle is not None:
            rep["process"] = compare_process(cycle, parse_csv(apps_text), int(ready["pid"]),
                                             int(ready["memory_bytes"]) // MIB)
        stop(proc)

    # 4. MIG, only when the GPU is already in MIG mode (never changed here).
    if cycle is not None and any(g.get("mig_enabled") for g in cycle.get("inventory", [])):
        run.cmd("smi-mig-lgi.txt", [run.smi, "mig", "-lgi"])
        rep["mig"] = compare_mig(cycle, ltext)
    else:
        rep["mig"] = None

    # 5. The agent's own footprint: running for a while, then one cycle's cost measured by
    #    `gpulens-agent bench` (the same numbers PERFORMANCE.md has from the fake NVML).
    if footprint_s > 0:
        rep["footprint"] = footprint(run, footprint_s)
    cycles = os.environ.get("GPU_CHECK_BENCH_CYCLES", "300")
    # A process on the GPU while the bench runs, so that its first cycle asks NVML for
    # per-process utilization (never asked of a GPU without processes) and the replay below
    # charges what that costs here.
    bproc, _ = start_load(run, 256, 120)
    status, bench_text, err = run.cmd("agent-bench.txt",
                                      [run.agent, "bench", "--cycles", cycles], timeout=300)
    stop(bproc)
    bench = {"cycles": int(cycles)}
    bench.update(bench_numbers(bench_text))
    if status != 0 or bench["cpu_ms_per_cycle"] is None:
        run.problem(f"gpulens-agent bench failed ({status}): {err.strip()[:300]}")
    bench["calls"] = driver_calls(bench_text)
    rep["bench"] = bench
    # 6. This driver's costs replayed on the fake NVML at the bar's shape.
    rep["fake_with_these_costs"] = fake_bench(run, latency_profile(bench_text), cycles)

    summarize(rep)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    txt = text_report(rep)
    with open(os.path.join(out, "report.txt"), "w") as f:
        f.write(txt)
    with tarfile.open(os.path.join(out, "raw.tar.gz"), "w:gz") as t:
        t.add(run.raw, arcname="raw")
    shutil.rmtree(run.raw, ignore_errors=True)
    shutil.rmtree(os.path.join(out, "agent-state"), ignore_errors=True)
    print(txt)
    return 1 if rep["summary"]["differ"] or rep["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
