"""Model and Layer properties, add_weight, add_loss, cloning, configs and ModelCheckpoint,
each checked against Keras 3 itself (torch backend) on the same small models."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

RNG = np.random.default_rng(0)
XA = RNG.standard_normal((6, 3)).astype("float32")
XB = RNG.standard_normal((6, 2)).astype("float32")


# ------------------------------------------------------------------ models built in both
def _sequential(lib):
    return lib.Sequential(
        [
            lib.Input((3,), name="x"),
            lib.layers.Dense(4, activation="relu", name="d1"),
            lib.layers.BatchNormalization(name="bn"),
            lib.layers.Dense(2, name="out"),
        ],
        name="seq",
    )


def _two_inputs(lib):
    a, b = lib.Input((3,), name="a"), lib.Input((2,), name="b")
    h = lib.layers.Dense(4, activation="tanh", name="d1")(a)
    n = lib.layers.BatchNormalization(name="bn")(b)
    joined = lib.layers.Concatenate(name="cat")([h, n])
    return lib.Model([a, b], [lib.layers.Dense(1, name="out")(joined), joined], name="two")


def _subclassed(lib):
    class Mlp(lib.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = lib.layers.Dense(4, activation="relu", name="d1")
            self.norm = lib.layers.BatchNormalization(name="bn")
            self.head = lib.layers.Dense(2, name="out")

        def call(self, x, training=None):
            return self.head(self.norm(self.hidden(x), training=training))

    model = Mlp(name="mlp")
    model(XA)
    return model


def _short(path):
    """'<layer>/<weight>' of a Keras variable path (which starts with the model's name in a subclassed model)."""
    return "/".join(path.split("/")[-2:])


def _describe(model, paths):
    return {
        "layers": [(layer.name, type(layer).__name__) for layer in model.layers],
        "weights": [(paths(w), tuple(w.shape)) for w in model.weights],
        "trainable": [paths(w) for w in model.trainable_variables],
        "non_trainable": [paths(w) for w in model.non_trainable_variables],
    }


@pytest.mark.parametrize("build", [_sequential, _two_inputs, _subclassed], ids=["sequential", "functional", "subclass"])
def test_layers_weights_and_variables_are_listed_as_keras_lists_them(build):
    ours, theirs = build(tp), build(keras)
    assert _describe(ours, lambda w: w.name) == _describe(theirs, lambda w: _short(w.path))
    # the same weights in the same order give the same outputs
    theirs.set_weights(ours.get_weights())
    inputs = XA if build is not _two_inputs else [XA, XB]
    for mine, reference in zip(tp.tree.flatten(ours(inputs)), tp.tree.flatten(theirs(inputs)), strict=True):
        np.testing.assert_allclose(np.asarray(mine), reference.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("build", [_sequential, _two_inputs], ids=["sequential", "functional"])
def test_inputs_and_outputs_have_keras_shapes_and_structure(build):
    ours, theirs = build(tp), build(keras)
    for attr in ("inputs", "outputs"):
        assert [t.shape for t in getattr(ours, attr)] == [tuple(t.shape) for t in getattr(theirs, attr)]
    if build is _two_inputs:
        assert ours.input == ours.inputs and [t.name for t in ours.input] == ["a", "b"]
        assert [t.shape for t in ours.output] == [tuple(t.shape) for t in theirs.output]
    else:  # a Sequential with an Input also has `input` and `output` (Keras 3 raises AttributeError)
        assert ours.input is ours.inputs[0] and ours.output is ours.outputs[0]


def test_a_layer_output_builds_a_sub_model_as_in_keras():
    for lib in (tp, keras):
        model = _sequential(lib)
        features = lib.Model(model.inputs, model.layers[0].output)
        assert tuple(features.outputs[0].shape) == (None, 4)
        assert features(XA).shape == (6, 4)
    ours = _two_inputs(tp)
    dense = ours.layers[2]
    assert (dense.name, dense.input.name) == ("d1", "a") and dense.output.shape == (None, 4)
    assert ours.layers[4].input == [ours.layers[2].output, ours.layers[3].output]  # the Concatenate


def test_undefined_input_and_output_raise_attribute_errors_as_keras():
    for lib in (tp, keras):
        with pytest.raises(AttributeError):
            _ = lib.layers.Dense(3).output
        with pytest.raises(AttributeError):
            _ = lib.Sequential([lib.layers.Dense(2)]).inputs
        with pytest.raises(AttributeError):
            _ = _subclassed(lib).outputs
    with pytest.raises(
        AttributeError, match="The layer dense_probe has never been called and thus has no defined input"
    ):
        _ = tp.layers.Dense(3, name="dense_probe").input


def test_functional_summary_lists_the_input_layers_first():
    lines = []
    _two_inputs(tp).summary(print_fn=lines.append)
    rows = [line.split()[0] for line in lines[0].splitlines()[4:10]]
    assert rows == ["a", "b", "d1", "bn", "cat", "out"]
    assert "(None, 3)" in lines[0].splitlines()[4] and "Total params: 31" in lines[0]  # Keras: 31


def test_functional_files_keep_their_format_and_load(tmp_path):
    model = _two_inputs(tp)
    config = model.get_config()
    assert [c["class_name"] for c in config["layers"]] == ["Dense", "BatchNormalization", "Concatenate", "Dense"]
    path = tmp_path / "two.keras"
    model.save(path)
    loaded = tp.models.load_model(path)
    assert [layer.name for layer in loaded.layers] == ["a", "b", "d1", "bn", "cat", "out"]
    for mine, again in zip(model([XA, XB]), loaded([XA, XB]), strict=True):
        np.testing.assert_array_equal(mine.numpy(), again.numpy())


# ------------------------------------------------------------------ add_weight
def test_add_weight_takes_keras_arguments_and_names_unnamed_weights():
    layer = tp.layers.Layer(name="probe")
    reference = keras.layers.Layer(name="probe")
    for kwargs in (
        {"shape": (2, 3)},
        {"shape": (4,), "initializer": "ones", "trainable": False},
        {"shape": (), "dtype": "int32", "trainable": False},
        {"shape": (3,), "regularizer": "l2", "aggregation": "none", "autocast": True, "name": "scaled"},
    ):
        mine, theirs = layer.add_weight(**kwargs), reference.add_weight(**kwargs)
        assert (tuple(mine.shape), mine.dtype.name, mine.trainable) == (
            tuple(theirs.shape),
            theirs.dtype,
            theirs.trainable,
        )
    assert [w.name for w in layer.weights] == ["probe/variable", "probe/scaled", "probe/variable_1", "probe/variable_2"]
    assert len(layer.losses) == 1 and len(reference.losses) == 1
    np.testing.assert_allclose(float(layer.losses[0]), 0.01 * float(np.sum(layer.weights[1].numpy() ** 2)), rtol=1e-6)
    # Keras 3's positional form (shape, initializer, dtype), and tapeflow's (name, shape, initializer, ...)
    assert tuple(layer.add_weight((2,), "zeros", "float64").shape) == (2,)
    assert layer.add_weight("named", (1,), "ones").name == "probe/named"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"shape": (2,), "constraint": "no_such_constraint"}, "no_such_constraint"),
        ({"shape": (2,), "aggregation": "sum"}, "aggregation"),
        ({"shape": (2,), "overwrite_with_gradient": True}, "overwrite_with_gradient"),
        ({"shape": (2,), "name": "a/b"}, "name"),
        ({"shape": (None, 2)}, "fully known shape"),
    ],
)
def test_add_weight_refuses_what_it_does_not_support(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tp.layers.Layer(name="probe").add_weight(**kwargs)


def test_add_weight_refuses_unknown_and_doubled_arguments():
    layer = tp.layers.Layer(name="probe")
    with pytest.raises(TypeError):
        layer.add_weight(shape=(2,), seed=1)
    with pytest.raises(TypeError, match="shape given both"):
        layer.add_weight((2,), shape=(3,))


# ------------------------------------------------------------------ add_loss
def _penalized(lib):
    class Penalty(lib.layers.Layer):
        def build(self, input_shape):
            self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

        def call(self, x):
            self.add_loss(0.1 * lib.ops.sum(lib.ops.square(x * self.scale)))
            return x * self.scale

    inputs = lib.Input((3,), name="x")
    outputs = lib.layers.Dense(1, name="out")(Penalty(name="penalty")(inputs))
    return lib.Model(inputs, outputs, name="penalized")


def test_add_loss_in_call_is_in_model_losses_and_is_cleared_by_the_next_call():
    for lib in (tp, keras):
        model = _penalized(lib)
        model(XA)
        first = [float(v) for v in model.losses]
        model(XA[:2])
        assert len(first) == 1 and len(model.losses) == 1
        np.testing.assert_allclose(first[0], 0.1 * float(np.sum(XA**2)), rtol=1e-5)
        np.testing.assert_allclose(float(model.losses[0]), 0.1 * float(np.sum(XA[:2] ** 2)), rtol=1e-5)
    with pytest.raises(ValueError, match="a loss must be a tensor"):
        tp.layers.Layer(name="probe").add_loss(1.0)


@pytest.mark.parametrize("jit", [False, True])
def test_add_loss_counts_in_training_as_in_keras(jit):
    y = RNG.standard_normal((6, 1)).astype("float32")
    ours, theirs = _penalized(tp), _penalized(keras)
    theirs.set_weights(ours.get_weights())
    ours.compile(tp.optimizers.SGD(0.05), "mse", jit=jit)
    theirs.compile(keras.optimizers.SGD(0.05), "mse")
    mine = ours.fit(XA, y, batch_size=6, epochs=2, shuffle=False, verbose=0).history["loss"]
    reference = theirs.fit(XA, y, batch_size=6, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(mine, reference, rtol=1e-5)
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ from_config, clone_model
class Scale(tp.layers.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor


def test_from_config_takes_custom_objects():
    x = tp.Input((3,), name="x")
    model = tp.Model(x, tp.layers.Dense(2, name="out")(Scale(3.0, name="scale")(x)))
    config = model.get_config()
    with pytest.raises(ValueError, match="Scale"):
        tp.Model.from_config(config)
    again = tp.Model.from_config(config, custom_objects={"Scale": Scale})
    assert [type(layer).__name__ for layer in again.layers] == ["InputLayer", "Scale", "Dense"]
    assert again.layers[1].factor == 3.0
    again.set_weights(model.get_weights())
    np.testing.assert_allclose(again(XA).numpy(), model(XA).numpy(), rtol=1e-6)
    seq = tp.Sequential([tp.Input((3,)), Scale(0.5)])
    assert tp.Sequential.from_config(seq.get_config(), custom_objects={"Scale": Scale}).layers[0].factor == 0.5
    assert type(tp.models.model_from_json(model.to_json(), custom_objects={"Scale": Scale})).__name__ == "Functional"


def _check_clone(model, clone, inputs):
    assert [type(layer).__name__ for layer in clone.layers] == [type(layer).__name__ for layer in model.layers]
    assert [w.shape for w in clone.weights] == [w.shape for w in model.weights]
    assert not any(a is b for a, b in zip(clone.weights, model.weights, strict=True))
    kernels = [(a, b) for a, b in zip(clone.get_weights(), model.get_weights(), strict=True) if a.ndim == 2]
    assert kernels and not any(np.array_equal(a, b) for a, b in kernels)  # newly initialized
    clone.set_weights(model.get_weights())
    for a, b in zip(tp.tree.flatten(clone(inputs)), tp.tree.flatten(model(inputs)), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


@pytest.mark.parametrize("build", [_sequential, _two_inputs], ids=["sequential", "functional"])
def test_clone_model_gives_new_weights_and_the_same_architecture_as_keras(build):
    ours, theirs = build(tp), build(keras)
    mine, reference = tp.models.clone_model(ours), keras.models.clone_model(theirs)
    assert [layer.name for layer in mine.layers] == [layer.name for layer in reference.layers]
    assert [t.shape for t in mine.outputs] == [tuple(t.shape) for t in reference.outputs]
    _check_clone(ours, mine, XA if build is _sequential else [XA, XB])


def test_clone_model_shares_what_is_shared_and_takes_clone_function_and_inputs():
    x = tp.Input((3,), name="x")
    shared = tp.layers.Dense(3, name="shared")
    model = tp.Model(x, shared(shared(x)))
    clone = tp.models.clone_model(model)
    assert len(clone.layers) == 2 and len(clone.weights) == 2
    _check_clone(model, clone, XA)
    renamed = tp.models.clone_model(
        model, clone_function=lambda layer: type(layer).from_config({**layer.get_config(), "name": "copy"})
    )
    assert [layer.name for layer in renamed.layers] == ["x", "copy"]
    new_input = tp.Input((3,), name="fresh")
    assert tp.models.clone_model(model, input_tensors=new_input).inputs == [new_input]
    seq = _sequential(tp)
    seq_input = tp.Input((3,), name="seq_in")
    assert tp.models.clone_model(seq, input_tensors=[seq_input]).inputs == [seq_input]


def test_clone_model_of_a_subclassed_model_uses_its_config():
    class Wide(tp.Model):
        def __init__(self, width=3, **kwargs):
            super().__init__(**kwargs)
            self.dense = tp.layers.Dense(width)

        def call(self, x):
            return self.dense(x)

    model = Wide(5, name="wide")
    model(XA)
    clone = tp.models.clone_model(model)
    assert type(clone) is Wide and clone.dense.units == 5 and clone is not model
    with pytest.raises(ValueError, match="only supported for Sequential and functional"):
        tp.models.clone_model(model, clone_function=lambda layer: layer)
    with pytest.raises(ValueError):
        keras.models.clone_model(_subclassed(keras), clone_function=lambda layer: layer)


def test_clone_model_of_a_compiled_model_is_compiled_with_a_fresh_optimizer():
    model = _sequential(tp)
    model.compile(tp.optimizers.Adam(0.01), "mse", metrics=["mae"])
    clone = tp.models.clone_model(model)
    assert clone.optimizer is not model.optimizer and clone.optimizer.get_config() == model.optimizer.get_config()
    history = clone.fit(XA, np.zeros((6, 2), "float32"), epochs=1, verbose=0).history
    assert set(history) == {"loss", "mae"}


# ------------------------------------------------------------------ ModelCheckpoint
def _fit_with(model, callback):
    model.compile(tp.optimizers.SGD(0.05), "mse")
    model.fit(XA, np.ones((6, 2), "float32"), batch_size=3, epochs=2, verbose=0, callbacks=[callback])


def test_model_checkpoint_writes_a_whole_model_by_default(tmp_path):
    model = _sequential(tp)
    checkpoint = tp.callbacks.ModelCheckpoint(str(tmp_path / "m.keras"))
    assert checkpoint.save_weights_only is keras.callbacks.ModelCheckpoint(str(tmp_path / "k.keras")).save_weights_only
    _fit_with(model, checkpoint)
    loaded = tp.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.predict(XA, verbose=0), model.predict(XA, verbose=0))
    assert loaded.optimizer.iterations == model.optimizer.iterations == 4


@pytest.mark.parametrize("weights_only", [False, True])
def test_model_checkpoint_writes_weights_to_a_weights_path(tmp_path, weights_only):
    model = _sequential(tp)
    _fit_with(model, tp.callbacks.ModelCheckpoint(str(tmp_path / "w.weights.h5"), save_weights_only=weights_only))
    fresh = _sequential(tp)
    fresh.load_weights(str(tmp_path / "w.weights.h5"))
    for a, b in zip(fresh.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError):
        tp.models.load_model(tmp_path / "w.weights.h5")


@pytest.mark.parametrize("path, weights_only", [("m.h5", True), ("m.keras", True), ("m.tf", False), ("m", False)])
def test_model_checkpoint_refuses_the_suffixes_keras_refuses(tmp_path, path, weights_only):
    with pytest.raises(ValueError, match="filepath"):
        keras.callbacks.ModelCheckpoint(str(tmp_path / path), save_weights_only=weights_only)
    with pytest.raises(ValueError, match="filepath"):
        tp.callbacks.ModelCheckpoint(str(tmp_path / path), save_weights_only=weights_only)
