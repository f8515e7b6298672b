"""Synchronous data-parallel training on a real LocalCluster (worker processes on 127.0.0.1).

The reference is single-process training in the same test: with no backup workers the
weights, optimizer state and History must equal single-process `fit` on the same batches;
with a backup worker, they must equal single-process steps on exactly the rows of the
shards each step applied. Every wait is bounded, and every test has a timeout.
"""

import os

import numpy as np
import pytest
from distributed_helpers import OPTIMIZERS, Recorder

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.sync.epoch_plan import EpochPlan

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(120),
]

N, BATCH = 40, 15  # batches of 15, 15 and 10 rows: unequal shards


@pytest.fixture(scope="module")
def shared_cluster():
    with tp.distributed.Cluster(n_workers=3, memory_limit="1GiB") as cluster:
        yield cluster


@pytest.fixture
def cluster(shared_cluster):
    """The module's cluster with all 3 workers up (a nanny may be restarting one that an
    earlier test pushed past its memory limit)."""
    shared_cluster.client.wait_for_workers(3, timeout=60)
    return shared_cluster


# ------------------------------------------------------------------ models and data
def mlp():
    return tp.Sequential([tp.layers.Dense(16, activation="relu"), tp.layers.Dense(5)]), (12,)


def cnn():
    layers = [
        tp.layers.Conv2D(4, 3, activation="relu"),
        tp.layers.MaxPooling2D(2),
        tp.layers.Flatten(),
        tp.layers.Dense(5),
    ]
    return tp.Sequential(layers), (8, 8, 1)


def lstm():
    return tp.Sequential([tp.layers.LSTM(8), tp.layers.Dense(5)]), (6, 4)


def data(shape, n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, 5, n)


def twins(architecture, optimizer, metrics=()):
    """Two compiled copies of one model with the same initial weights."""
    models = []
    for _ in range(2):
        tp.random.seed(7)
        model, shape = architecture()
        model(np.zeros((1, *shape), np.float32))
        loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=OPTIMIZERS[optimizer](), loss=loss, metrics=list(metrics))
        models.append(model)
    return models, shape


def assert_same_training(a, b):
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_allclose(wa, wb, rtol=2e-5, atol=2e-6)
    state_a, state_b = a.optimizer.get_state(), b.optimizer.get_state()  # keys differ by layer names only
    assert [k.split("/")[-1] for k in state_a] == [k.split("/")[-1] for k in state_b]
    for key, value_a, value_b in zip(state_a, state_a.values(), state_b.values(), strict=True):
        np.testing.assert_allclose(value_a, value_b, rtol=2e-5, atol=2e-6, err_msg=key)


# ------------------------------------------------------------------ equality with one process
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("architecture", [mlp, cnn, lstm], ids=["mlp", "cnn", "lstm"])
def test_sync_training_equals_single_process(cluster, architecture, optimizer):
    (single, spread), shape = twins(architecture, optimizer)
    x, y = data(shape)
    expected = single.fit(x, y, batch_size=BATCH, epochs=2, seed=3, verbose=0)
    strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=30)
    history = spread.fit(x, y, batch_size=BATCH, epochs=2, seed=3, verbose=0, distribute=strategy)
    assert_same_training(spread, single)
    np.testing.assert_allclose(history.history["loss"], expected.history["loss"], rtol=1e-5)
    assert [s.step for s in strategy.steps] == list(range(6))
    assert all(sorted(s.applied) == [0, 1] and s.dropped == () for s in strategy.steps)


def test_row_sharded_variables_train_as_whole_ones(cluster):
    (single, spread), shape = twins(mlp, "adam")
    x, y = data(shape)
    single.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    strategy = tp.distributed.DataParallel(cluster, replicas=2, row_block_bytes=64, timeout=30)
    spread.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, distribute=strategy)
    assert_same_training(spread, single)


