"""Metrics against NumPy written out directly, over several batches."""

import numpy as np
import pytest

import tapeflow as tp


def _batches(rng, n_batches=3, batch=8, classes=5):
    out = []
    for _ in range(n_batches):
        logits = rng.normal(size=(batch, classes))
        probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        labels = rng.integers(0, classes, size=batch)
        out.append((labels, probs, rng.uniform(size=batch)))
    return out


def _feed(metric, batches, weighted):
    for labels, probs, w in batches:
        metric.update_state(labels, probs, sample_weight=w if weighted else None)
    return metric.result()


def _weighted_mean(values, weights):
    return float(np.sum(values * weights) / np.sum(weights))


@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_categorical_accuracy(rng, weighted):
    batches = _batches(rng)
    labels = np.concatenate([b[0] for b in batches])
    probs = np.concatenate([b[1] for b in batches])
    w = np.concatenate([b[2] for b in batches]) if weighted else np.ones(len(labels))
    hits = (probs.argmax(-1) == labels).astype(float)
    result = _feed(tp.metrics.SparseCategoricalAccuracy(), batches, weighted)
    assert isinstance(result, float)
    assert result == pytest.approx(_weighted_mean(hits, w), rel=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
def test_categorical_accuracy(rng, weighted):
    batches = [(np.eye(5)[labels], probs, w) for labels, probs, w in _batches(rng)]
    labels = np.concatenate([b[0] for b in batches]).argmax(-1)
    probs = np.concatenate([b[1] for b in batches])
    w = np.concatenate([b[2] for b in batches]) if weighted else np.ones(len(labels))
    result = _feed(tp.metrics.CategoricalAccuracy(), batches, weighted)
    assert result == pytest.approx(_weighted_mean((probs.argmax(-1) == labels).astype(float), w), rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 5, 7])
def test_top_k_accuracies(rng, k):
    batches = _batches(rng)
    labels = np.concatenate([b[0] for b in batches])
    probs = np.concatenate([b[1] for b in batches])
    rank = (probs > probs[np.arange(len(labels)), labels][:, None]).sum(-1)  # classes scoring strictly higher
    expected = float(np.mean(rank < k))
    assert _feed(tp.metrics.SparseTopKCategoricalAccuracy(k=k), batches, False) == pytest.approx(expected)
    onehot = [(np.eye(5)[lab], p, w) for lab, p, w in batches]
    assert _feed(tp.metrics.TopKCategoricalAccuracy(k=k), onehot, False) == pytest.approx(expected)


