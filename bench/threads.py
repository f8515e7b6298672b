"""Training beside another busy process: the kernels' OpenMP threads must not spin.

    python bench/threads.py [--steps N]

The Deep-MNIST CNN (Adam, batch 50) trains for a few steps in a fresh process, with 2
threads, on an idle machine and with one competing process (a Python busy loop) on
the same cores; once with tapeflow's default (idle OpenMP threads sleep: PASSIVE) and
once with OMP_WAIT_POLICY=ACTIVE set by the user, which tapeflow leaves alone. A
spinning pool loses its core to the competitor in the middle of every parallel loop.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from _models import tapeflow_model


def worker(steps: int) -> dict:
    import tapeflow as tp

    tp.set_num_threads(2)
    model = tapeflow_model("cnn", dropout=False)
    model.compile(tp.optimizers.Adam(1e-3), tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x, y = tp.tensor(rng.random((50, 28, 28, 1), dtype=np.float32)), tp.tensor(rng.integers(0, 10, 50))
    for _ in range(3):
        model.train_step(x, y)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_step(x, y)
        times.append(time.perf_counter() - start)
    return {"ms": float(np.median(times) * 1e3)}


def measure(steps: int, policy: str | None, competitor: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if competitor else None
    try:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(steps)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def main(steps: int) -> None:
    print("Deep-MNIST CNN train step, batch 50, 2 threads (median ms per step)")
    print(f"{'':34s} {'idle':>8s} {'one competing process':>22s}")
    for label, policy in (("tapeflow default (PASSIVE)", None), ("OMP_WAIT_POLICY=ACTIVE (spinning)", "ACTIVE")):
        idle, busy = measure(steps, policy, False), measure(steps, policy, True)
        print(f"{label:34s} {idle:8.1f} {busy:22.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.steps)))
    else:
        main(args.steps)
