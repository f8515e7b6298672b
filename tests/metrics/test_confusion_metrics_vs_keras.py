"""The confusion metrics against Keras 3's on the same batches, weighted and not."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

COUNTS = ["TruePositives", "TrueNegatives", "FalsePositives", "FalseNegatives"]


def _binary_batches(rng, label_shape):
    out = []
    for _ in range(3):
        labels = rng.integers(0, 2, size=label_shape)
        out.append((labels, rng.uniform(size=(8, 1)).astype("float32"), rng.uniform(size=8).astype("float32")))
    return out


def _multiclass_batches(rng):
    out = []
    for _ in range(3):
        labels = np.eye(5)[rng.integers(0, 5, size=8)]
        out.append((labels, rng.uniform(size=(8, 5)).astype("float32"), rng.uniform(size=8).astype("float32")))
    return out


def assert_matches_keras(ours, theirs, batches, weighted):
    for labels, preds, w in batches:
        ours.update_state(labels, preds, sample_weight=w if weighted else None)
        theirs.update_state(labels, preds, sample_weight=w if weighted else None)
        np.testing.assert_allclose(ours.result(), keras.ops.convert_to_numpy(theirs.result()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("thresholds", [None, 0.3, [0.0, 0.25, 0.6, 1.0], [0.1, 0.7]])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("label_shape", [(8,), (8, 1)])
def test_counts_match_keras(rng, name, thresholds, weighted, label_shape):
    ours, theirs = getattr(tp.metrics, name)(thresholds=thresholds), getattr(keras.metrics, name)(thresholds=thresholds)
    assert_matches_keras(ours, theirs, _binary_batches(rng, label_shape), weighted)
    assert set(ours.get_config()) == set(theirs.get_config()) - {"dtype"}
    assert ours.get_config()["thresholds"] == thresholds


@pytest.mark.parametrize("name", ["Precision", "Recall"])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"thresholds": 0.7},
        {"thresholds": [0.2, 0.5, 0.9]},
        {"top_k": 2},
        {"class_id": 3},
        {"top_k": 2, "class_id": 1},
        {"top_k": 1, "thresholds": 0.4},
    ],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_precision_and_recall_match_keras(rng, name, kwargs, weighted):
    ours, theirs = getattr(tp.metrics, name)(**kwargs), getattr(keras.metrics, name)(**kwargs)
    assert_matches_keras(ours, theirs, _multiclass_batches(rng), weighted)
    config = ours.get_config()
    assert set(config) == set(theirs.get_config()) - {"dtype"}
    assert {k: config[k] for k in kwargs} == kwargs
    again = tp.metrics.get({"class_name": name, "config": config})
    assert again.get_config() == config


@pytest.mark.parametrize("name", ["Precision", "Recall"])
def test_binary_precision_and_recall_match_keras(rng, name):
    ours, theirs = getattr(tp.metrics, name)(), getattr(keras.metrics, name)()
    assert_matches_keras(ours, theirs, _binary_batches(rng, (8,)), weighted=True)


def test_logits_with_a_zero_threshold_and_empty_results():
    assert tp.metrics.Precision(thresholds=0.0)([1, 0, 1], [2.5, -1.0, -0.5]) == 1.0
    assert tp.metrics.Precision().result() == 0.0
    assert tp.metrics.Recall()([0, 0], [0.9, 0.1]) == 0.0


def test_names_and_lookup():
    assert [tp.metrics.get(n).name for n in ("true_positives", "FalseNegatives", "precision")] == [
        "true_positives",
        "false_negatives",
        "precision",
    ]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"TruePositives: threshold values must be in \[0, 1\]"):
        tp.metrics.TruePositives(thresholds=[0.5, 1.5])
    with pytest.raises(ValueError, match="Precision: top_k must be a positive integer"):
        tp.metrics.Precision(top_k=0)
    with pytest.raises(ValueError, match="recall: with class_id, y_pred must have shape"):
        tp.metrics.Recall(class_id=1).update_state([1, 0], [0.2, 0.8])
    with pytest.raises(ValueError, match="false_positives: sample_weight shape"):
        tp.metrics.FalsePositives().update_state([1, 0], [0.2, 0.8], sample_weight=[1.0, 2.0, 3.0])


def test_compile_and_fit_log_the_counts(rng):
    x = rng.normal(size=(32, 3)).astype("float32")
    y = (x[:, :1] > 0).astype("float32")
    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy", metrics=["true_positives", tp.metrics.Recall(name="r")])
    logs = model.fit(x, y, batch_size=8, epochs=1, verbose=0).history
    assert {"true_positives", "r"} <= set(logs)
    counts = tp.metrics.TruePositives()(y, model.predict(x, verbose=0))
    assert model.evaluate(x, y, verbose=0, return_dict=True)["true_positives"] == counts
