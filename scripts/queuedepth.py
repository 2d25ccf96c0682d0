#!/usr/bin/env python3
"""Helpers of scripts/queue-depth.sh: API submissions over the agent's
socket, and the figures (makespan, release-to-start gaps) from job times."""
import http.client
import json
import socket
import sys
import threading
import time


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self.path)


def api_submit(sock, n, conc, users, seconds, image, limit):
    """n submissions from conc keep-alive clients, users in turn; prints jobs/s."""
    users = users.split(",")
    lock = threading.Lock()
    state = {"next": 0, "failed": 0, "first": ""}

    def worker():
        c = UnixConn(sock)
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= n:
                return
            body = json.dumps({"gpus": 1, "time_limit": limit, "image": image, "as_user": users[i % len(users)],
                               "command": ["exit-after", seconds + "s", "0"]})
            try:
                c.request("POST", "/api/v1/jobs", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                if r.status not in (200, 201):
                    raise RuntimeError("%d %s" % (r.status, data[:200]))
            except Exception as e:  # counted, the first one shown
                with lock:
                    state["failed"] += 1
                    if not state["first"]:
                        state["first"] = str(e)
                c.close()
                c = UnixConn(sock)

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    el = time.monotonic() - t0
    print("%.1f %d %.1f" % (n / el, state["failed"], el))
    if state["failed"]:
        print("api submit: %d failed, first: %s" % (state["failed"], state["first"]), file=sys.stderr)


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def figures(path, gpus):
    """Lines "start end" (Unix seconds) of one-GPU jobs on `gpus` GPUs:
    prints makespan (first start to last end), gap p50, p99 and count. The
    k-th start after the first `gpus` takes the GPU of the k-th end."""
    starts, ends = [], []
    for line in open(path):
        f = line.split()
        if len(f) >= 2:
            starts.append(float(f[0]))
            ends.append(float(f[1]))
    starts.sort()
    ends.sort()
    gaps = [starts[k + gpus] - ends[k] for k in range(len(starts) - gpus)]
    print("%.1f %.2f %.2f %d" % (ends[-1] - starts[0], pct(gaps, 50), pct(gaps, 99), len(gaps)))


def gm_times(path, since, until):
    """gpumeter jobs --format json on stdin: "start end" of the jobs that
    started in [since, until) (Unix seconds; 0: any), into path."""
    from datetime import datetime
    jobs = json.load(sys.stdin)
    if isinstance(jobs, dict):
        jobs = jobs.get("jobs", [])
    n = 0
    with open(path, "w") as out:
        for j in jobs:
            s, e = j.get("started_at"), j.get("ended_at")
            if not s:
                continue
            s = datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
            e = datetime.fromisoformat(e.replace("Z", "+00:00")).timestamp() if e else float("inf")
            if (since and s < since) or (until and s >= until):
                continue
            out.write("%.6f %.6f\n" % (s, e))
            n += 1
    print(n)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "api-submit":
        api_submit(args[0], int(args[1]), int(args[2]), args[3], args[4], args[5], args[6])
    elif cmd == "figures":
        figures(args[0], int(args[1]))
    elif cmd == "gm-times":
        gm_times(args[0], float(args[1]), float(args[2]))
    else:
        sys.exit("queuedepth.py: unknown command " + cmd)
