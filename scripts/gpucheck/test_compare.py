#!/usr/bin/env python3
"""Tests of compare.py on a synthetic gpu-check output whose every figure
is known in advance. Standard library only:

  python3 scripts/gpucheck/test_compare.py
"""

import contextlib
import datetime
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

E = 1_700_000_000.0  # the epoch
MiB = 2**20


def smi_time(t):
    d = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    return d.strftime("%Y%m%d"), d.strftime("%H:%M:%S")


def write(d, name, text):
    path = os.path.join(d, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def jsonl(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_run(d, load_pids=(101, 103), nvml_pids=(101, 103)):
    """One 10 s phase: p90 runs at 90 % duty, hold holds 2000 MiB. gpumeter
    says 85 %, pmon 88 %, pynvml 90 %; power is 200 W everywhere while the
    energy counter runs at 204 W; memory agrees everywhere."""
    p90, hold = load_pids
    n90, nhold = nvml_pids
    write(d, "run.json", json.dumps({
        "epoch": E, "margin_s": 1, "load_end_s": 10,
        "phases": [{"name": "A: p90 alone", "start": 0, "end": 10}],
        "roles": {
            "p90": {"pid": p90, "mode": "duty", "duty": 0.9, "windows": [[0, 10]], "extra_mib": 256},
            "hold": {"pid": hold, "mode": "hold", "duty": 0, "windows": [], "extra_mib": 2048},
        },
    }))
    write(d, "steps.tsv", "step\trc\tseconds\tnote\npmon\tstarted\t0\t\nls-dev-nvidia\t2\t0\t\n")
    write(d, "loads/p90.jsonl", jsonl([
        {"event": "ready", "pid": p90},
        {"event": "window", "window": [0, 10], "cycles": [[k * 0.5, 0.45] for k in range(20)]},
    ]))
    write(d, "loads/hold.jsonl", jsonl([{"event": "ready", "pid": hold}]))

    gpus, metrics = [], []
    for k in range(11):
        t = E + k
        gpus.append({"t": t + 0.5, "body": {"gpus": [{
            "index": 0, "utilization_percent": 90, "unattributed_utilization_percent": 5, "unavailable": ["enc_util"],
            "processes": [{"pid": n90, "sm_util_percent": 85, "memory_bytes": 1000 * MiB},
                          {"pid": nhold, "sm_util_percent": 0, "memory_bytes": 2000 * MiB}]}]}})
        metrics.append({"t": t, "series": [
            ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", {"gpu": "0"}, 5e9 + 200_000 * k],
            ["DCGM_FI_DEV_POWER_USAGE", {"gpu": "0"}, 200.0],
            ["DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, 90.0],
            ["gpumeter_gpu_energy_joules_total", {"gpu": "0"}, 190.0 * k],
            ["gpumeter_gpu_value_unavailable", {"gpu": "0", "field": "enc_util"}, 1.0],
        ]})
    write(d, "gpumeter/gm_gpus.jsonl", jsonl(gpus) + '{"t": 1, "error": "x"}\n{"cut sh')
    write(d, "gpumeter/gm_metrics.jsonl", jsonl(metrics))
    write(d, "gpumeter/serve.log",
          'time=x level=DEBUG msg="NVML value not read" gpu=0 call=GetEncoderUtilization err="Unknown Error"\n' * 3)

    nv = []
    last = 0
    for i in range(101):
        t = E + i * 0.1
        nv.append({"kind": "power", "gpu": 0, "t": t, "t_end": t, "power_mw": 200_000, "energy_mj": 7e9 + 204 * 100 * i})
        if i % 10 == 0:
            ts = int((t - 0.5) * 1e6)
            nv.append({"kind": "slow", "gpu": 0, "t": t, "util_gpu": 91, "util_call_t": t, "last_seen_us": last,
                       "compute": [{"pid": n90, "used_bytes": 1000 * MiB}, {"pid": nhold, "used_bytes": 2000 * MiB}],
                       "proc_util": [{"pid": n90, "ts_us": ts, "sm": 90, "mem": 1, "enc": 0, "dec": 0}]})
            last = ts
    nv.append({"kind": "slow", "gpu": 0, "t": E + 10.5, "proc_util_error": "Not Found", "proc_util_code": 6})
    write(d, "nvml/samples.jsonl", jsonl(nv))
    write(d, "nvml/pids.json", json.dumps([{"pid": n90, "in_proc": n90 == p90}, {"pid": nhold, "in_proc": nhold == hold}]))
    write(d, "nvml/errors.json", "{}")
    write(d, "nvml/probe.json", json.dumps({"not_supported": ["gpu 0: GetEncoderUtilization"], "devices": {
        "0": {"GetEncoderUtilization": {"error": "Not Supported", "code": 3},
              "GetAccountingMode": {"error": "No Permission", "code": 4}}}}))

    pmon = ["#Date       Time        gpu         pid   type     sm    mem    enc    dec     fb   command",
            "#YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %     MB   name"]
    dmon = ["#Date       Time        gpu    pwr  gtemp     sm    mem     fb",
            "#YYYYMMDD   HH:MM:SS    Idx      W      C      %      %     MB"]
    for k in range(11):
        day, hms = smi_time(E + k)
        pmon.append(" %s   %s      0  %d     C     88      3      -      -   1000   python3 load.py" % (day, hms, n90))
        pmon.append(" %s   %s      0  %d     C      -      -      -      -   2000   python3" % (day, hms, nhold))
        dmon.append(" %s   %s      0    200     40     89      3   3500" % (day, hms))
    write(d, "nvidia-smi/pmon.txt", "\n".join(pmon) + "\n")
    write(d, "nvidia-smi/dmon.txt", "\n".join(dmon) + "\n")
    write(d, "nvidia-smi/compute-apps-A.csv",
          "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
          "2023/11/14 22:13:25.000, GPU-1, %d, python3, 1000\n"
          "2023/11/14 22:13:25.000, GPU-1, %d, python3, 2000\n" % (n90, nhold))
    write(d, "snapshots/ps-A.json", json.dumps({"host_users": [{"user": "root", "gpus": [
        {"gpu": 0, "sm_util_percent": 85, "memory_bytes": 3000 * MiB, "processes": 2}]}], "containers": [], "unresolved": []}))
    write(d, "snapshots/proc-check-A.txt", "%d\tyes\tpython3 load.py\n%d\tno\t\n" % (n90, nhold))
    write(d, "fixtures/nvidia-smi-q.txt", "    Fan Speed                         : N/A\n    Driver Version : 550.1\n")


def quiet_main(d):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return compare.main(["compare.py", d])


class CompareTest(unittest.TestCase):
    def tempdir(self):
        d = tempfile.mkdtemp(prefix="gpucheck-test-")
        self.addCleanup(shutil.rmtree, d)
        return d

    def run_compare(self, **kw):
        d = self.tempdir()
        make_run(d, **kw)
        self.assertEqual(quiet_main(d), 0)
        with open(os.path.join(d, "comparison.json"), encoding="utf-8") as f:
            res = json.load(f)
        with open(os.path.join(d, "summary.txt"), encoding="utf-8") as f:
            text = f.read()
        return res, text

    def test_sm_share(self):
        res, _ = self.run_compare()
        self.assertEqual(res["roles"]["method"], "pid")
        ph = res["sm"]["phases"][0]
        p90 = ph["loads"]["p90"]
        self.assertEqual(p90["expected"], 90.0)
        self.assertAlmostEqual(p90["achieved"], 90.0, places=6)
        self.assertEqual(p90["gpumeter"]["mean"], 85.0)
        self.assertEqual(p90["pmon"]["mean"], 88.0)
        self.assertEqual(p90["pynvml"]["per_read"]["mean"], 90.0)
        self.assertEqual(p90["gpumeter_minus_pmon"], -3.0)
        self.assertEqual(p90["gpumeter_minus_expected"], -5.0)
        hold = ph["loads"]["hold"]
        self.assertEqual(hold["expected"], 0.0)
        self.assertEqual(hold["gpumeter"]["mean"], 0.0)
        self.assertEqual(hold["pmon"]["mean"], 0.0)
        self.assertEqual(hold["pmon"]["dashes"], hold["pmon"]["n"])
        self.assertEqual(hold["pynvml"]["per_read"]["mean"], 0.0)
        self.assertEqual(ph["device"]["gpumeter_api"]["mean"], 90.0)
        self.assertEqual(ph["device"]["dmon_sm"]["mean"], 89.0)
        self.assertEqual(ph["device"]["pynvml"]["mean"], 91.0)
        self.assertEqual(ph["gpumeter_process_sum_minus_device"], -5.0)

    def test_memory(self):
        res, _ = self.run_compare()
        for role, mib in (("p90", 1000.0), ("hold", 2000.0)):
            m = res["memory"][role]
            self.assertEqual((m["gpumeter_mib"], m["pynvml_mib"], m["compute_apps_mib"], m["pmon_fb_mib"]), (mib,) * 4, role)
            self.assertEqual(m["gpumeter_minus_compute_apps_mib"], 0.0)

    def test_energy(self):
        res, _ = self.run_compare()
        nv = res["energy"]["pynvml"]
        self.assertEqual(nv["power_integral_j"], 2000.0)
        self.assertEqual(nv["counter_delta_j"], 2040.0)
        self.assertEqual(nv["integral_vs_counter_pct"], round(100 * (2000 - 2040) / 2040, 3))
        self.assertEqual(nv["counter_decreases"], 0)
        gm = res["energy"]["gpumeter"]
        self.assertEqual(gm["counter_delta_j"], 2000.0)
        self.assertEqual(gm["power_integral_j"], 2000.0)
        self.assertEqual(gm["booked_delta_j"], 1900.0)
        self.assertEqual(gm["booked_vs_counter_pct"], -5.0)
        dm = res["energy"]["dmon"]
        self.assertEqual(dm["power_integral_j"], 2000.0)
        self.assertEqual(dm["pynvml_counter_delta_j"], 2040.0)

    def test_proc_util_timestamps(self):
        res, _ = self.run_compare()
        pu = res["proc_util_timestamps"]
        self.assertEqual(pu["reads"], 12)
        self.assertEqual(pu["errors"], {"Not Found": 1})
        self.assertEqual(pu["lag_behind_wall_s"]["median"], 0.5)
        self.assertTrue(pu["timestamps_look_like_epoch_us"])
        self.assertEqual(pu["stale_samples"], 0)
        self.assertEqual(pu["interval_between_samples_s"]["101"]["median"], 1.0)

    def test_pids_and_not_supported(self):
        res, text = self.run_compare()
        self.assertEqual((res["pids"]["in_proc"], res["pids"]["not_in_proc"]), (2, 0))
        ns = res["not_supported"]
        self.assertEqual(ns["pynvml_probe_not_supported"], ["gpu 0: GetEncoderUtilization"])
        self.assertEqual(ns["pynvml_probe_errors"], ["gpu 0: GetAccountingMode: No Permission"])
        self.assertEqual(ns["gpumeter_value_unavailable"], ["enc_util"])
        self.assertEqual(ns["gpumeter_debug_log"], {"GetEncoderUtilization: Unknown Error": 3})
        self.assertEqual(ns["nvidia_smi_q_na_fields"], 1)
        ps = res["ps"][0]
        self.assertEqual((ps["ps_memory_mib"], ps["compute_apps_memory_mib"], ps["ps_minus_compute_apps_mib"]), (3000.0, 3000.0, 0.0))
        self.assertIn("steps not ending 0: 1", text)
        self.assertIn("ls-dev-nvidia 2", text)

    def test_other_pid_namespace(self):
        # NVML gives host PIDs the loads do not know: match on memory.
        res, _ = self.run_compare(load_pids=(11, 12), nvml_pids=(90001, 90002))
        self.assertTrue(res["roles"]["method"].startswith("memory rank"))
        self.assertEqual(res["roles"]["nvml_pid"], {"p90": 90001, "hold": 90002})
        self.assertEqual(res["sm"]["phases"][0]["loads"]["p90"]["gpumeter"]["mean"], 85.0)
        self.assertEqual(res["pids"]["not_in_proc"], 2)

    def test_missing_inputs(self):
        d = self.tempdir()
        write(d, "run.json", json.dumps({"epoch": E, "phases": [{"name": "idle", "start": 0, "end": 20}], "roles": {}}))
        self.assertEqual(quiet_main(d), 0)
        with open(os.path.join(d, "comparison.json"), encoding="utf-8") as f:
            res = json.load(f)
        self.assertIn("error", res["energy"]["pynvml"])
        self.assertIn("error", res["proc_util_timestamps"])
        self.assertEqual(quiet_main(self.tempdir()), 1)

    def test_compute_apps_without_timestamp(self):
        d = self.tempdir()
        write(d, "a.csv", "pid, process_name, used_gpu_memory [MiB]\n42, python3, 512\n")
        self.assertEqual(compare.parse_compute_apps(os.path.join(d, "a.csv")),
                         [{"pid": 42, "used_mib": 512.0, "name": "python3", "gpu_uuid": None}])


if __name__ == "__main__":
    unittest.main()
