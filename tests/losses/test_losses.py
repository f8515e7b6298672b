"""Losses (and weight regularizers) against torch.nn.functional: values and,
through tp.GradientTape against torch autograd, gradients; all in float64.

Keras clips probabilities to [1e-7, 1 - 1e-7] and renormalizes categorical
probabilities before the log; where torch has no such form, the reference is
the Keras formula written in torch and differentiated by torch autograd.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tapeflow as tp

EPS = 1e-7


def _ours(loss, y_true, y_pred, sample_weight=None):
    """(value, d value / d y_pred) from tapeflow."""
    pred = tp.tensor(y_pred)
    with tp.GradientTape() as tape:
        tape.watch(pred)
        value = loss(y_true, pred, sample_weight=sample_weight)
    return value.numpy(), tape.gradient(value, pred).numpy()


def _theirs(fn, y_pred):
    """(value, d value / d y_pred) from torch autograd."""
    pred = torch.tensor(y_pred, requires_grad=True)
    value = fn(pred)
    value.backward()
    return value.detach().numpy(), pred.grad.numpy()


def assert_loss_close(ours, theirs, rtol=1e-6):
    np.testing.assert_allclose(ours[0], theirs[0], rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=rtol, atol=1e-12)


@pytest.fixture
def data(rng):
    logits = rng.normal(size=(6, 4)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    labels = rng.integers(0, 4, size=6)
    onehot = np.eye(4)[labels]
    soft = rng.dirichlet(np.ones(4), size=6)
    return logits, probs, labels, onehot, soft


# ----------------------------------------------------- cross-entropies
def test_sparse_categorical_from_logits(data):
    logits, _, labels, _, _ = data
    ours = _ours(tp.losses.SparseCategoricalCrossentropy(from_logits=True), labels, logits)
    assert_loss_close(ours, _theirs(lambda z: F.cross_entropy(z, torch.tensor(labels)), logits))


def test_sparse_categorical_from_probabilities(data):
    _, probs, labels, _, _ = data
    ours = _ours(tp.losses.SparseCategoricalCrossentropy(), labels, probs)
    # value: an independent torch form; gradient: the Keras form (renormalized, clipped)
    np.testing.assert_allclose(ours[0], F.nll_loss(torch.log(torch.tensor(probs)), torch.tensor(labels)).numpy())

    def keras_form(p):
        logp = torch.log(torch.clamp(p / p.sum(-1, keepdim=True), EPS, 1 - EPS))
        return -logp[torch.arange(6), torch.tensor(labels)].mean()

    assert_loss_close(ours, _theirs(keras_form, probs))


def test_sparse_categorical_sequence_labels_and_column_labels(rng):
    logits = rng.normal(size=(2, 5, 3))
    labels = rng.integers(0, 3, size=(2, 5))
    ours = _ours(tp.losses.SparseCategoricalCrossentropy(from_logits=True), labels, logits)
    assert_loss_close(ours, _theirs(lambda z: F.cross_entropy(z.permute(0, 2, 1), torch.tensor(labels)), logits))
    flat_logits, flat_labels = logits[0], labels[0]
    as_column = tp.losses.sparse_categorical_crossentropy(flat_labels[:, None], flat_logits, from_logits=True)
    as_vector = tp.losses.sparse_categorical_crossentropy(flat_labels, flat_logits, from_logits=True)
    np.testing.assert_array_equal(as_column.numpy(), as_vector.numpy())


def test_sparse_categorical_accepts_whole_float_and_uint8_labels(data):
    logits, _, labels, _, _ = data
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    expected = float(loss(labels, logits))
    assert float(loss(labels.astype(np.float32), logits)) == expected
    assert float(loss(labels.astype(np.uint8), logits)) == expected


@pytest.mark.parametrize("from_logits", [True, False])
@pytest.mark.parametrize("bad", [4, -1])
def test_sparse_categorical_rejects_labels_out_of_range(data, from_logits, bad):
    logits, _, labels, _, _ = data
    labels = labels.copy()
    labels[2] = bad
    with pytest.raises(ValueError, match=rf"sparse_categorical_crossentropy: label {bad} is out of range \[0, 4\)"):
        tp.losses.SparseCategoricalCrossentropy(from_logits=from_logits)(labels, logits)


def test_sparse_categorical_rejects_bad_labels(data):
    logits, _, labels, onehot, _ = data
    loss = tp.losses.SparseCategoricalCrossentropy()
    with pytest.raises(ValueError, match="sparse_categorical_crossentropy: labels must be integer class ids"):
        loss(labels + 0.5, logits)
    with pytest.raises(ValueError, match=r"shape \(6, 4\).*use categorical_crossentropy"):
        loss(onehot, logits)
    with pytest.raises(ValueError, match=r"sparse_categorical_crossentropy: y_true shape \(5,\)"):
        loss(labels[:5], logits)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_categorical_from_logits(data, smoothing):
    logits, _, _, onehot, soft = data
    for target in (onehot, soft):
        ours = _ours(tp.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=smoothing), target, logits)
        t = torch.tensor(target)
        assert_loss_close(ours, _theirs(lambda z, t=t: F.cross_entropy(z, t, label_smoothing=smoothing), logits))


def test_categorical_from_probabilities(data, rng):
    _, probs, _, onehot, soft = data
    unnormalized = probs * rng.uniform(0.5, 2.0, size=(6, 1))
    for target in (onehot, soft):
        ours = _ours(tp.losses.CategoricalCrossentropy(), target, unnormalized)

        t = torch.tensor(target)

        def keras_form(p, t=t):
            return -(t * torch.log(torch.clamp(p / p.sum(-1, keepdim=True), EPS, 1 - EPS))).sum(-1).mean()

        assert_loss_close(ours, _theirs(keras_form, unnormalized))
        expected = -(target * np.log(probs)).sum(-1).mean()  # renormalizing undoes the row scaling
        np.testing.assert_allclose(ours[0], expected, rtol=1e-10)


def test_categorical_axis(data):
    logits, _, _, onehot, _ = data
    along_0 = tp.losses.categorical_crossentropy(onehot.T, logits.T, from_logits=True, axis=0)
    along_last = tp.losses.categorical_crossentropy(onehot, logits, from_logits=True)
    np.testing.assert_allclose(along_0.numpy(), along_last.numpy(), rtol=1e-12)


def test_categorical_rejects_mismatched_shapes_and_labels(data):
    logits, _, labels, onehot, _ = data
    loss = tp.losses.CategoricalCrossentropy(from_logits=True)
    with pytest.raises(ValueError, match=r"categorical_crossentropy: y_true shape \(6,\).*sparse_categorical"):
        loss(labels, logits)
    with pytest.raises(ValueError, match=r"categorical_crossentropy: labels must lie in \[0, 1\], got 3.0"):
        loss(onehot * 3, logits)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_binary_from_probabilities(rng, smoothing):
    p = rng.uniform(0.05, 0.95, size=(5, 3))
    t = rng.integers(0, 2, size=(5, 3)).astype(np.float64)
    ours = _ours(tp.losses.BinaryCrossentropy(label_smoothing=smoothing), t, p)
    smoothed = torch.tensor(t * (1 - smoothing) + 0.5 * smoothing)
    assert_loss_close(ours, _theirs(lambda q: F.binary_cross_entropy(q, smoothed), p))


def test_binary_from_logits_and_column_shapes(rng):
    z = rng.normal(size=(7, 1)) * 3
    t = rng.integers(0, 2, size=7).astype(np.float64)
    ours = _ours(tp.losses.BinaryCrossentropy(from_logits=True), t, z)  # labels [b] meet predictions [b, 1]
    assert_loss_close(ours, _theirs(lambda q: F.binary_cross_entropy_with_logits(q, torch.tensor(t[:, None])), z))


def test_binary_clips_probabilities_like_keras():
    value = tp.losses.binary_crossentropy([[1.0]], [[0.0]])
    np.testing.assert_allclose(value.numpy(), [-np.log(EPS)], rtol=1e-6)


def test_binary_rejects_labels_outside_unit_interval():
    with pytest.raises(ValueError, match=r"binary_crossentropy: labels must lie in \[0, 1\], got 2.0"):
        tp.losses.BinaryCrossentropy()([[1.0], [2.0]], [[0.5], [0.5]])


# ----------------------------------------------------------- regression
REGRESSION = {
    "mse": (tp.losses.MeanSquaredError(), F.mse_loss),
    "mae": (tp.losses.MeanAbsoluteError(), F.l1_loss),
    "huber": (tp.losses.Huber(), lambda a, b: F.huber_loss(a, b, delta=1.0)),
    "huber-delta": (tp.losses.Huber(delta=0.3), lambda a, b: F.huber_loss(a, b, delta=0.3)),
}


@pytest.mark.parametrize("case", sorted(REGRESSION))
def test_regression_losses(rng, case):
    ours_loss, torch_loss = REGRESSION[case]
    y, pred = rng.normal(size=(8, 3)), rng.normal(size=(8, 3)) * 1.5
    assert_loss_close(_ours(ours_loss, y, pred), _theirs(lambda q: torch_loss(q, torch.tensor(y)), pred))


@pytest.mark.parametrize("case", sorted(REGRESSION))
def test_sample_weight_and_reductions(rng, case):
    ours_loss = REGRESSION[case][0]
    y, pred, w = rng.normal(size=(8, 3)), rng.normal(size=(8, 3)), rng.uniform(size=8)
    elementwise = {
        "mse": (pred - y) ** 2,
        "mae": np.abs(pred - y),
        "huber": np.where(np.abs(pred - y) <= 1.0, 0.5 * (pred - y) ** 2, np.abs(pred - y) - 0.5),
        "huber-delta": np.where(np.abs(pred - y) <= 0.3, 0.5 * (pred - y) ** 2, 0.3 * np.abs(pred - y) - 0.045),
    }[case]
    per_sample = elementwise.mean(-1)
    value = ours_loss(y, pred, sample_weight=w)
    np.testing.assert_allclose(value.numpy(), (per_sample * w).sum() / 8, rtol=1e-10)
    np.testing.assert_allclose(ours_loss(y, pred, sample_weight=w[:, None]).numpy(), value.numpy(), rtol=1e-12)
    cls = type(ours_loss)
    kwargs = {"delta": ours_loss.get_config()["delta"]} if "delta" in ours_loss.get_config() else {}
    np.testing.assert_allclose(cls(reduction="none", **kwargs)(y, pred, w).numpy(), per_sample * w, rtol=1e-10)
    np.testing.assert_allclose(cls(reduction="sum", **kwargs)(y, pred, w).numpy(), (per_sample * w).sum())
    mean_w = cls(reduction="mean_with_sample_weight", **kwargs)(y, pred, w).numpy()
    np.testing.assert_allclose(mean_w, (per_sample * w).sum() / w.sum(), rtol=1e-10)


def test_sample_weight_gradient_matches_torch(data):
    logits, _, labels, _, _ = data
    w = np.linspace(0.0, 1.0, 6)
    ours = _ours(tp.losses.SparseCategoricalCrossentropy(from_logits=True), labels, logits, sample_weight=w)
    theirs = _theirs(
        lambda z: (F.cross_entropy(z, torch.tensor(labels), reduction="none") * torch.tensor(w)).mean(), logits
    )
    assert_loss_close(ours, theirs)


def test_regression_shape_errors():
    with pytest.raises(ValueError, match=r"mean_squared_error: y_true shape \(4, 3\) and y_pred shape \(4, 2\)"):
        tp.losses.MeanSquaredError()(np.zeros((4, 3)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"MeanAbsoluteError: sample_weight shape \(3,\)"):
        tp.losses.MeanAbsoluteError()(np.zeros((4, 2)), np.zeros((4, 2)), sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="reduction"):
        tp.losses.MeanSquaredError(reduction="mean")


def test_float32_stays_float32(data):
    logits, _, labels, _, _ = data
    value = tp.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits.astype(np.float32))
    assert value.dtype == tp.float32 and value.shape == ()
    value = tp.losses.MeanSquaredError()(np.ones((2, 2)), tp.ones((2, 2)))
    assert value.dtype == tp.float32


def test_function_forms_are_per_sample(data):
    logits, probs, labels, onehot, _ = data
    assert tp.losses.sparse_categorical_crossentropy(labels, probs).shape == (6,)
    assert tp.losses.categorical_crossentropy(onehot, probs).shape == (6,)
    assert tp.losses.binary_crossentropy(onehot, probs).shape == (6,)
    assert tp.losses.mean_squared_error(onehot, probs).shape == (6,)
    assert tp.losses.huber(onehot, probs, delta=2.0).shape == (6,)


# ------------------------------------------------------------------- get
@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("sparse_categorical_crossentropy", tp.losses.SparseCategoricalCrossentropy),
        ("SparseCategoricalCrossentropy", tp.losses.SparseCategoricalCrossentropy),
        ("categorical_crossentropy", tp.losses.CategoricalCrossentropy),
        ("binary_crossentropy", tp.losses.BinaryCrossentropy),
        ("mse", tp.losses.MeanSquaredError),
        ("mean_squared_error", tp.losses.MeanSquaredError),
        ("mae", tp.losses.MeanAbsoluteError),
        ("huber", tp.losses.Huber),
        ("huber_loss", tp.losses.Huber),
    ],
)
def test_get_by_name(name, cls):
    assert type(tp.losses.get(name)) is cls


def test_get_objects_configs_and_functions():
    loss = tp.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    assert tp.losses.get(loss) is loss
    again = tp.losses.get({"class_name": "CategoricalCrossentropy", "config": loss.get_config()})
    assert again.get_config() == loss.get_config()
    wrapped = tp.losses.get(lambda t, p: tp.abs(p - t))
    assert float(wrapped(tp.tensor([1.0, 2.0]), tp.tensor([2.0, 4.0]))) == 1.5
    with pytest.raises(ValueError, match=r"unknown loss 'not_a_loss'.*sparse_categorical_crossentropy"):
        tp.losses.get("not_a_loss")


# ---------------------------------------------------------- regularizers
def _penalty_and_grad(reg, w0):
    w = tp.Variable(w0, name="w")
    with tp.GradientTape() as tape:
        value = reg(w)
    return float(value), tape.gradient(value, w)


def test_regularizers_against_closed_forms(rng):
    w0 = rng.normal(size=(3, 4))
    value, grad = _penalty_and_grad(tp.regularizers.L2(0.3), w0)
    np.testing.assert_allclose(value, 0.3 * np.sum(w0**2))
    np.testing.assert_allclose(grad.numpy(), 0.6 * w0)
    value, grad = _penalty_and_grad(tp.regularizers.L1(0.2), w0)
    np.testing.assert_allclose(value, 0.2 * np.abs(w0).sum())
    np.testing.assert_allclose(grad.numpy(), 0.2 * np.sign(w0))
    value, grad = _penalty_and_grad(tp.regularizers.L1L2(l1=0.1, l2=0.5), w0)
    np.testing.assert_allclose(value, 0.1 * np.abs(w0).sum() + 0.5 * np.sum(w0**2))
    np.testing.assert_allclose(grad.numpy(), 0.1 * np.sign(w0) + w0)
    assert float(tp.regularizers.L1L2()(w0)) == 0.0


def test_regularizer_defaults_get_and_errors():
    assert tp.regularizers.L2().l2 == 0.01 and tp.regularizers.L1().l1 == 0.01
    assert tp.regularizers.get("l1_l2").get_config() == {"l1": 0.0, "l2": 0.0}
    assert tp.regularizers.get({"class_name": "L2", "config": {"l2": 0.5}}).l2 == 0.5
    assert tp.regularizers.get(None) is None
    with pytest.raises(ValueError, match=r"unknown regularizer 'l3'"):
        tp.regularizers.get("l3")
    with pytest.raises(ValueError, match="l2 must be a number >= 0"):
        tp.regularizers.L2(-1.0)


def test_categorical_crossentropy_from_logits_ignores_minus_infinity_on_zero_labels():
    logits = np.array([[-np.inf, 1.0, 0.0], [2.0, -np.inf, -np.inf]], "float32")
    one_hot = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], "float32")
    dense = tp.losses.CategoricalCrossentropy(from_logits=True, reduction=None)(one_hot, logits).numpy()
    sparse = tp.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)([1, 0], logits).numpy()
    np.testing.assert_allclose(dense, sparse, rtol=1e-6)
    np.testing.assert_allclose(dense, [np.logaddexp(1.0, 0.0) - 1.0, 0.0], rtol=1e-6)
    x = tp.tensor(logits)
    with tp.GradientTape() as tape:
        tape.watch(x)
        loss = tp.losses.CategoricalCrossentropy(from_logits=True)(one_hot, x)
    assert np.isfinite(tape.gradient(loss, x).numpy()).all()
