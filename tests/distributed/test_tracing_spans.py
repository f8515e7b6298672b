"""Tracing the distributed runtime's own work: each worker's replica marks its parameter
pushes and pulls (with the bytes they moved) and its compute, and the client's merged
timeline holds them on its own time axis."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(240),
]

MARGIN_NS = 20_000_000  # the clocks' alignment on one machine: the best round trip's half


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        cluster.client.wait_for_workers(2, timeout=60)
        yield cluster


def _model():
    tp.random.seed(3)
    model = tp.Sequential([tp.layers.Input((6,)), tp.layers.Dense(8, activation="relu"), tp.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _parameter_bytes(model) -> int:
    return sum(w.nbytes for w in model.get_weights())


@pytest.mark.parametrize("strategy", ["async", "sync"])
def test_pushes_and_pulls_of_both_workers_land_in_the_clients_step(cluster, strategy):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 6)).astype(np.float32), rng.normal(size=(64, 1)).astype(np.float32)
    model = _model()
    if strategy == "async":
        # a short pause after each gradient leaves batches to a replica that starts late
        distribute = tp.distributed.AsyncParameterServer(
            cluster, replicas=2, timeout=60, straggler_delay={0: 0.05, 1: 0.05}
        )
    else:
        distribute = tp.distributed.DataParallel(cluster, replicas=2, timeout=60)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, distribute=distribute)  # workers warmed up
    with tp.profiler.trace(cluster=cluster) as profile:
        with tp.profiler.phase("client_fit"):
            model.fit(x, y, batch_size=8, epochs=1, verbose=0, distribute=distribute)
    (window,) = [e for e in profile.events if e.name == "client_fit" and not e.process]
    spans = [e for e in profile.events if e.process and e.kind == "comm"]
    workers = set(cluster.workers)
    for name in ("push", "pull"):
        assert {e.process for e in spans if e.name == name} == workers, name
    # one time axis: every worker span inside the client's window, given the clocks' alignment
    assert all(window.start_ns - MARGIN_NS <= e.start_ns <= e.end_ns <= window.end_ns + MARGIN_NS for e in spans)
    size = _parameter_bytes(model)
    assert all(e.args["bytes"] == e.output_bytes == size for e in spans if e.name == "push")
    assert all(e.args["bytes"] == size for e in spans if e.name == "pull")
    pushes = [e for e in spans if e.name == "push"]
    assert len(pushes) == 8 if strategy == "async" else len(pushes) >= 8  # 8 batches; sync: a shard per replica
    steps = [e for e in profile.events if e.process and e.name == "replica_step"]
    assert {e.process for e in steps} == workers and all(e.kind == "phase" for e in steps)
    assert tp.profiler.active() is None
    assert cluster.client.run(tp.profiler.active) == {w: None for w in workers}


def test_spans_reach_the_chrome_trace_with_their_bytes(cluster, tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 6)).astype(np.float32), rng.normal(size=(32, 1)).astype(np.float32)
    model = _model()
    distribute = tp.distributed.DataParallel(cluster, replicas=2, timeout=60)  # every step has a shard per replica
    with tp.profiler.trace(tmp_path, cluster=cluster) as profile:
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, distribute=distribute)
    trace = tp.profiler.read_chrome_trace(profile.trace_path)
    pushes = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "push"]
    assert pushes and all(e["cat"] == "comm" and e["args"]["bytes"] == _parameter_bytes(model) for e in pushes)
    assert {e["args"]["replica"] for e in pushes} == {0, 1}


def test_sends_and_receives_between_placed_stages_are_traced(cluster):
    def f(x):
        with tp.device("/worker:0"):
            h = tp.exp(x)
        with tp.device("/worker:1"):
            return h * 2.0

    graph = tp.freeze(f, tp.TensorSpec((3, 5)), optimize=False)
    x = np.zeros((3, 5), np.float32)
    with tp.profiler.trace(cluster=cluster) as profile:
        with tp.profiler.phase("client_run"):
            (y,) = tp.distributed.run_placed(cluster, graph, x, timeout=60)
    np.testing.assert_allclose(y, 2.0)
    (window,) = [e for e in profile.events if e.name == "client_run" and not e.process]
    first, second = cluster.workers
    (send,) = [e for e in profile.events if e.name == "send"]
    (recv,) = [e for e in profile.events if e.name == "recv"]
    assert (send.process, recv.process) == (first, second)
    assert send.args["bytes"] == recv.args["bytes"] == 60 and send.args["to"] == "/worker:1/cpu:0"
    assert recv.args["from"] == "/worker:0/cpu:0" and send.args["value"] == recv.args["value"]
    assert all(window.start_ns - MARGIN_NS <= e.start_ns <= e.end_ns <= window.end_ns + MARGIN_NS for e in (send, recv))
