"""Asynchronous parameter-server training on a real LocalCluster (worker processes on 127.0.0.1).

The references are single-process: with one replica, training must equal single-process
`fit`; with two, every applied update must equal one single-process optimizer step on
its batch, with the gradient taken at the parameter versions the replica pulled (a
replay from the recorded steps); and on Fashion-MNIST async training must reach the
single-process accuracy minus 1 point in the same number of epochs. Every wait is
bounded, and every test has a timeout.
"""

import numpy as np
import pytest
from distributed_helpers import OPTIMIZERS, Recorder

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.parameters.variable_blocks import split_variables

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(120),
]

N, BATCH = 40, 15  # batches of 15, 15 and 10 rows


@pytest.fixture(scope="module")
def shared_cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        yield cluster


@pytest.fixture
def cluster(shared_cluster):
    """The module's cluster with both workers up (a nanny may be restarting one)."""
    shared_cluster.client.wait_for_workers(2, timeout=60)
    return shared_cluster


def twins(optimizer, metrics=(), n=2):
    """Compiled copies of one MLP with the same initial weights."""
    models = []
    for _ in range(n):
        tp.random.seed(7)
        model = tp.Sequential([tp.layers.Dense(16, activation="relu"), tp.layers.Dense(5)])
        model(np.zeros((1, 12), np.float32))
        loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=OPTIMIZERS[optimizer](), loss=loss, metrics=list(metrics))
        models.append(model)
    return models


def data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 12)).astype(np.float32), rng.integers(0, 5, n)


def assert_same_weights(a, b, rtol=2e-5, atol=2e-6):
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_allclose(wa, wb, rtol=rtol, atol=atol)


# ------------------------------------------------------------------ one replica: single-process training
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_one_replica_equals_single_process_training(cluster, optimizer):
    single, spread = twins(optimizer, metrics=["accuracy"])
    x, y = data()
    x_val, y_val = data(n=24, seed=1)
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=1)
    runs = []
    for model, distribute in ((single, None), (spread, strategy)):
        recorder = Recorder(epoch_logs=False)
        history = model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=2,
            seed=3,
            validation_data=(x_val, y_val),
            callbacks=[recorder],
            verbose=0,
            distribute=distribute,
        )
        runs.append((history.history, recorder.calls))
    (expected, expected_calls), (history, calls) = runs
    assert calls == expected_calls
    for key, values in expected.items():
        np.testing.assert_allclose(history[key], values, rtol=1e-5, err_msg=key)
    assert history["staleness_mean"] == history["staleness_max"] == history["updates_dropped"] == [0.0, 0.0]
    assert_same_weights(spread, single)
    assert spread.optimizer.iterations == single.optimizer.iterations == 6
    steps = strategy.steps
    assert [(s.batch, s.step, s.staleness) for s in steps] == [(b, e * 3 + b, 0) for e in range(2) for b in range(3)]


def test_state_written_by_the_forward_pass_travels_with_each_update(cluster):
    models = []
    for _ in range(2):
        tp.random.seed(7)
        model = tp.Sequential([tp.layers.BatchNormalization(), tp.layers.Dense(5)])
        model(np.zeros((1, 12), np.float32))
        model.compile(optimizer="sgd", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        models.append(model)
    x, y = data()
    x = x * 3.0 + 1.0
    models[0].fit(x, y, batch_size=BATCH, epochs=2, seed=1, verbose=0)
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=1)
    models[1].fit(x, y, batch_size=BATCH, epochs=2, seed=1, verbose=0, distribute=strategy)
    assert_same_weights(models[1], models[0])
    moving_mean = [w for w in models[1].non_trainable_weights if "moving_mean" in w.name][0]
    assert np.abs(moving_mean.numpy()).max() > 0.005


