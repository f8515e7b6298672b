"""The Keras 3 losses tapeflow adds, against Keras itself on the same inputs: values,
reductions, sample weights, configs and lookup by name."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

R = np.random.default_rng(7)
PROBS = R.uniform(0.05, 0.95, size=(6, 4)).astype("float32")
SOFT = (PROBS / PROBS.sum(-1, keepdims=True)).astype("float32")
ONE_HOT = np.eye(4, dtype="float32")[R.integers(0, 4, size=6)]
BINARY = R.integers(0, 2, size=(6, 4)).astype("float32")
SIGNED = (2 * BINARY - 1).astype("float32")
REAL = R.normal(size=(6, 4)).astype("float32")
REAL2 = R.normal(size=(6, 4)).astype("float32")
POSITIVE = R.uniform(0.0, 3.0, size=(6, 4)).astype("float32")
WEIGHTS = R.uniform(0.0, 2.0, size=(6,)).astype("float32")
IDS = R.integers(0, 4, size=(6,))
EMB = R.normal(size=(6, 5)).astype("float32")
EMB /= np.linalg.norm(EMB, axis=-1, keepdims=True)
CIRCLE_IDS = np.array([0, 1, 0, 2, 1, 0])
CTC_LABELS = np.array([[1, 2, 2, 0], [3, 0, 0, 0], [1, 1, 3, 2], [2, 3, 0, 0], [1, 0, 0, 0], [3, 1, 0, 0]])
CTC_LOGITS = R.normal(size=(6, 9, 4)).astype("float32")

# (class name, constructor kwargs, y_true, y_pred)
CASES = [
    ("MeanAbsolutePercentageError", {}, REAL + 2.0, REAL2),
    ("MeanSquaredLogarithmicError", {}, POSITIVE, REAL),
    ("LogCosh", {}, REAL, REAL2),
    ("CosineSimilarity", {}, REAL, REAL2),
    ("CosineSimilarity", {"axis": 0}, REAL, REAL2),
    ("Hinge", {}, BINARY, REAL),
    ("Hinge", {}, SIGNED, REAL),
    ("SquaredHinge", {}, BINARY, REAL),
    ("SquaredHinge", {}, SIGNED, REAL),
    ("CategoricalHinge", {}, ONE_HOT, REAL),
    ("KLDivergence", {}, SOFT, PROBS),
    ("Poisson", {}, POSITIVE, PROBS),
    ("BinaryFocalCrossentropy", {}, BINARY, PROBS),
    ("BinaryFocalCrossentropy", {"apply_class_balancing": True, "alpha": 0.4, "gamma": 1.5}, BINARY, PROBS),
    ("BinaryFocalCrossentropy", {"from_logits": True, "label_smoothing": 0.1}, BINARY, REAL),
    ("CategoricalFocalCrossentropy", {}, ONE_HOT, PROBS),
    ("CategoricalFocalCrossentropy", {"from_logits": True, "label_smoothing": 0.2, "gamma": 3.0}, ONE_HOT, REAL),
    ("CategoricalGeneralizedCrossEntropy", {}, IDS, SOFT),
    ("CategoricalGeneralizedCrossEntropy", {"q": 0.8}, IDS, SOFT),
    ("Dice", {}, BINARY, PROBS),
    ("Dice", {"axis": (1,)}, BINARY, PROBS),
    ("Tversky", {"alpha": 0.3, "beta": 0.7}, BINARY, PROBS),
    ("Tversky", {"axis": (1,)}, BINARY, PROBS),
    ("Circle", {}, CIRCLE_IDS, EMB),
    ("Circle", {"gamma": 10.0, "margin": 0.25, "remove_diagonal": False}, CIRCLE_IDS, EMB),
    ("CTC", {}, CTC_LABELS, CTC_LOGITS),
]


def _ids(case):
    return f"{case[0]}-{'-'.join(map(str, case[1].values()))}"


def _keras(value):
    return keras.ops.convert_to_numpy(value)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_matches_keras(case, reduction, weighted):
    name, kwargs, y_true, y_pred = case
    ours = getattr(tp.losses, name)(reduction=reduction, **kwargs)
    theirs = getattr(keras.losses, name)(reduction=reduction, **kwargs)
    w = None
    if weighted:
        if name in ("Dice", "Tversky") and "axis" not in kwargs or kwargs.get("axis") == 0:
            w = None  # no loss per sample: no per-sample weight applies
        else:
            w = WEIGHTS
    got = ours(y_true, y_pred, sample_weight=w)
    y_true_k, y_pred_k = keras.ops.convert_to_tensor(y_true), keras.ops.convert_to_tensor(y_pred)
    want = _keras(theirs(y_true_k, y_pred_k, sample_weight=w))
    np.testing.assert_allclose(np.asarray(got.numpy()).reshape(np.shape(want)), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_config_and_name_lookup(case):
    name, kwargs, _, _ = case
    ours = getattr(tp.losses, name)(**kwargs)
    theirs = getattr(keras.losses, name)(**kwargs)
    config = ours.get_config()
    assert set(theirs.get_config()) <= set(config)  # Keras's CosineSimilarity leaves out its axis
    for key, value in theirs.get_config().items():
        assert config[key] == value or (isinstance(value, tuple) and tuple(config[key]) == value), key
    again = tp.losses.deserialize(tp.losses.serialize(ours))
    assert type(again) is type(ours) and again.get_config() == config
    assert type(tp.losses.get(name)) is type(ours)
    assert type(tp.losses.get(theirs.name)) is type(ours)


FUNCTIONS = [
    ("mean_absolute_percentage_error", {}, REAL + 2.0, REAL2),
    ("mean_squared_logarithmic_error", {}, POSITIVE, REAL),
    ("log_cosh", {}, REAL, REAL2),
    ("cosine_similarity", {"axis": -1}, REAL, REAL2),
    ("hinge", {}, BINARY, REAL),
    ("squared_hinge", {}, SIGNED, REAL),
    ("categorical_hinge", {}, ONE_HOT, REAL),
    ("kl_divergence", {}, SOFT, PROBS),
    ("poisson", {}, POSITIVE, PROBS),
    ("binary_focal_crossentropy", {"gamma": 1.0}, BINARY, PROBS),
    ("categorical_focal_crossentropy", {}, ONE_HOT, PROBS),
    ("categorical_generalized_cross_entropy", {"q": 0.3}, IDS, SOFT),
    ("dice", {"axis": 1}, BINARY, PROBS),
    ("tversky", {"alpha": 0.2, "beta": 0.8}, BINARY, PROBS),
    ("circle", {}, CIRCLE_IDS, EMB),
    ("ctc", {}, CTC_LABELS, CTC_LOGITS),
]


@pytest.mark.parametrize("case", FUNCTIONS, ids=[c[0] for c in FUNCTIONS])
def test_function_matches_keras(case):
    name, kwargs, y_true, y_pred = case
    got = getattr(tp.losses, name)(y_true, y_pred, **kwargs).numpy()
    y_true_k, y_pred_k = keras.ops.convert_to_tensor(y_true), keras.ops.convert_to_tensor(y_pred)
    want = _keras(getattr(keras.losses, name)(y_true_k, y_pred_k, **kwargs))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    assert tp.losses.deserialize(tp.losses.serialize(getattr(tp.losses, name))) is getattr(tp.losses, name)


def test_gradients_flow():
    x = tp.Variable(REAL)
    for loss in (tp.losses.LogCosh(), tp.losses.Hinge(), tp.losses.CosineSimilarity(), tp.losses.Dice()):
        with tp.GradientTape() as tape:
            value = loss(BINARY, tp.sigmoid(x) if isinstance(loss, tp.losses.Dice) else x)
        grad = tape.gradient(value, x)
        assert grad is not None and np.all(np.isfinite(grad.numpy()))


def test_bad_arguments():
    with pytest.raises(ValueError, match="q must be"):
        tp.losses.CategoricalGeneralizedCrossEntropy(q=1.5)
    with pytest.raises(ValueError, match="axis must be an int"):
        tp.losses.categorical_focal_crossentropy(ONE_HOT, PROBS, axis=True)
    with pytest.raises(ValueError, match="unknown loss"):
        tp.losses.get("not_a_loss")


def test_compile_by_name_fits():
    model = tp.Sequential([tp.layers.Input((4,)), tp.layers.Dense(4, activation="sigmoid")])
    for name in ("hinge", "log_cosh", "kl_divergence", "poisson", "squared_hinge", "msle", "mape"):
        model.compile(optimizer="sgd", loss=name)
        history = model.fit(PROBS, BINARY, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])


def test_ctc_gradient_flows():
    x = tp.Variable(CTC_LOGITS)
    with tp.GradientTape() as tape:
        value = tp.losses.CTC()(CTC_LABELS, x)
    grad = tape.gradient(value, x).numpy()
    assert np.all(np.isfinite(grad)) and np.abs(grad).sum() > 0
