"""Text for word embeddings: tokens, a vocabulary, subsampling, and skip-gram / CBOW examples.

A corpus goes from sentences of tokens to a `Corpus` of word ids (one flat int32 array
plus sentence offsets) through a `Vocabulary`; `skipgram_dataset` and `cbow_dataset`
turn it into a `tp.data.Dataset` of training examples, drawing a fresh subsample and
fresh dynamic windows on every pass, as word2vec does every epoch.

>>> import tapeflow as tp
>>> sentences = [tokenize("the cat sat on the mat"), tokenize("the dog sat")]
>>> vocab = Vocabulary.build(sentences, min_count=2)
>>> vocab.words, vocab.counts.tolist()
(['the', 'sat'], [3, 2])
>>> corpus = vocab.encode(sentences)
>>> corpus.ids.tolist(), corpus.offsets.tolist()
([0, 1, 0, 0, 1], [0, 3, 5])
>>> for centers, contexts in skipgram_dataset(corpus, window=1, batch_size=8, seed=0):
...     print(centers.tolist(), contexts.tolist())
[0, 1, 1, 0, 0, 1] [1, 0, 0, 1, 1, 0]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.data.datasets.corpora import load_text8, load_text_file, load_wikipedia_excerpt
from tapeflow.ops.random import global_generator

__all__ = [
    "Corpus",
    "Vocabulary",
    "cbow_dataset",
    "cbow_examples",
    "keep_probabilities",
    "load_text8",
    "load_text_file",
    "load_wikipedia_excerpt",
    "skipgram_dataset",
    "skipgram_pairs",
    "subsample",
    "tokenize",
]


def tokenize(text: str, lowercase: bool = False) -> list[str]:
    """The whitespace-separated tokens of `text`, optionally lowercased.

    >>> tokenize("The  cat\\tsat\\n", lowercase=True)
    ['the', 'cat', 'sat']
    """
    if not isinstance(text, str):
        raise TypeError(f"tokenize: expected a str, got {type(text).__name__}")
    return (text.lower() if lowercase else text).split()


class Corpus:
    """Word ids of a tokenized corpus: `ids` (int32, all sentences back to back) and
    `offsets` (int64, sentence k is ids[offsets[k]:offsets[k + 1]]).

    >>> c = Corpus([3, 1, 2], [0, 2, 3])
    >>> len(c), c.num_sentences, [s.tolist() for s in c.sentences()]
    (3, 2, [[3, 1], [2]])
    """

    __slots__ = ("ids", "offsets")

    def __init__(self, ids, offsets):
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if ids.ndim != 1 or offsets.ndim != 1 or offsets.size < 1:
            raise ValueError(
                f"Corpus: ids and offsets must be 1-D (offsets non-empty), got {ids.shape}, {offsets.shape}"
            )
        if offsets[0] != 0 or offsets[-1] != ids.size or np.any(np.diff(offsets) < 0):
            raise ValueError(f"Corpus: offsets must rise from 0 to {ids.size} (the number of ids)")
        if ids.size and ids.min() < 0:
            raise ValueError(f"Corpus: word ids must be >= 0, got {ids.min()}")
        self.ids = ids
        self.offsets = offsets

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def num_sentences(self) -> int:
        return int(self.offsets.size - 1)

    def sentences(self) -> Iterator[np.ndarray]:
        for start, stop in zip(self.offsets[:-1], self.offsets[1:], strict=True):
            yield self.ids[start:stop]

    def sentence_ids(self) -> np.ndarray:
        """For each word, the index of its sentence."""
        return np.repeat(np.arange(self.num_sentences, dtype=np.int64), np.diff(self.offsets))

    def __repr__(self) -> str:
        return f"Corpus({len(self)} words in {self.num_sentences} sentences)"


class Vocabulary:
    """The words kept for training, most frequent first, with their counts.

    `build` keeps words seen at least `min_count` times, then at most `max_size` of the
    most frequent (ties keep first-seen order). Unknown words are a KeyError naming them.

    >>> v = Vocabulary.build([["a", "b", "a", "c", "a", "b"]], min_count=2)
    >>> len(v), v["a"], v.words, "c" in v, v.corpus_words
    (2, 0, ['a', 'b'], False, 6)
    """

    def __init__(self, words: list[str], counts, corpus_words: int | None = None):
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (len(words),):
            raise ValueError(f"Vocabulary: {len(words)} words but counts of shape {counts.shape}")
        if len(set(words)) != len(words):
            raise ValueError("Vocabulary: words must be distinct")
        self.words = list(words)
        self.counts = counts
        self.index = {w: i for i, w in enumerate(self.words)}
        self.corpus_words = int(counts.sum()) if corpus_words is None else int(corpus_words)

    @classmethod
    def build(cls, sentences: Iterable[Iterable[str]], min_count: int = 5, max_size: int | None = None) -> Vocabulary:
        _check_int("Vocabulary.build", "min_count", min_count, 1)
        if max_size is not None:
            _check_int("Vocabulary.build", "max_size", max_size, 1)
        counter: Counter = Counter()
        for sentence in sentences:
            if isinstance(sentence, str):
                raise TypeError(
                    "Vocabulary.build: expected sentences as lists of tokens, got a str (tokenize it first)"
                )
            counter.update(sentence)
        total = sum(counter.values())
        if total == 0:
            raise ValueError("Vocabulary.build: the corpus is empty (no tokens)")
        kept = [(w, c) for w, c in counter.items() if c >= min_count]
        kept.sort(key=lambda wc: -wc[1])  # stable: ties keep first-seen order
        if max_size is not None:
            kept = kept[:max_size]
        if not kept:
            raise ValueError(
                f"Vocabulary.build: no word occurs at least min_count={min_count} times "
                f"in a corpus of {total} tokens ({len(counter)} distinct)"
            )
        return cls([w for w, _ in kept], [c for _, c in kept], corpus_words=total)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> int:
        try:
            return self.index[word]
        except KeyError:
            raise KeyError(f"word {word!r} is not in the vocabulary ({len(self)} words)") from None

    def encode(self, sentences: Iterable[Iterable[str]]) -> Corpus:
        """The ids of the known words of each sentence (unknown words are dropped)."""
        index = self.index
        ids: list[int] = []
        offsets = [0]
        for sentence in sentences:
            if isinstance(sentence, str):
                raise TypeError("Vocabulary.encode: expected sentences as lists of tokens, got a str")
            ids.extend(i for i in map(index.get, sentence) if i is not None)
            offsets.append(len(ids))
        return Corpus(np.array(ids, dtype=np.int32), np.array(offsets, dtype=np.int64))

    def keep_probabilities(self, sample: float = 1e-3) -> np.ndarray:
        """See `keep_probabilities`; counts are this vocabulary's."""
        return keep_probabilities(self.counts, sample)

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} words, {int(self.counts.sum())} of {self.corpus_words} tokens kept)"


