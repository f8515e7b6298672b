"""Calls from a task to an actor on its own worker skip the network; calls to an actor
elsewhere go through Dask as before, with the same answers. Local workers keep glibc's
adaptive allocator (Dask's trimming default made every training step fault its arrays in)."""

import os

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.runtime.local_actor import in_process

pytestmark = [pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"), pytest.mark.timeout(60)]


class Holder:
    """An actor keeping one array; `swap` answers with the array it held."""

    def __init__(self):
        self.array = np.zeros(3)

    async def swap(self, array):
        held, self.array = self.array, array
        return held, id(array)


def call_twice(actor, array):
    """(type of the handle used, the two answers, whether the second saw the very same array object)."""
    handle = in_process(actor)
    first = handle.swap(array).result(timeout=10)
    second = handle.swap(np.ones(3)).result(timeout=10)
    return type(handle).__name__, first[0].tolist(), second[0].tolist(), first[1] == id(array)


def test_a_task_calls_an_actor_on_its_own_worker_directly_and_others_through_dask():
    with tp.distributed.Cluster(n_workers=2) as cluster:
        here, there = cluster.workers
        client = cluster.client
        actor = client.submit(Holder, actor=True, workers=[here], allow_other_workers=False).result(timeout=10)
        array = np.arange(3.0)
        local = client.submit(call_twice, actor, array, workers=[here], pure=False).result(timeout=10)
        remote = client.submit(call_twice, actor, array, workers=[there], pure=False).result(timeout=10)
    assert local == ("_Direct", [0.0, 0.0, 0.0], [0.0, 1.0, 2.0], True)
    # The remote task's call arrives after the local one's: it finds what that one left.
    assert remote[0] == "Actor" and remote[1:3] == ([1.0, 1.0, 1.0], [0.0, 1.0, 2.0])


def test_outside_a_worker_the_handle_is_returned_unchanged():
    holder = Holder()
    assert in_process(holder) is holder


def test_local_workers_keep_glibc_adaptive_trimming(monkeypatch):
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with tp.distributed.Cluster(n_workers=1) as cluster:
        seen = list(cluster.client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_").values())
    assert seen == [None]
