"""Replica inputs go to each worker under keys of its own, so Dask's memory manager never
finds two copies of one key to reduce under a long-running replica task."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.runtime.tasks import futures_of, launch_replicas, scatter_to_each

pytestmark = [pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"), pytest.mark.timeout(60)]


def _total(job, data, graphs):
    return job, float(sum(a.sum() for a in data)), graphs


def test_each_worker_holds_its_own_copy_and_each_task_reads_the_one_beside_it():
    with tp.distributed.Cluster(n_workers=2) as cluster:
        client, workers = cluster.client, cluster.workers
        arrays = [np.arange(6.0), np.ones(3)]
        data = scatter_to_each(client, arrays, workers, timeout=30)
        (graphs,) = scatter_to_each(client, ["graph bytes"], workers, timeout=30)
        futures = futures_of([data, graphs])
        assert len(futures) == 3 * len(workers) and len({f.key for f in futures}) == len(futures)
        held = client.who_has(futures)
        assert all(len(where) == 1 for where in held.values())  # no key on two workers
        for w in workers:
            assert {held[p.on(w).key][0] for p in [*data, graphs]} == {w}
        tasks = launch_replicas(client, _total, [0, 1], workers, (data, graphs))
        assert [t.result(timeout=30) for t in tasks] == [(0, 18.0, "graph bytes"), (1, 18.0, "graph bytes")]
        assert {f.key for f in futures} == set(client.who_has(futures))  # nothing moved or copied
        assert all(len(where) == 1 for where in client.who_has(futures).values())
