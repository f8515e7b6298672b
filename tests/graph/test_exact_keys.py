"""Caches, merges and rewrites key floats by their bits: 0.0 and -0.0 (and 1, 1.0, True)
are different values to a graph, as they are to eager."""

from __future__ import annotations

import numpy as np

import tapeflow as tp
from tapeflow.graph.passes import CommonSubexpressionElimination, ConstantFolding

NEG_ZERO = np.array([-0.0], np.float32)


def _signbits(t) -> list[bool]:
    return np.signbit(np.asarray(t)).tolist()


def test_function_retraces_for_a_zero_of_the_other_sign():
    f = tp.function(lambda x, c: x + c)
    x = tp.tensor(NEG_ZERO)
    assert _signbits(f(x, 0.0)) == _signbits(x + 0.0) == [False]
    assert _signbits(f(x, -0.0)) == _signbits(x + -0.0) == [True]


def test_function_retraces_for_an_int_float_or_bool_of_equal_value():
    f = tp.function(lambda x, c: x * c)
    x = tp.tensor(np.array([3], np.int64))
    assert f(x, 1).dtype == (x * 1).dtype
    assert f(x, 1.0).dtype == (x * 1.0).dtype
    assert f(x, True).dtype == (x * True).dtype


def test_cse_keeps_constants_and_attrs_of_zeros_of_both_signs_apart():
    def fn(x):
        return tp.full_like(x, 0.0) + x, tp.full_like(x, -0.0) + x, tp.clip(x, -0.0, 1.0), tp.clip(x, 0.0, 1.0)

    graph = tp.freeze(fn, tp.TensorSpec((1,)), optimize=False)
    CommonSubexpressionElimination().run(graph)
    graph.changed()
    x = tp.tensor(NEG_ZERO)
    for got, want in zip(graph(x), fn(x), strict=True):
        assert _signbits(got) == _signbits(want)


def test_folded_constants_are_flushed_as_at_run_time():
    """exp(-100) in float32 is subnormal: eager and the executor flush it to zero."""
    graph = tp.freeze(lambda: tp.exp(tp.constant([-100.0, -0.0, np.nan])) * 1e30, optimize=False)
    ConstantFolding().run(graph)
    eager = tp.exp(tp.constant([-100.0, -0.0, np.nan])) * 1e30
    np.testing.assert_array_equal(graph().numpy(), eager.numpy())
