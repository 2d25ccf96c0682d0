#!/usr/bin/env python3
"""Reads the GPUs through pynvml (nvidia-ml-py), next to gpumeter, as a
cross-check for scripts/gpu-check.sh.

Writes to --out:
  probe.json       every NVML call gpumeter makes (and a few more), asked
                   once per GPU, with its answer or its error (code, name);
                   NOT_SUPPORTED answers are listed apart.
  samples.jsonl    one line per read: "power" lines every --power-interval
                   (power, instant power where the GPU has it, the energy
                   counter) and "slow" lines every --interval (utilisation,
                   memory, the process lists, the raw GetProcessUtilization
                   samples since the last one seen, with their timestamps).
  pids.json        every PID NVML listed: whether /proc/<pid> exists here,
                   its command line and the NSpid line of its status.
  errors.json      how often each call failed during the loop, by error.

Stops after --duration seconds, when --stop-file appears, or on SIGTERM.
"""

import argparse
import json
import os
import signal
import sys
import time

NOT_SUPPORTED = 3
NOT_FOUND = 6

# Field ids (nvml.h); getattr prefers pynvml's names where it has them.
FIELDS = {
    "FI_DEV_MEMORY_TEMP": 82,
    "FI_DEV_POWER_AVERAGE": 185,
    "FI_DEV_POWER_INSTANT": 186,
    "FI_DEV_TOTAL_ENERGY_CONSUMPTION": 83,
}


def field_id(nv, name):
    return getattr(nv, "NVML_" + name, FIELDS[name])


class Reader:
    def __init__(self, nv, out):
        self.nv = nv
        self.out = out
        self.errors = {}
        self.pids = {}
        self.stop = False

    # A call's outcome as data: {"ok": value} or {"error": name, "code": n}.
    def call(self, name, fn, *args, **kw):
        try:
            return {"ok": fn(*args, **kw)}
        except self.nv.NVMLError as e:
            return {"error": str(e), "code": getattr(e, "value", None)}
        except Exception as e:  # a wrapper pynvml lacks, or ctypes trouble
            return {"error": "%s: %s" % (type(e).__name__, e), "code": None}

    def count(self, name, res):
        if "error" in res:
            key = "%s: %s" % (name, res["error"])
            self.errors[key] = self.errors.get(key, 0) + 1

    def note_pid(self, pid):
        if pid in self.pids:
            return
        info = {"pid": pid, "first_seen": time.time(), "in_proc": os.path.isdir("/proc/%d" % pid)}
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                info["cmdline"] = f.read(300).replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError as e:
            info["cmdline_error"] = str(e)
        try:
            with open("/proc/%d/status" % pid, encoding="utf-8") as f:
                for line in f:
                    if line.startswith(("NSpid:", "Uid:", "Name:")):
                        info[line.split(":")[0]] = line.split(":", 1)[1].strip()
        except OSError:
            pass
        self.pids[pid] = info


