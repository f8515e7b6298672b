"""word2vec_sgns_train: the fused kernel against an op-by-op model built from tapeflow's own
ops (gather, matmul, sigmoid, scatter_add), from a frozen graph, with threads, and bad input."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow._kernels import word2vec as kernels
from tapeflow.data import text
from tapeflow.ops import skipgram
from tapeflow.ops.skipgram import word2vec_sgns_train

RNG = np.random.default_rng(5)
VOCAB, DIM = 15, 8
IDS = RNG.zipf(1.6, 400).clip(1, VOCAB).astype(np.int32) - 1
OFFSETS = np.array([0, 150, 151, 300, 400])
COUNTS = np.bincount(IDS, minlength=VOCAB) + 1
KEEP = text.keep_probabilities(COUNTS, 0.02)
CUM = skipgram.negative_table(COUNTS)


def tables(dtype):
    return (RNG.standard_normal((VOCAB, DIM)) * 0.3).astype(dtype), (RNG.standard_normal((VOCAB, DIM)) * 0.1).astype(
        dtype
    )


def op_by_op(syn0, syn1, window, negative, alpha_start, alpha_end, seed):
    """The same training with one tapeflow op per step, window after window."""
    w0, w1, counts = tp.tensor(syn0), tp.tensor(syn1), np.zeros(3, np.int64)
    windows = skipgram.sgns_windows(
        IDS, OFFSETS, KEEP, CUM, 0, IDS.size, window, negative, alpha_start, alpha_end, seed, counts
    )
    for ctx, out, lr in windows:
        x, y = tp.gather(w0, tp.tensor(ctx), axis=0), tp.gather(w1, tp.tensor(out), axis=0)
        labels = tp.cast(tp.tensor(np.arange(out.size) == 0), w0.dtype)
        used = tp.cast(tp.tensor((out != out[0]) | (np.arange(out.size) == 0)), w0.dtype)
        g = (
            (labels - tp.sigmoid(tp.matmul(x, tp.transpose(y, (1, 0)))))
            * used
            * tp.cast(tp.tensor(np.float64(lr)), w0.dtype)
        )
        w1 = tp.scatter_add(w1, tp.tensor(out), tp.matmul(tp.transpose(g, (1, 0)), x), axis=0)
        w0 = tp.scatter_add(w0, tp.tensor(ctx), tp.matmul(g, y), axis=0)
    return w0.numpy(), w1.numpy(), counts


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
@pytest.mark.parametrize("window, negative", [(1, 1), (3, 5)])
def test_fused_kernel_equals_the_op_by_op_model(dtype, tol, window, negative):
    syn0, syn1 = tables(dtype)
    got0, got1, counts = word2vec_sgns_train(syn0, syn1, IDS, OFFSETS, KEEP, CUM, 0.05, 0.001, 11, window, negative, 1)
    want0, want1, want_counts = op_by_op(syn0, syn1, window, negative, 0.05, 0.001, 11)
    assert counts.numpy().tolist() == want_counts.tolist()
    assert 0 < want_counts[1] < IDS.size  # subsampling dropped some words, not all
    np.testing.assert_allclose(got0.numpy(), want0, rtol=tol, atol=tol)
    np.testing.assert_allclose(got1.numpy(), want1, rtol=tol, atol=tol)
    assert np.abs(got0.numpy() - syn0).max() > 1e-3  # it did train


def test_one_thread_is_reproducible_and_the_seed_matters():
    syn0, syn1 = tables(np.float32)
    runs = [
        word2vec_sgns_train(syn0, syn1, IDS, OFFSETS, KEEP, CUM, 0.05, 0.0, s, 3, 5, 1)[0].numpy() for s in (1, 1, 2)
    ]
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_threads_split_the_corpus():
    syn0, syn1 = tables(np.float32)
    before = syn0.copy()
    new0, new1, counts = word2vec_sgns_train(syn0, syn1, IDS, OFFSETS, KEEP, CUM, 0.05, 0.0, 3, 3, 5, 4)
    assert counts.numpy()[0] == IDS.size and 0 < counts.numpy()[1] <= IDS.size
    assert np.all(np.isfinite(new0.numpy())) and np.abs(new1.numpy() - syn1).max() > 1e-3
    np.testing.assert_array_equal(syn0, before)  # the op returns new tables


def test_frozen_train_step_equals_the_eager_one():
    syn0, syn1 = tables(np.float32)
    eager0, eager1, eager_counts = word2vec_sgns_train(syn0, syn1, IDS, OFFSETS, KEEP, CUM, 0.05, 0.01, 9, 3, 5, 1)
    v0, v1 = tp.Variable(syn0, name="syn0"), tp.Variable(syn1, name="syn1")

    def step(ids, offsets, alpha_start, alpha_end, seed):
        new0, new1, counts = word2vec_sgns_train(v0, v1, ids, offsets, KEEP, CUM, alpha_start, alpha_end, seed, 3, 5, 1)
        v0.assign(new0)
        v1.assign(new1)
        return counts

    specs = [tp.TensorSpec((None,), "int32"), tp.TensorSpec((None,), "int64")]
    specs += [tp.TensorSpec((), "float64"), tp.TensorSpec((), "float64"), tp.TensorSpec((), "int64")]
    graph = tp.freeze(step, *specs)
    assert "word2vec_sgns_train" in str(graph)
    counts = graph(IDS, OFFSETS, np.float64(0.05), np.float64(0.01), np.int64(9))
    np.testing.assert_array_equal(np.asarray(counts), eager_counts.numpy())
    np.testing.assert_array_equal(v0.numpy(), eager0.numpy())
    np.testing.assert_array_equal(v1.numpy(), eager1.numpy())


def test_kernel_pairs_cover_each_window():
    ids = np.arange(7, dtype=np.int32)
    centers, contexts = kernels.skipgram_pairs(ids, np.array([0, 4, 7]), np.ones(7), 1, 0)
    assert list(zip(centers.tolist(), contexts.tolist(), strict=True)) == [
        (0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2), (4, 5), (5, 4), (5, 6), (6, 5)
    ]  # fmt: skip


def test_kernel_pairs_subsample_at_the_keep_rate():
    ids = np.repeat(np.arange(2, dtype=np.int32), 20_000)
    keep = np.array([0.25, 1.0])
    centers, _ = kernels.skipgram_pairs(ids, np.arange(0, 40_001, 100), keep, 1, 4)
    kept_zero = np.count_nonzero(centers == 0) / np.count_nonzero(centers == 1)
    assert abs(kept_zero - 0.25) < 0.03


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"negative": 0}, ValueError, "negative"),
        ({"window": 0}, ValueError, "window"),
        ({"syn1": np.zeros((VOCAB, DIM + 1), np.float32)}, ValueError, "one shape"),
        ({"syn0": np.zeros((VOCAB, DIM), np.int64), "syn1": np.zeros((VOCAB, DIM), np.int64)}, TypeError, "float32"),
        ({"keep": np.ones(VOCAB - 1)}, ValueError, "one entry per word"),
        ({"ids": IDS.astype(np.float32)}, TypeError, "ids"),
        ({"ids": IDS + VOCAB}, IndexError, "word ids"),
    ],
)
def test_bad_input_is_a_clear_error(change, error, match):
    syn0, syn1 = tables(np.float32)
    args = {
        "syn0": syn0,
        "syn1": syn1,
        "ids": IDS,
        "offsets": OFFSETS,
        "keep": KEEP,
        "cum": CUM,
        "window": 2,
        "negative": 2,
    }
    args.update(change)
    with pytest.raises(error, match=match):
        word2vec_sgns_train(alpha_start=0.05, alpha_end=0.0, seed=1, **args)
