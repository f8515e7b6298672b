"""Every compiled CPU kernel against its op's NumPy reference: random odd shapes,
strides 1 and 2, both paddings, float32 and float64, with 1 and 2 threads."""

import itertools

import numpy as np
import pytest

import tapeflow as tp
from tapeflow._kernels.fusion_opcodes import ARITY, PRIMITIVES
from tapeflow.backends import numpy_backend
from tapeflow.ops.registry import all_ops, get_op

KERNEL_OPS = sorted(op.name for op in all_ops() if op.kernel("cpu") is not op.reference)
RNG = np.random.default_rng(7)


def test_the_hot_ops_have_kernels():
    for name in (
        "conv2d",
        "conv2d_input_grad",
        "conv2d_filter_grad",
        "max_pool2d",
        "max_pool2d_grad",
        "avg_pool2d",
        "avg_pool2d_grad",
        "sparse_softmax_cross_entropy_with_logits",
        "gather",
        "scatter_add",
        "adam_update",
        "relu",
        "relu_grad",
    ):
        assert name in KERNEL_OPS, f"{name} runs its NumPy reference, not a compiled kernel"
        assert get_op(name).kernel("cpu") is getattr(numpy_backend, name)


def _conv_cases():
    cases = itertools.product((1, 2), ("SAME", "VALID", ((1, 2), (0, 1))), (1, 2), (1, 5, 9))
    for stride, padding, dilation, channels in cases:  # few channels and many take different paths
        x = RNG.standard_normal((3, 9, 7, channels))
        w = RNG.standard_normal((3, 2, channels, 4))
        attrs = {"strides": (stride, stride), "padding": padding, "dilations": (dilation, 1)}
        y = get_op("conv2d").reference(x, w, **attrs)
        dy = RNG.standard_normal(y.shape)
        yield "conv2d", (x, w), attrs
        yield "conv2d_input_grad", (dy, w), {"input_size": (9, 7), **attrs}
        yield "conv2d_filter_grad", (x, dy), {"filter_size": (3, 2), **attrs}


def _pool_cases():
    for (kh, kw), stride, padding in itertools.product(((2, 2), (3, 2)), (1, 2), ("SAME", "VALID")):
        x = RNG.standard_normal((2, 7, 9, 3))
        attrs = {"ksize": (kh, kw), "strides": (stride, stride), "padding": padding}
        y = get_op("max_pool2d").reference(x, **attrs)
        dy = RNG.standard_normal(y.shape)
        yield "max_pool2d", (x,), attrs
        yield "max_pool2d_grad", (x, dy), attrs
        yield "avg_pool2d", (x,), attrs
        yield "avg_pool2d_grad", (dy,), {"input_size": (7, 9), **attrs}


def _other_cases():
    logits = RNG.standard_normal((37, 11)) * 5
    yield "sparse_softmax_cross_entropy_with_logits", (logits, RNG.integers(0, 11, 37)), {}
    params = RNG.standard_normal((13, 6))
    ids = RNG.integers(-13, 13, (4, 5))
    yield "gather", (params, ids), {"axis": 0}
    yield "scatter_add", (params, ids, RNG.standard_normal((4, 5, 6))), {"axis": 0}
    p, m, g = (RNG.standard_normal((33, 7)) for _ in range(3))
    v = RNG.random((33, 7))
    yield "adam_update", (p, m, v, g), {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7, "step": 3}
    adamw = {"lr": 0.01, "step": 3, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}
    yield "adamw_update", (p, m, v, g), adamw
    y = RNG.standard_normal((300, 700))  # large enough to run on several threads
    y[0, :4] = [np.nan, -0.0, 0.0, np.inf]
    yield "relu", (y,), {}
    yield "relu", (y[::2, 1:],), {}
    yield "relu", (np.array(-3.0),), {}
    yield "relu_grad", (RNG.standard_normal(y.shape), y), {}
    yield "relu_grad", (RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4)).T.copy().T), {}


