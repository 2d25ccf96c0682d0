#!/usr/bin/env python3
"""Compares what gpumeter read on a real GPU with what nvidia-smi and
pynvml read at the same time, from the files scripts/gpu-check.sh saved.

  compare.py OUTDIR     writes OUTDIR/comparison.json and OUTDIR/summary.txt

Standard library only. Every section is computed from whatever files are
there; a section whose inputs are missing says so ("error") and the others
go on. It states numbers and deviations, nothing more:

  roles        the loads' PIDs and the PIDs NVML listed (matched by PID, or
               by memory rank when NVML's PIDs are not this namespace's)
  sm           per phase and load: SM % from gpumeter (/api/v1/gpus),
               nvidia-smi pmon, pynvml (the newest GetProcessUtilization
               sample per 1 s read, as gpumeter takes it, and the mean of
               all samples), the duty cycle asked for and the one achieved;
               the device's utilisation from each
  memory       per load: GPU memory from gpumeter, pynvml, nvidia-smi
               --query-compute-apps and pmon
  energy       the energy counter's delta against the trapezoid integral of
               sampled power (pynvml at 10 Hz, gpumeter's /metrics and dmon
               at 1 Hz), and gpumeter's booked energy against the counter
  proc_util_timestamps  GetProcessUtilization: samples per read, the
               interval between a process's samples, their lag behind the
               wall clock, stale and out-of-range samples
  pids         whether NVML's PIDs exist in /proc
  not_supported  every NOT_SUPPORTED (and other error) answer seen
  ps           `gpumeter ps --format json` snapshots against the same
               moment's nvidia-smi process list
"""

import csv
import datetime
import glob
import json
import os
import re
import statistics
import sys

MiB = 2**20


# ---------- small helpers ----------

def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "mean": round(statistics.fmean(xs), 3), "median": round(statistics.median(xs), 3),
            "min": round(min(xs), 3), "max": round(max(xs), 3)}


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rnd(x, nd=3):
    return None if x is None else round(x, nd)


def diff(a, b):
    return None if a is None or b is None else round(a - b, 3)


def rel(a, b):
    """(a - b) / b in percent."""
    if a is None or b is None or b == 0:
        return None
    return round(100.0 * (a - b) / b, 3)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut short when the writer was killed
    return out


def trapezoid(points):
    """Integral of (t, y) points, sorted by t."""
    pts = sorted((t, y) for t, y in points if t is not None and y is not None)
    return sum((t1 - t0) * (y0 + y1) / 2 for (t0, y0), (t1, y1) in zip(pts, pts[1:])), pts


def section(fn, *args):
    try:
        return fn(*args)
    except FileNotFoundError as e:
        return {"error": "missing input: %s" % e.filename}
    except Exception as e:  # a malformed file must not hide the other sections
        return {"error": "%s: %s" % (type(e).__name__, e)}


# ---------- nvidia-smi text ----------

def parse_smi_table(path):
    """Parses nvidia-smi pmon/dmon output written with -o DT (and TZ=UTC):
    returns rows as dicts keyed by the header's column names, with "t" the
    wall time of the row."""
    cols = None
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("#"):
                toks = line.lstrip("#").split()
                if toks and toks[0] == "Date":
                    cols = toks
                continue
            toks = line.split()
            if not cols or len(toks) < len(cols) - 1:
                continue
            row = dict(zip(cols, toks))
            if len(toks) > len(cols):  # a command name with spaces
                row[cols[-1]] = " ".join(toks[len(cols) - 1:])
            try:
                dt = datetime.datetime.strptime(row["Date"] + " " + row["Time"], "%Y%m%d %H:%M:%S")
                row["t"] = dt.replace(tzinfo=datetime.timezone.utc).timestamp()
            except (KeyError, ValueError):
                continue
            rows.append(row)
    return rows


def num(v):
    if v is None or v in ("-", "N/A"):
        return None
    try:
        return float(v)
    except ValueError:
        return None


