"""`predict` and `evaluate` with `distribute=` when a worker dies or stops answering, and on
no rows, on a real LocalCluster (worker processes on 127.0.0.1).

The reference is the same model run in this process. A worker of the test's own (a `dask
worker` without a nanny) is killed while its part waits in its queue (a sleeping task holds
its one thread), or between two batches of a pipeline, and another such worker is started
as its replacement, or none; a frozen worker is stopped with SIGSTOP and always continued.
Every wait is bounded, and every test has a timeout.
"""

import importlib
import os
import re
import signal
import time

import numpy as np
import pytest
from distributed_helpers import KillWhenQueued, occupy, start_worker, worker_pid

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.pipeline.stages import StageGroup

pytestmark = [pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]")]

N, BATCH = 40, 8


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        yield cluster


def warm(cluster):
    """Import tapeflow on every worker, which would otherwise take part of a short timeout."""
    cluster.client.run(importlib.import_module, "tapeflow.distributed")


@pytest.fixture
def full(cluster):
    """The module's cluster with its 2 workers."""
    cluster.client.wait_for_workers(2, timeout=60)
    warm(cluster)
    return cluster


@pytest.fixture(scope="module")
def lonely():
    """A cluster of one worker with a nanny, which tests join with workers of their own."""
    with tp.distributed.Cluster(n_workers=1, memory_limit="1GiB") as cluster:
        yield cluster


class Joined:
    """`cluster` joined by a worker process of the test's own (`victim`), next to its
    `survivor`; `replace()` kills the victim and starts another worker, `kill()` only kills."""

    def __init__(self, cluster):
        self.cluster, self.address = cluster, cluster.client.scheduler.address
        (self.survivor,) = cluster.workers
        self.processes = [start_worker(self.address)]
        cluster.client.wait_for_workers(2, timeout=60)
        warm(cluster)
        (self.victim,) = set(cluster.workers) - {self.survivor}

    def kill(self):
        self.processes[0].kill()

    def replace(self):
        self.kill()
        self.processes.append(start_worker(self.address))

    def close(self):
        for process in self.processes:
            process.kill()
            process.wait(timeout=10)
        deadline = time.monotonic() + 30
        while len(self.cluster.workers) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)


@pytest.fixture
def joined(lonely):
    """`lonely` with a worker of the test's own (see `Joined`); every process it starts is killed at the end."""
    joined = Joined(lonely)
    try:
        yield joined
    finally:
        joined.close()


def make_model():
    tp.random.seed(7)
    model = tp.Sequential(
        [
            tp.layers.Dense(16, activation="tanh"),
            tp.layers.Dense(16, activation="relu"),
            tp.layers.Dense(16, activation="tanh"),
            tp.layers.Dense(5),
        ]
    )
    model(np.zeros((1, 12), np.float32))
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=tp.optimizers.SGD(0.1), loss=loss, metrics=["accuracy"])
    return model


def data(n=N):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 12)).astype(np.float32), rng.integers(0, 5, n)


def run(model, method, x, y, strategy=None):
    if method == "predict":
        return model.predict(x, batch_size=BATCH, verbose=0, distribute=strategy)
    return model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True, distribute=strategy)


def assert_same(got, expected):
    if isinstance(expected, dict):
        assert got.keys() == expected.keys()
        for key in expected:
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, err_msg=key)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def kill_between_batches(monkeypatch, batch: int, kill) -> list:
    """Make a pipeline's client call `kill()` (which kills or freezes a worker) just before it
    runs `batch`, once; the returned list gets the batch when it did."""
    step, killed = StageGroup.step, []

    def step_after_a_kill(group, index, *args):
        if index == batch and not killed:
            kill()
            killed.append(index)
        return step(group, index, *args)

    monkeypatch.setattr(StageGroup, "step", step_after_a_kill)
    return killed


# ------------------------------------------------------------------ a worker killed, then replaced
@pytest.mark.slow  # worker processes are started and killed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["predict", "evaluate"])
def test_the_part_of_a_killed_worker_runs_again_once_it_is_replaced(joined, method):
    x, y = data()
    model = make_model()
    expected = run(model, method, x, y)
    strategy = tp.distributed.DataParallel(joined.cluster, replicas=2, timeout=60)
    busy = occupy(joined.cluster, joined.victim)
    killer = KillWhenQueued(joined.cluster, joined.victim, f"_{method}_part", joined.replace)
    killer.start()
    try:
        got = run(model, method, x, y, strategy)
    finally:
        killer.join(timeout=65)
        joined.cluster.client.cancel(busy, force=True)
    assert killer.killed and joined.victim not in joined.cluster.workers
    assert_same(got, expected)


@pytest.mark.slow  # worker processes are started and killed
@pytest.mark.timeout(180)
def test_predict_right_after_a_kill_waits_for_the_replacement(joined):
    x, _ = data()
    model = make_model()
    strategy = tp.distributed.DataParallel(joined.cluster, replicas=2, timeout=60)
    joined.replace()
    got = model.predict(x, batch_size=BATCH, verbose=0, distribute=strategy)
    assert joined.victim not in joined.cluster.workers
    assert_same(got, model.predict(x, batch_size=BATCH, verbose=0))


