"""Every parallel kernel gives the same bits on 1 and 2 threads, with subnormal inputs, both
with flush-to-zero on (as ops run) and off: OpenMP worker threads take the calling thread's
floating-point environment instead of the one they happened to start with."""

from __future__ import annotations

import numpy as np
import pytest

from tapeflow import _kernels as K
from tapeflow.backends import numpy_backend

pytestmark = pytest.mark.skipif(not K.build_info()["conv"]["openmp"], reason="kernels built without OpenMP")

_RNG = np.random.default_rng(41)


def subnormal_salted(shape, dtype) -> np.ndarray:
    """Values of order one, a third of them replaced by subnormals of either sign."""
    tiny = np.finfo(dtype).smallest_normal
    x = _RNG.standard_normal(shape).astype(dtype)
    mask = _RNG.random(shape) < 1 / 3
    x[mask] = (tiny * _RNG.uniform(-0.9, 0.9, int(mask.sum()))).astype(dtype)
    return np.ascontiguousarray(x)


def small_ints(shape, dtype) -> np.ndarray:
    return _RNG.integers(-3, 4, shape).astype(dtype)


def subnormal_multiples(shape, dtype) -> np.ndarray:
    """Small integers times the smallest subnormal: products with small integers and their
    sums are exact in any order, unless flushed to zero."""
    return small_ints(shape, dtype) * np.finfo(dtype).smallest_subnormal


def _elementwise(dtype):
    program = (("input", 0), ("input", 1), ("multiply", 0, 1), ("input", 0), ("add", 2, 3), ("tanh", 4))
    run = numpy_backend.bind_fused_elementwise(None, program)
    x, y = subnormal_salted((300, 256), dtype), subnormal_salted((300, 256), dtype)
    return lambda: run(x, y)


def _cases(dtype):
    """name -> a call of one kernel, sized past its threshold for running in parallel. Products
    and sums are exact (subnormal multiples times small integers) where the kernel splits a
    sum differently on different thread counts."""
    d = dtype
    a, b = subnormal_multiples((400, 160), d), small_ints((160, 180), d)
    row, w_row = subnormal_multiples((1, 2048), d), small_ints((2048, 600), d)
    x4, w4 = subnormal_multiples((4, 20, 20, 8), d), small_ints((3, 3, 8, 16), d)
    dy4, sub_dy4 = small_ints((4, 20, 20, 16), d), subnormal_multiples((4, 20, 20, 16), d)
    px = subnormal_salted((8, 24, 24, 4), d)
    pdy = subnormal_salted((8, 12, 12, 4), d)
    big = subnormal_salted((1 << 20,), d)
    logits = subnormal_salted((256, 160), d) * d(-90)
    labels = _RNG.integers(0, 160, 256)
    bias, row_bias = subnormal_multiples((180,), d), subnormal_multiples((600,), d)
    table, ids = subnormal_salted((4096, 1024), d), _RNG.integers(0, 4096, 4096)
    cases = {
        "matmul": lambda: K.matmul(a, b),
        "matmul one row": lambda: K.matmul(row, w_row),
        "batched matmul": lambda: K.matmul(np.stack([a[:200]] * 4), np.stack([b] * 4)),
        "dense bias relu": lambda: K.dense(a, b, bias, True),
        "conv2d": lambda: K.conv2d_forward(x4, w4, 1, 1, 1, 1, 1, 1, 20, 20),
        "conv2d input grad": lambda: K.conv2d_backward_input(sub_dy4, w4, 20, 20, 1, 1, 1, 1, 1, 1),
        "conv2d filter grad": lambda: K.conv2d_backward_filter(x4, dy4, 3, 3, 1, 1, 1, 1, 1, 1),
        "max_pool2d": lambda: K.max_pool2d_forward(px, 2, 2, 2, 2, 0, 0, 12, 12),
        "max_pool2d grad": lambda: K.max_pool2d_backward(px, pdy, 2, 2, 2, 2, 0, 0),
        "avg_pool2d": lambda: K.avg_pool2d_forward(px, 2, 2, 2, 2, 0, 0, 12, 12),
        "avg_pool2d grad": lambda: K.avg_pool2d_backward(pdy, 24, 24, 2, 2, 2, 2, 0, 0),
        "sparse softmax xent": lambda: K.sparse_softmax_xent(logits, labels),
        "adam": lambda: K.adam_update(big, big, np.abs(big), big, 1e-3, 0.9, 0.999, 1e-30, 0.1, 0.001),
        "relu": lambda: K.relu(big),
        "relu grad": lambda: K.relu_grad(big, big),
        "fused elementwise": _elementwise(dtype),
        "gather rows": lambda: K.gather_rows(table, ids),
    }
    if dtype == np.float32:
        cases["dense one row"] = lambda: K.dense(row, w_row, row_bias, True)
    return cases


def _bits(result) -> list[bytes]:
    return [np.ascontiguousarray(r).tobytes() for r in (result if isinstance(result, tuple) else (result,))]


def _run(call, threads: int, flush: bool):
    K.set_num_threads(threads)
    state = K.flush_denormals_enter() if flush else None
    try:
        return _bits(call())
    finally:
        if flush:
            K.flush_denormals_leave(state)


@pytest.mark.parametrize("flush", [True, False], ids=["flush-to-zero", "subnormals-kept"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_parallel_kernels_give_the_same_bits_on_any_thread_count(dtype, flush):
    old = K.get_num_threads()
    try:
        # workers started under the other setting: they must not keep it
        _run(_cases(dtype)["relu"], 2, not flush)
        differ = [name for name, call in _cases(dtype).items() if _run(call, 1, flush) != _run(call, 2, flush)]
    finally:
        K.set_num_threads(old)
    assert not differ, f"results differ between 1 and 2 threads: {differ}"
