#!/usr/bin/env python3
"""What the NVML calls behind gpulens' costliest readings cost on this driver, next to the
calls that could stand in for them (standard library only: ctypes on libnvidia-ml.so.1).

Usage: probe_costs.py OUT.json [--load PATH [--window-only]]

For each candidate, on GPU 0: wall and CPU microseconds per call, over back-to-back calls and
over calls 200 ms apart (a driver may cache an answer for a while), and the value it returned.
With --load (the gpulens-gpu-load program), it then keeps the GPU busy and asks
nvmlDeviceGetProcessUtilization for the samples since 1, 5 and 20 s ago: how many samples per
process the driver keeps decides whether the call can be made less often than once a second
without losing what happened in between.

GPULENS_NVML_LIB names another library (the fake NVML, for the suite). Reads only: no GPU
setting is changed.
"""
import ctypes as C
import json
import os
import subprocess
import sys
import time

FI = {  # nvml.h field ids
    "TOTAL_ENERGY_CONSUMPTION": 83,
    "POWER_AVERAGE": 185,
    "POWER_INSTANT": 186,
    "ENERGY": 191,
    "PCIE_COUNT_TX_BYTES": 197,
    "PCIE_COUNT_RX_BYTES": 198,
}


class FieldValue(C.Structure):
    _fields_ = [("fieldId", C.c_uint), ("scopeId", C.c_uint), ("timestamp", C.c_longlong),
                ("latencyUsec", C.c_longlong), ("valueType", C.c_int), ("nvmlReturn", C.c_int),
                ("value", C.c_ulonglong)]


class ProcSample(C.Structure):
    _fields_ = [("pid", C.c_uint), ("timeStamp", C.c_ulonglong), ("smUtil", C.c_uint),
                ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint)]


class ProcInfoV1(C.Structure):
    _fields_ = [("timeStamp", C.c_ulonglong), ("pid", C.c_uint), ("smUtil", C.c_uint),
                ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint),
                ("jpgUtil", C.c_uint), ("ofaUtil", C.c_uint)]


class ProcsInfo(C.Structure):
    _fields_ = [("version", C.c_uint), ("processSamplesCount", C.c_uint),
                ("lastSeenTimeStamp", C.c_ulonglong), ("procUtilArray", C.POINTER(ProcInfoV1))]


def libcuda_mapped():
    """Whether libcuda is in this process's memory: NVML loads it itself on some call, and on
    an H200 it held 3.7 MiB of the agent's RSS (docs/gpu-checks/2026-12-04-h200-580.159.04.md)."""
    with open("/proc/self/maps") as f:
        return any("libcuda.so" in line for line in f)


