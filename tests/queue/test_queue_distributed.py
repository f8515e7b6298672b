"""Queues on Dask workers: one process holds the queue, producers and consumers on other
workers (and the client) share it through proxies, and the death of the queue's worker is
a clear error in every waiter, never a hang. Every wait here has a timeout."""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat
from tapeflow.queue import OutOfRangeError, UnavailableError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "distributed"))
from distributed_helpers import start_worker  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

WAIT = 60.0  # seconds any queue call here may wait (a loaded machine is slow to start workers)


def produce(q, count: int) -> int:
    """Enqueue elements (id, [id, -id]) for ids 0..count-1, then close the queue."""
    for k in range(count):
        q.enqueue([k, np.array([k, -k], np.float32)], timeout=WAIT)
    q.close()
    return os.getpid()


def consume(q, frozen: bool) -> tuple:
    """Dequeue batches of up to 3 until the queue is closed and empty (through a frozen graph
    when `frozen`); returns (the ids taken, checked against their vectors, the process id)."""
    step = tp.freeze(lambda: q.dequeue_up_to(3, timeout=WAIT)) if frozen else (lambda: q.dequeue_up_to(3, timeout=WAIT))
    ids = []
    while True:
        try:
            batch_ids, vectors = step()
        except OutOfRangeError:
            return ids, os.getpid()
        batch_ids = batch_ids.numpy()
        np.testing.assert_array_equal(vectors.numpy(), np.stack([batch_ids, -batch_ids], axis=1))
        ids.extend(batch_ids.tolist())


def dequeue_one(q):
    return q.dequeue(timeout=WAIT)


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=3, memory_limit="1GiB") as c:
        c.client.run(importlib.import_module, "tapeflow.distributed")  # every worker ready to take a proxy
        yield c


def test_a_producer_and_two_consumers_on_three_workers(cluster):
    producer_worker, *consumer_workers = cluster.workers
    q = tp.queue.FIFOQueue(4, ["int64", "float32"], shapes=[(), (2,)], cluster=cluster, worker=producer_worker)
    assert q.worker == producer_worker and pickle.loads(pickle.dumps(q)).name == q.name
    client = cluster.client
    consumers = [
        client.submit(consume, q, frozen, workers=[w], allow_other_workers=False, pure=False)
        for w, frozen in zip(consumer_workers, (False, True), strict=True)
    ]
    producer = client.submit(produce, q, 30, workers=[producer_worker], allow_other_workers=False, pure=False)
    producer_pid = producer.result(timeout=2 * WAIT)
    results = [c.result(timeout=2 * WAIT) for c in consumers]
    taken = [ids for ids, _ in results]
    assert sorted(taken[0] + taken[1]) == list(range(30))
    assert len({producer_pid, *(pid for _, pid in results), os.getpid()}) == 4  # four processes
    assert q.is_closed() and q.size() == 0


def test_the_client_uses_a_remote_queue_as_a_local_one(cluster):
    q = tp.queue.RandomShuffleQueue(8, 0, "float64", shapes=[(2,)], seed=3, cluster=cluster)
    q.enqueue_many(np.arange(8.0).reshape(4, 2))
    assert q.size() == 4
    assert sorted(q.dequeue_many(4, timeout=WAIT).numpy()[:, 0].tolist()) == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(ValueError, match=r"must have shape \(2,\), got \(3,\)"):
        q.enqueue(np.zeros(3))
    with pytest.raises(tp.queue.DeadlineExceededError, match="timed out"):
        q.dequeue(timeout=0.1)
    padding = tp.queue.PaddingFIFOQueue(4, "int32", shapes=[(None,)], cluster=cluster)
    padding.enqueue([1])
    padding.enqueue([2, 3])
    assert padding.dequeue_many(2, timeout=WAIT).numpy().tolist() == [[1, 0], [2, 3]]


def test_a_killed_queue_worker_is_an_error_in_every_waiter(cluster):
    before = set(cluster.workers)
    process = start_worker(cluster.client.scheduler.address)
    try:
        deadline = time.monotonic() + 60
        while not set(cluster.workers) - before:
            assert time.monotonic() < deadline, "the extra worker did not join"
            time.sleep(0.1)
        (victim,) = set(cluster.workers) - before
        q = tp.queue.FIFOQueue(2, "float32", shapes=[()], cluster=cluster, worker=victim, name="doomed")
        waiter = cluster.client.submit(
            dequeue_one, q, workers=[sorted(before)[0]], allow_other_workers=False, pure=False
        )
        box = {}

        def wait_forever():  # no timeout of its own: only the death can end it
            try:
                q.dequeue()
            except BaseException as err:  # noqa: BLE001 - handed to the test
                box["error"] = err

        thread = threading.Thread(target=wait_forever, daemon=True)
        thread.start()
        time.sleep(1.0)  # both waiters are blocked in the queue
        assert not waiter.done() and thread.is_alive()
        started = time.monotonic()
        os.kill(process.pid, signal.SIGKILL)
        thread.join(15)
        assert not thread.is_alive(), "a waiter without a timeout hung after the queue's worker died"
        assert isinstance(box["error"], UnavailableError) and "doomed: dequeue" in str(box["error"])
        with pytest.raises(UnavailableError, match=f"the worker {victim} holding the queue is gone"):
            waiter.result(timeout=30)
        assert time.monotonic() - started < 20.0
        with pytest.raises(UnavailableError, match="doomed: enqueue"):
            q.enqueue(1.0, timeout=1.0)
    finally:
        process.kill()
        process.wait(timeout=10)
