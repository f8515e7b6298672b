"""The whole-sequence GRU op (`gru_sequence`) and the GRU layer that trains through it: against
the layer's step-by-step path and against Keras 3 itself (torch backend) with the same weights,
outputs and gradients of the inputs, the initial state and the weights in float64, for both
reset_after forms, masks, go_backwards, return_sequences and Bidirectional; the CPU kernel
against the op's NumPy reference; and where the op does not apply (other activations, dropout,
inference graphs, ONNX export) the steps run instead or a clear error says why."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import tapeflow as tp  # noqa: E402
from tapeflow.backends import numpy_recurrent  # noqa: E402
from tapeflow.layers import recurrent as recurrent_layers  # noqa: E402
from tapeflow.ops.nn.recurrent import gru_sequence  # noqa: E402
from tapeflow.ops.registry import apply, get_op  # noqa: E402

L = tp.layers
TOL = 1e-7
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
# Keras's torch backend runs its GRU cell step by step under a mask or with reset_after=False, and
# there combines plain torch float64 tensors (slices of the kernels, the split bias) in float32:
# keras.ops takes the result type of two torch float64 dtypes as float32. Against those Keras runs
# the comparison gets a float32 tolerance; the layer's own steps and finite differences are exact.


def _keras_tol(reset_after: bool, mask) -> float:
    return TOL if reset_after and mask is None else 2e-6


MASKS = {
    "none": None,
    # leading masked steps (the output is zeros there while the state is the initial one),
    # a fully masked row, and gaps
    "gaps": np.array([[False, False, True, True, False], [True, False, True, False, True], [False] * 5]),
}


def _flat(values) -> list:
    return list(values) if isinstance(values, list | tuple) else [values]


def _keras_run(layer, x, h0, mask, projections):
    tx, th = (None if a is None else torch.tensor(a, requires_grad=True) for a in (x, h0))
    kwargs = {} if mask is None else {"mask": torch.tensor(mask)}
    state = {} if h0 is None else {"initial_state": [th]}
    outs = _flat(layer(tx, **state, **kwargs))
    sum((o * torch.tensor(p)).sum() for o, p in zip(outs, projections, strict=True)).backward()
    grads = [tx.grad.numpy()] + ([] if h0 is None else [th.grad.numpy()])
    grads += [w.value.grad.numpy() for w in layer.trainable_weights]
    return [o.detach().numpy() for o in outs], grads


def _ours_run(layer, x, h0, mask, projections):
    tx = tp.tensor(x)
    watched = [tx] if h0 is None else [tx, tp.tensor(h0)]
    kwargs = {} if mask is None else {"mask": tp.tensor(mask)}
    state = {} if h0 is None else {"initial_state": [watched[1]]}
    with tp.GradientTape() as tape:
        tape.watch(watched)
        outs = _flat(layer(tx, training=True, **state, **kwargs))
        loss = sum(tp.sum(o * tp.tensor(p)) for o, p in zip(outs, projections, strict=True))
    grads = tape.gradient(loss, watched + layer.trainable_weights)
    return [o.numpy() for o in outs], [g.numpy() for g in grads]


def _same_weights(ours, theirs, rng, shape):
    ours.build(shape)
    theirs.build(shape)
    theirs.set_weights([rng.normal(size=w.shape) * 0.5 for w in theirs.get_weights()])
    ours.set_weights(theirs.get_weights())


def _projections(layer, x, rng) -> list:
    """Random weights of the outputs for the loss, one per output (shapes from a Keras run)."""
    return [rng.normal(size=tuple(o.shape)) for o in _flat(layer(torch.tensor(x)))]


def _assert_close(got: list, want: list, tol: float = TOL) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.fixture
def counted(monkeypatch):
    """How many times the GRU layers ran as one op (the forward of `gru_sequence`)."""
    calls = []
    original = recurrent_layers.gru_sequence
    monkeypatch.setattr(recurrent_layers, "gru_sequence", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("mask_name", sorted(MASKS))
@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("sequences, state", [(False, False), (True, False), (True, True), (False, True)])
def test_gru_as_one_op_matches_keras(rng, counted, reset_after, mask_name, backwards, sequences, state):
    args = {"return_sequences": sequences, "return_state": state, "go_backwards": backwards, "dtype": "float64"}
    ours = L.GRU(4, reset_after=reset_after, **args)
    theirs = keras.layers.GRU(4, reset_after=reset_after, **args)
    x, h0 = rng.normal(size=(3, 5, 6)), rng.normal(size=(3, 4))
    _same_weights(ours, theirs, rng, x.shape)
    projections = _projections(theirs, x, rng)
    k_outs, k_grads = _keras_run(theirs, x, h0, MASKS[mask_name], projections)
    o_outs, o_grads = _ours_run(ours, x, h0, MASKS[mask_name], projections)
    assert counted, "the layer did not run as one op"
    _assert_close(o_outs + o_grads, k_outs + k_grads, _keras_tol(reset_after, MASKS[mask_name]))


@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("mask_name", sorted(MASKS))
def test_bidirectional_gru_as_one_op_matches_keras(rng, counted, reset_after, mask_name):
    args = {"reset_after": reset_after, "return_sequences": True, "dtype": "float64"}
    ours = L.Bidirectional(L.GRU(3, **args), dtype="float64")
    theirs = keras.layers.Bidirectional(keras.layers.GRU(3, **args), dtype="float64")
    x = rng.normal(size=(3, 5, 2))
    _same_weights(ours, theirs, rng, x.shape)
    projections = _projections(theirs, x, rng)
    k_outs, k_grads = _keras_run(theirs, x, None, MASKS[mask_name], projections)
    o_outs, o_grads = _ours_run(ours, x, None, MASKS[mask_name], projections)
    assert len(counted) == 2  # forwards and backwards
    _assert_close(o_outs + o_grads, k_outs + k_grads, _keras_tol(reset_after, MASKS[mask_name]))


def _steps_only(layer):
    """The same layer forced onto its step-by-step path."""
    layer._runs_as_one_op = lambda mask: False
    return layer


@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("mask_name", sorted(MASKS))
@pytest.mark.parametrize("backwards", [False, True])
def test_gru_as_one_op_matches_its_steps(rng, counted, reset_after, use_bias, mask_name, backwards):
    args = {"reset_after": reset_after, "use_bias": use_bias, "go_backwards": backwards, "dtype": "float64"}
    fused = L.GRU(4, return_sequences=True, return_state=True, **args)
    steps = _steps_only(L.GRU(4, return_sequences=True, return_state=True, **args))
    x, h0 = rng.normal(size=(3, 5, 6)), rng.normal(size=(3, 4))
    fused.build(x.shape)
    steps.build(x.shape)
    weights = [rng.normal(size=w.shape) * 0.5 for w in fused.get_weights()]
    fused.set_weights(weights)
    steps.set_weights(weights)
    projections = [rng.normal(size=(3, 5, 4)), rng.normal(size=(3, 4))]
    got = _ours_run(fused, x, h0, MASKS[mask_name], projections)
    assert len(counted) == 1
    want = _ours_run(steps, x, h0, MASKS[mask_name], projections)
    assert len(counted) == 1
    _assert_close(got[0] + got[1], want[0] + want[1])


@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_cpu_kernel_matches_the_numpy_reference(rng, reset_after, dtype):
    b, t, u = 3, 6, 5
    xp, h0 = rng.normal(size=(b, t, 3 * u)).astype(dtype), rng.normal(size=(b, u)).astype(dtype)
    kernel, bias = (rng.normal(size=(u, 3 * u)) * 0.5).astype(dtype), rng.normal(size=3 * u).astype(dtype)
    mask = rng.random((b, t)) > 0.3
    attrs = {"reset_after": reset_after, "go_backwards": True}
    ref_fwd, ref_grad = get_op("gru_sequence").reference, get_op("gru_sequence_grad").reference
    tol = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}[dtype]
    want = ref_fwd(xp, h0, kernel, bias, mask, **attrs)
    got = numpy_recurrent.gru_sequence(xp, h0, kernel, bias, mask, **attrs)
    gys, gh = rng.normal(size=(b, t, u)).astype(dtype), rng.normal(size=(b, u)).astype(dtype)
    want_grad = ref_grad(gys, gh, h0, kernel, want[0], want[2], mask, **attrs)
    got_grad = numpy_recurrent.gru_sequence_grad(gys, gh, h0, kernel, want[0], want[2], mask, **attrs)
    for a, b_ in zip(list(got) + list(got_grad), list(want) + list(want_grad), strict=True):
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a.astype(np.float64), b_.astype(np.float64), rtol=tol, atol=tol)


def test_gru_freezes_to_one_sequence_op_with_a_dynamic_batch(rng):
    layer = L.GRU(3, return_sequences=True)
    x = rng.normal(size=(2, 7, 4)).astype("float32")
    eager = layer(tp.tensor(x)).numpy()
    training = tp.freeze(lambda t: layer(t, training=True), tp.TensorSpec((None, 7, 4), "float32"))
    inference = tp.freeze(lambda t: layer(t), tp.TensorSpec((None, 7, 4), "float32"))
    assert "gru_sequence" in str(training)
    assert "gru_sequence" in str(inference)
    np.testing.assert_allclose(training(x).numpy(), eager, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [{"activation": "relu"}, {"recurrent_activation": "hard_sigmoid"}, {"dropout": 0.3}, {"recurrent_dropout": 0.3}],
)
def test_gru_falls_back_to_steps_where_the_op_does_not_apply(rng, counted, kwargs):
    layer = L.GRU(3, seed=1, **kwargs)
    x = tp.tensor(rng.normal(size=(2, 4, 3)).astype("float32"))
    layer(x, training=True)
    assert not counted
    masked = L.GRU(3, zero_output_for_mask=True)
    masked(x, training=True)
    assert len(counted) == 1
    masked(x, mask=tp.ones((2, 4), "bool"), training=True)
    assert len(counted) == 1
    masked(x)  # unmasked inference runs as one op too
    assert len(counted) == 2


def test_bad_arguments_are_clear_errors():
    xp, h0, kernel = tp.zeros((2, 3, 6)), tp.zeros((2, 2)), tp.zeros((2, 6))
    for attrs in ({"reset_after": True, "go_backwards": 1}, {"reset_after": "yes", "go_backwards": False}):
        with pytest.raises(TypeError, match="gru_sequence: (go_backwards|reset_after) must be a bool"):
            apply(get_op("gru_sequence"), (xp, h0, kernel, tp.zeros((6,))), attrs)
    with pytest.raises(ValueError, match=r"gru_sequence: the recurrent kernel must be \[units, 3 \* units\]"):
        gru_sequence(xp, h0, tp.zeros((2, 8)))
    with pytest.raises(ValueError, match="gru_sequence: h0 must have shape"):
        gru_sequence(xp, tp.zeros((2, 3)), kernel)
    with pytest.raises(ValueError, match="gru_sequence: the recurrent bias must have shape"):
        gru_sequence(xp, h0, kernel, tp.zeros((5,)))
    with pytest.raises(TypeError, match="gru_sequence: the mask must be bool"):
        gru_sequence(xp, h0, kernel, mask=tp.zeros((2, 3)))
    with pytest.raises(TypeError, match="gru_sequence: h0 has dtype float64"):
        gru_sequence(xp, tp.zeros((2, 2), "float64"), kernel)


@pytest.mark.parametrize("layer_class", [L.GRU, L.LSTM])
@pytest.mark.parametrize("masked", [False, True])
def test_training_on_a_device_equals_the_cpu(rng, accelerator, counted, layer_class, masked):
    """The whole-sequence ops on an accelerator (the reference on the GPU, the steps on XLA):
    outputs and gradients equal the CPU's."""
    x = rng.normal(size=(3, 5, 2)).astype("float32")
    mask = MASKS["gaps"] if masked else None
    projections = [rng.normal(size=(3, 5, 4)).astype("float32")]
    results, weights = [], None
    for where in ("cpu", accelerator):
        with tp.device(where):
            layer = layer_class(4, return_sequences=True, go_backwards=True)
            layer.build(x.shape)
            if weights is None:
                weights = layer.get_weights()
            layer.set_weights(weights)
            outs, grads = _ours_run(layer, x, None, mask, projections)
        results.append(outs + grads)
    if layer_class is L.GRU:
        assert len(counted) == (2 if accelerator.startswith("gpu") else 1)
    _assert_close(results[1], results[0], 1e-5)


