"""What an asynchronous parameter-server update costs: `fit` with
`tp.distributed.AsyncParameterServer` against single-process `fit` and synchronous
`DataParallel`, on the same batches in the same run.

    .venv/bin/python bench/distributed_async.py

MLP 784-256-256-10 (ReLU), Adam, batches of 128 rows. Each async update trains on one
whole batch, as a single-process step does, so updates/s compare directly (a sync step
splits its batch over the replicas). An update's cost is the marginal time of one more
batch, from epochs of k and 2k batches (see `distributed_step.py`); the mean staleness
of the async runs is printed beside them.
"""

from __future__ import annotations

from distributed_step import epoch_seconds, mlp

import tapeflow as tp


def update_seconds(steps: int, distribute=None) -> float:
    """Seconds per batch: the difference between epochs of 2 * `steps` and `steps` batches."""
    short = epoch_seconds(mlp, steps, distribute)
    return (epoch_seconds(mlp, 2 * steps, distribute) - short) / steps


def main() -> None:
    steps, rows = 40, []
    for threads in (1, 2):
        tp.set_num_threads(threads)
        rows.append((f"1 process, {threads} thread(s)", update_seconds(steps), None))
    tp.set_num_threads(1)
    with tp.distributed.Cluster(n_workers=2, threads_per_worker=1) as cluster:
        for replicas in (1, 2):
            strategy = tp.distributed.AsyncParameterServer(cluster, replicas=replicas)
            step = update_seconds(steps, strategy)
            staleness = sum(s.staleness for s in strategy.steps) / len(strategy.steps)  # of the last epoch
            rows.append((f"async, {replicas} replica(s)", step, staleness))
        strategy = tp.distributed.DataParallel(cluster, replicas=2)
        rows.append(("sync, 2 replicas", update_seconds(steps, strategy), None))
    reference = rows[1][1]
    print(f"{'MLP, batch 128':28s} {'per update':>11s} {'updates/s':>10s} {'vs 1 process':>13s} {'staleness':>10s}")
    for name, step, staleness in rows:
        stale = "" if staleness is None else f"{staleness:.2f}"
        print(f"{name:28s} {step * 1e3:9.2f}ms {1 / step:10.0f} {reference / step:12.2f}x {stale:>10s}")


if __name__ == "__main__":
    main()
