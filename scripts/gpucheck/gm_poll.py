#!/usr/bin/env python3
"""Polls a running `gpumeter serve` for scripts/gpu-check.sh, with the
standard library only.

Every --interval seconds it reads /api/v1/gpus over the agent's Unix socket
(root and the agent's own user need no token there) and /metrics over
HTTP, and appends to --out:
  gm_gpus.jsonl     {"t": wall time, "body": the /api/v1/gpus answer}
  gm_metrics.jsonl  {"t": wall time, "series": [[name, labels, value], ...]}
                    for the per-GPU, per-user and health series
  metrics/scrape-<n>.txt  the whole /metrics text every --raw-every seconds
A failed read is a line with "error" instead, and polling goes on.
"""

import argparse
import http.client
import json
import os
import re
import signal
import socket
import sys
import time
import urllib.request

KEEP = ("DCGM_FI_", "gpumeter_gpu_", "gpumeter_host_", "gpumeter_source_", "gpumeter_unresolved_",
        "gpumeter_ticks_", "gpumeter_tick_", "gpumeter_container_gpu_", "gpumeter_build_info",
        "gpumeter_last_tick_")

SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def unescape(v):
    return re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse_metrics(text, keep=KEEP):
    """Returns [name, labels, value] for each sample line whose name starts
    with one of keep."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SERIES.match(line)
        if not m:
            continue
        name = m.group(1)
        if keep and not name.startswith(keep):
            continue
        labels = {k: unescape(v) for k, v in LABEL.findall(m.group(3) or "")}
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append([name, labels, value])
    return out


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


def get_socket(path, url_path, timeout=3.0):
    c = UnixHTTPConnection(path, timeout)
    try:
        c.request("GET", url_path)
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status, body[:200].decode("utf-8", "replace")))
        return body
    finally:
        c.close()


def get_url(url, timeout=3.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--socket", required=True)
    p.add_argument("--metrics-url", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--duration", type=float, default=150.0)
    p.add_argument("--stop-file", default="")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--raw-every", type=float, default=10.0)
    args = p.parse_args()
    os.makedirs(os.path.join(args.out, "metrics"), exist_ok=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, _: stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _: stop.append(signum))

    deadline = time.time() + args.duration
    next_raw = 0.0
    raw_n = 0
    gpus_f = open(os.path.join(args.out, "gm_gpus.jsonl"), "a", encoding="utf-8")
    met_f = open(os.path.join(args.out, "gm_metrics.jsonl"), "a", encoding="utf-8")
    try:
        while not stop and time.time() < deadline:
            if args.stop_file and os.path.exists(args.stop_file):
                break
            t0 = time.time()
            try:
                body = json.loads(get_socket(args.socket, "/api/v1/gpus"))
                gpus_f.write(json.dumps({"t": t0, "t_end": time.time(), "body": body}) + "\n")
            except Exception as e:
                gpus_f.write(json.dumps({"t": t0, "error": "%s: %s" % (type(e).__name__, e)}) + "\n")
            t1 = time.time()
            try:
                text = get_url(args.metrics_url).decode("utf-8", "replace")
                met_f.write(json.dumps({"t": t1, "t_end": time.time(), "series": parse_metrics(text)}) + "\n")
                if t1 >= next_raw:
                    with open(os.path.join(args.out, "metrics", "scrape-%03d.txt" % raw_n), "w", encoding="utf-8") as f:
                        f.write("# scraped at %.3f\n" % t1)
                        f.write(text)
                    raw_n += 1
                    next_raw = t1 + args.raw_every
            except Exception as e:
                met_f.write(json.dumps({"t": t1, "error": "%s: %s" % (type(e).__name__, e)}) + "\n")
            gpus_f.flush()
            met_f.flush()
            time.sleep(max(0.0, args.interval - (time.time() - t0)))
    finally:
        gpus_f.close()
        met_f.close()
        why = ("signal %s" % stop[0] if stop else "stop file" if args.stop_file and os.path.exists(args.stop_file)
               else "duration" if time.time() >= deadline else "error")
        sys.stderr.write("gm_poll: stopped (%s) after %.1f s\n" % (why, time.time() - deadline + args.duration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
