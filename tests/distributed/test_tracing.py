"""Tracing on a cluster: the workers' graph nodes join the client's timeline, on its clock."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.tracing import wall_offsets

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(180),
]


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        cluster.client.wait_for_workers(2, timeout=60)
        yield cluster


def _model():
    model = tp.Sequential([tp.layers.Input((6,)), tp.layers.Dense(8, activation="relu"), tp.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_workers_trace_their_replicas_on_the_clients_clock(cluster, tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 6)).astype(np.float32), rng.normal(size=(64, 1)).astype(np.float32)
    model = _model()
    strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=60)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, distribute=strategy)  # workers warmed up
    with tp.profiler.trace(tmp_path, cluster=cluster) as profile:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, distribute=strategy)
        model.predict(x, verbose=0)  # and the client's own part
    workers = set(cluster.workers)
    remote = [e for e in profile.events if e.process]
    assert {e.process for e in remote} == workers
    assert any(e.kind == "node" and e.op in ("matmul", "fused_matmul") for e in remote)
    # on the client's axis, inside the recording (a margin for the clocks' alignment)
    margin = 50_000_000
    assert all(profile.started_ns - margin <= e.start_ns <= e.end_ns <= profile.stopped_ns + margin for e in remote)
    trace = tp.profiler.read_chrome_trace(profile.trace_path)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"client", *workers}
    assert tp.profiler.active() is None
    assert cluster.client.run(tp.profiler.active) == {w: None for w in workers}


def test_clock_offsets_of_workers_on_this_machine_are_small(cluster):
    offsets = wall_offsets(cluster.client, cluster.workers)
    assert set(offsets) == set(cluster.workers)
    assert all(abs(v) < 50_000_000 for v in offsets.values())  # one machine, one wall clock


def test_a_cluster_argument_that_is_not_a_cluster_is_refused():
    with pytest.raises(TypeError, match="cluster must be a tapeflow.distributed.Cluster"):
        tp.profiler.start(cluster="tcp://127.0.0.1:8786")
    assert tp.profiler.active() is None