def keep_probabilities(counts, sample: float = 1e-3) -> np.ndarray:
    """The chance of keeping each occurrence of a word, from Mikolov's subsampling formula.

    With f = count / total and t = `sample`, a word is kept with probability
    (sqrt(f / t) + 1) * t / f, capped at 1: the form of the original word2vec tool (and
    gensim), close to the paper's 1 - sqrt(t / f) discard rate. `sample=0` keeps all.

    >>> keep_probabilities([900, 90, 10], sample=0.01).round(3).tolist()
    [0.117, 0.444, 1.0]
    """
    counts = np.asarray(counts, dtype=np.float64)
    if isinstance(sample, bool) or not isinstance(sample, int | float) or not 0 <= sample < 1:
        raise ValueError(f"keep_probabilities: sample must be a number in [0, 1), got {sample!r}")
    if counts.ndim != 1 or counts.size == 0 or np.any(counts <= 0):
        raise ValueError("keep_probabilities: counts must be a non-empty 1-D array of positive counts")
    if sample == 0:
        return np.ones_like(counts)
    threshold = sample * counts.sum()
    return np.minimum(1.0, (np.sqrt(counts / threshold) + 1.0) * threshold / counts)


def subsample(corpus: Corpus, keep: np.ndarray, rng: np.random.Generator) -> Corpus:
    """A copy of `corpus` that keeps each word occurrence with probability keep[id].

    >>> c = subsample(Corpus([0, 1, 0], [0, 3]), np.array([0.0, 1.0]), np.random.default_rng(0))
    >>> c.ids.tolist(), c.offsets.tolist()
    ([1], [0, 1])
    """
    keep = np.asarray(keep, dtype=np.float64)
    if corpus.ids.size and corpus.ids.max() >= keep.size:
        raise ValueError(f"subsample: word id {corpus.ids.max()} has no keep probability (only {keep.size})")
    kept = rng.random(corpus.ids.size) < keep[corpus.ids]
    counts = np.add.reduceat(kept, corpus.offsets[:-1]) if corpus.ids.size else np.zeros(corpus.num_sentences)
    counts = np.where(np.diff(corpus.offsets) > 0, counts, 0)  # reduceat's value for empty sentences is wrong
    return Corpus(corpus.ids[kept], np.concatenate([[0], np.cumsum(counts)]))


