"""The 3-D convolution and pooling kernels and the depthwise convolution kernels against the
NumPy references of their ops, in float64 and float32, on odd shapes, strides, dilations,
both paddings, batch 1 and an empty batch, one thread and several, big and tiny scratch."""

import doctest

import numpy as np
import pytest

from tapeflow import _kernels as K
from tapeflow.backends import numpy_backend as B
from tapeflow.ops import registry
from tapeflow.ops.nn.conv3d import _geometry as volume_geometry
from tapeflow.ops.shapes import conv_geometry

MODULES = (K._conv3d, K._pool3d, K._depthwise)


@pytest.fixture(params=[1, 3], ids=["1-thread", "3-threads"])
def threads(request):
    """The thread count, with even tiny work split over the threads."""
    old = K.get_num_threads()
    old_min = [module._set_parallel_min(0) for module in MODULES]
    K.set_num_threads(request.param)
    yield request.param
    K.set_num_threads(old)
    for module, n in zip(MODULES, old_min, strict=True):
        module._set_parallel_min(n)


def reference(op, *args, **attrs):
    return registry.get_op(op).reference(*args, **attrs)


def assert_close(got, want, dtype):
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-12 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max(initial=0))))


CONV3D = {  # x shape, filter shape, strides, padding, dilations
    "valid-s1": ((2, 4, 5, 3, 2), (2, 3, 2, 2, 3), (1, 1, 1), "VALID", (1, 1, 1)),
    "same-s212-d121": ((1, 5, 4, 6, 3), (3, 2, 3, 3, 2), (2, 1, 2), "SAME", (1, 2, 1)),
    "same-s3-d2": ((3, 7, 6, 5, 1), (2, 3, 2, 1, 4), (3, 2, 3), "SAME", (2, 1, 2)),
    "valid-pointwise": ((2, 3, 4, 5, 6), (1, 1, 1, 6, 5), (1, 1, 1), "VALID", (1, 1, 1)),
    "valid-1x1-s2": ((1, 5, 5, 5, 3), (1, 1, 1, 3, 2), (2, 2, 2), "VALID", (1, 1, 1)),
    "empty-batch": ((0, 4, 4, 4, 2), (2, 2, 2, 2, 3), (1, 1, 1), "SAME", (1, 1, 1)),
}