def _matmul_cases():
    a, b = RNG.standard_normal((67, 45)), RNG.standard_normal((45, 31))
    yield "matmul", (a, b), {}
    yield "matmul", (b.T, a.T), {}  # transposed views go to BLAS as flags
    yield "matmul", (np.ascontiguousarray(a.T).T, b), {}
    yield "matmul", (a[:, ::2], b[::2]), {}  # strided views are copied
    # Split across threads: into bands of rows or of columns, with operands stored transposed.
    tall, wide = RNG.standard_normal((600, 700)), RNG.standard_normal((700, 9))
    yield "matmul", (tall, wide), {}
    yield "matmul", (np.ascontiguousarray(tall.T).T, np.ascontiguousarray(wide.T).T), {}
    yield "matmul", (wide.T, tall.T), {}
    yield "matmul", (np.ascontiguousarray(wide.T), np.ascontiguousarray(tall.T)), {}
    yield "matmul", (RNG.standard_normal((1, 50, 300)), RNG.standard_normal((1, 300, 170))), {}
    # One row: a matrix-vector product, with the matrix stored either way.
    row, mat = RNG.standard_normal((1, 45)), RNG.standard_normal((45, 31))
    yield "matmul", (row, mat), {}
    yield "matmul", (row, np.ascontiguousarray(mat.T).T), {}
    yield "matmul", (np.ascontiguousarray(row.T).T, mat.astype(np.float32).astype(np.float64)), {}
    big_row, big = RNG.standard_normal((1, 1100)), RNG.standard_normal((1100, 1001))  # split over the threads
    yield "matmul", (big_row, big), {}
    yield "matmul", (big_row, np.ascontiguousarray(big.T).T), {}
    x, y = RNG.standard_normal((5, 7, 6)), RNG.standard_normal((5, 6, 4))
    yield "matmul", (x, y), {}
    yield "matmul", (y.transpose(0, 2, 1), x.transpose(0, 2, 1)), {}
    yield "matmul", (x, RNG.standard_normal((6, 3))), {}
    yield "matmul", (RNG.standard_normal((2, 1, 3, 4)), RNG.standard_normal((5, 4, 2))), {}  # broadcast batch
    yield "matmul", (np.ones((3, 0)), np.ones((0, 2))), {}


CASES = list(_matmul_cases()) + list(_conv_cases()) + list(_pool_cases()) + list(_other_cases())


def _ids():
    return [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_kernel_matches_reference(case, dtype, threads):
    name, inputs, attrs = case
    op = get_op(name)
    inputs = tuple(a.astype(dtype) if a.dtype.kind == "f" else a for a in inputs)
    expected = op.reference(*inputs, **attrs)
    got = op.kernel("cpu")(*inputs, **attrs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    tol = 1e-10 if dtype == np.float64 else 2e-4
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


def test_max_pool_kernel_sends_ties_to_the_first_maximum():
    x = np.zeros((1, 4, 4, 1))
    attrs = {"ksize": (2, 2), "strides": (2, 2), "padding": "VALID"}
    dy = np.arange(1.0, 5.0).reshape(1, 2, 2, 1)
    got = numpy_backend.max_pool2d_grad(x, dy, **attrs)
    np.testing.assert_array_equal(got, get_op("max_pool2d_grad").reference(x, dy, **attrs))
    assert got[0, 0, 0, 0] == 1.0 and got[0, 1, 1, 0] == 0.0


def test_ops_run_with_subnormals_flushed_and_the_callers_setting_restored():
    tiny = tp.tensor(np.array([1e-30], dtype=np.float32))
    assert (tiny * 1e-10).numpy()[0] == 0.0  # 1e-40 is subnormal in float32: flushed inside the op
    assert np.float32(1e-30) * np.float32(1e-10) > 0  # outside ops NumPy keeps subnormals


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("primitive", PRIMITIVES)
def test_each_elementwise_primitive_has_its_opcode(primitive, dtype):
    """The compiled program kernel numbers its opcodes after tapeflow._kernels.fusion_opcodes.PRIMITIVES:
    each one-instruction program computes what the op's reference does."""
    arity = ARITY[primitive]
    inputs = [np.abs(RNG.standard_normal((3, 5))).astype(dtype) + 0.5 for _ in range(arity)]
    program = (*(("input", i) for i in range(arity)), (primitive, *range(arity)))
    got = get_op("fused_elementwise").bound_kernel("cpu", {"program": program})(*inputs)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(got, get_op(primitive).reference(*inputs), rtol=tol, atol=tol)


def test_matrices_beyond_blas_int_range_go_to_numpy(monkeypatch):
    """scipy's BLAS takes C ints: a dimension past 2**31 - 1 must not reach it (shown here
    with the limit lowered, as such matrices do not fit in memory)."""
    called = []
    monkeypatch.setattr(numpy_backend, "MAX_DIM", 4)
    monkeypatch.setattr(numpy_backend._kernels, "matmul", lambda a, b: called.append(1))
    monkeypatch.setattr(numpy_backend._kernels, "dense", lambda *args: called.append(1))
    rng = np.random.default_rng(3)
    a, b, bias = rng.standard_normal((5, 3)), rng.standard_normal((3, 2)), rng.standard_normal(2)
    np.testing.assert_allclose(numpy_backend.matmul(a, b), a @ b)
    np.testing.assert_allclose(numpy_backend.fused_matmul(a, b, bias, "relu"), np.maximum(a @ b + bias, 0))
    assert called == []