def skipgram_pairs(corpus: Corpus, window: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(center, context) id pairs with word2vec's dynamic window, in corpus order.

    Each center word draws a reach r uniformly from 1..`window` and pairs with every word
    at most r positions away in its sentence.

    >>> c, x = skipgram_pairs(Corpus([5, 6, 7], [0, 3]), 1, np.random.default_rng(0))
    >>> list(zip(c.tolist(), x.tolist()))
    [(5, 6), (6, 5), (6, 7), (7, 6)]
    """
    _check_int("skipgram_pairs", "window", window, 1)
    n = corpus.ids.size
    reach = window - rng.integers(0, window, size=n)
    sentence = corpus.sentence_ids()
    positions = np.arange(n, dtype=np.int64)
    centers, contexts = [], []
    for d in range(1, window + 1):
        for sign in (-1, 1):
            i = positions[(reach >= d) & (positions + sign * d >= 0) & (positions + sign * d < n)]
            i = i[sentence[i] == sentence[i + sign * d]]
            centers.append(i)
            contexts.append(i + sign * d)
    center_pos = np.concatenate(centers)
    context_pos = np.concatenate(contexts)
    order = np.lexsort((context_pos, center_pos))
    ids = corpus.ids.astype(np.int64)
    return ids[center_pos[order]], ids[context_pos[order]]


def cbow_examples(corpus: Corpus, window: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(contexts, targets) for CBOW: for each word, the ids within its dynamic window.

    `contexts` has shape (n, 2 * window), padded with -1 (`contexts >= 0` is the mask);
    words without any context are skipped.

    >>> ctx, tgt = cbow_examples(Corpus([5, 6, 7], [0, 3]), 1, np.random.default_rng(0))
    >>> ctx.tolist(), tgt.tolist()
    ([[6, -1], [5, 7], [6, -1]], [5, 6, 7])
    """
    _check_int("cbow_examples", "window", window, 1)
    n = corpus.ids.size
    reach = window - rng.integers(0, window, size=n)
    sentence = corpus.sentence_ids()
    positions = np.arange(n, dtype=np.int64)
    contexts = np.full((n, 2 * window), -1, dtype=np.int64)
    fill = np.zeros(n, dtype=np.int64)
    for offset in [*range(-window, 0), *range(1, window + 1)]:
        j = positions + offset
        ok = (reach >= abs(offset)) & (j >= 0) & (j < n)
        ok[ok] = sentence[ok] == sentence[j[ok]]
        rows = positions[ok]
        contexts[rows, fill[rows]] = corpus.ids[j[ok]]
        fill[rows] += 1
    has = fill > 0
    return contexts[has], corpus.ids[has].astype(np.int64)


def skipgram_dataset(
    corpus: Corpus,
    window: int = 5,
    batch_size: int = 1024,
    keep: np.ndarray | None = None,
    seed: int | None = None,
) -> Dataset:
    """A Dataset of (centers, contexts) int64 batches of skip-gram pairs.

    Every pass (epoch) subsamples the corpus with `keep` (from `keep_probabilities`; None
    keeps every word) and draws new dynamic windows, from a stream seeded by `seed` and
    the pass number; `seed=None` draws a seed from tapeflow's global stream.
    """
    return _examples_dataset("skipgram_dataset", skipgram_pairs, corpus, window, batch_size, keep, seed)


def cbow_dataset(
    corpus: Corpus,
    window: int = 5,
    batch_size: int = 1024,
    keep: np.ndarray | None = None,
    seed: int | None = None,
) -> Dataset:
    """A Dataset of (contexts, targets) batches for CBOW (see `cbow_examples`); passes as in
    `skipgram_dataset`.

    >>> ds = cbow_dataset(Corpus([5, 6, 7], [0, 3]), window=1, batch_size=2, seed=0)
    >>> [t.tolist() for _, t in ds]
    [[5, 6], [7]]
    """
    return _examples_dataset("cbow_dataset", cbow_examples, corpus, window, batch_size, keep, seed)


def _examples_dataset(name, make, corpus, window, batch_size, keep, seed) -> Dataset:
    if not isinstance(corpus, Corpus):
        raise TypeError(f"{name}: expected a Corpus (Vocabulary.encode gives one), got {type(corpus).__name__}")
    if len(corpus) == 0:
        raise ValueError(f"{name}: the corpus is empty (no known words)")
    _check_int(name, "window", window, 1)
    _check_int(name, "batch_size", batch_size, 1)
    if seed is None:
        seed = int(global_generator().numpy.integers(2**63))
    _check_int(name, "seed", seed, 0)
    if keep is not None:
        keep = np.asarray(keep, dtype=np.float64)
        if keep.ndim != 1 or keep.size <= corpus.ids.max() or np.any((keep < 0) | (keep > 1)):
            raise ValueError(f"{name}: keep must hold a probability in [0, 1] for every word id")
    passes = iter(range(2**62))

    def generate():
        rng = np.random.default_rng([seed, next(passes)])
        sampled = corpus if keep is None else subsample(corpus, keep, rng)
        first, second = make(sampled, window, rng)
        for start in range(0, len(first), batch_size):
            yield first[start : start + batch_size], second[start : start + batch_size]

    return Dataset.from_generator(generate)


def _check_int(name: str, what: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name}: {what} must be an integer >= {low}, got {value!r}")
