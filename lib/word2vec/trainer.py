"""Word2Vec: skip-gram with negative sampling, trained by the fused `word2vec_sgns_train` op.

Each epoch is one call of the op over the whole corpus: the op's threads walk their
shares of the corpus, subsample it, and update both embedding tables in place without a
Python producer, as the original word2vec tool does. The learning rate falls linearly
from `alpha` to `min_alpha` over all epochs. With `device="gpu:0"` on a GPU the op runs there
as one fused CUDA kernel, the tables staying on the GPU until training ends; with another
`device=` ("xla:0", or the CPU) the tables live on that device and train in batches of pairs
drawn on the host (tapeflow.word2vec.batched).

>>> import tapeflow as tp
>>> sentences = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "sat"]] * 50
>>> model = tp.word2vec.Word2Vec(dim=8, window=2, min_count=1, epochs=2, seed=1, threads=1, verbose=False)
>>> model.train(sentences).wv["cat"].shape
(8,)
>>> [round(e["words"]) for e in model.history]
[450, 450]
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable

import numpy as np

from tapeflow.backends import backend
from tapeflow.data.text import Corpus, Vocabulary
from tapeflow.devices import device, parse_device
from tapeflow.ops.creation import tensor
from tapeflow.ops.skipgram import negative_table, word2vec_sgns_train
from tapeflow.tensor import Variable
from tapeflow.word2vec.batched import SkipGramStep, draw_negatives, skipgram_pairs
from tapeflow.word2vec.vectors import KeyedVectors


class Word2Vec:
    """Skip-gram word vectors with negative sampling (Mikolov et al. 2013).

    Args:
        dim: vector size.
        window: the largest distance between a center word and its context; each center
            draws its own reach from 1..window.
        negative: negative samples per window (drawn from counts**0.75).
        min_count: words seen fewer times are dropped; max_vocab: keep at most this many.
        sample: subsampling threshold of frequent words (0 keeps all).
        epochs: passes over the corpus.
        threads: threads of the train step (0: tp.get_num_threads()); one thread is
            reproducible, several race on the tables (Hogwild) as word2vec does.
        seed: seeds the initial vectors and every random draw.
        alpha, min_alpha: the learning rate at the start and at the end.
        verbose: print one progress line per epoch.
        device: None trains with the fused CPU kernel; "gpu:0" on a GPU with the fused GPU
            kernel; another device ("xla:0", "cpu") trains there in batches of `batch_size`
            (center, context) pairs.
        batch_size: pairs per step with a device that trains in batches.
    """

    def __init__(
        self,
        dim: int = 100,
        window: int = 5,
        negative: int = 5,
        min_count: int = 5,
        sample: float = 1e-3,
        epochs: int = 5,
        threads: int = 0,
        seed: int = 1,
        alpha: float = 0.025,
        min_alpha: float = 1e-4,
        max_vocab: int | None = None,
        verbose: bool = True,
        device=None,
        batch_size: int = 1024,
    ):
        for name, value, low in (
            ("dim", dim, 1),
            ("window", window, 1),
            ("negative", negative, 1),
            ("min_count", min_count, 1),
            ("epochs", epochs, 1),
            ("threads", threads, 0),
            ("seed", seed, 0),
            ("batch_size", batch_size, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise ValueError(f"Word2Vec: {name} must be an integer >= {low}, got {value!r}")
        if not 0 <= sample < 1:
            raise ValueError(f"Word2Vec: sample must lie in [0, 1), got {sample!r}")
        if not 0 <= min_alpha <= alpha:
            raise ValueError(f"Word2Vec: need 0 <= min_alpha <= alpha, got alpha={alpha!r}, min_alpha={min_alpha!r}")
        self.dim, self.window, self.negative = int(dim), int(window), int(negative)
        self.min_count, self.max_vocab, self.sample = int(min_count), max_vocab, float(sample)
        self.epochs, self.threads, self.seed = int(epochs), int(threads), int(seed)
        self.alpha, self.min_alpha, self.verbose = float(alpha), float(min_alpha), verbose
        self.device = None if device is None else parse_device(device)
        self.batch_size = int(batch_size)
        self.vocab: Vocabulary | None = None
        self.syn0: np.ndarray | None = None
        self.syn1: np.ndarray | None = None
        self.history: list[dict] = []

    def build_vocab(self, sentences: Iterable[Iterable[str]]) -> Corpus:
        """Count the words, keep the vocabulary, initialize the tables; returns the encoded corpus."""
        sentences = list(sentences)
        self.vocab = Vocabulary.build(sentences, min_count=self.min_count, max_size=self.max_vocab)
        rng = np.random.default_rng(self.seed)
        self.syn0 = ((rng.random((len(self.vocab), self.dim)) - 0.5) / self.dim).astype(np.float32)
        self.syn1 = np.zeros_like(self.syn0)
        corpus = self.vocab.encode(sentences)
        if len(corpus) == 0:
            raise ValueError("Word2Vec: the corpus has no words of the vocabulary")
        return corpus

    def train(self, sentences: Iterable[Iterable[str]]) -> Word2Vec:
        """Build the vocabulary from `sentences` (lists of tokens) and train for `epochs`."""
        corpus = self.build_vocab(sentences)
        keep = self.vocab.keep_probabilities(self.sample)
        cum = negative_table(self.vocab.counts)
        self.history = []
        # a backend with a fused kernel of its own (CuPy on a GPU) runs the op; others train in batches
        fused_on_gpu = self.device is not None and getattr(backend(self.device.family), "FUSED_WORD2VEC", False)
        if self.device is not None and not fused_on_gpu:
            return self._train_in_batches(corpus, keep, cum)
        with device(self.device) if fused_on_gpu else contextlib.nullcontext():
            syn0, syn1 = tensor(self.syn0), tensor(self.syn1)  # kept where they are trained until the end
            walk = [tensor(a) for a in (corpus.ids, corpus.offsets, keep, cum)]
            decay = (self.alpha - self.min_alpha) / self.epochs
            for epoch in range(self.epochs):
                start = time.perf_counter()
                syn0, syn1, counts = word2vec_sgns_train(
                    syn0,
                    syn1,
                    *walk,
                    self.alpha - decay * epoch,
                    self.alpha - decay * (epoch + 1),
                    self.seed * 1_000_003 + epoch,
                    window=self.window,
                    negative=self.negative,
                    threads=self.threads,
                )
                counted = counts.numpy().tolist()  # waits for the epoch's work
                self._log(epoch, *counted, time.perf_counter() - start)
        self.syn0, self.syn1 = syn0.numpy(), syn1.numpy()
        return self

    def _train_in_batches(self, corpus: Corpus, keep, cum) -> Word2Vec:
        """Each epoch: the pairs drawn on the host, then one frozen step per batch on the device."""
        rng = np.random.default_rng(self.seed)
        with device(self.device):
            syn0, syn1 = Variable(self.syn0, name="syn0"), Variable(self.syn1, name="syn1")
        step = SkipGramStep(syn0, syn1, self.negative)
        span = self.alpha - self.min_alpha
        for epoch in range(self.epochs):
            start = time.perf_counter()
            centers, contexts, kept = skipgram_pairs(corpus.ids, corpus.offsets, keep, self.window, rng)
            order = rng.permutation(centers.size)
            negatives = draw_negatives(cum, (centers.size, self.negative), rng)
            with device(self.device):
                for first in range(0, centers.size, self.batch_size):
                    rows = order[first : first + self.batch_size]
                    done = (epoch + first / centers.size) / self.epochs
                    rate = tensor(np.float32(self.alpha - span * done))
                    step(tensor(centers[rows]), tensor(contexts[rows]), tensor(negatives[rows]), rate)
            self.syn0, self.syn1 = syn0.numpy(), syn1.numpy()  # waits for the epoch's last step
            self._log(epoch, len(corpus), kept, int(centers.size), time.perf_counter() - start)
        return self

    def _log(self, epoch: int, words: int, kept: int, pairs: int, seconds: float) -> None:
        self.history.append(
            {"words": words, "kept": kept, "pairs": pairs, "seconds": seconds, "words_per_second": words / seconds}
        )
        if self.verbose:
            print(
                f"epoch {epoch + 1}/{self.epochs}: {words} words ({kept} after subsampling), {pairs} pairs, "
                f"{seconds:.2f} s, {words / seconds:,.0f} words/s",
                file=sys.stderr,
                flush=True,
            )

    @property
    def wv(self) -> KeyedVectors:
        """The trained input vectors, most frequent word first."""
        if self.syn0 is None:
            raise ValueError("Word2Vec: train the model first")
        return KeyedVectors(self.vocab.words, self.syn0)

    @property
    def words_per_second(self) -> float:
        """Corpus tokens (out-of-vocabulary ones included, as gensim counts raw words) per
        second of training, over all epochs."""
        if not self.history:
            raise ValueError("Word2Vec: train the model first")
        return self.vocab.corpus_words * len(self.history) / sum(e["seconds"] for e in self.history)
