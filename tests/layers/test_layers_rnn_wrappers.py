"""Bidirectional, RNN over a list of cells (StackedRNNCells), the functional merge forms and
Sequential.pop, each checked against Keras 3 itself (torch backend) with the same weights:
outputs and gradients (inputs and weights) in float64, eagerly and frozen."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import tapeflow as tp  # noqa: E402

L = tp.layers
TOL = 1e-5  # Keras keeps some float32 steps (its SimpleRNN) even in float64
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _flat(values) -> list:
    if isinstance(values, list | tuple):
        return [leaf for value in values for leaf in _flat(value)]
    return [values]


def _keras_run(layer, x, projections, **kwargs):
    """Keras outputs (flat) and gradients of sum(out * proj) over inputs and trainable weights."""
    tx = torch.tensor(x, requires_grad=True)
    kwargs = {k: torch.tensor(v) for k, v in kwargs.items()}
    outs = _flat(layer(tx, **kwargs))
    loss = sum((o * torch.tensor(p)).sum() for o, p in zip(outs, projections, strict=True))
    loss.backward()
    grads = [tx.grad.numpy()] + [w.value.grad.numpy() for w in layer.trainable_weights]
    return [o.detach().numpy() for o in outs], grads


def _ours_run(layer, x, projections, **kwargs):
    tx = tp.tensor(x)
    kwargs = {k: tp.tensor(v) for k, v in kwargs.items()}
    with tp.GradientTape() as tape:
        tape.watch(tx)
        outs = _flat(layer(tx, **kwargs))
        loss = sum(tp.sum(o * tp.tensor(p)) for o, p in zip(outs, projections, strict=True))
    grads = tape.gradient(loss, [tx] + layer.trainable_weights)
    return [o.numpy() for o in outs], [g.numpy() for g in grads]


def assert_matches_keras(ours, theirs, x, rng, **kwargs):
    """Copy Keras' weights into ours, then compare outputs, gradients and the frozen outputs."""
    k_outs = _flat(theirs(torch.tensor(x), **{k: torch.tensor(v) for k, v in kwargs.items()}))
    ours(tp.tensor(x), **{k: tp.tensor(v) for k, v in kwargs.items()})
    assert [w.shape for w in ours.get_weights()] == [tuple(w.shape) for w in theirs.get_weights()]
    ours.set_weights(theirs.get_weights())
    projections = [rng.normal(size=tuple(o.shape)) for o in k_outs]
    k_outs, k_grads = _keras_run(theirs, x, projections, **kwargs)
    o_outs, o_grads = _ours_run(ours, x, projections, **kwargs)
    for a, b in zip(o_outs + o_grads, k_outs + k_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)
    mask = kwargs.get("mask")
    graph = tp.freeze(
        lambda t: ours(t, mask=None if mask is None else tp.tensor(mask)), tp.TensorSpec(x.shape, "float64")
    )
    for a, b in zip(_flat(graph(x)), k_outs, strict=True):
        np.testing.assert_allclose(np.asarray(a.numpy() if hasattr(a, "numpy") else a), b, rtol=TOL, atol=TOL)


RNNS = {
    "LSTM": (L.LSTM, keras.layers.LSTM),
    "GRU": (L.GRU, keras.layers.GRU),
    "SimpleRNN": (L.SimpleRNN, keras.layers.SimpleRNN),
}


@pytest.mark.parametrize("kind", sorted(RNNS))
@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave", None])
@pytest.mark.parametrize("sequences, state", [(False, False), (True, False), (True, True), (False, True)])
def test_bidirectional_matches_keras(rng, kind, merge_mode, sequences, state):
    ours_cls, keras_cls = RNNS[kind]
    args = {"units": 3, "return_sequences": sequences, "return_state": state, "dtype": "float64"}
    ours = L.Bidirectional(ours_cls(**args), merge_mode=merge_mode, dtype="float64")
    theirs = keras.layers.Bidirectional(keras_cls(**args), merge_mode=merge_mode, dtype="float64")
    assert_matches_keras(ours, theirs, rng.normal(size=(2, 4, 5)), rng)


def test_bidirectional_with_a_mask_and_a_given_backward_layer_matches_keras(rng):
    mask = np.array([[True, True, True, False], [True, True, False, False]])
    ours = L.Bidirectional(
        L.LSTM(3, return_sequences=True, dtype="float64"),
        backward_layer=L.GRU(3, return_sequences=True, go_backwards=True, dtype="float64"),
        dtype="float64",
    )
    theirs = keras.layers.Bidirectional(
        keras.layers.LSTM(3, return_sequences=True, dtype="float64"),
        backward_layer=keras.layers.GRU(3, return_sequences=True, go_backwards=True, dtype="float64"),
        dtype="float64",
    )
    assert_matches_keras(ours, theirs, rng.normal(size=(2, 4, 5)), rng, mask=mask)


def test_bidirectional_names_config_and_symbolic_shapes_follow_keras():
    ours = L.Bidirectional(L.LSTM(3, return_state=True, name="enc"), merge_mode=None, name="bi")
    theirs = keras.layers.Bidirectional(keras.layers.LSTM(3, return_state=True, name="enc"), merge_mode=None, name="bi")
    assert ours.forward_layer.name == theirs.forward_layer.name == "forward_enc"
    assert ours.backward_layer.name == theirs.backward_layer.name == "backward_enc"
    assert ours.get_config().keys() == theirs.get_config().keys()
    assert ours.get_config()["layer"]["config"]["go_backwards"] is False
    assert ours.get_config()["backward_layer"]["config"]["go_backwards"] is True
    ours_out = ours(L.Input((None, 4)))
    theirs_out = theirs(keras.Input((None, 4)))
    assert [o.shape for o in ours_out] == [tuple(o.shape) for o in theirs_out]
    ours(tp.ones((1, 2, 4)))
    assert [w.name for w in ours.weights] == [w.path.removeprefix(theirs.name + "/") for w in theirs.weights]