@pytest.mark.slow  # worker processes are started and killed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["predict", "evaluate"])
def test_a_pipeline_goes_on_from_the_batch_a_killed_worker_held(joined, monkeypatch, method):
    x, y = data()
    model = make_model()
    expected = run(model, method, x, y)
    killed = kill_between_batches(monkeypatch, batch=2, kill=joined.replace)
    strategy = tp.distributed.Pipeline(joined.cluster, stages=4, micro_batches=2, timeout=60)
    got = run(model, method, x, y, strategy)
    assert killed == [2] and joined.victim not in joined.cluster.workers
    assert_same(got, expected)


# ------------------------------------------------------------------ a worker killed, not replaced
@pytest.mark.slow  # worker processes are started and killed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["DataParallel", "Pipeline"])
def test_a_killed_worker_that_is_not_replaced_is_named_in_a_clear_error(joined, monkeypatch, kind):
    x, _ = data()
    model = make_model()
    cluster, victim, survivor = joined.cluster, joined.victim, joined.survivor
    busy = killer = None
    try:
        if kind == "DataParallel":
            strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=3)
            busy = occupy(cluster, victim)
            killer = KillWhenQueued(cluster, victim, "_predict_part", joined.kill)
            killer.start()
            lost = f"workers ['{victim}'] left the cluster; inference"
        else:
            strategy = tp.distributed.Pipeline(cluster, stages=4, timeout=3)
            index = 0 if victim < survivor else 1
            stages = [f"/worker:{index}/cpu:0", f"/worker:{index}/cpu:1"]
            kill_between_batches(monkeypatch, batch=1, kill=joined.kill)
            lost = f"workers ['{victim}'] holding pipeline stages {stages} left the cluster during batch 1; pipelined"
            lost += " inference"
        with pytest.raises(RuntimeError) as caught:
            model.predict(x, batch_size=BATCH, verbose=0, distribute=strategy)
    finally:
        if killer is not None:
            killer.join(timeout=35)
        if busy is not None:
            cluster.client.cancel(busy, force=True)
    assert str(caught.value) == (
        f"predict: {lost} needs 2 workers but 1 are alive ({survivor}), and no more joined within 3s"
    )


# ------------------------------------------------------------------ no rows
@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["predict", "evaluate"])
def test_no_rows_raise_the_error_they_raise_without_distribute(full, method):
    x, y = np.zeros((0, 12), np.float32), np.zeros(0, np.int64)
    model = make_model()
    with pytest.raises(ValueError) as local:
        run(model, method, x, y)
    assert "the data is empty" in str(local.value)
    for strategy in (
        tp.distributed.DataParallel(full, replicas=2),
        tp.distributed.Pipeline(full, stages=4),
        tp.distributed.AsyncParameterServer(full, replicas=2),
    ):
        with pytest.raises(ValueError, match=f"^{re.escape(str(local.value))}$"):
            run(model, method, x, y, strategy)


# ------------------------------------------------------------------ a frozen stage
class FreezeWorker(tp.callbacks.Callback):
    """SIGSTOPs `pid` as training batch `batch` begins: the worker stays in the cluster but
    answers nothing (the test continues it)."""

    def __init__(self, pid: int, batch: int):
        super().__init__()
        self.pid, self.batch, self.frozen = pid, batch, False

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.batch and not self.frozen:
            os.kill(self.pid, signal.SIGSTOP)
            self.frozen = True


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "method, frozen", [("fit", 0), ("fit", 1), ("predict", 1)], ids=["fit-first-stages", "fit-last-stages", "predict"]
)
def test_the_timeout_names_the_frozen_stage_not_a_healthy_one(full, monkeypatch, method, frozen):
    x, y = data()
    model = make_model()
    workers = full.workers
    victim, healthy = workers[frozen], workers[1 - frozen]
    freezer = FreezeWorker(worker_pid(full, victim), batch=1)
    strategy = tp.distributed.Pipeline(full, stages=4, micro_batches=2, timeout=5)
    try:
        with pytest.raises(TimeoutError) as caught:
            if method == "fit":
                model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[freezer], distribute=strategy)
            else:
                kill_between_batches(monkeypatch, batch=1, kill=lambda: freezer.on_train_batch_begin(1))
                model.predict(x, batch_size=BATCH, verbose=0, distribute=strategy)
    finally:
        if freezer.frozen:
            os.kill(freezer.pid, signal.SIGCONT)
    silent = ", ".join(f"the stage /worker:{frozen}/cpu:{j} on {victim}" for j in (0, 1))
    assert str(caught.value) == f"{method}: step 1 did not complete within 5s (no answer within 2s from {silent})"
    assert healthy not in str(caught.value)