def test_inputs_whose_sizes_differ_only_at_run_time_are_refused_before_the_kernel():
    # a graph with a dynamic batch, edited so that its state has one row fewer than its
    # inputs, passes every check at load; the kernel must not index past the state
    xp, kernel, bias = np.zeros((4, 3, 6), np.float32), np.zeros((2, 6), np.float32), np.zeros(6, np.float32)
    with pytest.raises(ValueError, match=r"gru_sequence: shapes do not fit together.*h0 \(3, 2\)"):
        numpy_recurrent.gru_sequence(xp, np.zeros((3, 2), np.float32), kernel, bias)
    with pytest.raises(ValueError, match=r"gru_sequence: the mask has shape \(4, 2\)"):
        numpy_recurrent.gru_sequence(xp, np.zeros((4, 2), np.float32), kernel, bias, np.ones((4, 2), bool))
    ys, _, acts = numpy_recurrent.gru_sequence(xp, np.zeros((4, 2), np.float32), kernel, bias)
    with pytest.raises(ValueError, match=r"gru_sequence_grad: shapes do not fit together"):
        numpy_recurrent.gru_sequence_grad(
            ys, np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32), kernel, ys, acts
        )


def test_a_saved_training_graph_runs_the_sequence_op_after_loading(rng, tmp_path):
    layer = L.GRU(3, reset_after=False, return_sequences=True, go_backwards=True)
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    layer(tp.tensor(x))
    graph = tp.freeze(lambda t: layer(t, training=True), tp.TensorSpec((None, 5, 4), "float32"))
    graph.save(str(tmp_path / "gru.tfg"))
    loaded = tp.load_graph(str(tmp_path / "gru.tfg"))
    assert "gru_sequence" in str(loaded)
    np.testing.assert_allclose(loaded(x).numpy(), graph(x).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_gru_as_one_op_under_a_mixed_precision_policy(rng, counted, policy):
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    tp.mixed_precision.set_global_policy(policy)
    try:
        fused = L.GRU(4, return_sequences=True)
        steps = _steps_only(L.GRU(4, return_sequences=True))
        fused.build(x.shape)
        steps.build(x.shape)
        steps.set_weights(fused.get_weights())
        projections = [rng.normal(size=(2, 5, 4))]
        got = _ours_run(fused, x, None, None, projections)
        want = _ours_run(steps, x, None, None, projections)
    finally:
        tp.mixed_precision.set_global_policy("float32")
    assert len(counted) == 1
    assert str(got[0][0].dtype) == policy.removeprefix("mixed_")  # the outputs in the compute dtype
    assert all(g.dtype == np.float32 for g in got[1][1:])  # the weights' gradients
    tol = 2e-2 if policy == "mixed_bfloat16" else 2e-3
    for a, b in zip(got[0] + got[1], want[0] + want[1], strict=True):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=tol, atol=tol)