# ------------------------------------------------------------------ two replicas: staleness and replay
def replay(model, steps, x, y, batch_size):
    """Single-process replay of the applied updates of one unshuffled epoch: each in step
    order, its gradient taken on its batch at the recorded versions of each shard's
    variables, applied to the current weights with the model's optimizer."""
    variables = model.trainable_weights
    shapes = [v.shape for v in variables]
    blocks = split_variables(shapes, n_shards=2, row_block_bytes=1 << 20)
    shard_of = {b.variable: sorted({c.shard for c in blocks}).index(b.shard) for b in blocks}
    versions = {0: model.get_weights()}
    for record in sorted((s for s in steps if s.applied), key=lambda s: s.step):
        current = versions[record.step]
        pulled = [versions[record.pulled[shard_of[i]]][i] for i in range(len(variables))]
        model.set_weights(pulled)
        rows = slice(record.batch * batch_size, (record.batch + 1) * batch_size)
        with tp.GradientTape() as tape:
            loss = model.loss(tp.tensor(y[rows]), model(tp.tensor(x[rows]), training=True))
        grads = tape.gradient(loss, variables)
        np.testing.assert_allclose(float(loss), record.loss, rtol=1e-5)
        model.set_weights(current)
        model.optimizer.apply_gradients(zip(grads, variables, strict=True))
        versions[record.step + 1] = model.get_weights()


