"""Pipelined model-parallel training on a real LocalCluster (worker processes on 127.0.0.1).

A 4-stage MLP runs split over 2 workers (two stages, so two devices, on each). The
reference is the same model trained in this process: the forward values of a step,
the weights and optimizer state after training, and, with several micro-batches, the
full-batch gradient from a GradientTape. Every wait is bounded, and every test has a
timeout.
"""

import os
import signal
import threading

import numpy as np
import pytest
from distributed_helpers import OPTIMIZERS

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.pipeline.compression import RELATIVE_ERROR

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(180),
    pytest.mark.slow,
]

N, BATCH = 40, 16  # batches of 16, 16 and 8 rows


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        yield cluster


def make_model(optimizer="sgd", metrics=()):
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
    model.compile(optimizer=OPTIMIZERS[optimizer](), loss=loss, metrics=list(metrics))
    return model


def data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 12)).astype(np.float32), rng.integers(0, 5, n)


def assert_same_training(a, b, rtol=2e-5, atol=2e-6):
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_allclose(wb, wa, rtol=rtol, atol=atol)
    state_a, state_b = a.optimizer.get_state(), b.optimizer.get_state()
    for value_a, value_b in zip(state_a.values(), state_b.values(), strict=True):
        np.testing.assert_allclose(value_b, value_a, rtol=rtol, atol=atol)


def test_stages_are_placed_two_per_worker(cluster):
    strategy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=2)
    model = make_model()
    x, y = data()
    model.fit(x, y, batch_size=BATCH, epochs=1, seed=1, verbose=0, distribute=strategy)
    assert len(strategy.steps) == 3
    assert all(len(s.busy) == 4 for s in strategy.steps)
    assert all(0 < s.bytes_between_workers < s.bytes_sent for s in strategy.steps)  # some transfers stay on a worker


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_forward_values_equal_single_process(cluster, micro_batches):
    x, y = data()
    model = make_model(metrics=["accuracy"])
    strategy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=micro_batches)
    np.testing.assert_allclose(
        model.predict(x, batch_size=BATCH, verbose=0, distribute=strategy),
        model.predict(x, batch_size=BATCH, verbose=0),
        rtol=1e-6,
        atol=1e-7,
    )
    expected = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    got = model.evaluate(x, y, batch_size=BATCH, verbose=0, distribute=strategy, return_dict=True)
    assert got.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6)
    first = model.compute_loss(y=tp.tensor(y), y_pred=model(x, training=True)).numpy()
    model.fit(x, y, batch_size=N, epochs=1, shuffle=False, verbose=0, distribute=strategy)
    np.testing.assert_allclose(strategy.steps[0].loss, first, rtol=1e-6)  # a training step's forward value


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("micro_batches", [1, 3])
def test_training_equals_single_process(cluster, optimizer, micro_batches):
    x, y = data()
    local, remote = make_model(optimizer, ["accuracy"]), make_model(optimizer, ["accuracy"])
    expected = local.fit(x, y, batch_size=BATCH, epochs=2, seed=3, verbose=0)
    strategy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=micro_batches)
    got = remote.fit(x, y, batch_size=BATCH, epochs=2, seed=3, verbose=0, distribute=strategy)
    if micro_batches == 1:
        assert_same_training(local, remote, rtol=1e-6, atol=1e-7)
    else:
        assert_same_training(local, remote)
    assert remote.optimizer.iterations == local.optimizer.iterations == 6
    np.testing.assert_allclose(got.history["loss"], expected.history["loss"], rtol=1e-5)
    assert got.history["accuracy"] == expected.history["accuracy"]


