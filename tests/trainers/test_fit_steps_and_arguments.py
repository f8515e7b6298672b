"""steps_per_epoch / validation_steps / evaluate(steps=) as Keras runs them, infinite and empty
data caught before training starts, and Keras' argument checks as errors naming the argument."""

import warnings

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(23)
X = RNG.standard_normal((8, 3)).astype(np.float32)
Y = RNG.integers(0, 2, 8)


def _model():
    tp.random.seed(2)
    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
    model.compile(tp.optimizers.SGD(0.1), tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class CountBatches(tp.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.counts = [*getattr(self, "counts", []), 0]

    def on_train_batch_end(self, batch, logs=None):
        self.counts[-1] += 1


def _same_weights(a, b):
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)


def test_steps_per_epoch_over_a_repeated_dataset_carries_the_pass_across_epochs():
    ds = tp.data.Dataset.from_tensor_slices((X, Y)).batch(4)  # 2 batches a pass
    model, counter = _model(), CountBatches()
    model.fit(ds.repeat(), epochs=2, steps_per_epoch=3, callbacks=[counter], verbose=0)
    assert counter.counts == [3, 3] and model.optimizer.iterations == 6
    reference = _model()
    reference.fit(ds.repeat().take(6), epochs=1, verbose=0)  # the same 6 batches in one go
    _same_weights(model, reference)


def test_steps_per_epoch_over_arrays_ends_an_epoch_early_when_the_pass_runs_out():
    model, counter = _model(), CountBatches()
    with pytest.warns(UserWarning, match="ran out after 1 of steps_per_epoch=2"):
        model.fit(X, Y, batch_size=3, epochs=3, steps_per_epoch=2, shuffle=False, callbacks=[counter], verbose=0)
    assert counter.counts == [2, 1, 2]  # batches 1-2, batch 3 (the pass ends), then a new pass
    reference = _model()
    for rows in (slice(0, 3), slice(3, 6), slice(6, 8), slice(0, 3), slice(3, 6)):
        reference.train_on_batch(X[rows], Y[rows])
    _same_weights(model, reference)


def test_infinite_data_without_steps_is_an_error_before_training():
    model = _model()
    before = model.get_weights()
    endless = tp.data.Dataset.from_tensor_slices((X, Y)).batch(4).repeat()
    with pytest.raises(ValueError, match=r"fit: the data is infinite.*pass steps_per_epoch="):
        model.fit(endless, epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"fit: validation_data: the data is infinite.*pass validation_steps="):
        model.fit(X, Y, validation_data=endless, verbose=0)
    with pytest.raises(ValueError, match=r"evaluate: the data is infinite.*pass steps="):
        model.evaluate(endless, verbose=0, return_dict=True)
    with pytest.raises(ValueError, match=r"predict: the data is infinite.*pass steps="):
        model.predict(endless)
    assert model.optimizer.iterations == 0
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_validation_steps_and_evaluate_steps_take_that_many_batches():
    model = _model()
    endless = tp.data.Dataset.from_tensor_slices((X, Y)).batch(4).repeat()
    history = model.fit(X, Y, epochs=1, validation_data=endless, validation_steps=1, verbose=0)
    first = model.evaluate(X[:4], Y[:4], verbose=0, return_dict=True)["loss"]
    assert history.history["val_loss"][0] == pytest.approx(first)
    assert model.evaluate(endless, steps=2, verbose=0, return_dict=True)["loss"] == pytest.approx(
        model.evaluate(X, Y, verbose=0, return_dict=True)["loss"]
    )
    assert model.predict(endless, steps=3).shape == (12, 2)


def test_empty_data_is_an_error():
    model = _model()
    with pytest.raises(ValueError, match="fit: the data is empty"):
        model.fit(X[:0], Y[:0], verbose=0)
    with pytest.raises(ValueError, match="fit: the data is empty"):
        model.fit(tp.data.Dataset.from_tensor_slices((X, Y)).take(0).batch(4), verbose=0)
    nothing = tp.data.Dataset.from_generator(lambda: iter(()))  # size unknown until it runs dry
    with pytest.raises(ValueError, match="fit: the data is empty: it yielded no batch"):
        model.fit(nothing, verbose=0)
    with pytest.raises(ValueError, match="evaluate: the data is empty"):
        model.evaluate(X[:0], Y[:0], verbose=0, return_dict=True)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"epochs": 2.7}, "fit: epochs must be an integer >= 0, got 2.7"),
        ({"epochs": True}, "fit: epochs must be an integer >= 0, got True"),
        ({"epochs": -1}, "epochs must be an integer >= 0"),
        ({"batch_size": 0}, "fit: batch_size must be an integer >= 1, got 0"),
        ({"batch_size": 8.0}, "batch_size must be an integer"),
        ({"batch_size": "32"}, "batch_size must be an integer"),
        ({"initial_epoch": -1}, "initial_epoch must be an integer >= 0"),
        ({"initial_epoch": 1.5}, "initial_epoch must be an integer"),
        ({"initial_epoch": 3, "epochs": 2}, r"initial_epoch \(3\) is past epochs \(2\)"),
        ({"validation_split": 1.0}, r"validation_split must be in \[0, 1\), got 1.0"),
        ({"validation_split": -0.2}, r"validation_split must be in \[0, 1\)"),
        ({"validation_split": "0.2"}, "validation_split must be a number"),
        ({"validation_split": True}, "validation_split must be a number"),
        ({"steps_per_epoch": 0}, "steps_per_epoch must be an integer >= 1"),
        ({"validation_steps": 1.5}, "validation_steps must be an integer"),
        ({"validation_batch_size": 0}, "validation_batch_size must be an integer"),
        ({"y": None}, r"fit: no target \(y\) given for output 'output', which has a loss"),
        ({"x": None}, "fit: x is required"),
        ({"y": np.array(["cat", "dog"] * 4)}, r"fit: y must hold numbers, got dtype <U3 \(e.g. np.str_\('cat'\)\)"),
        ({"validation_data": (X,)}, r"fit: validation_data must be \(x, y\)"),
    ],
)
def test_fit_arguments_are_checked_like_keras(arguments, message):
    model = _model()
    call = {"x": X, "y": Y, "verbose": 0, **arguments}
    with pytest.raises(ValueError, match=message):
        model.fit(**call)
    assert model.optimizer.iterations == 0


