"""What a synchronous data-parallel step costs: `fit` with `tp.distributed.DataParallel`
against single-process `fit` on the same global batch, in the same run.

    .venv/bin/python bench/distributed_step.py

A step's cost is the marginal time of one more step: the difference between epochs of
2k and k steps, divided by k. The per-epoch work (sending the weights to the parameter
shards and back, launching the replicas) shows in the time of an epoch of one step.

- MLP 784-256-256-10 (ReLU), Adam, global batch 128: one process (1 and 2 threads)
  against 2 replicas with 1 thread each.
- A null model (Dense(1) on one feature, batch 4): the per-step overhead of the
  synchronous protocol for 1 and 2 replicas.
"""

from __future__ import annotations

import time

import numpy as np

import tapeflow as tp


def mlp():
    layers = [tp.layers.Dense(256, activation="relu"), tp.layers.Dense(256, activation="relu"), tp.layers.Dense(10)]
    return tp.Sequential(layers), 784, 128


def null_model():
    return tp.Sequential([tp.layers.Dense(1)]), 1, 4


def epoch_seconds(build, steps: int, distribute=None, repeats: int = 3) -> float:
    """The best wall time of one `fit` epoch of `steps` steps (after a warm-up epoch)."""
    model, features, batch = build()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((steps * batch, features)).astype(np.float32)
    y = rng.integers(0, 10 if features > 1 else 1, steps * batch)
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True) if features > 1 else "mse"
    model.compile(optimizer=tp.optimizers.Adam(1e-3), loss=loss)
    if features == 1:
        y = y.astype(np.float32)[:, None]
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, distribute=distribute)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, distribute=distribute)
        best = min(best, time.perf_counter() - start)
    return best


def step_and_epoch(build, steps: int, distribute=None) -> tuple[float, float]:
    """(seconds per step, seconds of an epoch of one step): the step from epochs of `steps`
    and 2 * `steps` steps."""
    short, long = epoch_seconds(build, steps, distribute), epoch_seconds(build, 2 * steps, distribute)
    return (long - short) / steps, epoch_seconds(build, 1, distribute)


def main() -> None:
    rows = []
    for threads in (1, 2):
        tp.set_num_threads(threads)
        rows.append((f"MLP, 1 process, {threads} thread(s)", *step_and_epoch(mlp, 40)))
    tp.set_num_threads(1)
    rows.append(("null model, 1 process", *step_and_epoch(null_model, 100)))
    with tp.distributed.Cluster(n_workers=2, threads_per_worker=1) as cluster:
        for replicas in (1, 2):
            strategy = tp.distributed.DataParallel(cluster, replicas=replicas)
            rows.append((f"MLP, {replicas} replica(s)", *step_and_epoch(mlp, 40, strategy)))
            rows.append((f"null model, {replicas} replica(s)", *step_and_epoch(null_model, 100, strategy)))
    print(f"{'workload':36s} {'per step':>10s} {'1-step epoch':>13s}")
    for name, step, epoch in rows:
        print(f"{name:36s} {step * 1e3:8.2f}ms {epoch * 1e3:11.1f}ms")


if __name__ == "__main__":
    main()
