"""Pipeline stages handing micro-batch activations and gradients to each other through
cluster queues (`transport="queues"`) on a real LocalCluster (worker processes on
127.0.0.1): the same training as the actor calls, to float tolerance, and a killed worker
a clear error. Every wait is bounded, and every test has a timeout.
"""

import os
import signal
import threading

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(240),
    pytest.mark.slow,
]

N, BATCH = 40, 16  # batches of 16, 16 and 8 rows


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        yield cluster


def make_model(metrics=()):
    tp.random.seed(11)
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
    model.compile(optimizer=tp.optimizers.Adam(0.01), loss=loss, metrics=list(metrics))
    return model


def data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 12)).astype(np.float32), rng.integers(0, 5, n)


def train(cluster, transport, compression=None, micro_batches=3):
    model = make_model(["accuracy"])
    strategy = tp.distributed.Pipeline(
        cluster, stages=4, micro_batches=micro_batches, compression=compression, transport=transport, timeout=60
    )
    x, y = data()
    history = model.fit(x, y, batch_size=BATCH, epochs=2, seed=3, verbose=0, distribute=strategy)
    return model, strategy, history


@pytest.mark.parametrize("compression", [None, "bfloat16"])
def test_queues_train_as_actor_calls_do(cluster, compression):
    by_calls, calls, calls_history = train(cluster, "actors", compression)
    by_queues, queues, queues_history = train(cluster, "queues", compression)
    for a, b in zip(by_calls.get_weights(), by_queues.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    for a, b in zip(by_calls.optimizer.get_state().values(), by_queues.optimizer.get_state().values(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    assert by_queues.optimizer.iterations == 6
    np.testing.assert_allclose([s.loss for s in queues.steps], [s.loss for s in calls.steps], rtol=1e-6)
    assert [s.bytes_sent for s in queues.steps] == [s.bytes_sent for s in calls.steps]
    assert queues_history.history["accuracy"] == calls_history.history["accuracy"]
    assert "transport='queues'" in repr(queues)


def test_queues_carry_the_forward_pass_of_predict_and_evaluate(cluster):
    x, y = data()
    model = make_model(["accuracy"])
    strategy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=4, transport="queues")
    np.testing.assert_allclose(
        model.predict(x, batch_size=BATCH, verbose=0, distribute=strategy),
        model.predict(x, batch_size=BATCH, verbose=0),
        rtol=1e-6,
        atol=1e-7,
    )
    expected = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    got = model.evaluate(x, y, batch_size=BATCH, verbose=0, distribute=strategy, return_dict=True)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6)


def test_an_unknown_transport_is_refused(cluster):
    with pytest.raises(ValueError, match=r"Pipeline: transport must be one of \['actors', 'queues'\].*'rpc'"):
        tp.distributed.Pipeline(cluster, stages=2, transport="rpc")


class KillWorker(tp.callbacks.Callback):
    """SIGKILLs the worker holding the last stages shortly after step `step` begins."""

    def __init__(self, cluster, step):
        super().__init__()
        self.cluster, self.step, self.victim, self.timer = cluster, step, None, None

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.step and self.victim is None:
            self.victim = self.cluster.workers[1]
            pid = self.cluster.client.run(os.getpid, workers=[self.victim])[self.victim]
            self.timer = threading.Timer(0.01, os.kill, (pid, signal.SIGKILL))
            self.timer.start()


def test_a_worker_killed_while_values_queue_is_a_clear_error():
    x, y = data(n=200)
    model = make_model()
    before = model.get_weights()
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        strategy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=4, transport="queues", timeout=60)
        killer = KillWorker(cluster, step=2)
        with pytest.raises(RuntimeError, match="left the cluster") as caught:
            model.fit(x, y, batch_size=BATCH, epochs=1, seed=1, verbose=0, callbacks=[killer], distribute=strategy)
        killer.timer.join()
        assert killer.victim in str(caught.value)
        assert "/worker:1/cpu:0" in str(caught.value)
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # the epoch's start
