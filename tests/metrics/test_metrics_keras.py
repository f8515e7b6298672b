"""The Keras 3 metrics tapeflow adds, against Keras itself: two weighted batches then
result(), configs, lookup by name, serialize/deserialize."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

R = np.random.default_rng(11)


def _batches(kind):
    out = []
    for _ in range(2):
        w = R.uniform(0.2, 2.0, size=(8,)).astype("float32")
        if kind == "binary":
            t = R.integers(0, 2, size=(8, 3)).astype("float32")
            p = R.uniform(0.01, 0.99, size=(8, 3)).astype("float32")
        elif kind == "binary1":
            t = R.integers(0, 2, size=(8, 1)).astype("float32")
            p = R.uniform(0.01, 0.99, size=(8, 1)).astype("float32")
        elif kind == "logits":
            t = R.integers(0, 2, size=(8, 3)).astype("float32")
            p = R.normal(size=(8, 3)).astype("float32")
        elif kind == "onehot":
            t = np.eye(4, dtype="float32")[R.integers(0, 4, size=8)]
            p = R.uniform(0.01, 1.0, size=(8, 4)).astype("float32")
            p /= p.sum(-1, keepdims=True)
        elif kind == "sparse":
            t = R.integers(0, 4, size=(8,))
            p = R.uniform(0.01, 1.0, size=(8, 4)).astype("float32")
            p /= p.sum(-1, keepdims=True)
        elif kind == "ids":
            t = R.integers(0, 3, size=(8,))
            p = R.integers(0, 3, size=(8,))
            w = R.integers(0, 3, size=(8,)).astype("float32")  # Keras's IoU casts weights to int
        elif kind == "ids_int":
            t = R.integers(0, 2, size=(8,))
            p = R.uniform(size=(8,)).astype("float32")
            w = R.integers(0, 3, size=(8,)).astype("float32")
        elif kind == "onehot_iou":
            t = np.eye(3, dtype="float32")[R.integers(0, 3, size=8)]
            p = R.uniform(size=(8, 3)).astype("float32")
            w = R.integers(0, 3, size=(8,)).astype("float32")
        else:  # regression
            t = R.normal(size=(8, 3)).astype("float32")
            p = (t + R.normal(scale=0.5, size=(8, 3))).astype("float32")
            if kind == "positive":
                t, p = np.abs(t), np.abs(p)
        out.append((t, p, w))
    return out


CASES = [
    ("BinaryCrossentropy", {}, "binary"),
    ("BinaryCrossentropy", {"from_logits": True, "label_smoothing": 0.1}, "logits"),
    ("CategoricalCrossentropy", {}, "onehot"),
    ("CategoricalCrossentropy", {"label_smoothing": 0.2}, "onehot"),
    ("SparseCategoricalCrossentropy", {}, "sparse"),
    ("SparseCategoricalCrossentropy", {"ignore_class": 1}, "sparse"),
    ("KLDivergence", {}, "onehot"),
    ("Poisson", {}, "positive"),
    ("Hinge", {}, "binary"),
    ("SquaredHinge", {}, "binary"),
    ("CategoricalHinge", {}, "onehot"),
    ("CosineSimilarity", {}, "regression"),
    ("LogCoshError", {}, "regression"),
    ("MeanSquaredLogarithmicError", {}, "positive"),
    ("RootMeanSquaredError", {}, "regression"),
    ("R2Score", {}, "regression"),
    ("R2Score", {"class_aggregation": "variance_weighted_average"}, "regression"),
    ("R2Score", {"class_aggregation": None, "num_regressors": 2}, "regression"),
    ("PearsonCorrelation", {}, "regression"),
    ("ConcordanceCorrelation", {}, "regression"),
    ("F1Score", {}, "onehot"),
    ("F1Score", {"average": "micro", "threshold": 0.3}, "binary"),
    ("FBetaScore", {"beta": 2.0, "average": "macro", "threshold": 0.5}, "binary"),
    ("FBetaScore", {"beta": 0.5, "average": "weighted"}, "onehot"),
    ("AUC", {}, "binary1"),
    ("AUC", {"curve": "PR"}, "binary"),
    ("AUC", {"curve": "PR", "summation_method": "minoring", "num_thresholds": 50}, "binary"),
    ("AUC", {"summation_method": "majoring", "thresholds": [0.2, 0.5, 0.7]}, "binary"),
    ("AUC", {"multi_label": True, "num_labels": 3}, "binary"),
    ("AUC", {"multi_label": True, "label_weights": [0.2, 1.0, 0.5], "curve": "PR"}, "binary"),
    ("AUC", {"label_weights": [0.2, 1.0, 0.5]}, "binary"),
    ("AUC", {"from_logits": True}, "logits"),
    ("SensitivityAtSpecificity", {"specificity": 0.6}, "binary"),
    ("SpecificityAtSensitivity", {"sensitivity": 0.4, "num_thresholds": 20}, "binary"),
    ("PrecisionAtRecall", {"recall": 0.5, "class_id": 1}, "binary"),
    ("RecallAtPrecision", {"precision": 0.5}, "binary"),
    ("IoU", {"num_classes": 3, "target_class_ids": [0, 2]}, "ids"),
    ("IoU", {"num_classes": 3, "target_class_ids": [1], "ignore_class": 2}, "ids"),
    ("MeanIoU", {"num_classes": 3}, "ids"),
    ("BinaryIoU", {}, "ids_int"),
    ("BinaryIoU", {"target_class_ids": [1], "threshold": 0.3}, "ids_int"),
    ("OneHotIoU", {"num_classes": 3, "target_class_ids": [1, 2]}, "onehot_iou"),
    ("OneHotMeanIoU", {"num_classes": 3}, "onehot_iou"),
]
IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]


@pytest.mark.parametrize(("name", "kwargs", "kind"), CASES, ids=IDS)
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_keras_over_two_batches(name, kwargs, kind, weighted):
    ours = getattr(tp.metrics, name)(**kwargs)
    theirs = getattr(keras.metrics, name)(**kwargs)
    for t, p, w in _batches(kind):
        ours.update_state(t, p, sample_weight=w if weighted else None)
        theirs.update_state(
            keras.ops.convert_to_tensor(t),
            keras.ops.convert_to_tensor(p),
            sample_weight=keras.ops.convert_to_tensor(w) if weighted else None,
        )
    want = keras.ops.convert_to_numpy(theirs.result())
    np.testing.assert_allclose(ours.result(), want, rtol=1e-4, atol=1e-5)
    ours.reset_state()
    theirs.reset_state()
    t, p, _ = _batches(kind)[0]
    ours.update_state(t, p)
    theirs.update_state(keras.ops.convert_to_tensor(t), keras.ops.convert_to_tensor(p))
    np.testing.assert_allclose(ours.result(), keras.ops.convert_to_numpy(theirs.result()), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("name", "kwargs", "kind"), CASES, ids=IDS)
def test_config_and_lookup(name, kwargs, kind):
    ours = getattr(tp.metrics, name)(**kwargs)
    theirs = getattr(keras.metrics, name)(**kwargs)
    config = ours.get_config()
    keras_config = theirs.get_config()
    keras_config.pop("dtype", None)
    # Keras's CosineSimilarity forgets its axis; tapeflow keeps it
    assert set(keras_config) <= set(config) and set(config) - set(keras_config) <= {"axis"}
    assert config["name"] == keras_config["name"].rsplit("_", 1)[0] or config["name"] == keras_config["name"]
    for key in set(keras_config) - {"name", "label_weights"}:
        assert config[key] == keras_config[key], key
    again = tp.metrics.deserialize(tp.metrics.serialize(ours))
    assert type(again) is type(ours) and again.get_config() == config


@pytest.mark.parametrize(
    "name",
    [
        "auc",
        "AUC",
        "binary_crossentropy",
        "categorical_crossentropy",
        "sparse_categorical_crossentropy",
        "kl_divergence",
        "kld",
        "poisson",
        "hinge",
        "squared_hinge",
        "categorical_hinge",
        "cosine_similarity",
        "logcosh",
        "log_cosh",
        "msle",
        "mean_squared_logarithmic_error",
        "root_mean_squared_error",
        "r2_score",
        "pearson_correlation",
        "concordance_correlation",
        "f1_score",
        "fbeta_score",
        "huber",
        "binary_focal_crossentropy",
        "categorical_focal_crossentropy",
    ],
)
def test_get_by_name(name):
    metric = tp.metrics.get(name)
    assert isinstance(metric, tp.metrics.Metric)


@pytest.mark.parametrize(
    "name", ["binary_crossentropy", "hinge", "squared_hinge", "kl_divergence", "poisson", "log_cosh", "huber"]
)
def test_functions_match_keras(name):
    t, p, _ = _batches("binary")[0]
    got = getattr(tp.metrics, name)(t, p)
    want = keras.ops.convert_to_numpy(getattr(keras.metrics, name)(keras.ops.convert_to_tensor(t), p))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["pearson_correlation", "concordance_correlation"])
def test_correlation_functions_match_keras(name):
    t, p, _ = _batches("regression")[0]
    got = getattr(tp.metrics, name)(t, p)
    want = keras.ops.convert_to_numpy(getattr(keras.metrics, name)(keras.ops.convert_to_tensor(t), p))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_compile_with_metrics_by_name():
    x = R.normal(size=(32, 3)).astype("float32")
    y = (x.sum(-1, keepdims=True) > 0).astype("float32")
    model = tp.Sequential([tp.layers.Input((3,)), tp.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["auc", "binary_crossentropy", "hinge"])
    history = model.fit(x, y, epochs=1, verbose=0)
    assert {"auc", "binary_crossentropy", "hinge"} <= set(history.history)
    assert 0.0 <= history.history["auc"][0] <= 1.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="curve"):
        tp.metrics.AUC(curve="XY")
    with pytest.raises(ValueError, match="num_thresholds"):
        tp.metrics.AUC(num_thresholds=1)
    with pytest.raises(ValueError, match="num_labels"):
        tp.metrics.AUC(num_labels=3)
    with pytest.raises(ValueError, match="target class ids"):
        tp.metrics.IoU(num_classes=2, target_class_ids=[2])
    with pytest.raises(ValueError, match="beta"):
        tp.metrics.FBetaScore(beta=1)
    with pytest.raises(ValueError, match="class_aggregation"):
        tp.metrics.R2Score(class_aggregation="median")
    with pytest.raises(ValueError, match="recall"):
        tp.metrics.PrecisionAtRecall(1.5)