def test_top_k_counts_ties_as_in():
    m = tp.metrics.SparseTopKCategoricalAccuracy(k=1)
    m.update_state([0, 1], [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    assert m.result() == 1.0
    assert tp.metrics.SparseTopKCategoricalAccuracy().get_config()["k"] == 5


@pytest.mark.parametrize("threshold", [0.5, 0.2])
def test_binary_accuracy(rng, threshold):
    t = rng.integers(0, 2, size=(10, 3)).astype(float)
    p = rng.uniform(size=(10, 3))
    m = tp.metrics.BinaryAccuracy(threshold=threshold)
    m.update_state(t[:4], p[:4])
    m.update_state(t[4:], p[4:])
    assert m.result() == pytest.approx(float(np.mean((p > threshold) == t)))


def test_accuracy_is_exact_match():
    m = tp.metrics.Accuracy()
    assert m([[1], [2], [3], [4]], [[0], [2], [3], [4]]) == 0.75


@pytest.mark.parametrize("weighted", [False, True])
def test_precision_and_recall(rng, weighted):
    t = rng.integers(0, 2, size=30)
    p = rng.uniform(size=30)
    w = rng.uniform(size=30) if weighted else np.ones(30)
    precision, recall = tp.metrics.Precision(), tp.metrics.Recall()
    for lo, hi in ((0, 10), (10, 30)):
        sw = w[lo:hi] if weighted else None
        precision.update_state(t[lo:hi], p[lo:hi], sample_weight=sw)
        recall.update_state(t[lo:hi, None], p[lo:hi, None], sample_weight=sw)
    positive, truth = p > 0.5, t == 1
    tp_, fp, fn = w[truth & positive].sum(), w[~truth & positive].sum(), w[truth & ~positive].sum()
    assert precision.result() == pytest.approx(tp_ / (tp_ + fp), rel=1e-12)
    assert recall.result() == pytest.approx(tp_ / (tp_ + fn), rel=1e-12)


def test_precision_recall_edge_cases():
    p = tp.metrics.Precision()
    assert p.result() == 0.0
    p.update_state([1, 1], [0.1, 0.2])  # nothing predicted positive
    assert p.result() == 0.0
    assert tp.metrics.Recall(thresholds=0.05)([1, 1], [0.1, 0.2]) == 1.0
    assert tp.metrics.Precision(thresholds=0.0)([1, 0], [2.5, -1.0]) == 1.0  # logits, as in Keras


def test_mean_and_weights():
    m = tp.metrics.Mean()
    m.update_state([1.0, 2.0, 3.0])
    m.update_state(tp.tensor(10.0))
    assert m.result() == pytest.approx(4.0)
    m.reset_state()
    assert m.result() == 0.0
    m.update_state([[1.0, 3.0], [5.0, 7.0]], sample_weight=[1.0, 3.0])  # per-sample means 2 and 6
    assert m.result() == pytest.approx((2.0 + 18.0) / 4.0)
    with pytest.raises(ValueError, match="sample_weight shape"):
        m.update_state([1.0, 2.0], sample_weight=[1.0, 2.0, 3.0])


def test_regression_metrics(rng):
    t, p = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    assert tp.metrics.MeanSquaredError()(t, p) == pytest.approx(float(np.mean((t - p) ** 2)))
    assert tp.metrics.MeanAbsoluteError()(t, p) == pytest.approx(float(np.mean(np.abs(t - p))))


def test_reset_state_and_call():
    m = tp.metrics.SparseCategoricalAccuracy()
    assert m([1], [[0.2, 0.8]]) == 1.0
    assert m([1], [[0.9, 0.1]]) == 0.5
    m.reset_state()
    assert m.result() == 0.0


def test_shape_errors_name_the_metric():
    with pytest.raises(ValueError, match=r"sparse_categorical_accuracy: y_true shape \(3,\)"):
        tp.metrics.SparseCategoricalAccuracy().update_state([0, 1, 2], np.ones((2, 4)))
    with pytest.raises(ValueError, match="binary_accuracy"):
        tp.metrics.BinaryAccuracy().update_state(np.ones((2, 3)), np.ones((2, 4)))


# ---------------------------------------------------------- "accuracy"
@pytest.mark.parametrize(
    ("y_true", "y_pred", "resolved", "expected"),
    [
        ([2, 0, 1], [[0.1, 0.2, 0.7], [0.6, 0.3, 0.1], [0.8, 0.1, 0.1]], "sparse_categorical_accuracy", 2 / 3),
        ([[2], [0]], [[0.1, 0.2, 0.7], [0.1, 0.6, 0.3]], "sparse_categorical_accuracy", 0.5),
        ([[0, 0, 1], [0, 1, 0]], [[0.1, 0.2, 0.7], [0.6, 0.3, 0.1]], "categorical_accuracy", 0.5),
        ([[1], [0], [1]], [[0.9], [0.7], [0.2]], "binary_accuracy", 1 / 3),
        ([1, 0, 1, 1], [0.9, 0.2, 0.6, 0.4], "binary_accuracy", 0.75),
    ],
)
def test_auto_accuracy_resolves_from_shapes(y_true, y_pred, resolved, expected):
    acc = tp.metrics.get("accuracy")
    assert acc.name == "accuracy" and acc.resolved is None
    acc.update_state(np.asarray(y_true), tp.tensor(np.asarray(y_pred)))
    assert acc.resolved == resolved
    assert acc.result() == pytest.approx(expected)
    acc.reset_state()
    assert acc.resolved == resolved and acc.result() == 0.0


def test_auto_accuracy_follows_the_loss():
    t = np.array([[1, 0, 1], [0, 0, 1]])
    logits = np.array([[2.0, -1.0, -0.5], [0.3, -2.0, 1.0]])
    acc = tp.metrics.get("acc", loss=tp.losses.BinaryCrossentropy(from_logits=True))  # multi-label, logits
    acc.update_state(t, logits)
    assert acc.resolved == "binary_accuracy"
    assert acc.result() == pytest.approx(float(np.mean((logits > 0) == t)))
    sparse = tp.metrics.get("accuracy", loss="sparse_categorical_crossentropy")
    sparse.update_state([[0], [2]], [[0.9, 0.05, 0.05], [0.1, 0.1, 0.8]])
    assert sparse.resolved == "sparse_categorical_accuracy" and sparse.result() == 1.0


# ------------------------------------------------------------------- get
def test_get():
    assert isinstance(tp.metrics.get("sparse_categorical_accuracy"), tp.metrics.SparseCategoricalAccuracy)
    assert isinstance(tp.metrics.get("SparseTopKCategoricalAccuracy"), tp.metrics.SparseTopKCategoricalAccuracy)
    assert isinstance(tp.metrics.get("top_k_categorical_accuracy"), tp.metrics.TopKCategoricalAccuracy)
    assert isinstance(tp.metrics.get("Accuracy"), tp.metrics.Accuracy)
    assert isinstance(tp.metrics.get("mse"), tp.metrics.MeanSquaredError)
    assert tp.metrics.get("precision") is not tp.metrics.get("precision")  # a fresh, stateful object each time
    m = tp.metrics.BinaryAccuracy(threshold=0.3)
    assert tp.metrics.get(m) is m
    again = tp.metrics.get({"class_name": "BinaryAccuracy", "config": m.get_config()})
    assert again.get_config() == {"name": "binary_accuracy", "threshold": 0.3}
    custom = tp.metrics.get(lambda t, p: np.abs(np.asarray(t) - np.asarray(p)))
    assert custom([1.0, 2.0], [2.0, 2.0]) == 0.5
    with pytest.raises(ValueError, match=r"unknown metric 'f1'.*'sparse_categorical_accuracy'"):
        tp.metrics.get("f1")
