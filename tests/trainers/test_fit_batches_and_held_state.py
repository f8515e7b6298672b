"""fit's array batches (views of the caller's rows without shuffling, one gather per batch
with it) give the batches, and so the training, of the Dataset pipeline they replace; the
metrics and weights a run of steps holds follow the model (a layer frozen mid-epoch stops
training); the frozen step's graphs are found again without retracing."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.trainers import data_adapter as da
from tapeflow.trainers.compile_losses import OutputLosses
from tapeflow.trainers.target_checks import TargetChecks

RNG = np.random.default_rng(7)
X = RNG.standard_normal((37, 5)).astype(np.float32)
Y = RNG.integers(0, 3, 37)
W = RNG.random(37).astype(np.float32)


def _model(metrics=("accuracy",)):
    tp.random.seed(4)
    model = tp.Sequential([tp.Input((5,)), tp.layers.Dense(6, activation="relu"), tp.layers.Dense(3)])
    model.compile(tp.optimizers.Adam(0.01), tp.losses.SparseCategoricalCrossentropy(from_logits=True), list(metrics))
    return model


def assert_same_weights(a, b):
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)


@pytest.mark.parametrize("rows", [1, 2, 7, 64, 129])
@pytest.mark.parametrize("seed", [0, 3, 2**40])
def test_shuffled_order_is_the_order_of_the_dataset_shuffle(rows, seed):
    data = da.ArrayData(np.arange(rows))
    for epoch in (0, 1, 5):
        batches = da.shuffled_batches(data.dataset(), rows, 8, seed, epoch)
        expected = [int(i) for batch in batches for i in batch]
        assert da.shuffled_order(rows, seed, epoch).tolist() == expected


def _adapter_batches(x, y, sample_weight, shuffle):
    targets = TargetChecks(OutputLosses("mse"), output_specs=None)
    adapter = da.DataAdapter(x, y, sample_weight, where="fit", batch_size=8, targets=targets, shuffle=shuffle, seed=11)
    return adapter, list(adapter.epoch(1))


@pytest.mark.parametrize("shuffle", [False, True])
def test_array_batches_are_those_of_the_dataset_pipeline(shuffle):
    x = (X, X[:, :2] * 2.0)
    adapter, got = _adapter_batches(x, Y, W, shuffle)
    data = da.ArrayData(x, Y, W)
    pipeline = data.dataset().batch(8)
    if shuffle:
        pipeline = da.shuffled_batches(data.dataset(), len(data), 8, adapter.seed, 1)
    expected = list(pipeline.as_numpy_iterator())
    assert len(got) == len(expected) == 5
    for (gx, gy, gw), ((ex1, ex2), ey, ew) in zip(got, expected, strict=True):
        np.testing.assert_array_equal(gx[0].numpy(), ex1)
        np.testing.assert_array_equal(gx[1].numpy(), ex2)
        np.testing.assert_array_equal(gy.numpy(), ey)
        np.testing.assert_array_equal(gw.numpy(), ew)


def test_unshuffled_batches_are_read_only_views_of_the_callers_rows():
    x = X.copy()
    _, batches = _adapter_batches({"a": x}, Y, None, shuffle=False)
    first = batches[0][0]["a"].numpy()
    assert np.shares_memory(first, x) and not first.flags.writeable
    np.testing.assert_array_equal(first, X[:8])
    assert batches[0][2] is None and x.flags.writeable  # the caller's array stays writable


def test_rows_that_are_not_contiguous_are_copied_one_batch_at_a_time():
    x = np.asfortranarray(X)
    _, batches = _adapter_batches(x, Y, None, shuffle=False)
    first = batches[0][0].numpy()
    assert first.flags.c_contiguous and not np.shares_memory(first, x)
    np.testing.assert_array_equal(first, X[:8])


@pytest.mark.parametrize("shuffle", [False, True])
def test_fit_on_arrays_trains_as_on_the_dataset_of_the_same_batches(shuffle):
    data = da.ArrayData(X, Y, W)
    model = _model()
    history = model.fit(X, Y, batch_size=8, sample_weight=W, shuffle=shuffle, seed=5, epochs=1, verbose=0)
    pipeline = data.dataset().batch(8)
    if shuffle:
        pipeline = da.shuffled_batches(data.dataset(), len(data), 8, 5, 0)
    reference = _model()
    expected = reference.fit(pipeline, epochs=1, verbose=0)
    assert_same_weights(model, reference)
    assert history.history == expected.history


def test_fortran_ordered_and_sliced_inputs_train_as_contiguous_ones():
    model, reference = _model(), _model()
    model.fit(np.asfortranarray(X), Y, batch_size=8, shuffle=False, epochs=2, verbose=0)
    reference.fit(X.copy(), Y, batch_size=8, shuffle=False, epochs=2, verbose=0)
    assert_same_weights(model, reference)
    wide = np.concatenate([X, X], axis=1)[:, :5]  # rows strided in memory
    sliced = _model()
    sliced.fit(wide, Y, batch_size=8, shuffle=False, epochs=2, verbose=0)
    assert_same_weights(sliced, reference)


def test_fit_leaves_the_callers_arrays_as_they_were():
    x, y = X.copy(), Y.copy()
    _model().fit(x, y, batch_size=8, shuffle=False, epochs=2, verbose=0)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(y, Y)
    assert x.flags.writeable


class FreezeFirstLayer(tp.callbacks.Callback):
    def __init__(self, at_batch):
        super().__init__()
        self.at_batch = at_batch
        self.seen = None

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at_batch:
            self.model.layers[0].trainable = False
            self.seen = [w.numpy().copy() for w in self.model.layers[0].weights]


def test_a_layer_frozen_mid_epoch_stops_training_at_once():
    model = _model()
    freeze = FreezeFirstLayer(at_batch=1)
    model.fit(X, Y, batch_size=8, shuffle=False, epochs=2, callbacks=[freeze], verbose=0)
    for before, after in zip(freeze.seen, model.layers[0].weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())
    assert model.optimizer.iterations == 10


class Logged(tp.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.names = [m.name for m in self.model.metrics]
        self.logged = sorted(logs)


def test_metrics_seen_by_callbacks_and_results_are_those_of_the_model():
    model = _model(metrics=("accuracy", "sparse_top_k_categorical_accuracy"))
    logged = Logged()
    history = model.fit(X, Y, batch_size=8, epochs=2, callbacks=[logged], verbose=0)
    names = ["loss", "accuracy", "sparse_top_k_categorical_accuracy"]
    assert logged.names == [m.name for m in model.metrics] == names
    assert logged.logged == sorted(names) == sorted(history.history)
    assert model._held is None
    results = model.evaluate(X, Y, batch_size=8, verbose=0, return_dict=True)
    assert list(results) == names and model._held is None


def test_train_on_batch_gives_the_logs_of_a_one_batch_fit():
    model, reference = _model(), _model()
    logs = [model.train_on_batch(X[:8], Y[:8], return_dict=True) for _ in range(3)]
    expected = [reference.fit(X[:8], Y[:8], batch_size=8, shuffle=False, verbose=0).history for _ in range(3)]
    assert [sorted(d) for d in logs] == [sorted(h) for h in expected]
    for got, want in zip(logs, expected, strict=True):
        assert got == {k: v[0] for k, v in want.items()}
    assert_same_weights(model, reference)
    assert model._held is None


def test_the_frozen_step_finds_its_graphs_without_tracing_again():
    model = _model()
    model.fit(X, Y, batch_size=8, epochs=3, verbose=0)  # full and short last batches
    train, _ = model._frozen()
    assert train.trace_count == 2
    model.fit(X, Y, batch_size=8, epochs=2, verbose=0)
    assert train.trace_count == 2
    model.layers[1].trainable = False  # other trainable variables: traced again
    kernel = model.layers[1].kernel.numpy().copy()
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    assert train.trace_count == 4
    np.testing.assert_array_equal(model.layers[1].kernel.numpy(), kernel)


def test_the_steps_run_their_python_when_functions_run_eagerly():
    model, reference = _model(), _model()
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    tp.config.run_functions_eagerly(True)
    try:
        model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    finally:
        tp.config.run_functions_eagerly(False)
    reference.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class Counting(tp.Model):
    """Keras's pattern: a train_step of its own and a `metrics` property that lists what fit resets."""

    def __init__(self):
        super().__init__()
        self.dense = tp.layers.Dense(3)
        self.seen = tp.metrics.Sum(name="seen")
        self.unlisted = tp.metrics.Mean(name="unlisted")

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, _ = data
        self.seen.update_state(tp.ones((x.shape[0],)))
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.seen]


@pytest.mark.parametrize("jit", [True, False])
def test_a_metrics_property_of_the_model_is_what_fit_resets_and_logs(jit):
    model = Counting()
    model.compile("sgd", jit=jit)
    history = model.fit(X, Y, batch_size=8, epochs=3, verbose=0)
    assert history.history == {"seen": [37.0, 37.0, 37.0]}
    assert model.metrics_names == ["seen"]
    assert model.train_on_batch(X[:8], Y[:8], return_dict=True) == {"seen": 8.0}
