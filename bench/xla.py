"""A frozen training step on XLA (torch_xla on the CPU) against the NumPy backend.

    make bench-xla                                   # builds .venv-xla first
    PJRT_DEVICE=CPU .venv-xla/bin/python bench/xla.py --steps 20

The step is one `tp.function`: forward, loss, gradients and an Adam update on the
model's Variables. On XLA the whole step is one computation, compiled on the first call
and replayed afterwards. Each device runs in a process of its own. Reported per device:
the first call (tracing, plus compiling on XLA), the median time of a step after that
(each timed block ends by reading the loss, so XLA's queued work is included), the
compilations counted over the timed steps, and the ratio XLA / NumPy. XLA on the CPU is
not where XLA is fast; the figure says what the frozen path costs, as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import pin_threads  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

WORKLOADS = {"mlp": (128, (784,)), "cnn": (50, (28, 28, 1))}


def measure(kind: str, device: str, steps: int) -> dict:
    """Time the frozen step of one workload on one device (run in a child process)."""
    from _models import tapeflow_model

    import tapeflow as tp

    batch, shape = WORKLOADS[kind]
    rng = np.random.default_rng(0)
    x_host = rng.random((batch, *shape), dtype=np.float32)
    y_host = rng.integers(0, 10, batch)
    with tp.device(device):
        model = tapeflow_model(kind, dropout=False)
        model.build((None, *shape))
        optimizer = tp.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_weights)
        loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        x, y = tp.tensor(x_host), tp.tensor(y_host)

        @tp.function
        def step(x, y):
            with tp.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))
            return loss

        start = time.perf_counter()
        float(step(x, y))
        first = time.perf_counter() - start
        before = tp.device_stats(device).get("compiles", 0)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            loss = step(x, y)
            float(loss)
            times.append(time.perf_counter() - start)
        compiles = tp.device_stats(device).get("compiles", 0) - before
    return {"first": first, "median": statistics.median(times), "compiles": compiles}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child, args.steps)))
        return
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    print(f"frozen train step, {args.steps} timed steps; PJRT_DEVICE={env['PJRT_DEVICE']}")
    print(f"{'workload':10} {'device':7} {'first call':>11} {'step (median)':>14} {'compiles':>9} {'xla / numpy':>12}")
    for kind in WORKLOADS:
        results = {}
        for device in ("cpu", "xla:0"):
            cmd = [sys.executable, __file__, "--steps", str(args.steps), "--child", kind, device]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
            results[device] = json.loads(out.strip().splitlines()[-1])
        for device, r in results.items():
            ratio = f"{r['median'] / results['cpu']['median']:.2f}x" if device != "cpu" else ""
            print(
                f"{kind:10} {device:7} {r['first'] * 1e3:9.0f}ms {r['median'] * 1e3:12.2f}ms "
                f"{r['compiles']:9d} {ratio:>12}"
            )


if __name__ == "__main__":
    main()