def test_two_replicas_measure_staleness_and_apply_each_update_as_recorded(cluster):
    single, spread = twins("adam")
    n, batch = 300, 10
    x, y = data(n=n)
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=2)
    history = spread.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, distribute=strategy)

    steps = strategy.steps
    assert sorted(s.batch for s in steps) == list(range(n // batch))  # each batch once
    assert sorted(s.step for s in steps) == list(range(n // batch))  # none dropped, steps in order
    assert {s.replica for s in steps} == {0, 1}
    assert all(s.staleness == s.step - min(s.pulled) >= 0 for s in steps)
    assert any(s.staleness > 0 for s in steps)
    staleness = [s.staleness for s in steps]
    assert history.history["staleness_mean"] == [pytest.approx(np.mean(staleness))]
    assert history.history["staleness_max"] == [max(staleness)]
    assert history.history["updates_dropped"] == [0.0]
    assert np.mean(staleness) <= 2.0  # about replicas - 1 when both run at the same speed

    replay(single, steps, x, y, batch)
    assert_same_weights(spread, single, rtol=1e-4, atol=1e-5)


def test_a_staleness_bound_drops_and_counts_stale_updates(cluster):
    single, spread = twins("sgd")
    n, batch = 200, 10
    x, y = data(n=n)
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=2, staleness_bound=0, straggler_delay={1: 0.05})
    history = spread.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, distribute=strategy)

    steps = strategy.steps
    dropped = [s for s in steps if not s.applied]
    assert sorted(s.batch for s in steps) == list(range(n // batch))
    assert dropped and all(s.staleness > 0 for s in dropped)
    assert all(s.staleness == 0 for s in steps if s.applied)
    assert sorted(s.step for s in steps if s.applied) == list(range(n // batch - len(dropped)))
    assert history.history["updates_dropped"] == [float(len(dropped))]
    assert spread.optimizer.iterations == n // batch - len(dropped)

    replay(single, steps, x, y, batch)
    assert_same_weights(spread, single, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ convergence
@pytest.mark.timeout(240)
def test_async_training_converges_to_single_process_accuracy_on_fashion_mnist(cluster):
    try:
        (x, y), (x_test, y_test) = tp.datasets.mnist.load_data("fashion")
    except FileNotFoundError:
        pytest.skip("Fashion-MNIST is not installed")
    rows, epochs, batch = 10_000, 5, 64
    x = x[:rows].reshape(-1, 784).astype(np.float32) / 255
    y = y[:rows]
    x_test = x_test.reshape(-1, 784).astype(np.float32) / 255  # all 10k rows: a 2k-row accuracy varies by ~1 point
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=2)
    accuracy = []
    for distribute in (None, strategy):
        tp.random.seed(1)
        model = tp.Sequential([tp.layers.Dense(128, activation="relu"), tp.layers.Dense(10)])
        model(np.zeros((1, 784), np.float32))
        schedule = tp.schedules.CosineDecay(1e-3, decay_steps=epochs * rows // batch, alpha=0.05)  # a steady end
        loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=tp.optimizers.Adam(schedule), loss=loss, metrics=["accuracy"])
        model.fit(x, y, batch_size=batch, epochs=epochs, seed=0, verbose=0, distribute=distribute)
        accuracy.append(model.evaluate(x_test, y_test, batch_size=1000, verbose=0, return_dict=True)["accuracy"])
    single, spread = accuracy
    assert single > 0.8
    assert spread >= single - 0.01, f"async accuracy {spread:.4f} vs single-process {single:.4f}"
    assert np.mean([s.staleness for s in strategy.steps]) > 0.2


# ------------------------------------------------------------------ bad input and failures
def test_bad_arguments_are_value_errors(cluster):
    with pytest.raises(ValueError, match=r"3 replicas need 3 workers, but the cluster has 2"):
        tp.distributed.AsyncParameterServer(cluster, replicas=3)
    with pytest.raises(ValueError, match="replicas must be an integer >= 1"):
        tp.distributed.AsyncParameterServer(cluster, replicas=0)
    with pytest.raises(ValueError, match="AsyncParameterServer: staleness_bound must be an integer >= 0, got -1"):
        tp.distributed.AsyncParameterServer(cluster, staleness_bound=-1)
    with pytest.raises(ValueError, match="AsyncParameterServer: timeout"):
        tp.distributed.AsyncParameterServer(cluster, timeout=0)
    with pytest.raises(ValueError, match=r"straggler_delay keys must be replica numbers 0..1, got 2"):
        tp.distributed.AsyncParameterServer(cluster, straggler_delay={2: 1.0})


class Unfreezable(tp.Model):
    def __init__(self):
        super().__init__()
        self.dense = tp.layers.Dense(5)

    def call(self, x, training=None):
        if float(tp.sum(x)) > 0:  # a traced value escapes into Python: the FreezeError names this file
            return self.dense(x)
        return self.dense(-x)


def test_unsupported_models_and_inputs_are_clear_errors(cluster):
    x, y = data()
    strategy = tp.distributed.AsyncParameterServer(cluster)
    model = Unfreezable()
    model.compile(optimizer="sgd", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(tp.FreezeError, match="test_async_ps.py"):
        model.fit(x, y, batch_size=BATCH, verbose=0, distribute=strategy)


def test_a_replica_that_does_not_answer_ends_fit_with_a_timeout(cluster):
    (model,) = twins("sgd", n=1)
    x, y = data()
    weights = model.get_weights()
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=1, timeout=1.0, straggler_delay={0: 4.0})
    with pytest.raises(TimeoutError, match="no update was committed within 1s"):
        model.fit(x, y, batch_size=BATCH, verbose=0, distribute=strategy)
    for before, after in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)  # the failed epoch left the model as it was


def pipeline(x, y):
    """A shuffled, batched Dataset whose last batch is short and whose shuffle moves on each epoch."""
    return tp.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=4).batch(BATCH)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_replica_on_a_dataset_equals_single_process_training(cluster, optimizer):
    single, spread = twins(optimizer, metrics=["accuracy"])
    x, y = data()
    histories = [
        model.fit(pipeline(x, y), epochs=2, verbose=0, distribute=distribute).history
        for model, distribute in ((single, None), (spread, tp.distributed.AsyncParameterServer(cluster, replicas=1)))
    ]
    for key, values in histories[0].items():
        np.testing.assert_allclose(histories[1][key], values, rtol=2e-5, err_msg=key)
    assert_same_weights(spread, single)


def test_two_replicas_on_a_dataset_apply_every_batch_once(cluster):
    (model,) = twins("sgd", n=1)
    x, y = data()
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=2)
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(pipeline(x, y), epochs=2, verbose=0, distribute=strategy)
    assert len(history.history["loss"]) == 2
    batches = [(s.batch, s.step) for s in strategy.steps]
    assert sorted(b for b, _ in batches[:3]) == sorted(b for b, _ in batches[3:]) == [0, 1, 2]
    assert sorted(s for _, s in batches) == list(range(6))
    assert {s.replica for s in strategy.steps} <= {0, 1}
    assert all(not np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