@pytest.mark.parametrize("micro_batches", [2, 4, 5])
def test_micro_batches_give_the_full_batch_gradient(cluster, micro_batches):
    x, y = data(n=20)
    model = make_model("sgd")
    before = [w.copy() for w in model.get_weights()]
    with tp.GradientTape() as tape:
        loss = model.compute_loss(y=tp.tensor(y), y_pred=model(x, training=True))
    expected = [g.numpy() for g in tape.gradient(loss, model.trainable_weights)]
    strategy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=micro_batches)
    model.fit(x, y, batch_size=20, epochs=1, shuffle=False, verbose=0, distribute=strategy)
    rate = float(model.optimizer.learning_rate)
    for w0, w1, g in zip(before, model.get_weights(), expected, strict=True):
        np.testing.assert_allclose((w0 - w1) / rate, g, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("compression", ["float16", "bfloat16"])
def test_compressed_transfers_move_half_the_bytes_and_stay_close(cluster, compression):
    x, y = data()
    plain, packed = make_model("sgd"), make_model("sgd")
    exact = tp.distributed.Pipeline(cluster, stages=4, micro_batches=2)
    lossy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=2, compression=compression)
    plain.fit(x, y, batch_size=BATCH, epochs=1, seed=2, verbose=0, distribute=exact)
    packed.fit(x, y, batch_size=BATCH, epochs=1, seed=2, verbose=0, distribute=lossy)
    for a, b in zip(exact.steps, lossy.steps, strict=True):
        assert 2 * b.bytes_between_workers == a.bytes_between_workers
        assert b.bytes_sent - b.bytes_between_workers == a.bytes_sent - a.bytes_between_workers  # same worker: raw
        np.testing.assert_allclose(b.loss, a.loss, rtol=8 * RELATIVE_ERROR[compression])
    for wa, wb in zip(plain.get_weights(), packed.get_weights(), strict=True):
        # 3 steps of SGD(0.1) on gradients computed from rounded activations and gradients
        np.testing.assert_allclose(wb, wa, atol=32 * RELATIVE_ERROR[compression])
    assert not np.array_equal(plain.get_weights()[0], packed.get_weights()[0])  # it did round


def test_a_graph_placed_by_hand_runs_on_the_workers_it_names(cluster):
    rng = np.random.default_rng(5)
    w0 = tp.Variable(rng.standard_normal((6, 8)).astype(np.float32), name="w0")
    w1 = tp.Variable(rng.standard_normal((8, 3)).astype(np.float32), name="w1")

    def step(x):
        with tp.GradientTape() as tape:
            with tp.device("/worker:0"):
                h = tp.tanh(x @ w0)
            with tp.device("/worker:1/cpu:0"):
                loss = tp.sum(tp.nn.relu(h @ w1))
        return (loss, h, *tape.gradient(loss, [w0, w1]))

    graph = tp.freeze(step, tp.TensorSpec((5, 6)))
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for compression, tolerance in ((None, 1e-6), ("bfloat16", 64 * RELATIVE_ERROR["bfloat16"])):
        got = tp.distributed.run_placed(cluster, graph, x, compression=compression)
        for a, b in zip(got, graph.execute([x]), strict=True):
            np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance)
    with pytest.raises(ValueError, match="worker:2"):
        g = tp.freeze(lambda x: tp.exp(x), tp.TensorSpec((2,)), optimize=False)
        g.nodes[0].device = "/worker:2/cpu:0"
        tp.distributed.run_placed(cluster, g, np.zeros(2, np.float32))


def test_bad_arguments(cluster):
    with pytest.raises(ValueError, match="stages"):
        tp.distributed.Pipeline(cluster, stages=0)
    with pytest.raises(ValueError, match="compression"):
        tp.distributed.Pipeline(cluster, stages=2, compression="int8")
    x, y = data()
    with pytest.raises(ValueError, match="5 stages need at least 5 layers"):
        make_model().fit(x, y, batch_size=8, verbose=0, distribute=tp.distributed.Pipeline(cluster, stages=5))
    with pytest.raises(ValueError, match="does not split into 16 micro-batches"):
        make_model().fit(
            x, y, batch_size=8, verbose=0, distribute=tp.distributed.Pipeline(cluster, stages=2, micro_batches=16)
        )


class KillWorker(tp.callbacks.Callback):
    """SIGKILLs the worker holding the last stages shortly after step `step` begins, from
    another thread, so that the kill lands while the step's micro-batches are in flight
    (or, on a slow machine, between two steps: the error must be the same)."""

    def __init__(self, cluster, step):
        super().__init__()
        self.cluster, self.step, self.victim, self.timer = cluster, step, None, None

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.step and self.victim is None:
            self.victim = self.cluster.workers[1]
            pid = self.cluster.client.run(os.getpid, workers=[self.victim])[self.victim]
            self.timer = threading.Timer(0.01, os.kill, (pid, signal.SIGKILL))
            self.timer.start()


@pytest.mark.timeout(240)
def test_a_worker_killed_mid_pipeline_is_a_clear_error():
    x, y = data(n=200)
    model = make_model("sgd")
    before = model.get_weights()
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        strategy = tp.distributed.Pipeline(cluster, stages=4, micro_batches=4, timeout=60)
        killer = KillWorker(cluster, step=2)
        with pytest.raises(RuntimeError, match="left the cluster") as caught:
            model.fit(x, y, batch_size=BATCH, epochs=1, seed=1, verbose=0, callbacks=[killer], distribute=strategy)
        killer.timer.join()
        assert killer.victim in str(caught.value)
        assert "/worker:1/cpu:0" in str(caught.value)
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # the epoch's start
