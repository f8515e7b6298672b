"""lib/_kernels/cuda/word2vec.cu without a GPU: the kernel compiled for the host (cuda_host: each
CUDA thread a fiber, blocks advancing side by side, with the address and undefined-behaviour
sanitizers where the compiler has them) and compared with the CPU kernel. Its random draws are
not the CPU's, so the counts are compared exactly where they are deterministic and against
their expectation elsewhere, and training is compared by the quality of the vectors."""

import functools

import numpy as np
import pytest
from cuda_host import COMPILER, SHIMS, compile_program, run_program
from strict_arrays import dispatch_on_host

import tapeflow as tp
from tapeflow._kernels import cuda
from tapeflow._kernels import word2vec as cpu
from tapeflow.backends import cupy_backend
from tapeflow.data import text
from tapeflow.ops.registry import get_op
from tapeflow.ops.skipgram import negative_table, word2vec_sgns_train

needs_compiler = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (c++, g++ or clang++) on PATH")
needs_gpu = pytest.mark.skipif(not cupy_backend.ON_GPU, reason="needs CuPy and a CUDA GPU")

MAIN = r"""
template <typename T>
using tf_sgns = void (*)(T*, T*, const int*, const long long*, long long, const double*, const long long*,
                         const double*, const double*, const long long*, long long, int, int, int, int, int,
                         unsigned long long*);

template <typename T> static void tf_train(std::FILE* in, std::FILE* out, const long long* h, tf_sgns<T> kernel) {
    const long long vocab = h[1], dim = h[2], total = h[3], sentences = h[4], window = h[5], negative = h[6];
    const long long lanes = h[7], grid = h[8], threads = h[9], passes = h[10], shared = h[11];
    const unsigned order = (unsigned)h[12];
    std::vector<T> syn0 = tf_read<T>(in, vocab * dim), syn1 = tf_read<T>(in, vocab * dim);
    std::vector<int> ids = tf_read<int>(in, total);
    std::vector<long long> offsets = tf_read<long long>(in, sentences + 1);
    std::vector<double> keep = tf_read<double>(in, vocab);
    std::vector<long long> cum = tf_read<long long>(in, vocab);
    std::vector<double> alphas = tf_read<double>(in, 2 * passes);
    std::vector<long long> seeds = tf_read<long long>(in, passes);
    std::vector<unsigned long long> counts;
    for (long long p = 0; p < passes; ++p) {
        std::vector<unsigned long long> c(3, 0);
        std::vector<double> a0(1, alphas[2 * p]), a1(1, alphas[2 * p + 1]);
        std::vector<long long> seed(1, seeds[p]);
        launch(grid, threads, shared, [&] {
            kernel(syn0.data(), syn1.data(), ids.data(), offsets.data(), sentences, keep.data(), cum.data(),
                   a0.data(), a1.data(), seed.data(), total, vocab, dim, window, negative, lanes, c.data());
        }, order + p);
        counts.insert(counts.end(), c.begin(), c.end());
    }
    tf_write(out, syn0);
    tf_write(out, syn1);
    tf_write(out, counts);
}

int main(int argc, char** argv) {
    std::FILE* in = std::fopen(argv[1], "rb");
    std::FILE* out = std::fopen(argv[2], "wb");
    if (!in || !out) return 2;
    std::vector<long long> h = tf_read<long long>(in, 13);
    if (h[0] == 4) tf_train<float>(in, out, h.data(), word2vec_sgns_f32);
    else tf_train<double>(in, out, h.data(), word2vec_sgns_f64);
    std::fclose(in);
    std::fclose(out);
    return 0;
}
"""
_BINARY: list = []


