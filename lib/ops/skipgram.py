"""`word2vec_sgns_train`: one pass of skip-gram negative-sampling training as an op.

Like the custom word2vec kernels of TensorFlow's tutorial, the whole train step is one op,
so it runs eagerly and from a frozen graph alike. It is a training op: its outputs are the
updated embedding tables (and counts), not a differentiable function of its inputs, so it
has no VJP. In a frozen train step, assign its outputs to the table Variables.

The NumPy reference below is the op-by-op model of the compiled kernel: it walks the corpus
the same way, makes the same random draws (word2vec's linear congruential generator, one
stream per thread share), and updates the tables window by window with dense products.

>>> import numpy as np
>>> import tapeflow as tp
>>> syn0 = tp.tensor(np.full((3, 4), 0.1, np.float32)); syn1 = tp.zeros((3, 4))
>>> ids = tp.tensor(np.array([0, 1, 2, 1], np.int32)); offsets = tp.tensor(np.array([0, 4]))
>>> new0, new1, counts = word2vec_sgns_train(syn0, syn1, ids, offsets, tp.ones((3,), "float64"),
...     tp.tensor(np.array([1, 2, 3])), 0.025, 0.0, seed=1, window=1, negative=2, threads=1)
>>> counts.numpy().tolist()  # words, words kept by subsampling, (center, context) pairs
[4, 4, 6]
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.backends.common import ufunc_at
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor

_MASK64 = (1 << 64) - 1
LCG_MULTIPLIER = 25214903917
THREAD_STREAM = 0x9E3779B97F4A7C15


def negative_table(counts, power: float = 0.75, domain: int = 2**31 - 1) -> np.ndarray:
    """The cumulative int64 weights of the negative-sampling distribution, counts**power.

    >>> negative_table([3, 1], power=1.0, domain=100).tolist()
    [75, 100]
    """
    weights = np.asarray(counts, dtype=np.float64) ** power
    if weights.ndim != 1 or weights.size == 0 or not np.all(weights > 0):
        raise ValueError("negative_table: counts must be a non-empty 1-D array of positive counts")
    table = np.round(np.cumsum(weights) / weights.sum() * domain).astype(np.int64)
    return np.maximum(table, np.arange(1, table.size + 1))  # every word keeps a chance


def _infer(syn0, syn1, ids, offsets, keep, cum, alpha_start, alpha_end, seed, window, negative, threads):
    name = "word2vec_sgns_train"
    if len(syn0.shape) != 2 or tuple(syn1.shape) != tuple(syn0.shape):
        raise ValueError(f"{name}: syn0 and syn1 must be 2-D tables of one shape, got {syn0.shape} and {syn1.shape}")
    if syn0.dtype not in (dtypes.float32, dtypes.float64) or syn1.dtype is not syn0.dtype:
        raise TypeError(f"{name}: the tables must both be float32 or float64, got {syn0.dtype} and {syn1.dtype}")
    for label, t, kind in (("ids", ids, "i"), ("offsets", offsets, "i"), ("cum", cum, "i"), ("keep", keep, "f")):
        if len(t.shape) != 1 or t.dtype.kind != kind:
            raise TypeError(
                f"{name}: {label} must be a 1-D {'integer' if kind == 'i' else 'float'} array, got {t.dtype}{t.shape}"
            )
    for label, t in (("keep", keep), ("cum", cum)):
        if t.shape[0] is not None and syn0.shape[0] is not None and t.shape[0] != syn0.shape[0]:
            raise ValueError(f"{name}: {label} needs one entry per word ({syn0.shape[0]}), got {t.shape[0]}")
    for label, t in (("alpha_start", alpha_start), ("alpha_end", alpha_end), ("seed", seed)):
        if tuple(t.shape) != ():
            raise ValueError(f"{name}: {label} must be a scalar, got shape {t.shape}")
    _check_attrs(window, negative, threads)
    return [(syn0.shape, syn0.dtype), (syn1.shape, syn1.dtype), ((3,), dtypes.int64)]


def _check_attrs(window, negative, threads) -> None:
    for label, value, low in (("window", window, 1), ("negative", negative, 1), ("threads", threads, 0)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise ValueError(f"word2vec_sgns_train: {label} must be an integer >= {low}, got {value!r}")


@defop("word2vec_sgns_train", infer=_infer, num_outputs=3, stateful=True)
def _SGNS(syn0, syn1, ids, offsets, keep, cum, alpha_start, alpha_end, seed, window, negative, threads):
    """The op-by-op NumPy model (slow; one thread share after another)."""
    syn0, syn1 = np.copy(syn0), np.copy(syn1)  # the tables stay where they live; the walk reads host arrays
    ids, offsets = np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64)
    total = ids.size
    shares = max(1, min(threads or 1, total))
    counts = np.zeros(3, dtype=np.int64)
    for t in range(shares):
        lo, hi = total * t // shares, total * (t + 1) // shares
        state = (int(seed) + t * THREAD_STREAM) & _MASK64
        for ctx, out, lr in sgns_windows(
            ids, offsets, keep, cum, lo, hi, window, negative, alpha_start, alpha_end, state, counts
        ):
            x, y = syn0[ctx], syn1[out]
            labels = np.asarray((np.arange(len(out)) == 0).astype(np.float64), like=x)
            g = lr * (labels - 1.0 / (1.0 + np.exp(-(x @ y.T))))
            g[:, 1:][:, out[1:] == out[0]] = 0.0  # a negative equal to the center is skipped
            dx, dy = g @ y, g.T @ x
            ufunc_at(np.add, syn1, out, dy.astype(syn1.dtype))
            ufunc_at(np.add, syn0, ctx, dx.astype(syn0.dtype))
    return syn0, syn1, counts


def sgns_windows(ids, offsets, keep, cum, lo, hi, window, negative, alpha_start, alpha_end, state, counts):
    """Yield (context ids, [center, *negatives], lr) for each window of corpus words [lo, hi),
    making the kernel's random draws in the kernel's order; adds (words, kept, pairs) to `counts`."""
    counts[0] += hi - lo
    cum_total = int(cum[-1])

    def draw():
        nonlocal state
        state = (state * LCG_MULTIPLIER + 11) & _MASK64
        return state

    sentence = max(0, int(np.searchsorted(offsets, lo, side="right")) - 1)
    while sentence < len(offsets) - 1 and offsets[sentence] < hi:
        start, stop = max(int(offsets[sentence]), lo), min(int(offsets[sentence + 1]), hi)
        sentence += 1
        kept = [
            (k, int(ids[k]))
            for k in range(start, stop)
            if keep[ids[k]] >= 1.0 or keep[ids[k]] >= (draw() & 0xFFFF) / 65536.0
        ]
        counts[1] += len(kept)
        for p, (raw, word) in enumerate(kept):
            reach = window - draw() % window
            ctx = [kept[j][1] for j in range(max(0, p - reach), min(len(kept), p + reach + 1)) if j != p]
            if not ctx:
                continue
            counts[2] += len(ctx)
            lr = alpha_start + (alpha_end - alpha_start) * (raw - lo) / (hi - lo)
            negatives = [int(np.searchsorted(cum, (draw() >> 16) % cum_total, side="right")) for _ in range(negative)]
            yield np.array(ctx), np.array([word, *negatives]), lr


def word2vec_sgns_train(
    syn0,
    syn1,
    ids,
    offsets,
    keep,
    cum,
    alpha_start,
    alpha_end,
    seed,
    window: int = 5,
    negative: int = 5,
    threads: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """One pass of skip-gram negative-sampling training; returns (syn0, syn1, counts).

    `syn0` / `syn1` are the input and output embedding tables (V x D, float32 or float64);
    `ids` and `offsets` a corpus (see tp.data.text.Corpus); `keep` each word's subsampling
    keep probability; `cum` the cumulative negative-sampling weights (`negative_table`).
    The learning rate falls linearly from `alpha_start` to `alpha_end` over the pass.
    `threads=0` uses tp.get_num_threads(); with more than one thread the updates race as
    in word2vec (Hogwild), so only one thread is reproducible. `counts` holds the words,
    the words kept by subsampling and the (center, context) pairs trained.
    """
    _check_attrs(window, negative, threads)
    tables = tuple(as_tensor(t, name="word2vec_sgns_train") for t in (syn0, syn1))
    corpus = (
        as_tensor(ids, name="word2vec_sgns_train"),
        as_tensor(offsets, dtype="int64", name="word2vec_sgns_train"),
        as_tensor(keep, dtype="float64", name="word2vec_sgns_train"),
        as_tensor(cum, dtype="int64", name="word2vec_sgns_train"),
    )
    scalars = (
        alpha_start if isinstance(alpha_start, Tensor) else as_tensor(float(alpha_start), dtype="float64"),
        alpha_end if isinstance(alpha_end, Tensor) else as_tensor(float(alpha_end), dtype="float64"),
        seed if isinstance(seed, Tensor) else as_tensor(int(seed), dtype="int64"),
    )
    attrs = {"window": int(window), "negative": int(negative), "threads": int(threads)}
    return apply(_SGNS, tables + corpus + scalars, attrs)
