"""Keras 3's training API, checked against Keras itself (torch backend): the same model with
the same weights gives the same fit / evaluate / predict structures and values, and the
override points (train_step, test_step, predict_step, compute_loss) train the same."""

import os
import warnings

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.data.py_dataset import PyDataset
from tapeflow.trainers.data_adapter import pack_x_y_sample_weight, unpack_x_y_sample_weight

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
X = RNG.normal(size=(40, 4)).astype("float32")
Y = RNG.normal(size=(40, 2)).astype("float32")
LABELS = RNG.integers(0, 2, 40)


def _pair(lib, outputs=2, **compile_args):
    """The same MLP in tapeflow and Keras, with tapeflow's weights copied into Keras."""
    models = []
    for api in (tp, keras):
        models.append(
            api.Sequential([api.Input((4,)), api.layers.Dense(5, activation="tanh"), api.layers.Dense(outputs)])
        )
    ours, theirs = models
    theirs.set_weights(ours.get_weights())
    for model in models:
        if compile_args:
            model.compile(**compile_args)
    return ours, theirs


def _assert_weights_equal(ours, theirs, rtol=1e-4):
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-5)


def _sgd(lib):
    return lib.optimizers.SGD(0.1)


def test_evaluate_returns_what_keras_returns():
    ours, theirs = _pair(tp)
    for model, lib in ((ours, tp), (theirs, keras)):
        model.compile(_sgd(lib), "mse", metrics=["mae"])
    ours_list, theirs_list = ours.evaluate(X, Y, verbose=0), theirs.evaluate(X, Y, verbose=0)
    assert isinstance(ours_list, list) and len(ours_list) == len(theirs_list) == 2
    np.testing.assert_allclose(ours_list, theirs_list, rtol=1e-5)
    ours_dict = ours.evaluate(X, Y, verbose=0, return_dict=True)
    assert ours_dict == pytest.approx(theirs.evaluate(X, Y, verbose=0, return_dict=True), rel=1e-5)
    assert ours.metrics_names == ["loss", "mae"]
    ours, theirs = _pair(tp)
    for model, lib in ((ours, tp), (theirs, keras)):
        model.compile(_sgd(lib), "mse")
    loss, reference = ours.evaluate(X, Y, verbose=0), theirs.evaluate(X, Y, verbose=0)
    assert isinstance(loss, float) and loss == pytest.approx(reference, rel=1e-5)


def test_evaluate_list_order_for_several_outputs_is_keras_order():
    built = []
    for api in (tp, keras):
        inputs = api.Input((4,))
        hidden = api.layers.Dense(6, name="hidden")(inputs)
        outputs = [api.layers.Dense(3, name="out1")(hidden), api.layers.Dense(1, name="out2")(hidden)]
        model = api.Model(inputs, outputs)
        built.append(model)
    ours, theirs = built
    theirs.set_weights(ours.get_weights())
    y2 = Y[:, :1]
    for model, lib in ((ours, tp), (theirs, keras)):
        model.compile(
            _sgd(lib), loss=["sparse_categorical_crossentropy", "mse"], metrics={"out1": "accuracy", "out2": "mae"}
        )
    ours_list = ours.evaluate(X, [LABELS, y2], verbose=0)
    theirs_list = theirs.evaluate(X, [LABELS, y2], verbose=0)
    np.testing.assert_allclose(ours_list, theirs_list, rtol=1e-5)
    logs = ours.evaluate(X, [LABELS, y2], verbose=0, return_dict=True)
    assert logs == pytest.approx(theirs.evaluate(X, [LABELS, y2], verbose=0, return_dict=True), rel=1e-5)
    assert dict(zip(ours.metrics_names, ours_list, strict=True)) == pytest.approx(logs)


def test_fit_and_predict_match_keras():
    ours, theirs = _pair(tp)
    for model, lib in ((ours, tp), (theirs, keras)):
        model.compile(_sgd(lib), "mse", metrics=["mae"])
    kwargs = {"batch_size": 8, "epochs": 2, "shuffle": False, "verbose": 0}
    ours_history = ours.fit(X, Y, validation_data=(X[:8], Y[:8]), validation_freq=2, **kwargs).history
    theirs_history = theirs.fit(X, Y, validation_data=(X[:8], Y[:8]), validation_freq=2, **kwargs).history
    assert set(ours_history) == set(theirs_history)
    for key, values in theirs_history.items():
        np.testing.assert_allclose(ours_history[key], values, rtol=1e-4, err_msg=key)
    _assert_weights_equal(ours, theirs)
    np.testing.assert_allclose(ours.predict(X, verbose=0), theirs.predict(X, verbose=0), rtol=1e-4, atol=1e-6)