def train_on_host(tmp_path_factory, syn0, syn1, ids, offsets, keep, cum, alphas, seeds, window, negative, **launch):
    """One launch per (alpha_start, alpha_end) pair and seed, as the backend launches it (with
    `grid`, `threads` and `lanes` given, and `order` seeding the order of each block's threads);
    returns the tables and each launch's counts."""
    grid, threads, lanes = launch["grid"], launch["threads"], launch["lanes"]
    itemsize = syn0.dtype.itemsize
    shared = cupy_backend.word2vec_shared_bytes(itemsize, window, negative, threads, lanes)
    if not _BINARY:
        directory = tmp_path_factory.mktemp("word2vec")
        source = "\n".join([SHIMS, cuda.SOURCES["word2vec"].read_text(), MAIN])
        _BINARY.extend([compile_program(source, directory, "word2vec"), directory])
    binary, directory = _BINARY
    vocab, dim = syn0.shape
    sizes = [itemsize, vocab, dim, ids.size, offsets.size - 1, window, negative]
    header = [*sizes, lanes, grid, threads, len(seeds), shared, launch.get("order", 1)]
    data = b"".join(
        [
            np.array(header, np.int64).tobytes(),
            syn0.tobytes(),
            syn1.tobytes(),
            ids.astype(np.int32).tobytes(),
            offsets.astype(np.int64).tobytes(),
            keep.astype(np.float64).tobytes(),
            cum.astype(np.int64).tobytes(),
            np.asarray(alphas, np.float64).tobytes(),
            np.asarray(seeds, np.int64).tobytes(),
        ]
    )
    out = run_program(binary, directory, data)
    n = vocab * dim * itemsize
    new0 = np.frombuffer(out, syn0.dtype, vocab * dim, 0).reshape(vocab, dim)
    new1 = np.frombuffer(out, syn0.dtype, vocab * dim, n).reshape(vocab, dim)
    counts = np.frombuffer(out, np.uint64, 3 * len(seeds), 2 * n).astype(np.int64).reshape(-1, 3)
    assert len(out) == 2 * n + counts.nbytes
    return new0, new1, counts


def train_on_cpu(syn0, syn1, ids, offsets, keep, cum, alphas, seeds, window, negative):
    syn0, syn1, counts = syn0.copy(), syn1.copy(), []
    for (a0, a1), seed in zip(np.reshape(alphas, (-1, 2)), seeds, strict=True):
        args = (ids.astype(np.int32), offsets.astype(np.int64), keep.astype(np.float64), cum.astype(np.int64))
        counts.append(cpu.sgns_train(syn0, syn1, *args, window, negative, a0, a1, seed, 1))
    return syn0, syn1, np.array(counts, np.int64)


def corpus(rng, sentences: int, vocab: int):
    lengths = rng.integers(0, 30, sentences)
    lengths[:3] = [0, 1, 2]  # an empty sentence and ones too short for any window
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = (rng.zipf(1.5, offsets[-1]).clip(1, vocab) - 1).astype(np.int32)
    return ids, offsets


def expected_pairs(offsets, window: int):
    """Mean and variance of the pairs of a pass without subsampling: each centre with l words
    before it and r after it in its sentence draws its reach uniformly from 1..window."""
    mean = var = 0.0
    reaches = np.arange(1, window + 1)
    for start, stop in zip(offsets[:-1], offsets[1:], strict=True):
        position = np.arange(stop - start)
        m = np.minimum(reaches[:, None], position) + np.minimum(reaches[:, None], stop - start - 1 - position)
        mean += m.mean(axis=0).sum()
        var += m.var(axis=0).sum()
    return mean, var


def tables(rng, vocab, dim, dtype):
    return ((rng.random((vocab, dim)) - 0.5) / dim).astype(dtype), np.zeros((vocab, dim), dtype)


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_counts_match_the_cpu_kernel(dtype, tmp_path_factory):
    """Without subsampling and with window 1 every count is deterministic and equals the CPU
    kernel's; with window 4 the pairs lie within 4 standard deviations of their exact mean
    (as the CPU's do); with subsampling the kept words lie within 4 standard deviations of
    sum(keep[ids]) (as the CPU's do) and the pairs within 4 standard deviations of the mean of
    the CPU's over 20 seeds. Every launch runs under the sanitizers, with a grid, block and
    lanes that make each loop of the kernel wrap."""
    rng = np.random.default_rng(3)
    vocab, dim = 30, 11
    ids, offsets = corpus(rng, 300, vocab)
    frequencies = np.bincount(ids, minlength=vocab) + 1
    cum = negative_table(frequencies)
    launch = {"grid": 5, "threads": 4, "lanes": 3}
    for window, sample in ((1, 0.0), (4, 0.0), (4, 0.01)):
        keep = text.keep_probabilities(frequencies, sample) if sample else np.ones(vocab)
        syn0, syn1 = tables(rng, vocab, dim, dtype)
        args = (syn0, syn1, ids, offsets, keep, cum, [0.05, 0.01], [7], window, 6)
        got0, got1, (got,) = train_on_host(tmp_path_factory, *args, **launch)
        want0, want1, (want,) = train_on_cpu(*args)
        assert np.isfinite(got0).all() and np.isfinite(got1).all()
        assert not np.array_equal(got0, syn0) and np.abs(got1).sum() > 0
        assert got[0] == want[0] == ids.size
        if not sample:
            assert got[1] == want[1] == ids.size
            mean, var = expected_pairs(offsets, window)
            if window == 1:
                assert got[2] == want[2] == mean
            for pairs in (got[2], want[2]):
                assert abs(pairs - mean) <= 4 * np.sqrt(var) + 1e-9, (pairs, mean, var)
        else:
            p = keep[ids]
            mean, sd = p.sum(), np.sqrt((p * (1 - p)).sum())
            assert sd > 5 and got[1] < 0.9 * ids.size
            for kept in (got[1], want[1]):
                assert abs(kept - mean) <= 4 * sd, (kept, mean, sd)
            pairs = [train_on_cpu(*args[:7], [seed], window, 6)[2][0, 2] for seed in range(20)]
            assert abs(got[2] - np.mean(pairs)) <= 4 * np.std(pairs), (got, pairs)


