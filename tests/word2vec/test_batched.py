"""Word2Vec in batches of ops (`Word2Vec(device=...)`): the host's pairs and negatives, one
frozen step against a NumPy float64 model of the same update, and training on every
device (gpu:0 is the GPU backend with NumPy standing in for CuPy where no GPU exists; the
XLA suite adds xla:0 and xla:1) giving what the CPU gives."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.backends import backend
from tapeflow.devices import parse_device
from tapeflow.ops.skipgram import negative_table
from tapeflow.word2vec.batched import SkipGramStep, draw_negatives, skipgram_pairs


def _pairs_by_loops(ids, offsets, keep, window, rng):
    """The pairs one word at a time, making skipgram_pairs' draws in its order."""
    kept_mask = rng.random(len(ids)) < keep[ids]
    sentence = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    words, sentences = ids[kept_mask], sentence[kept_mask]
    reach = rng.integers(1, window + 1, len(words))
    pairs = []
    for p in range(len(words)):
        for q in range(max(0, p - reach[p]), min(len(words), p + reach[p] + 1)):
            if q != p and sentences[q] == sentences[p]:
                pairs.append((int(words[p]), int(words[q])))
    return sorted(pairs), len(words)


def test_pairs_are_each_kept_word_with_its_neighbours_within_its_reach():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 30, 400)
    offsets = np.array([0, 7, 7, 90, 91, 250, 400])  # an empty and a one-word sentence among them
    keep = rng.uniform(0.3, 1.0, 30)
    centers, contexts, kept = skipgram_pairs(ids, offsets, keep, 4, np.random.default_rng(9))
    want, want_kept = _pairs_by_loops(ids, offsets, keep, 4, np.random.default_rng(9))
    assert sorted(zip(centers.tolist(), contexts.tolist(), strict=True)) == want and kept == want_kept


def test_negatives_follow_the_counts_to_the_three_quarters():
    counts = np.array([1000, 100, 10, 1])
    drawn = draw_negatives(negative_table(counts), (200_000,), np.random.default_rng(1))
    want = counts**0.75 / np.sum(counts**0.75)
    np.testing.assert_allclose(np.bincount(drawn, minlength=4) / drawn.size, want, atol=0.005)


def test_one_step_is_the_word2vec_update_summed_over_the_batch():
    rng = np.random.default_rng(5)
    syn0, syn1 = rng.standard_normal((6, 4)) * 0.3, rng.standard_normal((6, 4)) * 0.3
    centers, contexts = np.array([0, 2, 2, 5]), np.array([1, 3, 3, 0])
    negatives = np.array([[4, 1], [3, 0], [5, 5], [2, 0]])  # row 1: a negative equal to the context
    rate = 0.05
    step = SkipGramStep(tp.Variable(syn0.astype(np.float32)), tp.Variable(syn1.astype(np.float32)), 2)
    loss = step(tp.tensor(centers), tp.tensor(contexts), tp.tensor(negatives), tp.tensor(np.float32(rate)))
    new0, new1, want_loss = syn0.copy(), syn1.copy(), 0.0
    for c, ctx, negs in zip(centers, contexts, negatives, strict=True):
        for target, label in [(ctx, 1.0)] + [(n, 0.0) for n in negs if n != ctx]:
            score = syn0[c] @ syn1[target]
            g = rate * (label - 1.0 / (1.0 + np.exp(-score)))
            new0[c] += g * syn1[target]  # every update from the tables before the batch
            new1[target] += g * syn0[c]
            want_loss += np.log1p(np.exp(-score if label else score)) / len(centers)
    np.testing.assert_allclose(step.syn0.numpy(), new0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(step.syn1.numpy(), new1, rtol=1e-5, atol=1e-6)
    assert float(loss) == pytest.approx(want_loss, rel=1e-5)


def _clustered_sentences():
    rng = np.random.default_rng(0)
    a, b = [f"a{i}" for i in range(20)], [f"b{i}" for i in range(20)]
    return [list(rng.choice(a if rng.random() < 0.5 else b, 12)) for _ in range(1500)]


def _trained(device):
    settings = {"dim": 16, "window": 3, "min_count": 1, "epochs": 2, "seed": 1, "sample": 0, "verbose": False}
    return tp.word2vec.Word2Vec(**settings, device=device).train(_clustered_sentences())


def assert_learns_the_clusters(model):
    wv = model.wv
    within = np.mean([wv.similarity(f"a{i}", f"a{(i + 1) % 20}") for i in range(20)])
    across = np.mean([wv.similarity(f"a{i}", f"b{i}") for i in range(20)])
    assert within > 0.9 and across < within - 0.5
    assert [e["words"] for e in model.history] == [18_000, 18_000]


def test_batched_training_learns_what_the_fused_kernel_learns():
    for model in (_trained(None), _trained("cpu")):
        assert_learns_the_clusters(model)


def test_batched_training_on_a_device_gives_what_the_cpu_gives(accelerator):
    on_cpu, there = _trained("cpu"), _trained(accelerator)
    if getattr(backend(parse_device(accelerator).family), "FUSED_WORD2VEC", False):
        # a real GPU trains through its own fused kernel (Hogwild, its own draws), not in batches
        assert_learns_the_clusters(there)
        return
    np.testing.assert_allclose(there.syn0, on_cpu.syn0, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(there.syn1, on_cpu.syn1, rtol=1e-4, atol=1e-5)
    assert there.history[0]["pairs"] == on_cpu.history[0]["pairs"] > 0