def jsonable(v):
    """Turns pynvml's ctypes structures and bytes into JSON values."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    fields = getattr(v, "_fields_", None)
    if fields:
        out = {}
        for f in fields:
            name = f[0]
            try:
                out[name] = jsonable(getattr(v, name))
            except Exception as e:
                out[name] = "unreadable: %s" % e
        return out
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if hasattr(v, "__dict__"):  # pynvml's "friendly objects"
        return {str(k): jsonable(x) for k, x in vars(v).items() if not k.startswith("_")}
    return repr(v)


def field_value(fv):
    kind = int(fv.valueType)
    u = fv.value
    names = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    attr = names.get(kind)
    if attr is None or not hasattr(u, attr):
        return None
    return getattr(u, attr)


def read_fields(r, h, names):
    nv = r.nv
    ids = [field_id(nv, n) for n in names]
    res = r.call("GetFieldValues", nv.nvmlDeviceGetFieldValues, h, ids)
    if "error" in res:
        return {n: res for n in names}
    out = {}
    for n, fv in zip(names, res["ok"]):
        ret = int(fv.nvmlReturn)
        if ret != 0:
            out[n] = {"error": nv.nvmlErrorString(ret) if hasattr(nv, "nvmlErrorString") else str(ret), "code": ret}
        else:
            out[n] = {"ok": field_value(fv), "timestamp_us": int(getattr(fv, "timestamp", 0))}
    return out


def probe(r, h):
    nv = r.nv
    calls = [
        ("GetName", nv.nvmlDeviceGetName, (h,)),
        ("GetUUID", nv.nvmlDeviceGetUUID, (h,)),
        ("GetPciInfo", nv.nvmlDeviceGetPciInfo, (h,)),
        ("GetMemoryInfo", nv.nvmlDeviceGetMemoryInfo, (h,)),
        ("GetUtilizationRates", nv.nvmlDeviceGetUtilizationRates, (h,)),
        ("GetEncoderUtilization", nv.nvmlDeviceGetEncoderUtilization, (h,)),
        ("GetDecoderUtilization", nv.nvmlDeviceGetDecoderUtilization, (h,)),
        ("GetPowerUsage", nv.nvmlDeviceGetPowerUsage, (h,)),
        ("GetTotalEnergyConsumption", nv.nvmlDeviceGetTotalEnergyConsumption, (h,)),
        ("GetEnforcedPowerLimit", nv.nvmlDeviceGetEnforcedPowerLimit, (h,)),
        ("GetTemperature(GPU)", nv.nvmlDeviceGetTemperature, (h, nv.NVML_TEMPERATURE_GPU)),
        ("GetClockInfo(SM)", nv.nvmlDeviceGetClockInfo, (h, nv.NVML_CLOCK_SM)),
        ("GetClockInfo(MEM)", nv.nvmlDeviceGetClockInfo, (h, nv.NVML_CLOCK_MEM)),
        ("GetMigMode", nv.nvmlDeviceGetMigMode, (h,)),
        ("GetComputeMode", nv.nvmlDeviceGetComputeMode, (h,)),
        ("GetPersistenceMode", nv.nvmlDeviceGetPersistenceMode, (h,)),
        ("GetPerformanceState", nv.nvmlDeviceGetPerformanceState, (h,)),
        ("GetComputeRunningProcesses", nv.nvmlDeviceGetComputeRunningProcesses, (h,)),
        ("GetGraphicsRunningProcesses", nv.nvmlDeviceGetGraphicsRunningProcesses, (h,)),
        ("GetAccountingMode", nv.nvmlDeviceGetAccountingMode, (h,)),
    ]
    optional = [
        ("GetMemoryInfo_v2", "nvmlMemory_v2", lambda v: nv.nvmlDeviceGetMemoryInfo(h, version=v)),
        ("GetMPSComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses", lambda fn: fn(h)),
        ("GetProcessUtilization(0)", "nvmlDeviceGetProcessUtilization", lambda fn: fn(h, 0)),
        ("GetProcessesUtilizationInfo(0)", "nvmlDeviceGetProcessesUtilizationInfo", lambda fn: fn(h, 0)),
        ("GetMaxMigDeviceCount", "nvmlDeviceGetMaxMigDeviceCount", lambda fn: fn(h)),
        ("GetArchitecture", "nvmlDeviceGetArchitecture", lambda fn: fn(h)),
        ("GetCudaComputeCapability", "nvmlDeviceGetCudaComputeCapability", lambda fn: fn(h)),
        ("GetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons", lambda fn: fn(h)),
        ("GetCurrentClocksThrottleReasons", "nvmlDeviceGetCurrentClocksThrottleReasons", lambda fn: fn(h)),
    ]
    out = {}
    for name, fn, args in calls:
        out[name] = r.call(name, fn, *args)
    for name, attr, invoke in optional:
        fn = getattr(nv, attr, None)
        if fn is None:
            out[name] = {"error": "pynvml has no %s" % attr, "code": None}
            continue
        out[name] = r.call(name, invoke, fn)
    for n, res in read_fields(r, h, list(FIELDS)).items():
        out["GetFieldValues(%s)" % n] = res
    return {k: ({"ok": jsonable(v["ok"])} if "ok" in v else v) for k, v in out.items()}


def fast_line(r, i, h, instant_ok):
    nv = r.nv
    line = {"kind": "power", "gpu": i, "t": time.time()}
    p = r.call("GetPowerUsage", nv.nvmlDeviceGetPowerUsage, h)
    r.count("GetPowerUsage", p)
    e = r.call("GetTotalEnergyConsumption", nv.nvmlDeviceGetTotalEnergyConsumption, h)
    r.count("GetTotalEnergyConsumption", e)
    line["t_end"] = time.time()
    line["power_mw"] = p.get("ok")
    line["energy_mj"] = e.get("ok")
    if instant_ok:
        f = read_fields(r, h, ["FI_DEV_POWER_INSTANT"])["FI_DEV_POWER_INSTANT"]
        r.count("GetFieldValues(FI_DEV_POWER_INSTANT)", f)
        line["power_instant_mw"] = f.get("ok")
    return line


def procs(r, name, fn, h):
    res = r.call(name, fn, h)
    r.count(name, res)
    if "error" in res:
        return {"error": res["error"], "code": res["code"]}
    out = []
    for p in res["ok"]:
        pid = int(p.pid)
        r.note_pid(pid)
        mem = getattr(p, "usedGpuMemory", None)
        out.append({"pid": pid, "used_bytes": None if mem is None else int(mem)})
    return out


def slow_line(r, i, h, last_seen):
    nv = r.nv
    line = {"kind": "slow", "gpu": i, "t": time.time()}
    u = r.call("GetUtilizationRates", nv.nvmlDeviceGetUtilizationRates, h)
    r.count("GetUtilizationRates", u)
    if "ok" in u:
        line["util_gpu"] = int(u["ok"].gpu)
        line["util_mem"] = int(u["ok"].memory)
    m = r.call("GetMemoryInfo", nv.nvmlDeviceGetMemoryInfo, h)
    r.count("GetMemoryInfo", m)
    if "ok" in m:
        line["mem_used"] = int(m["ok"].used)
        line["mem_total"] = int(m["ok"].total)
    line["compute"] = procs(r, "GetComputeRunningProcesses", nv.nvmlDeviceGetComputeRunningProcesses, h)
    line["graphics"] = procs(r, "GetGraphicsRunningProcesses", nv.nvmlDeviceGetGraphicsRunningProcesses, h)
    line["last_seen_us"] = last_seen
    t_call = time.time()
    pu = r.call("GetProcessUtilization", nv.nvmlDeviceGetProcessUtilization, h, last_seen)
    line["util_call_t"] = t_call
    if "error" in pu:
        if pu.get("code") != NOT_FOUND:
            r.count("GetProcessUtilization", pu)
        line["proc_util_error"] = pu["error"]
        line["proc_util_code"] = pu["code"]
        return line, last_seen
    samples = []
    for s in pu["ok"]:
        samples.append({"pid": int(s.pid), "ts_us": int(s.timeStamp), "sm": int(s.smUtil),
                        "mem": int(s.memUtil), "enc": int(s.encUtil), "dec": int(s.decUtil)})
        r.note_pid(int(s.pid))
    line["proc_util"] = samples
    newest = max([last_seen] + [s["ts_us"] for s in samples])
    return line, newest


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--duration", type=float, default=150.0)
    p.add_argument("--stop-file", default="")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--power-interval", type=float, default=0.1)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    def write(name, obj):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=True)

    try:
        import pynvml as nv  # noqa: PLC0415 (a missing module is reported, not a traceback)
    except Exception as e:
        msg = "pynvml cannot be imported (%s: %s); install nvidia-ml-py" % (type(e).__name__, e)
        sys.stderr.write("nvml_read: %s\n" % msg)
        write("probe.json", {"error": msg})
        sys.exit(3)
    try:
        nv.nvmlInit()
    except Exception as e:
        msg = "nvmlInit failed: %s" % e
        sys.stderr.write("nvml_read: %s\n" % msg)
        write("probe.json", {"error": msg})
        sys.exit(4)

    r = Reader(nv, args.out)

    def on_term(signum, _frame):
        r.stop = signum

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    system = {}
    for name, attr, call_args in [
        ("SystemGetDriverVersion", "nvmlSystemGetDriverVersion", ()),
        ("SystemGetNVMLVersion", "nvmlSystemGetNVMLVersion", ()),
        ("SystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion", ()),
        ("DeviceGetCount", "nvmlDeviceGetCount", ()),
    ]:
        fn = getattr(nv, attr, None)
        system[name] = r.call(name, fn, *call_args) if fn else {"error": "pynvml has no %s" % attr, "code": None}
    n = system["DeviceGetCount"].get("ok") or 0
    handles = []
    devices = {}
    for i in range(n):
        h = r.call("DeviceGetHandleByIndex", nv.nvmlDeviceGetHandleByIndex, i)
        if "error" in h:
            devices[str(i)] = {"DeviceGetHandleByIndex": h}
            continue
        handles.append((i, h["ok"]))
        devices[str(i)] = probe(r, h["ok"])
    not_supported = sorted(
        "gpu %s: %s" % (i, name)
        for i, calls in devices.items() for name, res in calls.items()
        if res.get("code") == NOT_SUPPORTED
    )
    write("probe.json", {
        "pynvml_version": getattr(nv, "__version__", None),
        "system": {k: ({"ok": jsonable(v["ok"])} if "ok" in v else v) for k, v in system.items()},
        "devices": devices,
        "not_supported": not_supported,
        "time": time.time(),
    })
    instant_ok = {i: "ok" in devices[str(i)].get("GetFieldValues(FI_DEV_POWER_INSTANT)", {}) for i, _ in handles}

    deadline = time.time() + args.duration
    last_seen = {i: 0 for i, _ in handles}
    next_slow = time.time()
    with open(os.path.join(args.out, "samples.jsonl"), "a", encoding="utf-8") as f:
        while not r.stop and time.time() < deadline:
            if args.stop_file and os.path.exists(args.stop_file):
                break
            t0 = time.time()
            for i, h in handles:
                f.write(json.dumps(fast_line(r, i, h, instant_ok[i])) + "\n")
            if t0 >= next_slow:
                for i, h in handles:
                    line, last_seen[i] = slow_line(r, i, h, last_seen[i])
                    f.write(json.dumps(line) + "\n")
                f.flush()
                next_slow += args.interval
                if next_slow < t0:
                    next_slow = t0 + args.interval
            time.sleep(max(0.0, args.power_interval - (time.time() - t0)))
    why = ("signal" if r.stop else "stop file" if args.stop_file and os.path.exists(args.stop_file)
           else "duration" if time.time() >= deadline else "?")
    sys.stderr.write("nvml_read: stopped (%s) after %.1f s\n" % (why, time.time() - deadline + args.duration))
    write("pids.json", sorted(r.pids.values(), key=lambda p: p["pid"]))
    write("errors.json", r.errors)
    try:
        nv.nvmlShutdown()
    except Exception:
        pass


if __name__ == "__main__":
    main()