class _OursCustom(tp.Model):
    """Keras' "customizing fit" guide's model: its own train_step, test_step and a tracker."""

    def __init__(self):
        super().__init__()
        self.hidden = tp.layers.Dense(5, activation="tanh")
        self.out = tp.layers.Dense(2)
        self.loss_tracker = tp.metrics.Mean(name="loss")
        self.mae_metric = tp.metrics.MeanAbsoluteError(name="mae")

    def call(self, x):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y, _ = unpack_x_y_sample_weight(data)
        with tp.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights, strict=True))
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.loss_tracker.update_state(self.compute_loss(y=y, y_pred=y_pred, training=False))
        self.mae_metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


class _TheirsCustom(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(5, activation="tanh")
        self.out = keras.layers.Dense(2)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        with torch.no_grad():
            self.optimizer.apply([v.value.grad for v in self.trainable_weights], self.trainable_weights)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.loss_tracker.update_state(self.compute_loss(y=y, y_pred=y_pred, training=False))
        self.mae_metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


@pytest.mark.parametrize("jit", ["auto", False])
def test_a_custom_train_step_trains_as_on_keras(jit):
    ours, theirs = _OursCustom(), _TheirsCustom()
    ours(tp.tensor(X[:1])), theirs(X[:1])
    theirs.set_weights(ours.get_weights())
    ours.compile(_sgd(tp), "mse", jit_compile=jit)
    theirs.compile(_sgd(keras), "mse")
    kwargs = {"batch_size": 8, "epochs": 3, "shuffle": False, "verbose": 0, "validation_data": (X[:16], Y[:16])}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # frozen without falling back to the tape
        ours_history = ours.fit(X, Y, **kwargs).history
    theirs_history = theirs.fit(X, Y, **kwargs).history
    assert set(ours_history) == set(theirs_history) == {"loss", "mae", "val_loss", "val_mae"}
    for key, values in theirs_history.items():
        np.testing.assert_allclose(ours_history[key], values, rtol=1e-4, err_msg=key)
    _assert_weights_equal(ours, theirs)
    assert ours.optimizer.iterations == 15
    assert ("train_step" in ours._custom_steps) is (jit == "auto")
    assert ours.evaluate(X, Y, verbose=0) == pytest.approx(theirs.evaluate(X, Y, verbose=0), rel=1e-5)


def _doubled_mae(lib):
    class DoubledMae(lib.Model):
        def __init__(self):
            super().__init__()
            self.dense = lib.layers.Dense(2)
            self.seen = lib.metrics.Mean(name="seen")

        def call(self, x):
            return self.dense(x)

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            loss = lib.ops.mean(lib.ops.abs(y_pred - x[:, :2])) * 2.0
            self.seen.update_state(loss)
            return loss

    return DoubledMae()


def test_compute_loss_override_trains_on_x_alone_as_on_keras():
    ours, theirs = _doubled_mae(tp), _doubled_mae(keras)
    ours(tp.tensor(X[:1])), theirs(X[:1])
    theirs.set_weights(ours.get_weights())
    ours.compile(_sgd(tp))
    theirs.compile(_sgd(keras))
    assert "seen" in ours.metrics_names
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours_history = ours.fit(X, batch_size=10, epochs=2, shuffle=False, verbose=0).history
    theirs_history = theirs.fit(X, batch_size=10, epochs=2, shuffle=False, verbose=0).history
    assert set(ours_history) == set(theirs_history) == {"loss", "seen"}
    for key, values in theirs_history.items():  # "seen" restarts each epoch
        np.testing.assert_allclose(ours_history[key], values, rtol=1e-4, err_msg=key)
    _assert_weights_equal(ours, theirs)


def test_predict_step_override_and_pack_unpack():
    class Doubled(tp.Sequential):
        def predict_step(self, data):
            x, _, _ = unpack_x_y_sample_weight(data)
            return self(x, training=False) * 2.0

    model = Doubled([tp.Input((4,)), tp.layers.Dense(2)])
    np.testing.assert_allclose(model.predict(X, batch_size=16), 2.0 * model(tp.tensor(X)).numpy(), rtol=1e-6)
    assert pack_x_y_sample_weight(1) == keras.utils.pack_x_y_sample_weight(1)
    assert pack_x_y_sample_weight([1, 2]) == keras.utils.pack_x_y_sample_weight([1, 2])
    assert pack_x_y_sample_weight(1, 2, 3) == keras.utils.pack_x_y_sample_weight(1, 2, 3)
    assert unpack_x_y_sample_weight([1, 2]) == keras.utils.unpack_x_y_sample_weight([1, 2])
    with pytest.raises(ValueError, match="a tuple of 4"):
        unpack_x_y_sample_weight((1, 2, 3, 4))


def test_dict_inputs_by_name_and_rank_expansion_as_in_keras():
    built = []
    for api in (tp, keras):
        a, b = api.Input((1,), name="a"), api.Input((3,), name="b")
        merged = api.layers.Concatenate()([a, b])
        built.append(api.Model([a, b], api.layers.Dense(2)(merged)))
    ours, theirs = built
    theirs.set_weights(ours.get_weights())
    inputs = {"b": X[:, :3], "a": X[:, 3]}  # "a" one rank short of Input((1,))
    np.testing.assert_allclose(ours.predict(inputs, verbose=0), theirs.predict(inputs, verbose=0), rtol=1e-5)
    for model, lib in ((ours, tp), (theirs, keras)):
        model.compile(_sgd(lib), "mse")
    ours.fit(inputs, Y, batch_size=8, shuffle=False, verbose=0)
    theirs.fit(inputs, Y, batch_size=8, shuffle=False, verbose=0)
    _assert_weights_equal(ours, theirs)
    assert ours.evaluate(inputs, Y, verbose=0) == pytest.approx(theirs.evaluate(inputs, Y, verbose=0), rel=1e-5)
    with pytest.raises(ValueError, match=r"named \['a', 'b'\]; missing \['b'\]"):
        ours.predict({"a": X[:, 3]})


def _batches(base):
    class Batches(base):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.epochs_begun = 0

        def __len__(self):
            return 4

        def __getitem__(self, index):
            rows = slice(10 * index, 10 * index + 10)
            return X[rows], Y[rows]

        def on_epoch_begin(self):
            self.epochs_begun += 1

    return Batches()


def test_a_py_dataset_and_a_generator_train_as_on_keras():
    ours, theirs = _pair(tp)
    for model, lib in ((ours, tp), (theirs, keras)):
        model.compile(_sgd(lib), "mse")
    ours_data, theirs_data = _batches(PyDataset), _batches(keras.utils.PyDataset)
    ours_history = ours.fit(ours_data, epochs=2, shuffle=False, verbose=0).history
    theirs_history = theirs.fit(theirs_data, epochs=2, shuffle=False, verbose=0).history
    np.testing.assert_allclose(ours_history["loss"], theirs_history["loss"], rtol=1e-4)
    assert ours_data.epochs_begun == 2
    _assert_weights_equal(ours, theirs)

    def endless():
        while True:
            for start in range(0, 40, 10):
                yield X[start : start + 10], Y[start : start + 10]

    ours.fit(endless(), steps_per_epoch=3, epochs=2, verbose=0)
    theirs.fit(endless(), steps_per_epoch=3, epochs=2, verbose=0)
    _assert_weights_equal(ours, theirs)
    shuffled = ours.fit(_batches(PyDataset), epochs=1, shuffle=True, verbose=0)  # batch order shuffled
    assert np.isfinite(shuffled.history["loss"][0])


def test_a_generator_that_runs_out_stops_training():
    model, _ = _pair(tp)
    model.compile(_sgd(tp), "mse")
    once = ((X[i : i + 10], Y[i : i + 10]) for i in range(0, 40, 10))
    with pytest.warns(UserWarning, match="ran out of data"):
        history = model.fit(once, epochs=3, verbose=0)
    assert history.epoch == [0]


def test_compile_takes_keras_arguments():
    model, _ = _pair(tp)
    model.compile("sgd", "mse", run_eagerly=True, steps_per_execution=1, auto_scale_loss=False)
    assert model.run_eagerly and model.jit_compile is False
    model.compile("sgd", "mse", jit=False)
    assert model.jit_compile is False
    with pytest.raises(ValueError, match="steps_per_execution must be 1"):
        model.compile("sgd", "mse", steps_per_execution=4)
    with pytest.raises(ValueError, match="disagree"):
        model.compile("sgd", "mse", jit=True, jit_compile=False)
    model.compile("sgd", "mse")
    with pytest.raises(ValueError, match="validation_freq must be"):
        model.fit(X, Y, validation_freq=0, verbose=0)
    with pytest.raises(ValueError, match="shuffle must be True or False"):
        model.fit(X, Y, shuffle="batch", verbose=0)
    without_loss, _ = _pair(tp)
    without_loss.compile("sgd")
    with pytest.raises(ValueError, match="the model has no loss"):
        without_loss.fit(X, Y, verbose=0)


def test_logs_holding_tensors_reach_callbacks_as_floats():
    class Logged(tp.Sequential):
        def train_step(self, data):
            logs = super().train_step(data)
            return {**logs, "twice": tp.tensor(2.0)}

    seen = []

    class Record(tp.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(logs)

    model = Logged([tp.Input((4,)), tp.layers.Dense(2)])
    model.compile(_sgd(tp), "mse")
    history = model.fit(X, Y, batch_size=20, epochs=1, verbose=2, callbacks=[Record()])
    assert history.history["twice"] == [2.0] and all(type(logs["twice"]) is float for logs in seen)


def _endpoint_model(lib):
    """Keras's endpoint-layer pattern: a layer that adds its loss and updates its own metric."""

    class Endpoint(lib.layers.Layer):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.loss_fn = lib.losses.BinaryCrossentropy(from_logits=True)
            self.accuracy_fn = lib.metrics.BinaryAccuracy()

        def call(self, logits, targets=None, sample_weight=None):
            if targets is not None:
                self.add_loss(self.loss_fn(targets, logits, sample_weight))
                self.accuracy_fn.update_state(targets, logits, sample_weight)
            return lib.ops.sigmoid(logits)

    inputs = lib.Input((4,), name="inputs")
    targets = lib.Input((1,), name="targets")
    weights = lib.Input((1,), name="sample_weight")
    logits = lib.layers.Dense(1)(inputs)
    return lib.Model([inputs, targets, weights], Endpoint()(logits, targets, weights))


@pytest.mark.parametrize("jit", ["auto", False])
def test_a_metric_a_layer_updates_in_its_call_logs_as_on_keras(jit):
    ours, theirs = _endpoint_model(tp), _endpoint_model(keras)
    theirs.set_weights(ours.get_weights())
    ours.compile(_sgd(tp), jit_compile=jit)
    theirs.compile(_sgd(keras))
    data = {"inputs": X, "targets": LABELS[:, None].astype("float32"), "sample_weight": np.ones((40, 1), "float32")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # frozen without falling back to the tape
        ours_history = ours.fit(data, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    theirs_history = theirs.fit(data, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    assert set(ours_history) == set(theirs_history) == {"loss", "binary_accuracy"}
    for key, values in theirs_history.items():
        np.testing.assert_allclose(ours_history[key], values, rtol=1e-4, err_msg=key)
    _assert_weights_equal(ours, theirs)
    assert ours.evaluate(data, verbose=0) == pytest.approx(theirs.evaluate(data, verbose=0), rel=1e-5)


def _true_positives(lib):
    """A Keras-style metric: its state is a variable made with add_variable."""

    class TruePositives(lib.metrics.Metric):
        def __init__(self, name="true_positives", **kwargs):
            super().__init__(name=name, **kwargs)
            self.hits = self.add_variable(shape=(), name="hits", initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            predicted = lib.ops.cast(lib.ops.argmax(y_pred, axis=1), "int32")
            values = lib.ops.cast(lib.ops.cast(y_true, "int32") == predicted, "float32")
            self.hits.assign_add(lib.ops.sum(values))

        def result(self):
            return self.hits

        def reset_state(self):
            self.hits.assign(0.0)

    return TruePositives()


def test_a_metric_with_variables_counts_as_on_keras():
    ours, theirs = _pair(tp)
    for lib, model in ((tp, ours), (keras, theirs)):
        loss = lib.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(_sgd(lib), loss, metrics=[_true_positives(lib)])
    ours_history = ours.fit(X, LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    theirs_history = theirs.fit(X, LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    assert set(ours_history) == set(theirs_history) == {"loss", "true_positives"}
    for key, values in theirs_history.items():
        np.testing.assert_allclose(ours_history[key], values, rtol=1e-4, err_msg=key)
    metric = ours.metrics[-1]
    assert [v.name for v in metric.variables] == ["true_positives/hits"]
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_a_frozen_custom_step_retraces_when_a_layer_stops_training():
    start, trained = None, {}
    for jit in ("auto", False):
        model = _OursCustom()
        model(tp.tensor(X[:1]))
        start = start or model.get_weights()
        model.set_weights(start)
        model.compile(_sgd(tp), "mse", jit_compile=jit)
        model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        model.hidden.trainable = False
        kept = model.hidden.get_weights()
        model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        for before, after in zip(kept, model.hidden.get_weights(), strict=True):
            np.testing.assert_array_equal(before, after)
        trained[jit] = model.get_weights()
    for a, b in zip(trained["auto"], trained[False], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
