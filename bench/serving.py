"""Serving beside other processes: batch-1 MLP inference in several processes at once on the same cores.

    python bench/serving.py [--processes 4] [--seconds 5] [--rounds 3]

Each library runs `--processes` serving processes side by side (tapeflow's frozen graph, then
onnxruntime with the same exported model), each with 2 threads, all starting their timed loop at
the same moment and calling the model for `--seconds`. Reported per library: every process's
median latency, the slowest process's median, and that against the same library's latency alone
(one process on the quiet machine, measured first). Targets: tapeflow alone at most 0.7x
onnxruntime alone, and tapeflow's slowest serving process no slower than onnxruntime's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from graph import THREADS, latency_call

LIBS = ("frozen", "onnx")
NAMES = {"frozen": "tapeflow frozen", "onnx": "onnxruntime"}


def worker(lib: str, start: float, seconds: float) -> dict:
    """Wait until `start` (wall clock), then call the model for `seconds`; the median latency in µs."""
    run = latency_call(lib)
    for _ in range(50):
        run()
    time.sleep(max(0.0, start - time.time()))
    times = []
    end = time.perf_counter() + seconds
    while True:
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
        if t > end:
            break
    times = np.array(times) * 1e6
    return {"us": float(np.median(times)), "p90": float(np.percentile(times, 90)), "calls": len(times)}


def side_by_side(lib: str, processes: int, seconds: float) -> list[dict]:
    """`processes` workers of `lib` started together; their results in start order."""
    start = time.time() + 8.0  # after every worker has imported its library and built the model
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
    command = [sys.executable, __file__, "--worker", lib, repr(start), repr(seconds)]
    running = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(processes)
    ]
    results = []
    for proc in running:
        out, err = proc.communicate(timeout=seconds + 120)
        if proc.returncode != 0:
            raise RuntimeError(f"{lib} serving process failed:\n{err}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        lib, start, seconds = args.worker
        print(json.dumps(worker(lib, float(start), float(seconds))))
        return
    print(f"batch-1 MLP 784-256-256-10 inference, {THREADS} threads per process, on {os.cpu_count()} cores")
    alone = {lib: [] for lib in LIBS}
    slowest = {lib: [] for lib in LIBS}
    for round_ in range(args.rounds):
        for lib in LIBS if round_ % 2 == 0 else LIBS[::-1]:
            alone[lib].append(side_by_side(lib, 1, args.seconds)[0]["us"])
            crowd = side_by_side(lib, args.processes, args.seconds)
            medians = [r["us"] for r in crowd]
            slowest[lib].append(max(medians))
            print(
                f"  round {round_ + 1} {NAMES[lib]:<16} alone {alone[lib][-1]:7.1f} us;  "
                f"{args.processes} processes: " + " ".join(f"{m:.1f}" for m in medians) + " us",
                flush=True,
            )
    quiet = {lib: float(np.median(alone[lib])) for lib in LIBS}
    worst = {lib: float(np.median(slowest[lib])) for lib in LIBS}
    print("\nmedians over the rounds")
    for lib in LIBS:
        print(
            f"  {NAMES[lib]:<16} alone {quiet[lib]:7.1f} us   slowest of {args.processes}: {worst[lib]:8.1f} us"
            f"  ({worst[lib] / quiet[lib]:.1f}x its latency alone)"
        )
    print(f"  alone: tapeflow / onnxruntime {quiet['frozen'] / quiet['onnx']:.2f}x (target <= 0.7x)")
    print(f"  slowest serving process: tapeflow / onnxruntime {worst['frozen'] / worst['onnx']:.2f}x (target <= 1.0x)")


if __name__ == "__main__":
    main()