@needs_compiler
def test_results_do_not_depend_on_the_order_of_a_blocks_threads(tmp_path_factory):
    """Blocks take turns between barriers on the host, so a kernel whose barriers are all in
    place gives the same bits whatever order each block's threads run in; a missing barrier
    lets a thread read shared memory another has not written yet. The counts do not depend on
    the grid or the block either."""
    rng = np.random.default_rng(4)
    ids, offsets = corpus(rng, 40, 25)
    frequencies = np.bincount(ids, minlength=25) + 1
    keep, cum = text.keep_probabilities(frequencies, 0.02), negative_table(frequencies)
    syn0, syn1 = tables(rng, 25, 13, np.float64)
    args = (syn0, syn1, ids, offsets, keep, cum, [0.05, 0.01], [5], 3, 4)
    runs = [train_on_host(tmp_path_factory, *args, grid=3, threads=8, lanes=4, order=order) for order in (1, 2, 3)]
    for run in runs[1:]:
        for got, want in zip(run, runs[0], strict=True):
            np.testing.assert_array_equal(got, want)
    for grid, threads in ((1, 2), (7, 32)):  # each position's draws are its own: the counts never change
        counts = train_on_host(tmp_path_factory, *args, grid=grid, threads=threads, lanes=4)[2]
        np.testing.assert_array_equal(counts, runs[0][2])


@needs_compiler
def test_the_learning_rate_falls_over_the_pass(tmp_path_factory):
    """With alpha_end = 0, words seen only in the first sentence move about as far as the
    learning rate at the start allows, and words seen only in the last one (1% from the end)
    hardly at all, as with the CPU kernel."""
    rng = np.random.default_rng(6)
    vocab, dim = 40, 8
    body = rng.integers(4, vocab - 4, 1980)
    ids = np.concatenate([[0, 1] * 5, body, [vocab - 2, vocab - 1] * 5]).astype(np.int32)
    offsets = np.array([0, 10, 10 + body.size, ids.size])
    keep, cum = np.ones(vocab), negative_table(np.bincount(ids, minlength=vocab) + 1)
    syn0, syn1 = rng.standard_normal((2, vocab, dim)) * 0.3  # both moving from the first window on
    args = (syn0, syn1, ids, offsets, keep, cum, [0.05, 0.0], [3], 2, 3)
    for new0, _, _ in (train_on_host(tmp_path_factory, *args, grid=4, threads=4, lanes=2), train_on_cpu(*args)):
        moved = np.linalg.norm(new0 - syn0, axis=1)
        assert moved[vocab - 2 :].max() < 0.05 * moved[:2].min(), moved


