"""The text pipeline: vocabulary counts, subsampling against its formula, skip-gram and
CBOW examples against a plain per-word loop, and bad input."""

import collections

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.data import text

SENTENCES = [
    "the quick brown fox jumps over the lazy dog".split(),
    "the dog barks".split(),
    [],
    "a fox and a dog and the end".split(),
]


def test_vocabulary_counts_match_a_counter():
    counter = collections.Counter(w for s in SENTENCES for w in s)
    vocab = text.Vocabulary.build(SENTENCES, min_count=2)
    expected = sorted((w for w, c in counter.items() if c >= 2), key=lambda w: -counter[w])
    assert vocab.words == expected
    assert vocab.counts.tolist() == [counter[w] for w in expected]
    assert vocab.corpus_words == sum(counter.values())
    assert vocab.counts[0] == counter.most_common(1)[0][1]


def test_vocabulary_max_size_keeps_most_frequent():
    vocab = text.Vocabulary.build(SENTENCES, min_count=1, max_size=3)
    assert len(vocab) == 3
    assert vocab.words[:2] == ["the", "dog"]
    assert np.all(np.diff(vocab.counts) <= 0)


def test_encode_drops_unknown_words_and_keeps_sentences():
    vocab = text.Vocabulary.build(SENTENCES, min_count=2)
    corpus = vocab.encode(SENTENCES)
    assert corpus.num_sentences == len(SENTENCES)
    for ids, sentence in zip(corpus.sentences(), SENTENCES, strict=True):
        assert [vocab.words[i] for i in ids] == [w for w in sentence if w in vocab]


def test_unknown_word_is_a_key_error_naming_it():
    vocab = text.Vocabulary.build(SENTENCES, min_count=1)
    with pytest.raises(KeyError, match="zebra"):
        vocab["zebra"]


def test_keep_probabilities_follow_the_formula():
    rng = np.random.default_rng(1)
    counts = np.sort(rng.integers(1, 100_000, size=50))[::-1]
    sample = 1e-3
    keep = text.keep_probabilities(counts, sample)
    total = counts.sum()
    for count, p in zip(counts, keep, strict=True):
        f = count / total
        assert p == pytest.approx(min(1.0, (np.sqrt(f / sample) + 1) * sample / f), rel=1e-12)
    assert np.all(text.keep_probabilities(counts, 0.0) == 1.0)


def test_subsampling_keeps_words_at_their_probability():
    vocab = text.Vocabulary([f"w{i}" for i in range(4)], [8000, 1500, 400, 100])
    ids = np.repeat(np.arange(4), vocab.counts)
    corpus = text.Corpus(np.tile(ids, 20), np.linspace(0, 20 * ids.size, 41).astype(np.int64))
    keep = vocab.keep_probabilities(sample=0.01)
    kept = text.subsample(corpus, keep, np.random.default_rng(0))
    rates = np.bincount(kept.ids, minlength=4) / np.bincount(corpus.ids, minlength=4)
    n = np.bincount(corpus.ids, minlength=4)
    assert np.all(np.abs(rates - keep) < 5 * np.sqrt(keep * (1 - keep) / n) + 1e-12)
    assert kept.num_sentences == corpus.num_sentences


def _loop_pairs(corpus, window, reach):
    """Per-word loop: the reference for skip-gram pairs given the drawn reaches."""
    pairs = []
    for start, stop in zip(corpus.offsets[:-1], corpus.offsets[1:], strict=True):
        for i in range(start, stop):
            for j in range(max(start, i - reach[i]), min(stop, i + reach[i] + 1)):
                if j != i:
                    pairs.append((corpus.ids[i], corpus.ids[j]))
    return pairs


def test_skipgram_pairs_match_a_per_word_loop():
    vocab = text.Vocabulary.build(SENTENCES, min_count=1)
    corpus = vocab.encode(SENTENCES)
    window = 3
    centers, contexts = text.skipgram_pairs(corpus, window, np.random.default_rng(7))
    reach = window - np.random.default_rng(7).integers(0, window, size=len(corpus))
    assert list(zip(centers.tolist(), contexts.tolist(), strict=True)) == _loop_pairs(corpus, window, reach)


def test_cbow_examples_match_the_skipgram_windows():
    vocab = text.Vocabulary.build(SENTENCES, min_count=1)
    corpus = vocab.encode(SENTENCES)
    contexts, targets = text.cbow_examples(corpus, 2, np.random.default_rng(3))
    centers, pair_contexts = text.skipgram_pairs(corpus, 2, np.random.default_rng(3))
    assert np.all((contexts >= 0).sum(axis=1) >= 1)
    flat = [(t, c) for row, t in zip(contexts, targets, strict=True) for c in row[row >= 0]]
    assert sorted(flat) == sorted(zip(centers.tolist(), pair_contexts.tolist(), strict=True))
    assert contexts.shape[1] == 4


def test_skipgram_dataset_batches_and_redraws_each_pass():
    vocab = text.Vocabulary.build(SENTENCES * 20, min_count=1)
    corpus = vocab.encode(SENTENCES * 20)
    ds = text.skipgram_dataset(corpus, window=2, batch_size=64, keep=vocab.keep_probabilities(0.05), seed=3)
    first = [np.concatenate(part) for part in zip(*ds, strict=True)]
    second = [np.concatenate(part) for part in zip(*ds, strict=True)]
    assert isinstance(ds, tp.data.Dataset)
    assert all(b[0].shape[0] <= 64 for b in ds)
    assert first[0].dtype == np.int64 and first[0].shape == first[1].shape
    assert first[0].shape != second[0].shape or not np.array_equal(first[0], second[0])
    again = text.skipgram_dataset(corpus, window=2, batch_size=64, keep=vocab.keep_probabilities(0.05), seed=3)
    assert np.array_equal(np.concatenate([c for c, _ in again]), first[0])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: text.Vocabulary.build([[], []]), ValueError, "empty"),
        (lambda: text.Vocabulary.build([["a"]], min_count=2), ValueError, "min_count=2"),
        (lambda: text.Vocabulary.build(["a b"]), TypeError, "tokenize"),
        (lambda: text.skipgram_dataset(text.Corpus([0, 1], [0, 2]), window=0), ValueError, "window"),
        (lambda: text.cbow_dataset(text.Corpus([0, 1], [0, 2]), window=0), ValueError, "window"),
        (lambda: text.skipgram_dataset(text.Corpus([], [0]), window=2), ValueError, "empty"),
        (lambda: text.skipgram_dataset([[0, 1]], window=2), TypeError, "Corpus"),
        (lambda: text.keep_probabilities([5, 3], sample=-1), ValueError, "sample"),
        (lambda: text.Corpus([0, 1], [0, 3]), ValueError, "offsets"),
    ],
)
def test_bad_input_is_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()