def test_bidirectional_initial_state_and_weights_argument(rng):
    x = rng.normal(size=(2, 3, 4))
    states = [rng.normal(size=(2, 3)) for _ in range(4)]
    ours = L.Bidirectional(L.LSTM(3, dtype="float64"), dtype="float64")
    theirs = keras.layers.Bidirectional(keras.layers.LSTM(3, dtype="float64"), dtype="float64")
    theirs(torch.tensor(x))
    copy = L.Bidirectional(L.LSTM(3, dtype="float64"), weights=theirs.get_weights(), dtype="float64")
    copy(tp.tensor(x))
    ours(tp.tensor(x))
    ours.set_weights(theirs.get_weights())
    want = theirs(torch.tensor(x), initial_state=[torch.tensor(s) for s in states]).detach().numpy()
    got = ours(tp.tensor(x), initial_state=[tp.tensor(s) for s in states]).numpy()
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    for a, b in zip(copy.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bidirectional_bad_arguments_name_the_layer():
    with pytest.raises(ValueError, match="merge_mode.*'max'"):
        L.Bidirectional(L.LSTM(2), merge_mode="max", name="bi")
    with pytest.raises(TypeError, match="bi: layer"):
        L.Bidirectional("lstm", name="bi")
    with pytest.raises(ValueError, match="go_backwards"):
        L.Bidirectional(L.LSTM(2), backward_layer=L.LSTM(2), name="bi")
    with pytest.raises(ValueError, match="return_sequences"):
        L.Bidirectional(L.LSTM(2), backward_layer=L.LSTM(2, go_backwards=True, return_sequences=True))


def test_bidirectional_trains_in_a_model_and_survives_save_and_load(rng, tmp_path):
    model = tp.Sequential([tp.Input((4, 3)), L.Bidirectional(L.GRU(2, return_sequences=True)), L.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    x = rng.normal(size=(8, 4, 3)).astype("float32")
    model.fit(x, rng.normal(size=(8, 4, 1)).astype("float32"), epochs=1, verbose=0)
    path = os.fspath(tmp_path / "bi.keras")
    model.save(path)
    loaded = tp.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------- RNN over a list of cells
def _cells(lib):
    return [lib.layers.SimpleRNNCell(3, dtype="float64"), lib.layers.LSTMCell(2, dtype="float64")]


@pytest.mark.parametrize("backwards", [False, True])
def test_rnn_of_a_list_of_cells_matches_keras(rng, backwards):
    args = {"return_sequences": True, "return_state": True, "go_backwards": backwards, "dtype": "float64"}
    ours = L.RNN(_cells(tp), **args)
    theirs = keras.layers.RNN(_cells(keras), **args)
    assert isinstance(ours.cell, L.StackedRNNCells) and ours.cell.state_size == [3, 2, 2]
    mask = np.array([[True, True, True, False], [True, False, True, True]])
    assert_matches_keras(ours, theirs, rng.normal(size=(2, 4, 5)), rng, mask=mask)


def test_stacked_rnn_cells_config_and_symbolic_shapes_follow_keras():
    ours, theirs = L.StackedRNNCells(_cells(tp)), keras.layers.StackedRNNCells(_cells(keras))
    assert ours.get_config().keys() == theirs.get_config().keys()
    assert ours.output_size == theirs.output_size == 2
    ours_out = L.RNN(_cells(tp), return_sequences=True)(L.Input((None, 5)))
    theirs_out = keras.layers.RNN(_cells(keras), return_sequences=True)(keras.Input((None, 5)))
    assert ours_out.shape == tuple(theirs_out.shape) == (None, None, 2)
    with pytest.raises(ValueError, match="stacked: cells must be a non-empty list"):
        L.StackedRNNCells([], name="stacked")


# -------------------------------------------------------------- functional merge forms
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate"])
def test_functional_merge_forms_match_keras(rng, name):
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    want = getattr(keras.layers, name)([torch.tensor(a), torch.tensor(b)])
    got = getattr(L, name)([tp.tensor(a), tp.tensor(b)])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    symbolic = getattr(L, name)([L.Input((3,)), L.Input((3,))], name=f"my_{name}")
    assert symbolic.shape == tuple(getattr(keras.layers, name)([keras.Input((3,)), keras.Input((3,))]).shape)


def test_concatenate_axis_and_bad_input():
    out = L.concatenate([L.Input((2, 3)), L.Input((4, 3))], axis=1)
    assert out.shape == tuple(keras.layers.concatenate([keras.Input((2, 3)), keras.Input((4, 3))], axis=1).shape)
    with pytest.raises(TypeError, match="layers.add: expected a list"):
        L.add(tp.ones((2, 3)))


# ---------------------------------------------------------------------- Sequential.pop
def test_sequential_pop_matches_keras():
    def model(lib):
        return lib.Sequential([lib.Input((4,)), lib.layers.Dense(3), lib.layers.Dense(2), lib.layers.Dense(5)])

    ours, theirs = model(tp), model(keras)
    popped, keras_popped = ours.pop(), theirs.pop()
    assert popped.units == keras_popped.units == 5
    assert len(ours.layers) == len(theirs.layers) == 2
    assert ours.output_shape == tuple(theirs.output_shape) == (None, 2)
    assert len(ours.weights) == len(theirs.weights) == 4
    assert ours(np.ones((1, 4), "float32")).shape == (1, 2)
    ours.pop()
    ours.pop()
    with pytest.raises(ValueError, match="pop: .* has no layers"):
        ours.pop()