def test_callbacks_metrics_validation_and_history_as_in_one_process(cluster):
    (single, spread), shape = twins(mlp, "momentum", metrics=["accuracy"])
    x, y = data(shape)
    x_val, y_val = data(shape, n=24, seed=1)
    runs = []
    for model, distribute in ((single, None), (spread, tp.distributed.DataParallel(cluster, replicas=3))):
        recorder = Recorder()
        history = model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=2,
            seed=5,
            validation_data=(x_val, y_val),
            callbacks=[recorder],
            verbose=0,
            distribute=distribute,
        )
        runs.append((history, recorder.calls))
    (expected, expected_calls), (history, calls) = runs
    assert calls == expected_calls
    assert sorted(history.history) == sorted(expected.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    for key, values in expected.history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-5, err_msg=key)
    assert_same_training(spread, single)
    np.testing.assert_allclose(
        spread.predict(x_val, distribute=distribute), single.predict(x_val), rtol=1e-5, atol=1e-6
    )


class InterruptAfterEpoch(tp.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt


def test_an_interrupted_distributed_fit_resumes_from_its_checkpoint_exactly(cluster, tmp_path):
    def named_mlp():
        return tp.Sequential([tp.layers.Dense(16, activation="relu", name="a"), tp.layers.Dense(5, name="b")]), (12,)

    (single, first), shape = twins(named_mlp, "adam")
    (resumed, _), _ = twins(named_mlp, "adam")
    x, y = data(shape)
    single.fit(x, y, batch_size=BATCH, epochs=3, seed=2, verbose=0)
    strategy = tp.distributed.DataParallel(cluster, replicas=2)
    backup = tp.io.BackupAndRestore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        first.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=3,
            seed=2,
            verbose=0,
            distribute=strategy,
            callbacks=[backup, InterruptAfterEpoch(1)],
        )
    history = resumed.fit(x, y, batch_size=BATCH, epochs=3, seed=2, verbose=0, distribute=strategy, callbacks=[backup])
    assert history.epoch == [2]
    assert_same_training(resumed, single)


