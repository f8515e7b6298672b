"""Whole-model files (`Model.save` / `tp.models.load_model`) and weights matched by
structure (`save_weights` / `load_weights`), against Keras 3's documented behaviour:
training resumes exactly, predictions are identical, unregistered classes are named, and
nothing in a file is executed."""

from __future__ import annotations

import builtins
import json
import os

import h5py
import numpy as np
import pytest

import tapeflow as tp
from tapeflow.files.safe_h5 import write_text

L = tp.layers


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(96, 6)).astype("float32")
    y = (x[:, :3].sum(axis=1) > 0).astype("int64") + (x[:, 3] > 0.5)
    return x, y


@tp.saving.register_serializable(package="test_saving")
class Residual(tp.Model):
    """A registered subclassed model: its config is its constructor arguments."""

    def __init__(self, width=8, classes=3, **kwargs):
        super().__init__(**kwargs)
        self.hidden = L.Dense(width, activation="relu")
        self.norm = L.BatchNormalization()
        self.blocks = [L.Dense(width, activation="tanh"), L.Dense(width)]
        self.head = L.Dense(classes)

    def call(self, x, training=None):
        h = self.norm(self.hidden(x), training=training)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


class Unregistered(tp.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.out = L.Dense(3)

    def call(self, x):
        return self.out(x)


def _sequential():
    return tp.Sequential(
        [tp.Input((6,)), L.Dense(16, activation="relu"), L.BatchNormalization(), L.Dropout(0.3), L.Dense(3)]
    )


def _functional():
    a = tp.Input((6,), name="features")
    b = tp.Input((2,), name="extra")
    shared = L.Dense(8, activation="relu")
    h = L.Concatenate()([shared(a), L.Dense(8)(b)])
    h = L.Dropout(0.2)(shared(L.Dense(6)(h)))  # the shared layer is called twice
    return tp.Model([a, b], L.Dense(3)(h))


def _inputs(kind, x):
    return [x, x[:, :2] * 2.0] if kind == "functional" else x


BUILDERS = {"sequential": _sequential, "functional": _functional, "subclassed": lambda: Residual(8, 3)}
OPTIMIZERS = {
    "adam": lambda: tp.optimizers.Adam(1e-2, amsgrad=True),
    "sgd_momentum": lambda: tp.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "rmsprop_schedule": lambda: tp.optimizers.RMSprop(tp.optimizers.schedules.ExponentialDecay(0.01, 3, 0.5)),
}


def _compiled(kind, optimizer):
    tp.random.seed(11)
    model = BUILDERS[kind]()
    model.compile(
        optimizer=OPTIMIZERS[optimizer](),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy", tp.metrics.SparseTopKCategoricalAccuracy(k=2)],
    )
    return model


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_training_resumed_from_a_saved_model_equals_uninterrupted_training(kind, optimizer, data, tmp_path):
    x, y = data
    inputs = _inputs(kind, x)
    uninterrupted = _compiled(kind, optimizer)
    history = uninterrupted.fit(inputs, y, batch_size=16, epochs=2, seed=5, verbose=0)

    first = _compiled(kind, optimizer)
    first.fit(inputs, y, batch_size=16, epochs=1, seed=5, verbose=0)
    path = tmp_path / "model.keras"
    first.save(path)
    loaded = tp.models.load_model(path)
    assert type(loaded) is type(first) and loaded.optimizer.iterations == first.optimizer.iterations == 6
    assert type(loaded.optimizer) is type(first.optimizer)
    assert loaded.optimizer.get_config() == first.optimizer.get_config()
    np.testing.assert_array_equal(loaded.predict(inputs), first.predict(inputs))
    resumed = loaded.fit(inputs, y, batch_size=16, epochs=2, initial_epoch=1, seed=5, verbose=0)

    assert loaded.optimizer.iterations == uninterrupted.optimizer.iterations == 12
    for a, b in zip(loaded.get_weights(), uninterrupted.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # bit-exact
    assert resumed.history["loss"][0] == history.history["loss"][1]
    assert set(resumed.history) == set(history.history)


def test_a_multi_output_functional_model_predicts_the_same_after_loading(tmp_path):
    a, b = tp.Input((3,)), tp.Input((2,))
    shared = L.Dense(4, activation="tanh")
    h = L.Concatenate()([shared(a), L.Dense(4)(b)])
    model = tp.Model({"a": a, "b": b}, {"score": L.Dense(1)(shared(L.Dense(3)(h))), "hidden": h})
    model.save(tmp_path / "m.keras")
    loaded = tp.models.load_model(tmp_path / "m.keras")
    feed = {"a": np.ones((2, 3), "float32"), "b": np.full((2, 2), 0.5, "float32")}
    got, want = loaded(feed), model(feed)
    assert set(got) == {"score", "hidden"}
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())
    assert not hasattr(loaded, "optimizer")  # saved uncompiled, loaded uncompiled


def test_the_file_holds_config_weights_compile_config_and_optimizer_state(data, tmp_path):
    x, y = data
    model = _compiled("sequential", "adam")
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    with h5py.File(tmp_path / "m.keras", "r") as f:
        assert f.attrs["format"] == b"tapeflow-model" and f.attrs["version"] == 2
        config = json.loads(f["config"][()])
        compile_config = json.loads(f["compile_config"][()])
        assert config["class_name"] == "Sequential"
        assert [layer["class_name"] for layer in config["config"]["layers"]][:2] == ["Dense", "BatchNormalization"]
        assert compile_config["optimizer"]["class_name"] == "Adam"
        assert compile_config["loss"]["class_name"] == "SparseCategoricalCrossentropy"
        assert compile_config["metrics"][0] == "accuracy"
        assert sorted(f["weights/layers"]) == ["batch_normalization", "dense", "dense_1"]
        assert f["optimizer"].attrs["iterations"] == 3
        assert sorted(f["optimizer/slots/0"]) == ["momentum", "velocity", "velocity_hat"]
        assert f["weights/layers/dense/kernel"].dtype == np.float32


def test_load_model_compile_false_skips_the_optimizer(data, tmp_path):
    x, y = data
    model = _compiled("sequential", "adam")
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = tp.models.load_model(tmp_path / "m.keras", compile=False)
    assert not loaded._compiled
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_an_unregistered_subclass_is_named_and_custom_objects_resolve_it(tmp_path):
    model = Unregistered()
    model(np.ones((1, 4), "float32"))
    model.save(tmp_path / "m.keras")
    with pytest.raises(ValueError, match=r"'Unregistered'.*register_serializable"):
        tp.models.load_model(tmp_path / "m.keras")
    loaded = tp.models.load_model(tmp_path / "m.keras", custom_objects={"Unregistered": Unregistered})
    np.testing.assert_array_equal(loaded.predict(np.ones((2, 4))), model.predict(np.ones((2, 4))))


def test_a_model_whose_config_cannot_be_saved_is_refused_and_the_old_file_kept(tmp_path):
    path = tmp_path / "m.keras"
    good = _sequential()
    good.save(path)
    before = path.read_bytes()
    odd = tp.Sequential([tp.Input((2,)), L.Dense(2, activation=lambda t: t * 2.0)])
    with pytest.raises(TypeError, match="cannot be saved.*register_serializable"):
        odd.save(path)
    assert path.read_bytes() == before
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


@tp.saving.register_serializable(package="test_saving")
def doubled(x):
    return 2.0 * x


@tp.saving.register_serializable(package="test_saving")
def squared_error(y_true, y_pred):
    return tp.mean((y_pred - y_true) ** 2, axis=-1)


def test_registered_functions_are_saved_by_name(tmp_path):
    model = tp.Sequential([tp.Input((2,)), L.Dense(3, activation=doubled), L.Dense(1)])
    model.compile(optimizer="sgd", loss=squared_error)
    x, y = np.ones((4, 2), "float32"), np.zeros((4, 1), "float32")
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = tp.models.load_model(tmp_path / "m.keras")
    assert loaded.layers[0].activation is doubled and loaded.loss.fn is squared_error
    assert loaded.evaluate(x, y, verbose=0) == model.evaluate(x, y, verbose=0)  # the loss alone, as Keras


def _rewrite(path, name, text):
    with h5py.File(path, "a") as f:
        del f[name]
        f[name] = text  # a str becomes a variable-length string dataset


def test_loading_never_imports_a_module_named_by_the_file(tmp_path, monkeypatch):
    path = tmp_path / "m.keras"
    _sequential().save(path)
    evil = {"module": "os", "class_name": "system", "registered_name": "os>system", "config": {"command": "true"}}
    with h5py.File(path, "a") as f:
        del f["config"]
        write_text(f, "config", json.dumps(evil))  # with a valid checksum
    imported = []
    real_import = builtins.__import__
    monkeypatch.setattr(
        builtins, "__import__", lambda name, *a, **k: imported.append(name) or real_import(name, *a, **k)
    )
    with pytest.raises(ValueError, match="'os>system'"):
        tp.models.load_model(path)
    assert "os" not in imported and "pickle" not in imported


def test_strings_of_the_wrong_kind_are_refused_before_they_are_read(tmp_path):
    path = tmp_path / "m.keras"
    _sequential().save(path)
    config = h5py.File(path, "r")["config"][()].decode()
    _rewrite(path, "config", config)  # variable-length now
    with pytest.raises(ValueError, match="fixed-length string"):
        tp.models.load_model(path)
    with h5py.File(path, "a") as f:
        del f["config"]
        f["config"] = np.frombuffer(config.encode(), np.uint8)
        f.attrs["format"] = "tapeflow-model"  # variable-length
    with pytest.raises(ValueError, match="fixed-length string"):
        tp.models.load_model(path)


def test_an_object_dataset_among_the_weights_is_refused(tmp_path):
    path = tmp_path / "m.keras"
    _sequential().save(path)
    with h5py.File(path, "a") as f:
        f["weights/extra"] = np.array([b"x"], dtype=object)
    with pytest.raises(ValueError, match="refused"):
        tp.models.load_model(path)


def test_load_weights_reads_the_weights_of_a_model_file(tmp_path):
    source = _sequential()
    source.save(tmp_path / "m.keras")
    target = _sequential()
    assert target.load_weights(tmp_path / "m.keras").ok
    for a, b in zip(source.get_weights(), target.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert tp.saving.register_keras_serializable is tp.saving.register_serializable


def test_not_a_model_file_is_a_clear_error(tmp_path):
    model = _sequential()
    model.save_weights(tmp_path / "w.h5")
    with pytest.raises(ValueError, match="not a tapeflow-model file"):
        tp.models.load_model(tmp_path / "w.h5")
    with pytest.raises(FileNotFoundError, match="no such file"):
        tp.models.load_model(tmp_path / "missing.keras")


# ---------------------------------------------------------- weights by structure
def test_weights_load_by_structure_into_the_same_architecture_built_again(tmp_path):
    first = _sequential()
    first.save_weights(tmp_path / "w.h5")
    second = _sequential()  # its layers are auto-named dense_2, dense_3 ... now
    assert [w.name for w in first.weights] != [w.name for w in second.weights]
    report = second.load_weights(tmp_path / "w.h5")
    assert report.ok and report.matched[:2] == ("layers/dense/kernel", "layers/dense/bias")
    for a, b in zip(first.get_weights(), second.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="missing from the file"):
        second.load_weights(tmp_path / "w.h5", by_name=True)


def test_subclassed_models_are_keyed_by_attribute_path(tmp_path):
    model = Residual()
    model(np.ones((2, 6), "float32"))
    keys = list(tp.saving.weight_paths(model))
    assert keys[:2] == ["hidden/kernel", "hidden/bias"]
    assert "blocks/dense_1/kernel" in keys and "norm/moving_variance" in keys
    model.save_weights(tmp_path / "w.h5")
    again = Residual()
    again(np.ones((2, 6), "float32"))
    again.load_weights(tmp_path / "w.h5")
    np.testing.assert_array_equal(again.predict(np.ones((3, 6))), model.predict(np.ones((3, 6))))


def test_by_name_matches_full_names(tmp_path):
    def build(names):
        return tp.Sequential([tp.Input((3,)), *(L.Dense(3, name=n) for n in names)])

    source = build(["a", "b"])
    source.save_weights(tmp_path / "w.h5")
    reordered = build(["b", "a"])  # same structure, names swapped
    reordered.load_weights(tmp_path / "w.h5", by_name=True)
    np.testing.assert_array_equal(reordered.layers[0].kernel.numpy(), source.layers[1].kernel.numpy())
    np.testing.assert_array_equal(reordered.layers[1].kernel.numpy(), source.layers[0].kernel.numpy())


def test_a_mismatch_names_every_weight_and_changes_nothing(tmp_path):
    source = tp.Sequential([tp.Input((3,)), L.Dense(2), L.Dense(4)])
    source.save_weights(tmp_path / "w.h5")
    target = tp.Sequential([tp.Input((3,)), L.Dense(2), L.Dense(5), L.Dense(1)])
    before = target.get_weights()
    with pytest.raises(tp.io.WeightsMismatchError) as err:
        target.load_weights(tmp_path / "w.h5")
    message = str(err.value)
    assert "missing from the file: layers/dense_2/kernel, layers/dense_2/bias" in message
    assert "layers/dense_1/kernel (file (2, 4), model (2, 5))" in message
    assert "no weight was changed" in message
    for a, b in zip(before, target.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    report = target.load_weights(tmp_path / "w.h5", strict=False)
    assert report.matched == ("layers/dense/kernel", "layers/dense/bias")
    np.testing.assert_array_equal(target.layers[0].kernel.numpy(), source.layers[0].kernel.numpy())


def test_files_of_the_name_keyed_layout_still_load_by_name(tmp_path):
    source = tp.Sequential([tp.Input((3,)), L.Dense(2, name="keep")])
    tp.io.save_weights(source, tmp_path / "old.h5")  # version 1: keyed by name
    target = tp.Sequential([tp.Input((3,)), L.Dense(2, name="keep")])
    assert target.load_weights(tmp_path / "old.h5").matched == ("keep/kernel", "keep/bias")
    np.testing.assert_array_equal(target.get_weights()[0], source.get_weights()[0])
