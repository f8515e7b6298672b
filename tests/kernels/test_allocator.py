"""The caching allocator of graph runs: large arrays reuse the blocks earlier arrays gave back."""

import os
import threading

import numpy as np
import pytest

import tapeflow as tp
from tapeflow._kernels import allocator as A

LARGE = A.LARGE_BYTES


def _handler(a) -> str:
    """The name of the allocator that made `a`'s data (NumPy keeps the query in its core module)."""
    return np._core.multiarray.get_handler_name(a)


@pytest.fixture(autouse=True)
def _empty_cache():
    A.release()
    yield
    A.release()


def test_large_arrays_reuse_blocks_and_zeros_are_zeros():
    with A.reusing_blocks():
        a = np.full(LARGE // 8, 7.0)
        assert _handler(a) == "tapeflow_reusing_blocks"
    del a
    assert A.cached_bytes() >= LARGE
    before = A.reused_blocks()
    with A.reusing_blocks():
        b = np.zeros(LARGE // 8)  # the dirty block of `a`, cleared
        c = np.ones(LARGE // 8)
    assert A.reused_blocks() == before + 1
    assert not b.any() and (c == 1).all()


def test_only_the_context_that_entered_uses_it():
    seen = {}

    def other():
        seen["name"] = _handler(np.empty(LARGE))

    with A.reusing_blocks():
        worker = threading.Thread(target=other)
        worker.start()
        worker.join(timeout=30)
        mine = _handler(np.empty(LARGE))
    assert mine == "tapeflow_reusing_blocks"
    assert seen["name"] != "tapeflow_reusing_blocks"
    assert _handler(np.empty(LARGE)) != "tapeflow_reusing_blocks"


def test_the_kept_blocks_are_bounded():
    with A.reusing_blocks():
        arrays = [np.empty(LARGE + 4096 * (i % 16), np.uint8) for i in range(A.CACHE_SLOTS + 8)]
    del arrays
    assert 0 < A.cached_bytes() <= A.CACHE_LIMIT
    huge = A.CACHE_LIMIT // 2 + 4096
    with A.reusing_blocks():
        first, second, third = (np.empty(huge, np.uint8) for _ in range(3))
    del first, second, third
    assert A.cached_bytes() <= A.CACHE_LIMIT


def test_the_limit_is_a_sixteenth_of_memory_within_bounds():
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert A.CACHE_LIMIT == A._cache_limit() == max(1 << 28, min(1 << 30, memory // 16))
    with A.reusing_blocks():
        weights, update = np.empty((1 << 28) // 4 + 1024, np.float32), np.empty((1 << 28) // 4 + 1024, np.float32)
    del weights, update  # two blocks past 256 MiB together: both kept where the limit allows
    assert A.cached_bytes() == (2 * ((1 << 28) + 4096) if A.CACHE_LIMIT >= (1 << 29) + 8192 else (1 << 28) + 4096)


def test_resizing_in_place_keeps_the_data():
    with A.reusing_blocks():
        a = np.arange(10, dtype=np.float64)
        a.resize(LARGE // 4, refcheck=False)  # small to large
        assert a[:10].tolist() == list(range(10))
        a[-1] = 5.0
        a.resize(20, refcheck=False)  # large to small
        assert a[:10].tolist() == list(range(10))


def test_a_frozen_training_step_computes_the_same_with_and_without_kept_blocks():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 300)).astype(np.float32)
    y = rng.integers(0, 10, 256)

    def trained():
        tp.random.seed(0)
        model = tp.Sequential([tp.Input((300,)), tp.layers.Dense(512, activation="relu"), tp.layers.Dense(10)])
        model.compile(tp.optimizers.Adam(1e-2), tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=128, epochs=3, verbose=0, shuffle=False)
        return [w.numpy() for w in model.weights]

    reused = A.reused_blocks()
    first = trained()
    assert A.reused_blocks() > reused  # the step's large arrays came from kept blocks
    A.release()
    second = trained()
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
