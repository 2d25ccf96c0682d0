#!/usr/bin/env python3
"""GPU load for scripts/gpu-check.sh: a matmul loop with a duty cycle, or a
process that only holds GPU memory.

Every load starts, initialises CUDA, allocates its memory and writes a
"ready" line to its log; then it waits for the epoch file (a wall-clock
time written by gpu-check.sh once every load is ready) and follows its
schedule relative to that epoch, so that the loads' phases line up.

  duty mode: in each active window [start, end) (seconds after the epoch)
  every period starts with duty*period seconds of back-to-back matmuls
  (synchronised in short batches, so the busy part ends on time) and
  sleeps the rest. Each window's log line gives the busy wall time it got.
  hold mode: allocate, touch once, then no kernels at all until the end.

Needs python3 and torch with CUDA; anything missing is said on stderr and
in the log, and the exit status is not 0.
"""

import argparse
import json
import os
import signal
import sys
import time


def log_line(path, **fields):
    fields.setdefault("t", time.time())
    fields.setdefault("pid", os.getpid())
    line = json.dumps(fields, sort_keys=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def fail(args, code, message):
    sys.stderr.write("load %s: %s\n" % (args.role, message))
    log_line(args.log, event="error", role=args.role, error=message)
    sys.exit(code)


def parse_windows(text):
    windows = []
    for part in filter(None, text.split(",")):
        start, end = part.split(":")
        windows.append((float(start), float(end)))
    return windows


def sleep_until(t):
    while True:
        left = t - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


def wait_epoch(args):
    deadline = time.time() + args.ready_timeout
    while time.time() < deadline:
        try:
            with open(args.epoch_file, encoding="utf-8") as f:
                text = f.read().strip()
            if text:
                return float(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return None


def make_matrices(torch, dev, n):
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    c = torch.empty(n, n, device=dev)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize(dev)
    return a, b, c


def calibrate(torch, dev, a, b, c):
    # Time one matmul so a batch takes about 5 ms: long enough to keep the
    # GPU busy between synchronisations, short enough to end a busy part on
    # time.
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    reps = 10
    for _ in range(reps):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize(dev)
    per = max((time.perf_counter() - t0) / reps, 1e-6)
    return per, max(1, int(0.005 / per))


def duty_window(args, torch, dev, mats, batch, est, epoch, ws, we):
    a, b, c = mats
    start, end = epoch + ws, epoch + we
    sleep_until(start)
    cycles = []
    busy_total = 0.0
    batches = 0
    k = 0
    while True:
        cs = start + k * args.period
        if cs >= end - 1e-9:
            break
        ce = min(cs + args.period, end)
        busy_end = cs + args.duty * (ce - cs)
        t_first = None
        t_last = time.time()
        while time.time() + est <= busy_end:
            t0 = time.time()
            if t_first is None:
                t_first = t0
            for _ in range(batch):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize(dev)
            t_last = time.time()
            est = 0.8 * est + 0.2 * (t_last - t0)
            batches += 1
        busy = (t_last - t_first) if t_first is not None else 0.0
        busy_total += busy
        cycles.append([round(cs - epoch, 4), round(busy, 4)])
        sleep_until(ce)
        k += 1
    return {
        "window": [ws, we],
        "busy_s": round(busy_total, 4),
        "duty_measured": round(busy_total / (we - ws), 4) if we > ws else None,
        "batches": batches,
        "cycles": cycles,
    }, est


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", required=True)
    p.add_argument("--mode", choices=("duty", "hold"), required=True)
    p.add_argument("--duty", type=float, default=0.0, help="busy fraction of each period, 0..1")
    p.add_argument("--period", type=float, default=0.5, help="seconds")
    p.add_argument("--windows", default="", help="active windows, start:end seconds after the epoch, comma-separated")
    p.add_argument("--end", type=float, required=True, help="seconds after the epoch at which the load exits")
    p.add_argument("--extra-mib", type=int, default=0, help="GPU memory to allocate and hold, MiB")
    p.add_argument("--matrix", type=int, default=4096)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--epoch-file", required=True)
    p.add_argument("--ready-timeout", type=float, default=90.0)
    p.add_argument("--log", required=True)
    args = p.parse_args()

    def on_term(signum, _frame):
        log_line(args.log, event="terminated", role=args.role, signal=signum)
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    log_line(args.log, event="start", role=args.role, mode=args.mode, duty=args.duty,
             period=args.period, windows=parse_windows(args.windows), end=args.end,
             extra_mib=args.extra_mib, python=sys.version.split()[0])
    try:
        import torch  # noqa: PLC0415 (imported here so a missing torch is reported, not a traceback)
    except Exception as e:  # ImportError, or a broken CUDA install raising at import
        fail(args, 3, "torch cannot be imported (%s: %s); install PyTorch with CUDA" % (type(e).__name__, e))
    if not torch.cuda.is_available():
        fail(args, 4, "torch %s sees no CUDA device (torch.version.cuda=%s)" % (torch.__version__, torch.version.cuda))
    dev = torch.device(args.device)
    try:
        hold = None
        if args.extra_mib > 0:
            hold = torch.empty(args.extra_mib * 2**20, dtype=torch.uint8, device=dev)
            hold.fill_(1)
        mats, per, batch = None, None, None
        if args.mode == "duty":
            mats = make_matrices(torch, dev, args.matrix)
            per, batch = calibrate(torch, dev, *mats)
        torch.cuda.synchronize(dev)
    except Exception as e:
        fail(args, 5, "CUDA setup failed: %s: %s" % (type(e).__name__, e))
    log_line(args.log, event="ready", role=args.role, torch=torch.__version__,
             torch_cuda=torch.version.cuda, device_name=torch.cuda.get_device_name(dev),
             memory_allocated=torch.cuda.memory_allocated(dev),
             memory_reserved=torch.cuda.memory_reserved(dev),
             matmul_s=per, batch=batch, matrix=args.matrix)

    epoch = wait_epoch(args)
    if epoch is None:
        fail(args, 6, "no epoch in %s after %.0f s" % (args.epoch_file, args.ready_timeout))
    log_line(args.log, event="epoch", role=args.role, epoch=epoch)

    if args.mode == "duty":
        est = per * batch
        for ws, we in parse_windows(args.windows):
            if epoch + we <= time.time():
                continue
            summary, est = duty_window(args, torch, dev, mats, batch, est, epoch, ws, we)
            log_line(args.log, event="window", role=args.role, duty=args.duty, **summary)
    sleep_until(epoch + args.end)
    del hold
    log_line(args.log, event="done", role=args.role)


if __name__ == "__main__":
    main()
