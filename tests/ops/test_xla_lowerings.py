"""The XLA lowerings of Keras's sorting, scan, segment, spectral, linear algebra and 3-D
window ops: each compiles to XLA (no operation falls back to the CPU), and each keeps the
NumPy reference's conventions where the samples of test_every_op do not reach (NaN and
signed-zero order, ties, signs of Householder reflections, singular pivots, integer scans).

These run in the XLA test environment (`make test` builds .venv-xla); elsewhere they skip.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_every_op import SAMPLES, _run

import tapeflow as tp
from tapeflow import _compat
from tapeflow.backends import backend
from tapeflow.ops import registry

pytestmark = pytest.mark.skipif(not _compat.has_xla, reason="needs torch_xla (the .venv-xla test environment)")
XLA = "xla:0"
LOWERED = (
    "argsort",
    "avg_pool3d",
    "avg_pool3d_grad",
    "conv3d",
    "conv3d_filter_grad",
    "conv3d_input_grad",
    "cumprod",
    "depthwise_conv2d",
    "depthwise_conv2d_filter_grad",
    "depthwise_conv2d_input_grad",
    "det",
    "dft",
    "einsum",
    "inv",
    "logdet",
    "logdet_grad",
    "lu_factor",
    "max_pool3d",
    "max_pool3d_grad",
    "max_pool3d_grad_grad",
    "put_along_axis_add",
    "quantile",
    "quantile_weights",
    "searchsorted",
    "segment_max",
    "segment_min",
    "segment_prod",
    "segment_sum",
    "slogdet",
    "solve",
    "sort",
    "take_along_axis",
    "top_k",
    "unravel_index",
)


def _both(name: str, inputs, **attrs):
    """The op's outputs on the CPU and on XLA, as NumPy arrays."""
    op = registry.get_op(name)
    cpu = registry.apply(op, tuple(tp.tensor(a) for a in inputs), attrs)
    with tp.device(XLA):
        xla = registry.apply(op, tuple(tp.tensor(a, device=XLA) for a in inputs), attrs)
    cpu, xla = (v if isinstance(v, tuple | list) else (v,) for v in (cpu, xla))
    return [c.numpy() for c in cpu], [x.numpy() for x in xla]


def check_same_as_cpu(name: str, inputs, exact: bool = False, **attrs) -> None:
    for k, (c, x) in enumerate(zip(*_both(name, inputs, **attrs), strict=True)):
        assert c.dtype == x.dtype, f"{name} output {k}: {x.dtype} on XLA, {c.dtype} on the CPU"
        if exact:
            np.testing.assert_array_equal(x, c, err_msg=f"{name} output {k}")
            np.testing.assert_array_equal(np.signbit(x), np.signbit(c), err_msg=f"{name} output {k} signs")
        else:
            np.testing.assert_allclose(x, c, rtol=1e-10, atol=1e-12, err_msg=f"{name} output {k}")


def test_the_lowered_ops_run_on_xla_without_a_cpu_fallback():
    metrics = pytest.importorskip("torch_xla.debug.metrics")
    for name in LOWERED:
        op = registry.get_op(name)
        assert op.runs_on("xla"), f"{name} has no XLA lowering"
        for case in SAMPLES[name]:
            metrics.clear_all()
            with tp.device(XLA):
                outputs = _run(op, case, [tp.tensor(a, device=XLA) for a in case.inputs])
            for out in outputs:
                out.numpy()
            assert metrics.executed_fallback_ops() == [], f"{name}[{case.name}] ran part of its work on the CPU"


def test_sorting_orders_nans_last_and_keeps_signed_zeros_stable():
    x = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, -np.nan, 0.0, -0.0, -np.inf, 0.0]])
    for dtype in (np.float64, np.float32):
        check_same_as_cpu("sort", [x.astype(dtype)], exact=True, axis=1)
        check_same_as_cpu("argsort", [x.astype(dtype)], exact=True, axis=1)
        check_same_as_cpu("top_k", [x.astype(dtype)], exact=True, k=6, sorted=True)


def test_searchsorted_places_nans_as_numpy_sorts_them():
    seq, values = np.array([1.0, 2.0, 2.0, np.nan]), np.array([[np.nan, 2.0], [5.0, -1.0]])
    for side in ("left", "right"):
        check_same_as_cpu("searchsorted", [seq, values], exact=True, side=side)


def test_integer_cumprod_wraps_like_numpy():
    x = np.array([[3, -2, 7, 5, -1, 4, 6], [2**20, 2**20, 2**20, 1, 0, 9, 1]], dtype=np.int64)
    check_same_as_cpu("cumprod", [x], exact=True, axis=1)
    check_same_as_cpu("cumprod", [x.T.astype(np.int32)], exact=True, axis=0)


@pytest.mark.parametrize(
    ("shape", "mode"),
    [((4, 3), "complete"), ((2, 4), "reduced"), ((2, 2, 4), "complete"), ((3, 3), "triangular")],
)
def test_qr_reflections_have_lapacks_signs(shape, mode):
    x = np.random.default_rng(5).standard_normal(shape)
    if mode == "triangular":  # no reflection is needed: R keeps the diagonal's signs
        x, mode = np.triu(x), "reduced"
    kernels = backend("xla")  # lowered, though refused while its VJP is not device-aware
    q, r = (kernels.to_host(t) for t in kernels.qr(kernels.from_host(x), mode))
    np.testing.assert_allclose(q @ r, x, atol=1e-12)
    np.testing.assert_allclose(r, np.linalg.qr(x, mode=mode)[1], atol=1e-12)
    np.testing.assert_allclose(q, np.linalg.qr(x, mode=mode)[0], atol=1e-12)


def test_cholesky_and_triangular_solves_read_one_triangle():
    kernels = backend("xla")  # lowered, though refused while their VJPs are not device-aware
    rng = np.random.default_rng(8)
    a = rng.standard_normal((2, 3, 3))
    spd = a @ a.transpose(0, 2, 1) + 3 * np.eye(3)
    lower = kernels.to_host(kernels.cholesky(kernels.from_host(np.tril(spd) + np.triu(rng.standard_normal((3, 3)), 1))))
    np.testing.assert_allclose(lower, np.linalg.cholesky(spd), atol=1e-12)
    a, b = a + 3 * np.eye(3), rng.standard_normal((3, 2))
    for is_lower, triangle in ((True, np.tril), (False, np.triu)):
        x = kernels.to_host(kernels.solve_triangular(kernels.from_host(a), kernels.from_host(b), is_lower))
        np.testing.assert_allclose(x, np.linalg.solve(triangle(a), b), atol=1e-10)


def test_lu_pivots_ties_and_singular_matrices_as_getrf():
    check_same_as_cpu("lu_factor", [np.array([[1.0, 2.0, 3.0], [-1.0, 2.0, 0.0], [1.0, 0.0, 0.0]])])
    check_same_as_cpu("lu_factor", [np.zeros((2, 2))])
    rng = np.random.default_rng(6)
    check_same_as_cpu("solve", [rng.standard_normal((5, 5)) + 5 * np.eye(5), rng.standard_normal((2, 5, 3))])


def test_max_pool3d_gradients_go_to_the_first_maximum():
    ones, g = np.ones((1, 3, 3, 3, 1)), np.random.default_rng(7).standard_normal((1, 3, 3, 3, 1))
    attrs = {"ksize": (2, 2, 2), "strides": (1, 1, 1), "padding": "VALID"}
    check_same_as_cpu("max_pool3d_grad", [ones, g[:, :2, :2, :2]], **attrs)
    check_same_as_cpu("max_pool3d_grad_grad", [ones, g], **attrs)