def test_state_written_by_the_forward_pass_is_averaged_over_shards(cluster):
    models = []
    for _ in range(2):
        tp.random.seed(7)
        model = tp.Sequential([tp.layers.BatchNormalization(), tp.layers.Dense(5)])
        model(np.zeros((1, 12), np.float32))
        model.compile(optimizer="sgd", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        models.append(model)
    x, y = data((12,))
    x = x * 3.0 + 1.0
    models[0].fit(x, y, batch_size=N, epochs=1, verbose=0)
    models[1].fit(x, y, batch_size=N, epochs=1, verbose=0, distribute=tp.distributed.DataParallel(cluster))
    # One step on the raw inputs: the shard-weighted mean of the shards' moving means is the batch's.
    mean = [w for w in models[1].non_trainable_weights if "moving_mean" in w.name][0]
    expected = [w for w in models[0].non_trainable_weights if "moving_mean" in w.name][0]
    np.testing.assert_allclose(mean.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(mean.numpy()).max() > 0.005


def test_predict_splits_the_rows_over_the_workers_for_several_inputs_and_outputs(cluster):
    tp.random.seed(3)
    a, b = tp.layers.Input((4,)), tp.layers.Input((3,))
    joined = tp.layers.Concatenate()([tp.layers.Dense(5)(a), b])
    model = tp.Model([a, b], [tp.layers.Dense(2)(joined), tp.layers.Dense(1)(joined)])
    rng = np.random.default_rng(1)
    x = [rng.standard_normal((37, 4)).astype(np.float32), rng.standard_normal((37, 3)).astype(np.float32)]
    expected = [o.numpy() for o in model(x)]
    got = model.predict(x, batch_size=8, distribute=tp.distributed.DataParallel(cluster, replicas=3))
    assert [g.shape for g in got] == [(37, 2), (37, 1)]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ Dataset inputs
def test_a_dataset_trains_as_in_one_process_each_replica_reading_its_shard(cluster):
    (single, spread), shape = twins(mlp, "adam", metrics=["accuracy"])
    x, y = data(shape, n=50)

    def pipeline():  # reshuffled every epoch; a batch map; batches of 16, 16, 16 and 2
        return tp.data.Dataset.from_tensor_slices((x, y)).shuffle(50, seed=4).map(lambda a, b: (2 * a, b)).batch(16)

    expected = single.fit(pipeline(), epochs=3, verbose=0)
    history = spread.fit(pipeline(), epochs=3, verbose=0, distribute=tp.distributed.DataParallel(cluster, replicas=2))
    for key, values in expected.history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-5, err_msg=key)
    assert_same_training(spread, single)
    assert spread.optimizer.iterations == 12


def test_a_dataset_with_other_batches_on_another_pass_is_a_clear_error(cluster):
    (model, _), shape = twins(mlp, "sgd")
    x, y = data(shape)
    client = os.getpid()

    def batches():  # the client's passes see the rows in order, the replicas' (other processes) reversed
        order = np.arange(N) if os.getpid() == client else np.arange(N)[::-1]
        for start in range(0, N, 10):
            rows = order[start : start + 10]
            yield x[rows], y[rows]

    with pytest.raises(ValueError, match=r"differs here from the client's pass"):
        model.fit(tp.data.Dataset.from_generator(batches), verbose=0, distribute=tp.distributed.DataParallel(cluster))


# ------------------------------------------------------------------ backup workers
def test_backup_worker_drops_the_straggler_and_applies_the_first_shards(cluster):
    (single, spread), shape = twins(mlp, "sgd")
    n, batch = 72, 12
    x, y = data(shape, n=n)
    strategy = tp.distributed.DataParallel(cluster, replicas=2, backup_workers=1, straggler_delay={2: 1.0})
    history = spread.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, distribute=strategy)

    steps = strategy.steps
    assert [s.step for s in steps] == list(range(n // batch))
    assert all(len(s.applied) == 2 and len(s.dropped) == 1 for s in steps)
    assert sum(2 in s.dropped for s in steps) >= len(steps) // 2
    assert history.history["shards_applied"] == [2.0 * len(steps)]
    assert history.history["shards_dropped"] == [1.0 * len(steps)]

    # What a step equals: one single-process step on the rows of the shards it applied.
    plan = EpochPlan(0, (batch,) * (n // batch), replicas=2, backup_workers=1)
    order = np.arange(n)
    for record in steps:
        shards = sorted(plan.shard_of(r, record.step) for r in record.applied)
        rows = np.concatenate([plan.shard_rows(order, record.step, s) for s in shards])
        single.train_on_batch(x[rows], y[rows])
    for wa, wb in zip(spread.get_weights(), single.get_weights(), strict=True):
        np.testing.assert_allclose(wa, wb, rtol=2e-5, atol=2e-6)


def test_a_straggler_drawn_at_random_each_step_is_the_one_dropped(cluster):
    (_, spread), shape = twins(mlp, "sgd")
    n, batch = 96, 12
    x, y = data(shape, n=n)
    strategy = tp.distributed.DataParallel(cluster, replicas=2, backup_workers=1, random_straggler_delay=0.5)
    spread.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, distribute=strategy)

    slowed = [strategy.stragglers.slowed(s.step, 3) for s in strategy.steps]
    assert len(set(slowed)) > 1  # the straggler moves between replicas
    assert all(len(s.applied) == 2 and len(s.dropped) == 1 for s in strategy.steps)
    assert sum(s.dropped == (slow,) for s, slow in zip(strategy.steps, slowed, strict=True)) >= len(slowed) // 2


# ------------------------------------------------------------------ bad input and failures
def test_a_negative_random_straggler_delay_is_a_value_error(cluster):
    with pytest.raises(ValueError, match=r"DataParallel: random_straggler_delay must be seconds >= 0, got -1"):
        tp.distributed.DataParallel(cluster, replicas=2, random_straggler_delay=-1)


def test_more_replicas_than_workers_is_a_value_error(cluster):
    with pytest.raises(ValueError, match=r"2 replicas \+ 2 backup workers need 4 workers, but the cluster has 3"):
        tp.distributed.DataParallel(cluster, replicas=2, backup_workers=2)
    with pytest.raises(ValueError, match="replicas must be an integer >= 1"):
        tp.distributed.DataParallel(cluster, replicas=0)


def test_a_batch_that_does_not_split_is_a_value_error(cluster):
    (model, _), shape = twins(mlp, "sgd")
    x, y = data(shape)
    strategy = tp.distributed.DataParallel(cluster, replicas=2, backup_workers=1)
    with pytest.raises(ValueError, match="a global batch of 2 does not split over 2 replicas"):
        model.fit(x, y, batch_size=2, verbose=0, distribute=strategy)


class Unfreezable(tp.Model):
    def __init__(self):
        super().__init__()
        self.dense = tp.layers.Dense(5)

    def call(self, x, training=None):
        if float(tp.sum(x)) > 0:  # a traced value escapes into Python: the FreezeError names this file
            return self.dense(x)
        return self.dense(-x)


def test_a_model_that_cannot_be_frozen_raises_freeze_error_with_its_line(cluster):
    model = Unfreezable()
    model.compile(optimizer="sgd", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data((12,))
    with pytest.raises(tp.FreezeError, match="test_data_parallel.py"):
        model.fit(x, y, batch_size=BATCH, verbose=0, distribute=tp.distributed.DataParallel(cluster))


def test_unsupported_inputs_are_clear_errors(cluster):
    (model, _), shape = twins(mlp, "sgd")
    x, y = data(shape)
    strategy = tp.distributed.DataParallel(cluster)
    with pytest.raises(ValueError, match=r"with a Dataset x, y must be None"):
        model.fit(tp.data.Dataset.from_tensor_slices((x, y)).batch(8), y, distribute=strategy, verbose=0)
    with pytest.raises(ValueError, match=r"a Dataset must yield \(x, y\) batches; batch 0 is ndarray"):
        model.fit(tp.data.Dataset.from_tensor_slices(x).batch(8), distribute=strategy, verbose=0)
    model.compile(optimizer=tp.optimizers.SGD(0.1, use_ema=True), loss="mse")
    with pytest.raises(ValueError, match="use_ema=True"):
        model.fit(x, np.zeros((N, 5), np.float32), batch_size=BATCH, distribute=strategy, verbose=0)


def test_a_replica_that_does_not_answer_ends_fit_with_a_timeout_naming_the_step(cluster):
    (model, _), shape = twins(mlp, "sgd")
    x, y = data(shape)
    weights = model.get_weights()
    strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=1.0, straggler_delay={1: 4.0})
    with pytest.raises(TimeoutError, match="did not complete within 1s"):
        model.fit(x, y, batch_size=BATCH, verbose=0, distribute=strategy)
    for before, after in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)  # the failed epoch left the model as it was


@pytest.mark.parametrize("batch_size", [8, 100])
def test_evaluate_on_the_workers_equals_evaluate_in_one_process(cluster, batch_size):
    tp.random.seed(4)
    model = tp.Sequential([tp.Input((6,)), tp.layers.Dense(8, activation="relu"), tp.layers.Dense(3)])
    model.compile(
        optimizer="sgd",
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy", tp.metrics.SparseTopKCategoricalAccuracy(k=2)],
    )
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((37, 6)).astype(np.float32), rng.integers(0, 3, 37)
    expected = model.evaluate(x, y, batch_size=batch_size, verbose=0, return_dict=True)
    got = model.evaluate(
        x,
        y,
        batch_size=batch_size,
        verbose=0,
        distribute=tp.distributed.DataParallel(cluster, replicas=3),
        return_dict=True,
    )
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-6, err_msg=key)


def test_evaluate_on_the_workers_checks_its_arrays(cluster):
    model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    distribute = tp.distributed.DataParallel(cluster, replicas=2)
    with pytest.raises(ValueError, match="evaluate: x has 4 rows but y has 3"):
        model.evaluate(np.ones((4, 2), np.float32), np.ones((3, 1), np.float32), distribute=distribute)
