"""Skip-gram negative sampling in batches of ops, for devices the fused CPU kernel does not
serve (XLA, GPUs).

The host draws each epoch's training pairs at once with NumPy: it subsamples the
corpus, gives every kept word a reach drawn from 1..window, pairs it with the kept words
of its sentence within that reach, shuffles the pairs and draws `negative` negatives per
pair from the counts**0.75 table. A frozen step then updates both tables on the device
from one batch of pairs: the word2vec update (the gradient of log sigmoid(v . u) for the
true context and log sigmoid(-v . u) for each negative, a negative equal to the context
skipped), summed over the batch with scatter-adds and scaled by the learning rate, which
falls linearly over all epochs as in word2vec. Unlike the fused kernel, the words of a
batch see the tables as they were before it.

>>> import numpy as np
>>> ids, offsets = np.array([0, 1, 2, 1, 0]), np.array([0, 3, 5])
>>> centers, contexts, kept = skipgram_pairs(ids, offsets, np.ones(3), window=1, rng=np.random.default_rng(0))
>>> sorted(zip(centers.tolist(), contexts.tolist())), kept
([(0, 1), (0, 1), (1, 0), (1, 0), (1, 2), (2, 1)], 5)
"""

from __future__ import annotations

import numpy as np

from tapeflow.graph.function import Function
from tapeflow.graph.structure import TensorSpec
from tapeflow.ops.array import concat, gather, reshape, scatter_add
from tapeflow.ops.creation import ones_like, zeros_like
from tapeflow.ops.math import cast, not_equal, sigmoid
from tapeflow.ops.nn import softplus
from tapeflow.ops.reduce import mean
from tapeflow.ops.reduce import sum as reduce_sum


def skipgram_pairs(ids, offsets, keep, window: int, rng) -> tuple[np.ndarray, np.ndarray, int]:
    """(center ids, context ids, words kept) of one epoch: words kept with probability
    `keep[id]`, each center reaching a number of kept words drawn from 1..`window` on each
    side, within its sentence."""
    ids, offsets = np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64)
    sentence = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    kept = rng.random(ids.size) < np.asarray(keep)[ids]
    words, sentence = ids[kept], sentence[kept]
    reach = rng.integers(1, window + 1, words.size)
    centers, contexts = [], []
    for d in range(1, window + 1):
        near = np.flatnonzero(sentence[d:] == sentence[:-d])  # pairs (p, p + d) in one sentence
        for p, q in ((near, near + d), (near + d, near)):  # p's context q, both directions
            take = reach[p] >= d
            centers.append(words[p[take]])
            contexts.append(words[q[take]])
    if not centers:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), int(words.size)
    return np.concatenate(centers), np.concatenate(contexts), int(words.size)


def draw_negatives(cum, shape, rng) -> np.ndarray:
    """Word ids drawn from the cumulative negative-sampling weights `cum` (negative_table)."""
    cum = np.asarray(cum, dtype=np.int64)
    return np.searchsorted(cum, rng.integers(0, cum[-1], shape), side="right").astype(np.int64)


class SkipGramStep:
    """A frozen update of `syn0` and `syn1` (Variables on one device) from a batch of
    (centers [B], contexts [B], negatives [B, K], learning rate); returns the batch's mean
    loss, -log sigmoid(v . u) - sum log sigmoid(-v . u_negative)."""

    def __init__(self, syn0, syn1, negative: int):
        self.syn0, self.syn1 = syn0, syn1
        batch = [TensorSpec((None,), "int64"), TensorSpec((None,), "int64"), TensorSpec((None, negative), "int64")]
        rate = TensorSpec((), syn0.dtype)
        self._step = Function(self._update, input_signature=[*batch, rate])  # one graph for every batch size

    def __call__(self, centers, contexts, negatives, learning_rate):
        return self._step(centers, contexts, negatives, learning_rate)

    def _update(self, centers, contexts, negatives, learning_rate):
        dim, width = self.syn0.shape[1], 1 + negatives.shape[1]
        context = reshape(contexts, (-1, 1))
        targets = concat([context, negatives], axis=1)  # [B, 1 + K]: the context, then negatives
        v = gather(self.syn0, centers)  # [B, D]
        u = reshape(gather(self.syn1, reshape(targets, (-1,))), (-1, width, dim))
        scores = reduce_sum(reshape(v, (-1, 1, dim)) * u, axis=2)
        labels = concat([ones_like(context, scores.dtype), zeros_like(negatives, scores.dtype)], axis=1)
        live = concat([ones_like(context, scores.dtype), cast(not_equal(negatives, context), scores.dtype)], axis=1)
        g = (labels - sigmoid(scores)) * live * learning_rate  # the ascent step of each score
        dv = reduce_sum(reshape(g, (-1, width, 1)) * u, axis=1)
        du = reshape(reshape(g, (-1, width, 1)) * reshape(v, (-1, 1, dim)), (-1, dim))
        self.syn1.assign(scatter_add(self.syn1, reshape(targets, (-1,)), du))
        self.syn0.assign(scatter_add(self.syn0, centers, dv))
        return mean(reduce_sum(softplus(scores * (1.0 - 2.0 * labels)) * live, axis=1))