def test_batch_size_none_means_32_and_epochs_zero_trains_nothing():
    model = _model()
    x, y = np.repeat(X, 5, axis=0), np.repeat(Y, 5)  # 40 samples: 2 batches of (up to) 32
    model.fit(x, y, batch_size=None, epochs=1, verbose=0)
    assert model.optimizer.iterations == 2
    history = model.fit(x, y, epochs=0, verbose=0)
    assert history.history == {} and model.optimizer.iterations == 2
    assert model.evaluate(x, y, batch_size=None, verbose=0, return_dict=True)["loss"] > 0


def test_evaluate_and_predict_check_their_arguments():
    model = _model()
    with pytest.raises(ValueError, match="evaluate: steps must be an integer >= 1"):
        model.evaluate(X, Y, steps=0, verbose=0, return_dict=True)
    with pytest.raises(ValueError, match=r"no target \(y\) given for output"):
        model.evaluate(X, verbose=0, return_dict=True)
    with pytest.raises(ValueError, match="predict: batch_size must be an integer"):
        model.predict(X, batch_size=-4)
    with pytest.raises(ValueError, match="predict: x is required"):
        model.predict(None)
    with pytest.raises(ValueError, match=r"no target \(y\) given for output 'output', which has a loss"):
        model.fit(tp.data.Dataset.from_tensor_slices(X).batch(4), verbose=0)  # x alone, as Keras takes it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model.predict(tp.data.Dataset.from_tensor_slices((X, Y)).batch(3)).shape == (8, 2)  # (x, y): x
