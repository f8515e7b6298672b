"""Training beside another busy process: the kernels' OpenMP threads must not spin for long.

    python bench/threads.py [--steps N]

The Deep-MNIST CNN (Adam, batch 50) and the MLP 784-256-256-10 (Adam, batch 128) train for
a few steps in a fresh process, with 2 threads, on an idle machine and with one competing
process (a Python busy loop) on the same cores. tapeflow runs with its default (idle
OpenMP threads spin for about 0.1 ms, then sleep), with OMP_WAIT_POLICY=PASSIVE (they sleep
at once: every parallel loop pays a wake-up) and with OMP_WAIT_POLICY=ACTIVE (they spin:
a spinning pool loses its core to the competitor in the middle of every parallel loop);
a policy the user sets is left alone. PyTorch with its own defaults, in its own process,
is the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

BATCH = {"cnn": 50, "mlp": 128}
POLICIES = (
    ("tapeflow default (brief spin)", "tapeflow", None),
    ("tapeflow, OMP_WAIT_POLICY=PASSIVE", "tapeflow", "PASSIVE"),
    ("tapeflow, OMP_WAIT_POLICY=ACTIVE", "tapeflow", "ACTIVE"),
    ("PyTorch (its defaults)", "torch", None),
)


def _data(kind: str):
    rng = np.random.default_rng(0)
    shape = (BATCH[kind], 28, 28, 1) if kind == "cnn" else (BATCH[kind], 784)
    return rng.random(shape, dtype=np.float32), rng.integers(0, 10, BATCH[kind])


def _median_ms(step, steps: int) -> float:
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def tapeflow_worker(kind: str, steps: int) -> float:
    from _models import tapeflow_model

    import tapeflow as tp

    tp.set_num_threads(2)
    model = tapeflow_model(kind, dropout=False)
    model.compile(tp.optimizers.Adam(1e-3), tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = (tp.tensor(a) for a in _data(kind))
    return _median_ms(lambda: model.train_step((x, y)), steps)


def torch_worker(kind: str, steps: int) -> float:
    import torch
    from _models import torch_model
    from torch import nn

    torch.set_num_threads(2)
    model = torch_model(kind, dropout=False)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = (torch.from_numpy(a) for a in _data(kind))
    if kind == "cnn":
        x = x.permute(0, 3, 1, 2).contiguous()

    def step():
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return _median_ms(step, steps)


def measure(library: str, kind: str, steps: int, policy: str | None, competitor: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if competitor else None
    try:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", library, kind, "--steps", str(steps)],
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
    print("train step, 2 threads, median ms per step: on an idle machine / beside one competing process")
    print(f"{'':36s} {'CNN batch 50':>22s} {'MLP batch 128':>22s}")
    for label, library, policy in POLICIES:
        cells = []
        for kind in ("cnn", "mlp"):
            n = steps if kind == "cnn" else steps * 10
            idle, busy = measure(library, kind, n, policy, False), measure(library, kind, n, policy, True)
            cells.append(f"{idle:7.2f} / {busy:7.2f}")
        print(f"{label:36s} {cells[0]:>22s} {cells[1]:>22s}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="CNN steps per process (the MLP runs 10x as many)")
    parser.add_argument("--worker", nargs=2, metavar=("LIBRARY", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        library, kind = args.worker
        run = tapeflow_worker if library == "tapeflow" else torch_worker
        print(json.dumps({"ms": run(kind, args.steps)}))
    else:
        main(args.steps)