def timed(fn, n, gap_s=0.0):
    """Median wall and CPU µs per call of `fn` over `n` calls, `gap_s` apart, and its last rc."""
    walls, cpus, rc = [], [], None
    for _ in range(n):
        w, c = time.perf_counter(), time.process_time()
        rc = fn()
        walls.append((time.perf_counter() - w) * 1e6)
        cpus.append((time.process_time() - c) * 1e6)
        if gap_s:
            time.sleep(gap_s)
    med = lambda xs: sorted(xs)[len(xs) // 2]
    return {"wall_us": round(med(walls), 1), "cpu_us": round(med(cpus), 1), "rc": rc}


def window(lib, dev, load, proc_util, C):
    """What one process-utilization sample covers: under a load 2 s on / 2 s off, the value
    read every 250 ms since the previous read's newest sample, and read every second since 4 s
    before (a whole period: an average since the timestamp reads ~50, the latest window 0 or
    100), beside the device's utilization rate."""
    p = subprocess.Popen([load, "--memory-mib", "256", "--duty", "50", "--period-ms", "4000",
                          "--seconds", "30"], stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    time.sleep(2)

    class Rates(C.Structure):
        _fields_ = [("gpu", C.c_uint), ("memory", C.c_uint)]
    rates, rows, last = Rates(), [], 0
    t0 = time.time()
    for i in range(48):
        now_us = int(time.time() * 1e6)
        inc = proc_util(last)()
        if isinstance(inc, list) and inc:
            last = max(s[1] for s in inc)
        whole = proc_util(now_us - 4_000_000)() if i % 4 == 0 else None
        lib.nvmlDeviceGetUtilizationRates(dev, C.byref(rates))
        rows.append({"t": round(time.time() - t0, 2),
                     "incremental": inc if isinstance(inc, int) else [(s[2], round((now_us - s[1]) / 1e6, 2)) for s in inc],
                     "since_4s": whole if whole is None or isinstance(whole, int) else [(s[2], round((now_us - s[1]) / 1e6, 2)) for s in whole],
                     "device_gpu": rates.gpu})
        print(rows[-1], flush=True)
        time.sleep(0.25)
    p.kill()
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: probe_costs.py OUT.json [--load PATH]")
    out, load = sys.argv[1], None
    if "--load" in sys.argv:
        load = sys.argv[sys.argv.index("--load") + 1]
    lib = C.CDLL(os.environ.get("GPULENS_NVML_LIB", "libnvidia-ml.so.1"))
    # Where libcuda comes in: the first step after which it is mapped ("never": not at all).
    libcuda = {"first_mapped_after": "never"}

    def note_libcuda(step):
        if libcuda["first_mapped_after"] == "never" and libcuda_mapped():
            libcuda["first_mapped_after"] = step
    note_libcuda("loading libnvidia-ml")
    assert lib.nvmlInit_v2() == 0, "nvmlInit_v2 failed"
    note_libcuda("nvmlInit_v2")
    dev = C.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(dev)) == 0
    note_libcuda("nvmlDeviceGetHandleByIndex_v2")
    u64, u32 = C.c_ulonglong(), C.c_uint()

    def fields(*names):
        vals = (FieldValue * len(names))()
        for v, name in zip(vals, names):
            v.fieldId = FI[name]

        def call():
            rc = lib.nvmlDeviceGetFieldValues(dev, len(names), vals)
            return rc if rc else [(v.nvmlReturn, v.value) for v in vals]
        return call

    def proc_util(last_seen=0):
        buf, n = (ProcSample * 256)(), C.c_uint(256)

        def call():
            n.value = 256
            rc = lib.nvmlDeviceGetProcessUtilization(dev, buf, C.byref(n), C.c_ulonglong(last_seen))
            return rc if rc else [(buf[i].pid, buf[i].timeStamp, buf[i].smUtil) for i in range(n.value)]
        return call

    def procs_info(last_seen=0):
        arr = (ProcInfoV1 * 256)()
        info = ProcsInfo(version=C.sizeof(ProcsInfo) | (1 << 24), processSamplesCount=256,
                         lastSeenTimeStamp=last_seen, procUtilArray=arr)

        def call():
            info.processSamplesCount, info.lastSeenTimeStamp = 256, last_seen
            f = getattr(lib, "nvmlDeviceGetProcessesUtilizationInfo", None)
            if f is None:
                return "absent"
            rc = f(dev, C.byref(info))
            return rc if rc else [(arr[i].pid, arr[i].timeStamp, arr[i].smUtil)
                                  for i in range(info.processSamplesCount)]
        return call

    candidates = {
        "nvmlDeviceGetTotalEnergyConsumption": lambda: (lib.nvmlDeviceGetTotalEnergyConsumption(dev, C.byref(u64)), u64.value),
        "nvmlDeviceGetPowerUsage": lambda: (lib.nvmlDeviceGetPowerUsage(dev, C.byref(u32)), u32.value),
        "fields TOTAL_ENERGY_CONSUMPTION": fields("TOTAL_ENERGY_CONSUMPTION"),
        "fields ENERGY": fields("ENERGY"),
        "fields POWER_AVERAGE": fields("POWER_AVERAGE"),
        "fields POWER_INSTANT": fields("POWER_INSTANT"),
        "fields PCIE_COUNT_TX_BYTES+RX_BYTES": fields("PCIE_COUNT_TX_BYTES", "PCIE_COUNT_RX_BYTES"),
        "nvmlDeviceGetPcieThroughput(rx)": lambda: (lib.nvmlDeviceGetPcieThroughput(dev, 1, C.byref(u32)), u32.value),
        "nvmlDeviceGetProcessUtilization(0)": proc_util(0),
        "nvmlDeviceGetProcessesUtilizationInfo(0)": procs_info(0),
    }
    report = {"calls": {}, "history": {}, "libcuda": libcuda}
    if "--window-only" in sys.argv:
        report["window"] = window(lib, dev, load, proc_util, C)
        candidates = {}
    for name, fn in candidates.items():
        slow = "Pcie" in name
        report["calls"][name] = {
            "back_to_back": timed(fn, 4 if slow else 40),
            "200ms_apart": timed(fn, 3 if slow else 8, gap_s=0.2),
            "value": repr(fn())[:300],
        }
        note_libcuda(name)
        print(f"{name:45s} {report['calls'][name]['back_to_back']} {report['calls'][name]['200ms_apart']}",
              flush=True)
    if load and candidates:
        p = subprocess.Popen([load, "--memory-mib", "512", "--duty", "50", "--period-ms", "200",
                              "--seconds", "40"], stdout=subprocess.PIPE, text=True)
        p.stdout.readline()
        time.sleep(22)
        now_us = int(time.time() * 1e6)
        for back in (1, 5, 20):
            for name, make in (("v0", proc_util), ("v1", procs_info)):
                got = make(now_us - back * 1_000_000)()
                key = f"{name} since {back}s"
                report["history"][key] = got if isinstance(got, (int, str)) else {
                    "samples": len(got), "pids": len({s[0] for s in got}),
                    "span_s": round((max(s[1] for s in got) - min(s[1] for s in got)) / 1e6, 2) if got else 0,
                    "sm": [s[2] for s in got][:60]}
                print(key, report["history"][key], flush=True)
        p.wait()
        report["window"] = window(lib, dev, load, proc_util, C)
    print(f"libcuda mapped first after: {libcuda['first_mapped_after']}", flush=True)
    lib.nvmlShutdown()
    with open(out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
