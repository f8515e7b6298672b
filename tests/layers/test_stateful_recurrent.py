"""stateful=True on the recurrent layers against Keras 3's (torch backend): consecutive calls
carry the final states, reset_state() starts over, fit(shuffle=False) and predict carry them
across batches (frozen and eager), and the errors for an unknown or changed batch size."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")
L = tp.layers
NAMES = ["SimpleRNN", "LSTM", "GRU"]


def _pair(name, kwargs, shape, rng, dtype="float64"):
    """The same stateful layer in tapeflow and Keras, built for `shape`, with the same random weights."""
    ours = getattr(L, name)(stateful=True, dtype=dtype, **kwargs)
    ours.build(shape)
    theirs = getattr(keras.layers, name)(stateful=True, dtype=dtype, **kwargs)
    theirs.build(shape)
    weights = [rng.normal(scale=0.5, size=w.shape) for w in ours.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


# Keras's recurrent steps on the torch backend agree with a float64 NumPy loop to about 1e-7 only,
# so outputs are compared with it to 1e-6; tapeflow against itself, to rounding.


def _numpy(out):
    if isinstance(out, list | tuple):
        return [_numpy(o) for o in out]
    return out.detach().numpy() if isinstance(out, torch.Tensor) else out.numpy()


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"return_sequences": True, "go_backwards": True}, {"return_state": True}],
    ids=["last", "backwards_sequences", "with_states"],
)
@pytest.mark.parametrize("name", NAMES)
def test_consecutive_calls_carry_the_states_as_keras(name, kwargs, training, rng):
    ours, theirs = _pair(name, {"units": 4, **kwargs}, (3, 5, 2), rng)
    xs = [rng.normal(size=(3, 5, 2)) for _ in range(3)]
    first = None
    for x in xs:
        out = _numpy(ours(tp.tensor(x), training=training))
        ref = _numpy(theirs(torch.tensor(x), training=training))
        np.testing.assert_allclose(out, ref, atol=1e-6)
        first = out if first is None else first
    for state, ref in zip(ours.states, theirs.states, strict=True):
        np.testing.assert_allclose(state.numpy(), _numpy(ref.value), atol=1e-6)
    ours.reset_states()
    assert all(not state.numpy().any() for state in ours.states)
    np.testing.assert_allclose(_numpy(ours(tp.tensor(xs[0]), training=training)), first, rtol=1e-12)
    ours.reset_state()
    np.testing.assert_allclose(_numpy(ours(tp.tensor(xs[0]), training=training)), first, rtol=1e-12)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", NAMES)
def test_masked_steps_and_an_explicit_initial_state_as_keras(name, training, rng):
    ours, theirs = _pair(name, {"units": 3}, (2, 4, 2), rng)
    sizes = 2 if name == "LSTM" else 1
    mask = np.array([[True, True, False, False], [True, False, True, True]])
    given = [rng.normal(size=(2, 3)) for _ in range(sizes)]
    calls = [
        {"mask": mask},
        {"initial_state": given},
        {},
        {"initial_state": given, "mask": mask},
        {},
    ]
    for call in calls:
        x = rng.normal(size=(2, 4, 2))
        out = ours(
            tp.tensor(x),
            training=training,
            **{k: [tp.tensor(s) for s in v] if k == "initial_state" else v for k, v in call.items()},
        )
        converted = {
            k: [torch.tensor(s) for s in v] if k == "initial_state" else torch.tensor(v) for k, v in call.items()
        }
        ref = theirs(torch.tensor(x), training=training, **converted)
        np.testing.assert_allclose(_numpy(out), _numpy(ref), atol=1e-6)
        for state, kept in zip(ours.states, theirs.states, strict=True):
            np.testing.assert_allclose(state.numpy(), _numpy(kept.value), atol=1e-6)


def test_bidirectional_and_conv_lstm_carry_their_states_as_keras(rng):
    ours = L.Bidirectional(L.LSTM(3, stateful=True, return_sequences=True, dtype="float64"), dtype="float64")
    theirs = keras.layers.Bidirectional(
        keras.layers.LSTM(3, stateful=True, return_sequences=True, dtype="float64"), dtype="float64"
    )
    conv = L.ConvLSTM1D(2, 3, padding="same", stateful=True, dtype="float64")
    keras_conv = keras.layers.ConvLSTM1D(2, 3, padding="same", stateful=True, dtype="float64")
    for a, b, shape in ((ours, theirs, (2, 4, 3)), (conv, keras_conv, (2, 3, 5, 2))):
        a.build(shape)
        b.build(shape)
        weights = [rng.normal(scale=0.5, size=w.shape) for w in a.get_weights()]
        a.set_weights(weights)
        b.set_weights(weights)
        for _ in range(3):
            x = rng.normal(size=shape)
            np.testing.assert_allclose(_numpy(a(tp.tensor(x))), _numpy(b(torch.tensor(x))), atol=1e-6)
        assert [s.shape for s in a.states] == [tuple(s.shape) for s in b.states]
        a.reset_states()
        assert all(not s.numpy().any() for s in a.states)
    assert len(ours.states) == 4
    with pytest.raises(AttributeError, match="stateful"):
        L.Bidirectional(L.GRU(2)).reset_state()


@pytest.mark.parametrize("name", NAMES)
def test_states_are_not_weights_and_the_config_keeps_stateful(name, tmp_path):
    model = tp.Sequential([tp.Input(batch_shape=(2, 3, 4)), getattr(L, name)(5, stateful=True), L.Dense(1)])
    layer = model.layers[0]
    keras_model = keras.Sequential(
        [keras.Input(batch_shape=(2, 3, 4)), getattr(keras.layers, name)(5, stateful=True), keras.layers.Dense(1)]
    )
    assert len(model.weights) == len(keras_model.weights) == 5
    assert not layer.non_trainable_weights and all(not s.trainable for s in layer.states)
    model(np.ones((2, 3, 4), "float32"))
    kept = [s.numpy().copy() for s in layer.states]
    path = tmp_path / "stateful.weights.h5"
    model.save_weights(path)
    layer.reset_states()
    model.load_weights(path)  # the weights only: the states stay as they are
    assert all(not s.numpy().any() for s in layer.states) and any(k.any() for k in kept)
    config = layer.get_config()
    assert config["stateful"] is True and keras_model.layers[0].get_config()["stateful"] is True
    assert type(layer).from_config(config).stateful
    assert not hasattr(model, "reset_states") and not hasattr(keras_model, "reset_states")


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_or_changed_batch_size_fails_as_in_keras(name):
    pattern = "batch size must be static"
    for module in (L, keras.layers):
        with pytest.raises(ValueError, match=pattern):
            getattr(module, name)(3, stateful=True).build((None, 4, 5))
    with pytest.raises(ValueError, match=pattern):
        getattr(L, name)(3, stateful=True)(tp.Input((4, 5)))
    with pytest.raises(ValueError, match=pattern):
        getattr(keras.layers, name)(3, stateful=True)(keras.Input((4, 5)))
    ours, theirs = getattr(L, name)(3, stateful=True), getattr(keras.layers, name)(3, stateful=True)
    ours(np.ones((2, 4, 5), "float32"))
    theirs(np.ones((2, 4, 5), "float32"))
    with pytest.raises(ValueError, match="batch size"):
        ours(np.ones((3, 4, 5), "float32"))
    with pytest.raises(ValueError, match="batch size"):
        theirs(np.ones((3, 4, 5), "float32"))


def _models(name, weights=None):
    # Keras's own whole-sequence LSTM and GRU on the torch backend (use_cudnn="auto") reuse the
    # state variables that the step then overwrites, which torch's backward refuses: its
    # step-by-step loop (use_cudnn=False, the same math) is the reference.
    options = {} if name == "SimpleRNN" else {"use_cudnn": False}

    def make(module, model_class):
        return model_class(
            [
                module.Input(batch_shape=(4, 5, 3)),
                getattr(module.layers, name)(6, stateful=True, return_sequences=True, **options),
                getattr(module.layers, name)(4, stateful=True, **options),
                module.layers.Dense(1),
            ]
        )

    ours, theirs = make(tp, tp.Sequential), make(keras, keras.Sequential)
    weights = weights or [np.random.default_rng(3).normal(scale=0.4, size=w.shape) for w in ours.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["frozen", "eager"])
@pytest.mark.parametrize("name", NAMES)
def test_fit_carries_the_states_across_batches_as_keras(name, run_eagerly, rng):
    x = rng.normal(size=(16, 5, 3)).astype("float32")
    y = rng.normal(size=(16, 1)).astype("float32")
    ours, theirs = _models(name)
    ours.compile(tp.optimizers.SGD(0.1), "mse", run_eagerly=run_eagerly)
    theirs.compile(keras.optimizers.SGD(0.1), "mse")
    history = ours.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    reference = theirs.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], reference.history["loss"], rtol=1e-5, atol=1e-6)
    for w, ref in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-5)
    for layer, keras_layer in zip(ours.layers[:2], theirs.layers[:2], strict=True):
        for state, ref in zip(layer.states, keras_layer.states, strict=True):
            np.testing.assert_allclose(state.numpy(), _numpy(ref.value), rtol=1e-5, atol=1e-5)
    # predict and evaluate go on from the states training left, batch after batch
    np.testing.assert_allclose(
        ours.predict(x[:12], batch_size=4, verbose=0), theirs.predict(x[:12], batch_size=4, verbose=0), atol=1e-5
    )
    ours.layers[0].reset_states()
    theirs.layers[0].reset_states()
    np.testing.assert_allclose(
        ours.evaluate(x, y, batch_size=4, verbose=0), theirs.evaluate(x, y, batch_size=4, verbose=0), rtol=1e-5
    )


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["frozen", "eager"])
def test_predict_carries_the_states_across_batches_as_keras(run_eagerly, rng):
    ours, theirs = _models("LSTM")
    ours.compile(run_eagerly=run_eagerly)
    x = rng.normal(size=(12, 5, 3)).astype("float32")
    first = ours.predict(x, batch_size=4, verbose=0)
    np.testing.assert_allclose(first, theirs.predict(x, batch_size=4, verbose=0), atol=1e-6)
    np.testing.assert_allclose(
        ours.predict(x, batch_size=4, verbose=0), theirs.predict(x, batch_size=4, verbose=0), atol=1e-6
    )
    assert not np.allclose(first[:4], first[8:])  # the same model sees different histories
    for layer in ours.layers[:2]:
        layer.reset_state()
    np.testing.assert_allclose(ours.predict(x, batch_size=4, verbose=0), first, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_stateful_layers_carry_their_states_on_a_device(name, accelerator, rng):
    x = rng.normal(size=(3, 2, 4, 3)).astype("float32")
    outputs = {}
    for where in ("cpu:0", accelerator):
        tp.random.seed(1)
        with tp.device(where):
            model = tp.Sequential([tp.Input(batch_shape=(2, 4, 3)), getattr(L, name)(5, stateful=True), L.Dense(1)])
            model.compile(tp.optimizers.SGD(0.1), "mse")
            model.fit(x[:2].reshape(4, 4, 3), np.ones((4, 1), "float32"), batch_size=2, shuffle=False, verbose=0)
            eager = [model(tp.tensor(x[2]), training=training).numpy() for training in (False, True)]
            outputs[where] = [*eager, model.predict(x[2], verbose=0), *[s.numpy() for s in model.layers[0].states]]
            model.layers[0].reset_states()
            assert all(not s.numpy().any() for s in model.layers[0].states)
    for ours, cpu in zip(outputs[accelerator], outputs["cpu:0"], strict=True):
        np.testing.assert_allclose(ours, cpu, rtol=1e-5, atol=1e-6)
