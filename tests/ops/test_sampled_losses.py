"""nce_loss and sampled_softmax_loss against a NumPy float64 reference given the same
samples, finite differences, the full softmax as num_sampled reaches the vocabulary,
and the candidate samplers' draws and expected counts."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(3)
CLASSES, DIM, BATCH = 12, 5, 4


def _problem(num_true=2, num_sampled=6, dtype=np.float64):
    weights = RNG.standard_normal((CLASSES, DIM)).astype(dtype)
    biases = RNG.standard_normal(CLASSES).astype(dtype)
    inputs = RNG.standard_normal((BATCH, DIM)).astype(dtype)
    labels = np.stack([RNG.choice(CLASSES, num_true, replace=False) for _ in range(BATCH)])
    sampled = RNG.choice(CLASSES, num_sampled, replace=False)
    sampled[0] = labels[0, 0]  # an accidental hit
    true_expected = RNG.uniform(0.1, 0.9, labels.shape).astype(np.float32)
    sampled_expected = RNG.uniform(0.1, 0.9, num_sampled).astype(np.float32)
    return weights, biases, labels, inputs, (sampled, true_expected, sampled_expected)


def _reference(weights, biases, labels, inputs, samples, kind, remove_hits):
    """Per-example losses in float64; accidental hits are left out of the sums."""
    sampled, true_expected, sampled_expected = (np.asarray(s, dtype=np.float64) for s in samples)
    sampled = sampled.astype(np.int64)
    num_true = labels.shape[1]
    losses = []
    for i in range(labels.shape[0]):
        x = inputs[i].astype(np.float64)
        true_logits = weights[labels[i]] @ x + biases[labels[i]] - np.log(true_expected[i])
        keep = [j for j in range(sampled.shape[0]) if not (remove_hits and sampled[j] in labels[i])]
        noise_logits = weights[sampled[keep]] @ x + biases[sampled[keep]] - np.log(sampled_expected[keep])
        if kind == "nce":
            positive = np.logaddexp(0.0, true_logits) - true_logits / num_true
            losses.append(positive.sum() + np.logaddexp(0.0, noise_logits).sum())
        else:
            all_logits = np.concatenate([true_logits, noise_logits])
            top = all_logits.max()
            losses.append(top + np.log(np.exp(all_logits - top).sum()) - true_logits.sum() / num_true)
    return np.array(losses)


LOSSES = {"nce": tp.nn.nce_loss, "softmax": tp.nn.sampled_softmax_loss}


@pytest.mark.parametrize("kind", sorted(LOSSES))
@pytest.mark.parametrize("remove_hits", [False, True])
@pytest.mark.parametrize("num_true", [1, 2])
def test_matches_numpy_given_the_same_samples(kind, remove_hits, num_true):
    weights, biases, labels, inputs, samples = _problem(num_true)
    got = LOSSES[kind](
        weights,
        biases,
        labels,
        inputs,
        num_sampled=6,
        num_classes=CLASSES,
        num_true=num_true,
        sampled_values=samples,
        remove_accidental_hits=remove_hits,
    )
    expected = _reference(weights, biases, labels, inputs, samples, kind, remove_hits)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize("kind", sorted(LOSSES))
def test_gradients_match_finite_differences_and_are_sparse(kind):
    weights, biases, labels, inputs, samples = _problem(num_true=2)
    cot = RNG.standard_normal(BATCH)
    w, b, x = tp.Variable(weights, name="w"), tp.Variable(biases, name="b"), tp.Variable(inputs, name="x")
    with tp.GradientTape() as tape:
        loss = tp.sum(
            LOSSES[kind](w, b, labels, x, 6, CLASSES, 2, samples, remove_accidental_hits=True) * tp.tensor(cot)
        )
    gw, gb, gx = tape.gradient(loss, [w, b, x])
    assert isinstance(gw, tp.IndexedSlices) and isinstance(gb, tp.IndexedSlices)

    def objective(arrays):
        return float(cot @ _reference(*arrays[:2], labels, arrays[2], samples, kind, True))

    arrays = [weights, biases, inputs]
    for k, got in enumerate((gw, gb, gx)):
        fd = np.zeros(arrays[k].shape)
        for idx in np.ndindex(arrays[k].shape):
            for sign in (1, -1):
                shifted = [a.copy() for a in arrays]
                shifted[k][idx] += sign * 1e-6
                fd[idx] += sign * objective(shifted) / 2e-6
        np.testing.assert_allclose(np.asarray(got), fd, rtol=1e-5, atol=1e-7)


def _full_softmax(weights, biases, labels, inputs):
    logits = inputs @ weights.T + biases
    top = logits.max(axis=1, keepdims=True)
    lse = (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))[:, 0]
    return lse - logits[np.arange(len(labels)), labels[:, 0]]


def test_sampled_softmax_approaches_full_softmax_as_samples_cover_the_vocabulary():
    classes = 60
    weights = RNG.standard_normal((classes, DIM))
    biases = RNG.standard_normal(classes)
    inputs = RNG.standard_normal((BATCH, DIM))
    labels = RNG.integers(0, classes, (BATCH, 1))
    full = _full_softmax(weights, biases, labels, inputs)
    tp.random.seed(0)
    errors = []
    for num_sampled in (4, 16, 40, classes):
        draws = [
            tp.nn.sampled_softmax_loss(
                weights,
                biases,
                labels,
                inputs,
                num_sampled,
                classes,
                sampled_values=tp.random.uniform_candidate_sampler(labels, 1, num_sampled, True, classes, seed=1),
            ).numpy()
            for _ in range(30)
        ]
        errors.append(np.mean(np.abs(np.array(draws) - full)))
    assert errors == sorted(errors, reverse=True), errors
    assert errors[-1] < 1e-9  # every class drawn once, equal weights: exactly the full softmax


def test_nce_loss_runs_in_a_frozen_train_step_with_sparse_updates():
    weights = tp.Variable(RNG.standard_normal((CLASSES, DIM)).astype(np.float32), name="w")
    biases = tp.Variable(np.zeros(CLASSES, np.float32), name="b")
    opt = tp.optimizers.SGD(0.5)

    @tp.function
    def step(labels, inputs, lr, iteration):
        with tp.GradientTape() as tape:
            loss = tp.mean(tp.nn.nce_loss(weights, biases, labels, inputs, 3, CLASSES, seed=4))
        grads = tape.gradient(loss, [weights, biases])
        assert all(isinstance(g, tp.IndexedSlices) for g in grads)
        opt.apply_gradients_at(zip(grads, [weights, biases], strict=True), lr, iteration)
        return loss

    labels = np.array([[0], [1], [0], [1]])
    inputs = tp.tensor(RNG.standard_normal((4, DIM)).astype(np.float32))
    losses = [float(step(labels, inputs, tp.tensor(0.5), tp.tensor(float(i + 1)))) for i in range(30)]
    assert step.trace_count == 1
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


# ------------------------------------------------------------ candidate samplers
SAMPLERS = {
    "uniform": lambda t, s, u, r, seed: tp.random.uniform_candidate_sampler(t, 1, s, u, r, seed=seed),
    "log_uniform": lambda t, s, u, r, seed: tp.random.log_uniform_candidate_sampler(t, 1, s, u, r, seed=seed),
    "unigram": lambda t, s, u, r, seed: tp.random.fixed_unigram_candidate_sampler(
        t, 1, s, u, r, distortion=0.75, unigrams=np.arange(1, r + 1) ** 2, seed=seed
    ),
}


def _probabilities(kind, r):
    k = np.arange(r, dtype=np.float64)
    if kind == "uniform":
        return np.full(r, 1.0 / r)
    if kind == "log_uniform":
        return np.log((k + 2) / (k + 1)) / np.log(r + 1)
    weights = (k + 1) ** 1.5  # (counts (k+1)^2) ** 0.75
    return weights / weights.sum()


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_sampler_frequencies_and_expected_counts(kind):
    r, n = 10, 200_000
    labels = np.array([[0], [9]])
    sampled, true_expected, sampled_expected = SAMPLERS[kind](labels, n, False, r, 7)
    p = _probabilities(kind, r)
    freq = np.bincount(sampled.numpy(), minlength=r) / n
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(p.max() / n))
    np.testing.assert_allclose(true_expected.numpy()[:, 0], n * p[[0, 9]], rtol=1e-6)
    np.testing.assert_allclose(sampled_expected.numpy(), n * p[sampled.numpy()], rtol=1e-6)


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_unique_sampler_draws_distinct_classes_with_tensorflow_counts(kind):
    r = 20
    sampled, true_expected, sampled_expected = SAMPLERS[kind]([[3]], 8, True, r, 2)
    s = sampled.numpy()
    assert len(set(s.tolist())) == 8 and s.min() >= 0 and s.max() < r
    p = _probabilities(kind, r)
    # expected count = 1 - (1 - p) ** tries, one tries for every class: recover it from one class
    tries = np.log1p(-sampled_expected.numpy()[0]) / np.log1p(-p[s[0]])
    assert round(tries) >= 8 and abs(tries - round(tries)) < 1e-3
    np.testing.assert_allclose(sampled_expected.numpy(), -np.expm1(round(tries) * np.log1p(-p[s])), rtol=1e-5)
    np.testing.assert_allclose(true_expected.numpy()[0, 0], -np.expm1(round(tries) * np.log1p(-p[3])), rtol=1e-5)


def test_samplers_are_seeded():
    tp.random.seed(5)
    first = [tp.random.log_uniform_candidate_sampler([[1]], 1, 6, True, 100, seed=9)[0].numpy() for _ in range(2)]
    tp.random.seed(5)
    again = [tp.random.log_uniform_candidate_sampler([[1]], 1, 6, True, 100, seed=9)[0].numpy() for _ in range(2)]
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], first[1])  # repeated calls continue the stream


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: tp.random.uniform_candidate_sampler([[1]], 1, 5, True, 3), ValueError, "distinct"),
        (lambda: tp.random.uniform_candidate_sampler([1], 1, 2, True, 3), ValueError, "true_classes"),
        (
            lambda: tp.random.fixed_unigram_candidate_sampler([[1]], 1, 2, False, 3, unigrams=[1, 2]),
            ValueError,
            "range_max",
        ),
        (lambda: tp.random.log_uniform_candidate_sampler([[1]], 1, 2, False, 3, seed="a"), TypeError, "seed"),
        (lambda: tp.nn.nce_loss(tp.zeros((5, 2)), tp.zeros((5,)), [[1]], tp.ones((1, 3)), 2, 5), ValueError, "weights"),
        (lambda: tp.nn.nce_loss(tp.zeros((5, 2)), tp.zeros((5,)), [[1.0]], tp.ones((1, 2)), 2, 5), TypeError, "labels"),
        (
            lambda: tp.nn.sampled_softmax_loss(
                tp.zeros((5, 2)), tp.zeros((5,)), [[1]], tp.ones((1, 2)), 2, 5, num_true=2
            ),
            ValueError,
            "num_true",
        ),
    ],
)
def test_bad_input_names_the_problem(make, error, match):
    with pytest.raises(error, match=match):
        make()