def parse_compute_apps(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines or "pid" not in lines[0]:
        return []
    out = []
    for rec in csv.DictReader(lines, skipinitialspace=True):
        rec = {k.strip().split(" ")[0]: (v or "").strip() for k, v in rec.items() if k}
        try:
            pid = int(rec.get("pid", ""))
        except ValueError:
            continue
        out.append({"pid": pid, "used_mib": num(rec.get("used_gpu_memory", rec.get("used_memory"))),
                    "name": rec.get("process_name"), "gpu_uuid": rec.get("gpu_uuid")})
    return out


# ---------- the inputs ----------

class Run:
    def __init__(self, d):
        self.d = d
        self.run = read_json(os.path.join(d, "run.json"))
        self.epoch = float(self.run["epoch"])
        self.margin = float(self.run.get("margin_s", 3))
        self._cache = {}

    def path(self, *p):
        return os.path.join(self.d, *p)

    def cached(self, key, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def gm_gpus(self):
        return self.cached("gm_gpus", lambda: [l for l in read_jsonl(self.path("gpumeter", "gm_gpus.jsonl")) if "body" in l])

    def gm_metrics(self):
        return self.cached("gm_metrics", lambda: [l for l in read_jsonl(self.path("gpumeter", "gm_metrics.jsonl")) if "series" in l])

    def nvml(self):
        return self.cached("nvml", lambda: read_jsonl(self.path("nvml", "samples.jsonl")))

    def pmon(self):
        return self.cached("pmon", lambda: parse_smi_table(self.path("nvidia-smi", "pmon.txt")))

    def dmon(self):
        return self.cached("dmon", lambda: parse_smi_table(self.path("nvidia-smi", "dmon.txt")))

    def load_log(self, role):
        return read_jsonl(self.path("loads", role + ".jsonl"))

    def phases(self):
        """Phases with the window each is judged over: the phase less the
        margin at both ends, in wall time."""
        out = []
        for p in self.run["phases"]:
            a, b = self.epoch + p["start"] + self.margin, self.epoch + p["end"] - self.margin
            out.append(dict(p, eval_from=a, eval_to=b))
        return out


def in_window(t, a, b):
    return t is not None and a <= t < b


def overlap(a0, a1, b0, b1):
    return max(0.0, min(a1, b1) - max(a0, b0))


# ---------- roles and PIDs ----------

def nvml_pid_memory(r):
    """Median used memory per PID NVML listed, from whichever reader has it."""
    mem = {}
    try:
        for l in r.nvml():
            if l.get("kind") != "slow" or not isinstance(l.get("compute"), list):
                continue
            for p in l["compute"]:
                mem.setdefault(p["pid"], []).append(p.get("used_bytes"))
    except FileNotFoundError:
        pass
    if not mem:
        try:
            for l in r.gm_gpus():
                for g in l["body"].get("gpus", []):
                    for p in g.get("processes", []):
                        mem.setdefault(p["pid"], []).append(p.get("memory_bytes"))
        except FileNotFoundError:
            pass
    return {pid: median(v) for pid, v in mem.items()}


def role_pids(r):
    roles = r.run.get("roles", {})
    listed = nvml_pid_memory(r)
    by_pid = {name: role["pid"] for name, role in roles.items() if role.get("pid") in listed}
    out = {"roles": {n: {"pid": ro.get("pid"), "extra_mib": ro.get("extra_mib")} for n, ro in roles.items()},
           "nvml_pids": {str(k): rnd(v) for k, v in sorted(listed.items())}}
    if len(by_pid) == len(roles):
        out["method"] = "pid"
        out["nvml_pid"] = by_pid
        return out
    # NVML's PIDs are not this PID namespace's: match on memory, since the
    # loads hold distinct amounts.
    ranked_roles = sorted(roles, key=lambda n: roles[n].get("extra_mib") or 0)
    ranked_pids = sorted((m or 0, pid) for pid, m in listed.items())
    if len(ranked_pids) == len(ranked_roles) and ranked_roles:
        out["method"] = "memory rank (the loads' own PIDs are not among NVML's)"
        out["nvml_pid"] = {n: pid for n, (_, pid) in zip(ranked_roles, ranked_pids)}
    else:
        out["method"] = "unmatched: %d loads, %d NVML PIDs, %d matched by PID" % (len(roles), len(listed), len(by_pid))
        out["nvml_pid"] = by_pid
    return out


# ---------- SM share ----------

def load_expectation(r, role, a, b):
    spec = r.run["roles"][role]
    if spec.get("mode") != "duty":
        return 0.0
    covered = sum(overlap(a, b, r.epoch + ws, r.epoch + we) for ws, we in spec.get("windows", []))
    return 100.0 * float(spec.get("duty", 0)) * covered / (b - a) if b > a else None


def load_achieved(r, role, a, b):
    try:
        log = r.load_log(role)
    except FileNotFoundError:
        return None
    spec = r.run["roles"][role]
    if spec.get("mode") != "duty":
        return 0.0 if any(l.get("event") == "ready" for l in log) else None
    busy, seen = 0.0, False
    for l in log:
        if l.get("event") != "window":
            continue
        for cs, bs in l.get("cycles", []):
            t = r.epoch + cs
            if a <= t < b:
                busy += bs
            seen = True
    if not seen:
        # No active window was logged: 0 where none was asked for here.
        return 0.0 if load_expectation(r, role, a, b) == 0 else None
    return 100.0 * busy / (b - a)


def gm_proc_sm(r, pid, a, b):
    vals = []
    for l in r.gm_gpus():
        if not in_window(l["t"], a, b):
            continue
        v = 0.0
        for g in l["body"].get("gpus", []):
            for p in g.get("processes", []):
                if p.get("pid") == pid:
                    v = float(p.get("sm_util_percent") or 0)
        vals.append(v)
    return vals


def pmon_proc_sm(r, pid, a, b):
    vals, dashes = [], 0
    for row in r.pmon():
        if not in_window(row["t"], a, b) or row.get("pid") != str(pid):
            continue
        v = num(row.get("sm"))
        if v is None:
            dashes += 1
            v = 0.0
        vals.append(v)
    return vals, dashes


def nvml_proc_sm(r, pid, a, b):
    """Per read: the newest sample of pid newer than the read's lastSeen,
    0 when none (gpumeter's rule); and every sample whose timestamp lies in
    the window."""
    per_read, samples = [], []
    for l in r.nvml():
        if l.get("kind") != "slow":
            continue
        smp = [s for s in l.get("proc_util", []) if s["pid"] == pid]
        for s in smp:
            if in_window(s["ts_us"] / 1e6, a, b):
                samples.append(float(s["sm"]))
        if not in_window(l["t"], a, b):
            continue
        last = l.get("last_seen_us") or 0
        fresh = [s for s in smp if s["sm"] <= 100 and (last == 0 or s["ts_us"] > last)]
        per_read.append(float(max(fresh, key=lambda s: s["ts_us"])["sm"]) if fresh else 0.0)
    return per_read, samples


def device_util(r, a, b):
    out = {}
    try:
        out["gpumeter_api"] = stats([l["body"]["gpus"][0].get("utilization_percent") for l in r.gm_gpus()
                                     if in_window(l["t"], a, b) and l["body"].get("gpus")])
        out["gpumeter_unattributed"] = stats([l["body"]["gpus"][0].get("unattributed_utilization_percent") for l in r.gm_gpus()
                                              if in_window(l["t"], a, b) and l["body"].get("gpus")])
    except FileNotFoundError:
        out["gpumeter_api"] = {"error": "no gm_gpus.jsonl"}
    try:
        out["gpumeter_metric"] = stats([v for l in r.gm_metrics() if in_window(l["t"], a, b)
                                        for name, lab, v in l["series"] if name == "DCGM_FI_DEV_GPU_UTIL" and lab.get("gpu") == "0"])
    except FileNotFoundError:
        out["gpumeter_metric"] = {"error": "no gm_metrics.jsonl"}
    try:
        out["dmon_sm"] = stats([num(row.get("sm")) for row in r.dmon() if in_window(row["t"], a, b) and row.get("gpu") == "0"])
    except FileNotFoundError:
        out["dmon_sm"] = {"error": "no dmon.txt"}
    try:
        out["pynvml"] = stats([l.get("util_gpu") for l in r.nvml() if l.get("kind") == "slow" and l.get("gpu") == 0 and in_window(l["t"], a, b)])
    except FileNotFoundError:
        out["pynvml"] = {"error": "no samples.jsonl"}
    return out


def sm_section(r, pids):
    phases = []
    for ph in r.phases():
        a, b = ph["eval_from"], ph["eval_to"]
        entry = {"name": ph["name"], "from_s": rnd(a - r.epoch), "to_s": rnd(b - r.epoch), "loads": {}}
        total_gm = 0.0
        for role in r.run["roles"]:
            pid = pids["nvml_pid"].get(role)
            e = {"pid": pid, "expected": rnd(load_expectation(r, role, a, b)), "achieved": rnd(load_achieved(r, role, a, b))}
            if pid is not None:
                for key, fn in (("gpumeter", lambda: stats(gm_proc_sm(r, pid, a, b))),):
                    e[key] = section(fn)
                def pm():
                    vals, dashes = pmon_proc_sm(r, pid, a, b)
                    return dict(stats(vals), dashes=dashes)
                e["pmon"] = section(pm)
                def nv():
                    per_read, samples = nvml_proc_sm(r, pid, a, b)
                    return {"per_read": stats(per_read), "samples": stats(samples)}
                e["pynvml"] = section(nv)
                g = e["gpumeter"].get("mean")
                total_gm += g or 0.0
                e["gpumeter_minus_pmon"] = diff(g, e["pmon"].get("mean"))
                e["gpumeter_minus_pynvml_per_read"] = diff(g, e["pynvml"].get("per_read", {}).get("mean"))
                e["gpumeter_minus_expected"] = diff(g, e["expected"])
                e["gpumeter_minus_achieved"] = diff(g, e["achieved"])
                e["pmon_minus_expected"] = diff(e["pmon"].get("mean"), e["expected"])
            entry["loads"][role] = e
        entry["device"] = device_util(r, a, b)
        entry["gpumeter_process_sum"] = rnd(total_gm)
        entry["gpumeter_process_sum_minus_device"] = diff(total_gm, entry["device"].get("gpumeter_api", {}).get("mean"))
        phases.append(entry)
    return {"margin_s": r.margin, "phases": phases}


# ---------- memory ----------

def memory_section(r, pids):
    a, b = r.epoch, r.epoch + float(r.run.get("load_end_s", 0) or 0)
    out = {}
    apps = {}
    for f in sorted(glob.glob(r.path("nvidia-smi", "compute-apps-*.csv"))):
        for p in parse_compute_apps(f):
            apps.setdefault(p["pid"], []).append(p["used_mib"])
    for role, pid in pids["nvml_pid"].items():
        e = {"pid": pid, "extra_mib": r.run["roles"][role].get("extra_mib")}
        def gm():
            return median([p.get("memory_bytes") for l in r.gm_gpus() if in_window(l["t"], a, b)
                           for g in l["body"].get("gpus", []) for p in g.get("processes", []) if p.get("pid") == pid])
        def nv():
            return median([p.get("used_bytes") for l in r.nvml() if l.get("kind") == "slow" and in_window(l["t"], a, b)
                           and isinstance(l.get("compute"), list) for p in l["compute"] if p["pid"] == pid])
        def pm():
            return median([num(row.get("fb")) for row in r.pmon() if in_window(row["t"], a, b) and row.get("pid") == str(pid)])
        gm_b = section(gm)
        nv_b = section(nv)
        pm_m = section(pm)
        e["gpumeter_mib"] = rnd(gm_b / MiB) if isinstance(gm_b, (int, float)) else gm_b
        e["pynvml_mib"] = rnd(nv_b / MiB) if isinstance(nv_b, (int, float)) else nv_b
        e["compute_apps_mib"] = rnd(median(apps.get(pid, [])))
        e["pmon_fb_mib"] = pm_m if not isinstance(pm_m, (int, float)) else rnd(pm_m)
        g = e["gpumeter_mib"] if isinstance(e["gpumeter_mib"], (int, float)) else None
        e["gpumeter_minus_compute_apps_mib"] = diff(g, e["compute_apps_mib"])
        e["gpumeter_minus_pynvml_mib"] = diff(g, e["pynvml_mib"] if isinstance(e["pynvml_mib"], (int, float)) else None)
        e["gpumeter_minus_pmon_mib"] = diff(g, e["pmon_fb_mib"] if isinstance(e["pmon_fb_mib"], (int, float)) else None)
        out[role] = e
    return out


# ---------- energy ----------

def energy_section(r):
    out = {}

    def pynvml_energy():
        lines = [l for l in r.nvml() if l.get("kind") == "power" and l.get("gpu") == 0]
        pts = [((l["t"] + l.get("t_end", l["t"])) / 2, l.get("power_mw"), l.get("energy_mj"), l.get("power_instant_mw")) for l in lines]
        pts = [p for p in pts if p[1] is not None and p[2] is not None]
        if len(pts) < 2:
            return {"error": "fewer than 2 power samples"}
        decreases = sum(1 for p, q in zip(pts, pts[1:]) if q[2] < p[2])
        res = {"samples": len(pts), "span_s": rnd(pts[-1][0] - pts[0][0]), "counter_decreases": decreases}
        counter = (pts[-1][2] - pts[0][2]) / 1000.0
        integral, _ = trapezoid([(t, p / 1000.0) for t, p, _, _ in pts])
        res.update(counter_delta_j=rnd(counter), power_integral_j=rnd(integral),
                   integral_minus_counter_j=diff(integral, counter), integral_vs_counter_pct=rel(integral, counter),
                   mean_power_w=rnd(integral / (pts[-1][0] - pts[0][0])) if pts[-1][0] > pts[0][0] else None)
        inst = [(t, i / 1000.0) for t, _, _, i in pts if i is not None]
        if len(inst) >= 2:
            ii, _ = trapezoid(inst)
            res.update(instant_power_integral_j=rnd(ii), instant_integral_vs_counter_pct=rel(ii, counter))
        # The energy counter's own steps: how often it moves.
        steps = [q[0] - p[0] for p, q in zip(pts, pts[1:]) if q[2] != p[2]]
        res["counter_update_interval_s"] = stats(steps)
        res["counter_changed_in_pct_of_reads"] = rnd(100.0 * len(steps) / (len(pts) - 1))
        return res

    def gm_energy():
        ms = r.gm_metrics()
        def series(name, **lab):
            return [(l["t"], v) for l in ms for n, lb, v in l["series"]
                    if n == name and all(lb.get(k) == w for k, w in lab.items())]
        counter = series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0")
        power = series("DCGM_FI_DEV_POWER_USAGE", gpu="0")
        booked = series("gpumeter_gpu_energy_joules_total", gpu="0")
        idle = series("gpumeter_gpu_idle_energy_joules_total", gpu="0")
        if len(counter) < 2:
            return {"error": "fewer than 2 scrapes with DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}
        res = {"scrapes": len(counter), "span_s": rnd(counter[-1][0] - counter[0][0])}
        c = (counter[-1][1] - counter[0][1]) / 1000.0
        res["counter_delta_j"] = rnd(c)
        if len(power) >= 2:
            integral, _ = trapezoid(power)
            res.update(power_integral_j=rnd(integral), integral_vs_counter_pct=rel(integral, c))
        if len(booked) >= 2:
            bk = booked[-1][1] - booked[0][1]
            res.update(booked_delta_j=rnd(bk), booked_minus_counter_j=diff(bk, c), booked_vs_counter_pct=rel(bk, c))
        if len(idle) >= 2:
            res["idle_booked_delta_j"] = rnd(idle[-1][1] - idle[0][1])
        owners = {}
        for l in ms:
            for n, lb, v in l["series"]:
                if n in ("gpumeter_host_gpu_energy_joules_total", "gpumeter_container_gpu_energy_joules_total",
                         "gpumeter_unresolved_gpu_energy_joules_total") and lb.get("gpu") == "0":
                    owners.setdefault((n, lb.get("user", lb.get("container_id", ""))), []).append(v)
        res["owners_j"] = {"%s{%s}" % k: rnd(v[-1] - v[0]) for k, v in owners.items()}
        return res

    def dmon_energy():
        rows = [(row["t"], num(row.get("pwr"))) for row in r.dmon() if row.get("gpu") == "0"]
        rows = [x for x in rows if x[1] is not None]
        if len(rows) < 2:
            return {"error": "fewer than 2 dmon rows with pwr"}
        integral, pts = trapezoid(rows)
        res = {"rows": len(rows), "span_s": rnd(pts[-1][0] - pts[0][0]), "power_integral_j": rnd(integral)}
        # The pynvml counter over the same span, for comparison.
        try:
            lines = [l for l in r.nvml() if l.get("kind") == "power" and l.get("gpu") == 0 and l.get("energy_mj") is not None]
            inside = [l for l in lines if pts[0][0] <= l["t"] <= pts[-1][0]]
            if len(inside) >= 2:
                c = (inside[-1]["energy_mj"] - inside[0]["energy_mj"]) / 1000.0
                res.update(pynvml_counter_delta_j=rnd(c), integral_vs_counter_pct=rel(integral, c))
        except FileNotFoundError:
            pass
        return res

    out["pynvml"] = section(pynvml_energy)
    out["gpumeter"] = section(gm_energy)
    out["dmon"] = section(dmon_energy)
    return out


# ---------- GetProcessUtilization timestamps ----------

def proc_util_section(r):
    reads = [l for l in r.nvml() if l.get("kind") == "slow" and l.get("gpu") == 0]
    res = {"reads": len(reads)}
    errors = {}
    per_read, lags, stale, over, unknown = [], [], 0, 0, 0
    by_pid = {}
    for l in reads:
        if "proc_util" not in l:
            errors[l.get("proc_util_error", "?")] = errors.get(l.get("proc_util_error", "?"), 0) + 1
            continue
        smp = l["proc_util"]
        per_read.append(len(smp))
        listed = {p["pid"] for p in l.get("compute", []) if isinstance(l.get("compute"), list)}
        last = l.get("last_seen_us") or 0
        for s in smp:
            if last and s["ts_us"] <= last:
                stale += 1
            if s["sm"] > 100:
                over += 1
            if listed and s["pid"] not in listed:
                unknown += 1
            by_pid.setdefault(s["pid"], set()).add(s["ts_us"])
        if smp:
            lags.append(l["util_call_t"] - max(s["ts_us"] for s in smp) / 1e6)
    res["errors"] = errors
    res["samples_per_read"] = stats(per_read)
    res["lag_behind_wall_s"] = stats(lags)
    res["timestamps_look_like_epoch_us"] = (abs(median(lags)) < 86400) if lags else None
    res["stale_samples"] = stale
    res["sm_over_100"] = over
    res["samples_for_unlisted_pids"] = unknown
    res["interval_between_samples_s"] = {}
    for pid, ts in sorted(by_pid.items()):
        ts = sorted(ts)
        res["interval_between_samples_s"][str(pid)] = dict(stats([(b - a) / 1e6 for a, b in zip(ts, ts[1:])]), distinct=len(ts))
    return res


# ---------- PIDs, NOT_SUPPORTED, ps ----------

def pids_section(r, pids):
    out = {"method": pids["method"]}
    try:
        seen = read_json(r.path("nvml", "pids.json"))
        out["pynvml_seen"] = [{k: p.get(k) for k in ("pid", "in_proc", "cmdline", "NSpid")} for p in seen]
        out["in_proc"] = sum(1 for p in seen if p.get("in_proc"))
        out["not_in_proc"] = sum(1 for p in seen if not p.get("in_proc"))
    except FileNotFoundError:
        out["pynvml_seen"] = {"error": "no nvml/pids.json"}
    checks = []
    for f in sorted(glob.glob(r.path("snapshots", "proc-check-*.txt"))):
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2 and parts[0].isdigit():
                    checks.append({"snapshot": os.path.basename(f), "pid": int(parts[0]), "in_proc": parts[1] == "yes",
                                   "cmdline": parts[2] if len(parts) > 2 else ""})
    out["nvidia_smi_snapshots"] = checks
    out["load_pids"] = {n: ro.get("pid") for n, ro in r.run.get("roles", {}).items()}
    return out


def not_supported_section(r):
    out = {}
    try:
        probe = read_json(r.path("nvml", "probe.json"))
        out["pynvml_probe_not_supported"] = probe.get("not_supported", probe.get("error"))
        out["pynvml_probe_errors"] = sorted("gpu %s: %s: %s" % (i, c, v["error"]) for i, calls in probe.get("devices", {}).items()
                                            for c, v in calls.items() if "error" in v and v.get("code") != 3)
    except FileNotFoundError:
        out["pynvml_probe_not_supported"] = {"error": "no nvml/probe.json"}
    try:
        out["pynvml_loop_errors"] = read_json(r.path("nvml", "errors.json"))
    except FileNotFoundError:
        out["pynvml_loop_errors"] = {"error": "no nvml/errors.json"}
    try:
        ms = r.gm_metrics()
        fields = sorted({lb.get("field", "?") for l in ms for n, lb, v in l["series"] if n == "gpumeter_gpu_value_unavailable" and v})
        out["gpumeter_value_unavailable"] = fields
        out["gpumeter_api_unavailable"] = sorted({u for l in r.gm_gpus() for g in l["body"].get("gpus", []) for u in g.get("unavailable") or []})
    except FileNotFoundError:
        out["gpumeter_value_unavailable"] = {"error": "no gpumeter polls"}
    calls = {}
    try:
        with open(r.path("gpumeter", "serve.log"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if "NVML value" not in line:
                    continue
                m = re.search(r'call=("[^"]*"|\S+).*?(?:err|value)=("[^"]*"|\S+)', line)
                key = "%s: %s" % (m.group(1).strip('"'), m.group(2).strip('"')) if m else line.strip()[:120]
                calls[key] = calls.get(key, 0) + 1
        out["gpumeter_debug_log"] = calls
    except FileNotFoundError:
        out["gpumeter_debug_log"] = {"error": "no gpumeter/serve.log"}
    try:
        na = []
        with open(r.path("fixtures", "nvidia-smi-q.txt"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if ":" in line and re.search(r"N/A|Not Supported|Not Available", line.split(":", 1)[1]):
                    na.append(line.split(":", 1)[0].strip())
        out["nvidia_smi_q_na_fields"] = len(na)
        out["nvidia_smi_q_na_names"] = sorted(set(na))
    except FileNotFoundError:
        out["nvidia_smi_q_na_fields"] = {"error": "no fixtures/nvidia-smi-q.txt"}
    return out


def ps_section(r):
    out = []
    for f in sorted(glob.glob(r.path("snapshots", "ps-*.json"))):
        label = os.path.basename(f)[3:-5]
        e = {"snapshot": label}
        try:
            ps = read_json(f)
        except (ValueError, OSError) as err:
            e["error"] = str(err)
            out.append(e)
            continue
        rows = []
        for h in ps.get("host_users", []):
            for g in h.get("gpus", []):
                rows.append({"owner": "host:" + h.get("user", ""), "gpu": g.get("gpu"), "sm": g.get("sm_util_percent"),
                             "memory_mib": rnd((g.get("memory_bytes") or 0) / MiB), "processes": g.get("processes")})
        for c in ps.get("containers", []):
            for g in c.get("gpus", []):
                rows.append({"owner": "container:" + c.get("name", ""), "gpu": g.get("gpu"), "sm": g.get("sm_util_percent"),
                             "memory_mib": rnd((g.get("memory_bytes") or 0) / MiB), "processes": g.get("processes")})
        for g in ps.get("unresolved", []):
            rows.append({"owner": "unresolved", "gpu": g.get("gpu"), "sm": g.get("sm_util_percent"),
                         "memory_mib": rnd((g.get("memory_bytes") or 0) / MiB), "processes": g.get("processes")})
        e["rows"] = rows
        apps_f = r.path("nvidia-smi", "compute-apps-%s.csv" % label)
        if os.path.exists(apps_f):
            apps = parse_compute_apps(apps_f)
            e["compute_apps_processes"] = len(apps)
            e["compute_apps_memory_mib"] = rnd(sum(a["used_mib"] or 0 for a in apps))
            e["ps_memory_mib"] = rnd(sum(x["memory_mib"] or 0 for x in rows))
            e["ps_minus_compute_apps_mib"] = diff(e["ps_memory_mib"], e["compute_apps_memory_mib"])
            e["ps_processes"] = sum(x["processes"] or 0 for x in rows)
        out.append(e)
    return out


# ---------- the report ----------

def compare(d):
    r = Run(d)
    res = {"outdir": os.path.abspath(d), "epoch": r.epoch, "phases": r.run.get("phases")}
    pids = section(role_pids, r)
    res["roles"] = pids
    if "error" in pids:
        pids = {"nvml_pid": {}, "method": pids["error"]}
    res["sm"] = section(sm_section, r, pids)
    res["memory"] = section(memory_section, r, pids)
    res["energy"] = section(energy_section, r)
    res["proc_util_timestamps"] = section(proc_util_section, r)
    res["pids"] = section(pids_section, r, pids)
    res["not_supported"] = section(not_supported_section, r)
    res["ps"] = section(ps_section, r)
    return res


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.1f" % v
    return str(v)


def summary(res):
    L = []
    L.append("gpu-check comparison (%s)" % res["outdir"])
    L.append("")
    roles = res.get("roles", {})
    L.append("PIDs: loads %s; NVML listed %s; matched by %s" % (
        {n: ro.get("pid") for n, ro in roles.get("roles", {}).items()} if "roles" in roles else "-",
        sorted(roles.get("nvml_pids", {})) if "nvml_pids" in roles else "-", roles.get("method", roles.get("error"))))
    L.append("")
    sm = res.get("sm", {})
    if "phases" in sm:
        L.append("SM %% per load, mean over each phase less %s s at both ends" % sm.get("margin_s"))
        L.append("  %-22s %-5s %8s %8s %9s %8s %10s %9s" % ("phase", "load", "expected", "achieved", "gpumeter", "pmon", "pynvml/rd", "gm-pmon"))
        for ph in sm["phases"]:
            for role, e in ph["loads"].items():
                L.append("  %-22s %-5s %8s %8s %9s %8s %10s %9s" % (
                    ph["name"][:22], role, fmt(e.get("expected")), fmt(e.get("achieved")),
                    fmt(e.get("gpumeter", {}).get("mean")), fmt(e.get("pmon", {}).get("mean")),
                    fmt(e.get("pynvml", {}).get("per_read", {}).get("mean")), fmt(e.get("gpumeter_minus_pmon"))))
            dev = ph["device"]
            L.append("  %-22s %-5s gpumeter %s (metric %s), dmon %s, pynvml %s; gpumeter processes sum %s, unattributed %s" % (
                ph["name"][:22], "GPU", fmt(dev.get("gpumeter_api", {}).get("mean")), fmt(dev.get("gpumeter_metric", {}).get("mean")),
                fmt(dev.get("dmon_sm", {}).get("mean")), fmt(dev.get("pynvml", {}).get("mean")),
                fmt(ph.get("gpumeter_process_sum")), fmt(dev.get("gpumeter_unattributed", {}).get("mean"))))
    else:
        L.append("SM: %s" % sm.get("error"))
    L.append("")
    mem = res.get("memory", {})
    if "error" in mem:
        L.append("memory: %s" % mem["error"])
    else:
        L.append("GPU memory per load (MiB, median): gpumeter / pynvml / compute-apps / pmon fb; gpumeter - compute-apps")
        for role, e in mem.items():
            L.append("  %-5s pid %-8s %s / %s / %s / %s; %s" % (role, e.get("pid"), fmt(e.get("gpumeter_mib")), fmt(e.get("pynvml_mib")),
                                                            fmt(e.get("compute_apps_mib")), fmt(e.get("pmon_fb_mib")),
                                                            fmt(e.get("gpumeter_minus_compute_apps_mib"))))
    L.append("")
    en = res.get("energy", {})
    for src in ("pynvml", "gpumeter", "dmon"):
        e = en.get(src, {})
        if "error" in e:
            L.append("energy (%s): %s" % (src, e["error"]))
            continue
        L.append("energy (%s): counter delta %s J, power integral %s J (%s %%)%s%s" % (
            src, fmt(e.get("counter_delta_j", e.get("pynvml_counter_delta_j"))), fmt(e.get("power_integral_j")),
            fmt(e.get("integral_vs_counter_pct")),
            ("; booked %s J (%s %% vs counter)" % (fmt(e.get("booked_delta_j")), fmt(e.get("booked_vs_counter_pct")))) if "booked_delta_j" in e else "",
            ("; instant-power integral %s %% vs counter" % fmt(e.get("instant_integral_vs_counter_pct"))) if "instant_integral_vs_counter_pct" in e else ""))
    L.append("")
    pu = res.get("proc_util_timestamps", {})
    if "error" in pu:
        L.append("GetProcessUtilization: %s" % pu["error"])
    else:
        L.append("GetProcessUtilization: %s reads, errors %s, samples/read %s, lag behind wall %s s, stale %s, >100 %% %s, unlisted PIDs %s" % (
            pu.get("reads"), pu.get("errors"), pu.get("samples_per_read", {}).get("median"),
            pu.get("lag_behind_wall_s", {}).get("median"), pu.get("stale_samples"), pu.get("sm_over_100"), pu.get("samples_for_unlisted_pids")))
        for pid, s in pu.get("interval_between_samples_s", {}).items():
            L.append("  pid %s: %s distinct timestamps, interval median %s s (min %s, max %s)" % (
                pid, s.get("distinct"), s.get("median"), s.get("min"), s.get("max")))
    L.append("")
    pids = res.get("pids", {})
    snaps = pids.get("nvidia_smi_snapshots", [])
    L.append("NVML PIDs in /proc: %s of %s (pynvml); nvidia-smi snapshots: %d of %d, absent: %s" % (
        pids.get("in_proc"), (pids.get("in_proc") or 0) + (pids.get("not_in_proc") or 0),
        sum(1 for c in snaps if c["in_proc"]), len(snaps),
        sorted({c["pid"] for c in snaps if not c["in_proc"]}) or "none"))
    ns = res.get("not_supported", {})
    L.append("NOT_SUPPORTED (pynvml probe): %s" % ns.get("pynvml_probe_not_supported"))
    L.append("other probe errors: %s" % ns.get("pynvml_probe_errors"))
    L.append("gpumeter unavailable fields: %s; debug log: %s" % (ns.get("gpumeter_value_unavailable"), ns.get("gpumeter_debug_log")))
    L.append("nvidia-smi -q N/A fields: %s" % ns.get("nvidia_smi_q_na_fields"))
    L.append("")
    for e in res.get("ps", []) if isinstance(res.get("ps"), list) else []:
        L.append("ps %s: %s; ps memory %s MiB vs compute-apps %s MiB" % (
            e.get("snapshot"), "; ".join("%s gpu %s sm %s mem %s MiB procs %s" % (x["owner"], x["gpu"], fmt(x["sm"]), fmt(x["memory_mib"]), x["processes"])
                                         for x in e.get("rows", [])) or e.get("error", "no rows"),
            fmt(e.get("ps_memory_mib")), fmt(e.get("compute_apps_memory_mib"))))
    L.append("")
    return "\n".join(L) + "\n" + failed_steps(res["outdir"])


def failed_steps(d):
    """The steps in steps.tsv that did not end with status 0."""
    try:
        with open(os.path.join(d, "steps.tsv"), encoding="utf-8") as f:
            steps = [l.rstrip("\n").split("\t") for l in f][1:]
    except OSError:
        return "no steps.tsv\n"
    failed = [s for s in steps if len(s) >= 2 and s[1] not in ("0", "started")]
    return "steps not ending 0: %d\n" % len(failed) + "".join("  %s\n" % " ".join(s) for s in failed)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: compare.py OUTDIR\n")
        return 2
    d = argv[1]
    try:
        res = compare(d)
    except FileNotFoundError as e:
        res = {"outdir": os.path.abspath(d), "error": "missing input: %s" % e.filename}
        with open(os.path.join(d, "comparison.json"), "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1, sort_keys=True)
        with open(os.path.join(d, "summary.txt"), "w", encoding="utf-8") as f:
            f.write("gpu-check comparison: nothing to compare (%s)\n" % res["error"])
            f.write(failed_steps(d))
            try:
                with open(os.path.join(d, "gpu-check.log"), encoding="utf-8", errors="replace") as lf:
                    f.write("\ngpu-check.log:\n" + "".join("  " + l for l in lf.readlines()[-15:]))
            except OSError:
                pass
        sys.stderr.write("compare: %s\n" % res["error"])
        return 1
    with open(os.path.join(d, "comparison.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    text = summary(res)
    with open(os.path.join(d, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