@pytest.mark.parametrize("scratch", [1, 1 << 30], ids=["row-chunks", "one-chunk"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", list(CONV3D))
def test_conv3d_kernels_match_reference(case, dtype, scratch, threads):
    xs, ws, strides, padding, dilations = CONV3D[case]
    rng = np.random.default_rng(len(case))
    x = rng.standard_normal(xs)
    w = rng.standard_normal(ws)
    outs, _ = volume_geometry("conv3d", xs[1:4], ws[:3], strides, padding, dilations)
    dy = rng.standard_normal((xs[0], *outs, ws[4]))
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    old = K._conv3d._set_col_buffer_bytes(scratch)
    try:
        y = B.conv3d(x.astype(dtype), w.astype(dtype), **attrs)
        dx = B.conv3d_input_grad(dy.astype(dtype), w.astype(dtype), xs[1:4], **attrs)
        dw = B.conv3d_filter_grad(x.astype(dtype), dy.astype(dtype), ws[:3], **attrs)
    finally:
        K._conv3d._set_col_buffer_bytes(old)
    assert_close(y, reference("conv3d", x, w, **attrs), dtype)
    assert_close(dx, reference("conv3d_input_grad", dy, w, input_size=xs[1:4], **attrs), dtype)
    assert_close(dw, reference("conv3d_filter_grad", x, dy, filter_size=ws[:3], **attrs), dtype)


POOL3D = {  # x shape, window, strides, padding
    "valid-k2-s2": ((2, 4, 5, 4, 3), (2, 2, 2), (2, 2, 2), "VALID"),
    "same-k323-s2": ((1, 5, 4, 5, 2), (3, 2, 3), (2, 2, 2), "SAME"),
    "same-k3-s1": ((2, 4, 3, 5, 1), (3, 3, 3), (1, 1, 1), "SAME"),
    "valid-k213-s312": ((3, 7, 5, 6, 4), (2, 1, 3), (3, 1, 2), "VALID"),
    "empty-batch": ((0, 4, 4, 4, 2), (2, 2, 2), (2, 2, 2), "SAME"),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", list(POOL3D))
def test_pool3d_kernels_match_reference(case, dtype, threads):
    xs, ksize, strides, padding = POOL3D[case]
    rng = np.random.default_rng(len(case))
    x = rng.permutation(np.arange(np.prod(xs), dtype=np.float64)).reshape(xs) / 7  # no ties
    x[..., 0] = np.round(x[..., 0])  # ... but ties along channel 0
    outs, _ = volume_geometry("pool", xs[1:4], ksize, strides, padding, (1, 1, 1))
    dy = rng.standard_normal((xs[0], *outs, xs[4]))
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    xc, dyc = x.astype(dtype), dy.astype(dtype)
    assert_close(B.max_pool3d(xc, **attrs), reference("max_pool3d", xc, **attrs).astype(dtype), dtype)
    assert_close(B.max_pool3d_grad(xc, dyc, **attrs), reference("max_pool3d_grad", xc, dy, **attrs), dtype)
    assert_close(B.avg_pool3d(xc, **attrs), reference("avg_pool3d", x, **attrs), dtype)
    assert_close(B.avg_pool3d_grad(dyc, xs[1:4], **attrs), reference("avg_pool3d_grad", dy, xs[1:4], **attrs), dtype)


def test_max_pool3d_routes_ties_to_the_first_max():
    x = np.ones((1, 2, 2, 2, 1))
    dx = K.max_pool3d_backward(x, np.ones((1, 1, 1, 1, 1)), (2, 2, 2), (2, 2, 2), (0, 0, 0))
    assert dx.ravel().tolist() == [1.0] + [0.0] * 7


DEPTHWISE = {  # x shape, filter shape (kh, kw, C, M), strides, padding, dilations
    "valid-s1-m1": ((2, 5, 6, 3), (3, 2, 3, 1), (1, 1), "VALID", (1, 1)),
    "same-s2-m2": ((1, 7, 6, 4), (3, 3, 4, 2), (2, 2), "SAME", (1, 1)),
    "same-s12-d21-m3": ((3, 6, 7, 2), (2, 3, 2, 3), (1, 2), "SAME", (2, 1)),
    "explicit-s21-d2": ((2, 6, 5, 5), (3, 2, 5, 1), (2, 1), ((1, 2), (0, 1)), (2, 2)),
    "valid-1x1-s3": ((1, 7, 7, 3), (1, 1, 3, 2), (3, 3), "VALID", (1, 1)),
    "many-channels": ((2, 9, 9, 40), (3, 3, 40, 1), (1, 1), "SAME", (1, 1)),
    "empty-batch": ((0, 5, 5, 3), (3, 3, 3, 2), (1, 1), "SAME", (1, 1)),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", list(DEPTHWISE))
def test_depthwise_kernels_match_reference(case, dtype, threads):
    xs, ws, strides, padding, dilations = DEPTHWISE[case]
    rng = np.random.default_rng(len(case))
    x = rng.standard_normal(xs)
    w = rng.standard_normal(ws)
    oh, ow, _, _ = conv_geometry("depthwise", xs[1], xs[2], ws[0], ws[1], strides, padding, dilations)
    dy = rng.standard_normal((xs[0], oh, ow, ws[2] * ws[3]))
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    y = B.depthwise_conv2d(x.astype(dtype), w.astype(dtype), **attrs)
    dx = B.depthwise_conv2d_input_grad(dy.astype(dtype), w.astype(dtype), xs[1:3], **attrs)
    dw = B.depthwise_conv2d_filter_grad(x.astype(dtype), dy.astype(dtype), ws[:2], **attrs)
    assert_close(y, reference("depthwise_conv2d", x, w, **attrs), dtype)
    assert_close(dx, reference("depthwise_conv2d_input_grad", dy, w, input_size=xs[1:3], **attrs), dtype)
    assert_close(dw, reference("depthwise_conv2d_filter_grad", x, dy, filter_size=ws[:2], **attrs), dtype)


def test_depthwise_matches_a_grouped_conv2d():
    """Channel c * M + m of the output is channel c of x convolved with filter [:, :, c, m]."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 6, 3))
    w = rng.standard_normal((3, 3, 3, 2))
    y = K.depthwise_conv2d_forward(x, w, 1, 1, 1, 1, 1, 1, 6, 6)
    for c in range(3):
        single = K.conv2d_forward(np.ascontiguousarray(x[..., c : c + 1]), np.ascontiguousarray(w[:, :, c : c + 1]),
                                  1, 1, 1, 1, 1, 1, 6, 6)  # fmt: skip
        np.testing.assert_allclose(y[..., c * 2 : c * 2 + 2], single, rtol=1e-12, atol=1e-12)


def test_kernels_reject_bad_arguments():
    x = np.ones((1, 4, 4, 4, 2))
    with pytest.raises(ValueError, match="conv3d_forward: input has 2 channels"):
        K.conv3d_forward(x, np.ones((2, 2, 2, 3, 1)), (1, 1, 1), (0, 0, 0), (1, 1, 1), (3, 3, 3))
    with pytest.raises(ValueError, match="strides and dilations must be >= 1"):
        K.conv3d_forward(x, np.ones((2, 2, 2, 2, 1)), (0, 1, 1), (0, 0, 0), (1, 1, 1), (3, 3, 3))
    with pytest.raises(ValueError, match="max_pool3d_forward: window"):
        K.max_pool3d_forward(x, (0, 2, 2), (1, 1, 1), (0, 0, 0), (3, 3, 3))
    with pytest.raises(ValueError, match="max_pool3d_backward: dy"):
        K.max_pool3d_backward(x, np.ones((1, 2, 2, 2, 3)), (2, 2, 2), (2, 2, 2), (0, 0, 0))
    with pytest.raises(ValueError, match="depthwise_conv2d_forward: input has 4 channels"):
        K.depthwise_conv2d_forward(np.ones((1, 4, 4, 4)), np.ones((2, 2, 3, 1)), 1, 1, 0, 0, 1, 1, 3, 3)
    with pytest.raises(ValueError, match="depthwise_conv2d_backward_input: dy has 5 channels"):
        K.depthwise_conv2d_backward_input(np.ones((1, 3, 3, 5)), np.ones((2, 2, 2, 2)), 4, 4, 1, 1, 0, 0, 1, 1)


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0
