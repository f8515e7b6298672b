"""Fused kernels at the edges of float range: every fused elementwise primitive and every
fused epilogue gives, for ±0, ±inf, NaN, subnormals and the overflow and underflow
thresholds, what eager gives and what NumPy gives in float64 (up to flush-to-zero)."""

from __future__ import annotations

import numpy as np
import pytest
from hostile import PRIMITIVE_ORACLE, RTOL, edge_values, flushed, mismatches

import tapeflow as tp
from tapeflow._kernels.fusion_opcodes import PRIMITIVES, UNARY
from tapeflow.backends import numerics, numpy_backend
from tapeflow.devices import CPU
from tapeflow.ops import registry

DTYPES = [np.float32, np.float64]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_every_primitive_has_an_oracle():
    assert sorted(PRIMITIVE_ORACLE) == sorted(PRIMITIVES)


def _operands(name, dtype):
    edges = edge_values(dtype)
    if name in UNARY:
        return (edges,)
    x, y = np.meshgrid(edges, edges, indexing="ij")
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


def _fused(name, operands):
    """The compiled program for one primitive, run as a graph's executor runs it."""
    program = (*(("input", i) for i in range(len(operands))), (name, *range(len(operands))))
    run = numpy_backend.bind_fused_elementwise(None, program)
    with numerics(CPU):
        return run(*operands)


def _eager(name, operands):
    return registry.apply(registry.get_op(name), tuple(tp.tensor(a) for a in operands), {}).numpy()


def _oracle(name, operands):
    """NumPy in float64 on the operands as given and as flushed (subnormals read as zero)."""
    with np.errstate(all="ignore"):
        exact = PRIMITIVE_ORACLE[name](*(a.astype(np.float64) for a in operands))
        daz = PRIMITIVE_ORACLE[name](*(flushed(a).astype(np.float64) for a in operands))
    return exact, daz


def _report(name, operands, actual, expected, bad) -> str:
    where = np.argwhere(bad)[:6]
    rows = [
        f"{tuple(float(a[tuple(i)]) for a in operands)} -> {actual[tuple(i)]!r}, expected {expected[tuple(i)]!r}"
        for i in where
    ]
    return f"{name}: {int(bad.sum())} mismatches, e.g. " + "; ".join(rows)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", PRIMITIVES)
def test_fused_primitive_matches_numpy_float64_at_the_edges(name, dtype):
    operands = _operands(name, dtype)
    actual = _fused(name, operands)
    exact, daz = _oracle(name, operands)
    rtol = RTOL[np.dtype(dtype)]
    bad = mismatches(actual, exact, dtype, rtol) & mismatches(actual, daz, dtype, rtol)
    assert not bad.any(), _report(name, operands, actual, exact, bad)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", PRIMITIVES)
def test_fused_primitive_matches_eager_at_the_edges(name, dtype):
    operands = _operands(name, dtype)
    actual, eager = _fused(name, operands), _eager(name, operands)
    bad = mismatches(actual, eager, dtype, RTOL[np.dtype(dtype)])
    assert not bad.any(), _report(name, operands, actual, eager, bad)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
def test_binary_primitive_keeps_operand_order_for_nan_and_ties(name, dtype):
    """maximum(NaN, x), maximum(x, NaN) and maximum(-0.0, 0.0) are eager's, bit for bit (up
    to flush-to-zero)."""
    operands = _operands(name, dtype)
    actual, eager = flushed(_fused(name, operands)), flushed(_eager(name, operands))
    bits = f"u{actual.itemsize}"
    same = (np.isnan(actual) & np.isnan(eager)) | (actual.view(bits) == eager.view(bits))
    assert same.all(), _report(name, operands, actual, eager, ~same)


def _salted_dense_inputs(dtype, rows):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((rows, 64)).astype(dtype)
    w = rng.standard_normal((64, 130)).astype(dtype)
    b = rng.standard_normal(130).astype(dtype)
    a[0, 3], b[5], b[7], b[9] = np.nan, np.nan, np.inf, -np.inf
    w[10, 20] = np.inf
    b[11] = -0.0
    return a, w, b


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rows", [1, 7])
@pytest.mark.parametrize("activation", ["relu", "linear"])
def test_dense_epilogue_propagates_nan_and_inf_as_eager(dtype, rows, activation):
    a, w, b = _salted_dense_inputs(dtype, rows)
    eager = tp.matmul(tp.tensor(a), tp.tensor(w)) + tp.tensor(b)
    if activation == "relu":
        eager = tp.nn.relu(eager)
    fused_op = registry.get_op("fused_matmul")
    kernels = {
        "kernel": fused_op.kernel("cpu")(a, w, b, activation=activation),
        "bound kernel": fused_op.bound_kernel("cpu", {"activation": activation})(a, w, b),
        "reference": fused_op.reference(a, w, b, activation=activation),
    }
    for label, out in kernels.items():
        bad = mismatches(out, eager.numpy(), dtype, RTOL[np.dtype(dtype)] * 10)
        assert not bad.any(), f"fused_matmul {label}: {int(bad.sum())} entries differ from eager"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("activation", ["relu", "linear"])
def test_conv_epilogue_propagates_nan_and_inf_as_eager(dtype, activation):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 6, 6, 3)).astype(dtype)
    w = rng.standard_normal((3, 3, 3, 4)).astype(dtype)
    b = np.array([np.nan, np.inf, -np.inf, -0.0], dtype)
    x[0, 2, 2, 1] = np.nan
    conv = {"strides": (1, 1), "padding": "SAME", "dilations": (1, 1)}
    eager = registry.apply(registry.get_op("conv2d"), (tp.tensor(x), tp.tensor(w)), conv) + tp.tensor(b)
    if activation == "relu":
        eager = tp.nn.relu(eager)
    fused_op = registry.get_op("fused_conv2d")
    out = fused_op.bound_kernel("cpu", {"activation": activation, **conv})(x, w, b)
    bad = mismatches(out, eager.numpy(), dtype, RTOL[np.dtype(dtype)] * 10)
    assert not bad.any(), f"fused_conv2d: {int(bad.sum())} entries differ from eager"
