"""Where a frozen GPU training step's time goes, node by node.

    python3 bench/gpu_profile.py [--kinds mlp cnn] [--steps 5]

For bench/gpu.py's MLP, CNN and LSTM steps on gpu:0 it prints:
- the step's median wall time (ending with a read of the loss), and the time the host takes to
  queue it (the call returning before the read): a step whose queueing time is close to its
  wall time is bound by the host's Python, not by the GPU;
- per op, summed over the step's nodes: the host time to queue the op (traced as it runs), and
  its time with the device synchronized after every node (the op's own GPU time, plus the
  host's), with the count of nodes.
Without a GPU it prints "skipped".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu import tapeflow_step  # noqa: E402

import tapeflow as tp  # noqa: E402
from tapeflow import _compat, devices  # noqa: E402
from tapeflow.profiler import recording  # noqa: E402


def _per_op(step, inputs, steps: int, synchronize) -> dict[str, list[float]]:
    """op -> [milliseconds per step, nodes per step], the device synchronized after each node
    when `synchronize` is given."""
    on_node = recording.Profile.on_node

    def synchronized(self, *args):
        synchronize()
        on_node(self, *args)

    if synchronize is not None:
        recording.Profile.on_node = synchronized
    try:
        with tp.profiler.trace() as profile:
            for _ in range(steps):
                float(step(*inputs))
    finally:
        recording.Profile.on_node = on_node
    totals = defaultdict(lambda: [0.0, 0.0])
    for event in profile.events:
        if event.kind == "node":
            totals[event.op][0] += event.duration_ns / 1e6 / steps
            totals[event.op][1] += 1 / steps
    return totals


def profile(kind: str, steps: int) -> None:
    step, inputs = tapeflow_step(kind)
    synchronize = _compat.cupy.cuda.Device().synchronize
    with tp.device("gpu:0"):
        for _ in range(3):
            float(step(*inputs))
        walls, queued = [], []
        for _ in range(20):
            synchronize()
            start = time.perf_counter()
            loss = step(*inputs)
            queued.append(time.perf_counter() - start)
            float(loss)
            walls.append(time.perf_counter() - start)
        host = _per_op(step, inputs, steps, None)
        synced = _per_op(step, inputs, steps, synchronize)
    print(f"{kind}: step {statistics.median(walls) * 1e3:.3f} ms, queued in {statistics.median(queued) * 1e3:.3f} ms")
    print(f"  {'op':34} {'nodes':>5} {'host ms':>8} {'synced ms':>9}")
    for op, (ms, nodes) in sorted(synced.items(), key=lambda kv: -kv[1][0]):
        print(f"  {op:34} {nodes:5.0f} {host.get(op, [0.0])[0]:8.3f} {ms:9.3f}")
    print(f"  {'all':34} {sum(n for _, n in synced.values()):5.0f} "
          f"{sum(h for h, _ in host.values()):8.3f} {sum(s for s, _ in synced.values()):9.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["mlp", "cnn", "lstm"])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    reason = devices.gpu_unavailable_reason()
    if reason is not None:
        print(f"bench/gpu_profile.py: skipped, no GPU: {reason}")
        return
    for kind in args.kinds:
        profile(kind, args.steps)


if __name__ == "__main__":
    main()