def topic_corpus(rng, topics: int, per_topic: int, sentences: int, stray: float):
    """Sentences of one topic each: words of the topic (Zipf-like within it), a share `stray`
    of words of any topic, and a quarter of function words shared by all topics. Word
    t * per_topic + k belongs to topic t; the four function words come last."""
    fillers = 4
    weights = 1.0 / np.arange(1, per_topic + 1)
    weights /= weights.sum()
    chunks, lengths = [], rng.integers(6, 16, sentences)
    for length in lengths:
        words = rng.integers(topics) * per_topic + rng.choice(per_topic, length, p=weights)
        strays = rng.random(length) < stray
        words[strays] = rng.integers(0, topics * per_topic, int(strays.sum()))
        filler = rng.random(length) < 0.25
        words[filler] = topics * per_topic + rng.integers(0, fillers, int(filler.sum()))
        chunks.append(words)
    ids = np.concatenate(chunks).astype(np.int32)
    return ids, np.concatenate([[0], np.cumsum(lengths)]), topics * per_topic + fillers


def neighbour_precision(vectors, topics: int, per_topic: int, k: int = 5) -> float:
    """The share of each topic word's k nearest topic words (by cosine) that share its topic."""
    v = vectors[: topics * per_topic].astype(np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    similarity = v @ v.T
    np.fill_diagonal(similarity, -np.inf)
    nearest = np.argsort(-similarity, axis=1)[:, :k]
    return float(np.mean(nearest // per_topic == np.arange(len(v))[:, None] // per_topic))


TOPICS, PER_TOPIC = 8, 10


def topic_problem() -> tuple:
    """(syn0, syn1, ids, offsets, keep, cum, alphas) of one pass over a corpus of eight planted
    topics, small enough that the vectors come out far from perfect; subsampling on."""
    rng = np.random.default_rng(11)
    ids, offsets, vocab = topic_corpus(rng, TOPICS, PER_TOPIC, 500, 0.2)
    frequencies = np.bincount(ids, minlength=vocab)
    keep, cum = text.keep_probabilities(frequencies, 0.01), negative_table(frequencies)
    return (*tables(rng, vocab, 24, np.float32), ids, offsets, keep, cum, [0.05, 0.0001])


def check_against_the_cpu_kernel(problem, trained, counts) -> None:
    """The trained vectors rank same-topic words among each word's 5 nearest (chance: 0.11)
    as often as the CPU kernel's do, within 0.03 of the worst of 8 CPU seeds (these lie
    between 0.67 and 0.76; the host build's at 0.73); the kept words and pairs lie within 4
    standard deviations of the CPU's mean."""
    precisions, cpu_counts = [], []
    for seed in range(8):
        want0, _, (want_counts,) = train_on_cpu(*problem, [seed], 3, 5)
        precisions.append(neighbour_precision(want0, TOPICS, PER_TOPIC))
        cpu_counts.append(want_counts)
    got = neighbour_precision(trained, TOPICS, PER_TOPIC)
    assert got >= min(precisions) - 0.03 and min(precisions) > 0.5, (got, precisions)
    mean, sd = np.mean(cpu_counts, axis=0), np.std(cpu_counts, axis=0)
    assert np.all(np.abs(counts - mean) <= 4 * sd + 1e-9), (counts, cpu_counts)


@needs_compiler
def test_training_ranks_neighbours_as_the_cpu_kernel_does(tmp_path_factory):
    """`check_against_the_cpu_kernel` on the host build, 8 blocks of 16 threads."""
    problem = topic_problem()
    trained, _, (counts,) = train_on_host(tmp_path_factory, *problem, [1], 3, 5, grid=8, threads=16, lanes=4)
    check_against_the_cpu_kernel(problem, trained, counts)


@needs_gpu
def test_on_a_gpu_the_op_trains_as_the_cpu_kernel_does():
    """The compiled kernel through the op on gpu:0: `check_against_the_cpu_kernel`, and with
    window 1 and no subsampling the CPU kernel's counts exactly."""
    syn0, syn1, ids, offsets, keep, cum, alphas = problem = topic_problem()
    with tp.device("gpu:0"):
        trained, _, counts = word2vec_sgns_train(*problem[:6], *alphas, 1, window=3, negative=5)
        check_against_the_cpu_kernel(problem, trained.numpy(), counts.numpy())
        _, _, counts = word2vec_sgns_train(syn0, syn1, ids, offsets, np.ones_like(keep), cum, *alphas, 1, 1, 5)
    want = train_on_cpu(syn0, syn1, ids, offsets, np.ones_like(keep), cum, alphas, [1], 1, 5)[2][0]
    assert counts.numpy().tolist() == want.tolist()


def test_shared_memory_fits_the_launch():
    """The backend's launch: blocks and lanes whose shared memory fits 48 KiB, or no launch."""
    for itemsize in (4, 8):
        for window, negative in ((5, 5), (10, 15), (50, 25)):
            launch = cupy_backend.word2vec_launch(itemsize, 300, window, negative)
            if launch is None:
                assert cupy_backend.word2vec_shared_bytes(itemsize, window, negative, 32, 1) > 48 * 1024
                continue
            threads, lanes, size = launch
            assert size == cupy_backend.word2vec_shared_bytes(itemsize, window, negative, threads, lanes) <= 48 * 1024
            assert threads % 32 == 0 and lanes >= 1


@needs_compiler
def test_on_a_gpu_the_backend_launches_the_kernel_as_written(monkeypatch, tmp_path_factory):
    """The GPU path of the backend with the compiled kernel replaced by its host build: the
    arguments it passes (checked against the kernel's C signature, scalars as 0-d arrays) train
    copies of the tables, with the CPU kernel's counts (window 1, no subsampling), in the grid,
    block and shared memory of `word2vec_launch`; bad word ids are an IndexError."""
    launches = []

    def host_build(source, name, dtype):
        assert (source, name, np.dtype(dtype)) == ("word2vec", "word2vec_sgns", np.float32)

        def function(grid, block, args, shared_mem):
            syn0, syn1, ids, offsets, sentences, keep, cum, a0, a1, seed, total, *sizes, counts = args
            vocab, dim, window, negative, lanes = sizes
            kinds = [syn0, syn1, ids, offsets, keep, cum, a0, a1, seed, counts]
            dtypes = [
                "float32",
                "float32",
                "int32",
                "int64",
                "float64",
                "int64",
                "float64",
                "float64",
                "int64",
                "int64",
            ]
            assert [a.dtype.name for a in kinds] == dtypes
            assert [a.ndim for a in kinds] == [2, 2, 1, 1, 1, 1, 0, 0, 0, 1] and counts.shape == (3,)
            assert type(sentences) is type(total) is np.int64 and {type(s) for s in sizes} == {np.int32}
            assert (sentences, total, vocab, dim) == (offsets.size - 1, ids.size, *syn0.shape)
            launches.append((grid, block, shared_mem, int(lanes)))
            new0, new1, (got,) = train_on_host(
                tmp_path_factory,
                syn0, syn1, ids, offsets, keep, cum, [a0[()], a1[()]], [seed[()]], int(window), int(negative),
                grid=grid[0], threads=block[0], lanes=int(lanes),
            )  # fmt: skip
            syn0[...], syn1[...], counts[...] = new0, new1, got

        return function

    dispatch_on_host(cupy_backend, monkeypatch)
    monkeypatch.setattr(cupy_backend, "_raw", host_build)
    monkeypatch.setattr(cupy_backend, "_multiprocessors", lambda: 1)
    monkeypatch.setattr(cupy_backend, "WORD2VEC_ROWS_PER_BLOCK", 4)  # several blocks on this small vocabulary
    rng = np.random.default_rng(8)
    vocab, dim = 20, 20
    ids, offsets = corpus(rng, 12, vocab)
    keep, cum = np.ones(vocab), negative_table(np.bincount(ids, minlength=vocab) + 1)
    syn0, syn1 = tables(rng, vocab, dim, np.float32)
    reference = functools.partial(get_op("word2vec_sgns_train").reference, window=1, negative=3, threads=1)
    run = cupy_backend.bind_word2vec_sgns_train(reference, window=1, negative=3, threads=1)
    scalars = np.asarray(0.05), np.asarray(0.01), np.asarray(7, np.int64)
    new0, new1, counts = run(syn0, syn1, ids.astype(np.int64), offsets, keep, cum, *scalars)
    threads, lanes, shared = cupy_backend.word2vec_launch(4, dim, 1, 3)
    assert launches == [((5,), (threads,), shared, lanes)]  # a block for every 4 words of the vocabulary, as set
    assert counts.tolist() == train_on_cpu(syn0, syn1, ids, offsets, keep, cum, [0.05, 0.01], [7], 1, 3)[2][0].tolist()
    assert not np.array_equal(new0, syn0) and np.abs(new1).sum() > 0 and not np.abs(syn1).any()
    with pytest.raises(IndexError, match="word id 20 is out of range"):
        run(syn0, syn1, np.append(ids, vocab), offsets, keep, cum, *scalars)
