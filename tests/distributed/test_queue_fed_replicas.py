"""`fit(queue, steps_per_epoch=..., distribute=...)`: the replicas of `DataParallel` and
`AsyncParameterServer` dequeue their own rows from a cluster queue that producer tasks
feed, on a real LocalCluster (worker processes on 127.0.0.1). The reference is `fit` in
this process on the rows the queue was fed. Every wait is bounded, and every test has a
timeout.
"""

import importlib

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(240),
    pytest.mark.slow,
]

WAIT = 60.0  # seconds a producer may wait for room


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        cluster.client.run(importlib.import_module, "tapeflow.distributed")  # every worker ready to take a proxy
        yield cluster


def produce(q, x, y, chunk: int) -> int:
    """Enqueue the rows of (x, y), `chunk` at a time; returns how many. A task that waits for
    room leaves its worker's thread pool, which the strategies' actors need."""
    _compat.require_distributed().secede()
    for start in range(0, len(x), chunk):
        q.enqueue_many([x[start : start + chunk], y[start : start + chunk]], timeout=WAIT)
    return len(x)


def rows(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)


def twins(metrics=()):
    tp.random.seed(1)
    models = [tp.Sequential([tp.Input((3,)), tp.layers.Dense(4, activation="tanh"), tp.layers.Dense(1)]) for _ in "ab"]
    models[1].set_weights(models[0].get_weights())
    for m in models:
        m.compile(optimizer=tp.optimizers.Adam(0.05), loss="mse", metrics=list(metrics))
    return models


def feed(cluster, x, y, capacity, chunk=4, producers=1):
    """A queue of (x, y) rows on the first worker and the producer tasks filling it, each
    from its own worker with a part of the rows."""
    q = tp.queue.FIFOQueue(capacity, ["float32", "float32"], shapes=[(3,), (1,)], cluster=cluster)
    parts = np.array_split(np.arange(len(x)), producers)
    workers = cluster.workers
    tasks = [
        cluster.client.submit(
            produce, q, x[p], y[p], chunk, workers=[workers[k % len(workers)]], allow_other_workers=False, pure=False
        )
        for k, p in enumerate(parts)
    ]
    return q, tasks


def test_data_parallel_replicas_dequeue_their_shards(cluster):
    steps, epochs, batch = 3, 2, 8
    block_x, block_y = rows(batch // 2)  # every shard dequeued is this block, whichever replica takes it
    total = steps * epochs * 2
    q, tasks = feed(cluster, np.tile(block_x, (total, 1)), np.tile(block_y, (total, 1)), capacity=4 * total)
    fed, plain = twins()
    strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=WAIT)
    history = fed.fit(q, batch_size=batch, steps_per_epoch=steps, epochs=epochs, verbose=0, distribute=strategy)
    assert sum(t.result(timeout=WAIT) for t in tasks) == batch * steps * epochs
    x, y = np.tile(block_x, (2 * steps, 1)), np.tile(block_y, (2 * steps, 1))
    expected = plain.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    for a, b in zip(plain.get_weights(), fed.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(history.history["loss"], expected.history["loss"], rtol=1e-5)
    assert len(strategy.steps) == steps * epochs and q.size() == 0


def test_an_async_replica_trains_on_the_batches_in_queue_order(cluster):
    steps, epochs, batch = 4, 2, 6
    x, y = rows(steps * epochs * batch, seed=2)
    q, tasks = feed(cluster, x, y, capacity=12, chunk=3)  # the producer runs while fit does
    fed, plain = twins()
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=1, timeout=WAIT)
    fed.fit(q, batch_size=batch, steps_per_epoch=steps, epochs=epochs, verbose=0, distribute=strategy)
    assert tasks[0].result(timeout=WAIT) == len(x)
    plain.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(plain.get_weights(), fed.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert q.size() == 0


def test_two_async_replicas_share_a_queue_fed_by_two_producers(cluster):
    steps, epochs, batch = 5, 2, 4
    x, y = rows(steps * epochs * batch, seed=3)
    q, tasks = feed(cluster, x, y, capacity=8, chunk=2, producers=2)
    model, _ = twins()
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=2, timeout=WAIT)
    history = model.fit(q, batch_size=batch, steps_per_epoch=steps, epochs=epochs, verbose=0, distribute=strategy)
    assert sum(t.result(timeout=WAIT) for t in tasks) == len(x)
    assert len(strategy.steps) == steps * epochs and model.optimizer.iterations == steps * epochs
    assert {s.replica for s in strategy.steps} <= {0, 1} and np.isfinite(history.history["loss"]).all()
    assert q.size() == 0


def test_what_a_queue_fed_fit_refuses(cluster):
    remote = tp.queue.FIFOQueue(8, ["float32", "float32"], shapes=[(3,), (1,)], cluster=cluster)
    strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=WAIT)
    model, with_metrics = twins()[0], twins(["mae"])[0]
    with pytest.raises(ValueError, match="needs steps_per_epoch"):
        model.fit(remote, batch_size=4, verbose=0, distribute=strategy)
    with pytest.raises(ValueError, match="must live on the cluster"):
        local = tp.queue.FIFOQueue(8, ["float32", "float32"], shapes=[(3,), (1,)])
        model.fit(local, batch_size=4, steps_per_epoch=1, verbose=0, distribute=strategy)
    with pytest.raises(ValueError, match="compile the model without metrics"):
        with_metrics.fit(remote, batch_size=4, steps_per_epoch=1, verbose=0, distribute=strategy)
    unshaped = tp.queue.FIFOQueue(8, ["float32", "float32"], cluster=cluster)
    with pytest.raises(ValueError, match="needs fully known shapes"):
        model.fit(unshaped, batch_size=4, steps_per_epoch=1, verbose=0, distribute=strategy)
    with pytest.raises(ValueError, match="one input array x"):
        model.fit(remote, batch_size=4, steps_per_epoch=1, verbose=0, distribute=tp.distributed.Pipeline(cluster))
