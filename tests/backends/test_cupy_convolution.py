"""The GPU backend's window ops (`backends/window_ops.py`: im2col as a strided view, col2im
as one convolution of the spread-out gradient, one scatter-add for a max pool's gradient):
2-D and 3-D convolutions, depthwise convolutions and poolings with their gradients against
the CPU references, on StrictArrays, over strides, dilations and paddings."""

import itertools

import numpy as np
import pytest
from strict_arrays import unwrap, use_strict_arrays

from tapeflow.backends import cupy_backend, window_ops
from tapeflow.backends.geometry import conv_geometry
from tapeflow.ops.registry import get_op

GEOMETRIES = [
    (h, w, kh, kw, strides, dilations, padding)
    for h, w, kh, kw, strides, dilations, padding in itertools.product(
        [5, 8], [7], [1, 3], [2, 3], [(1, 1), (2, 3)], [(1, 1), (2, 1)], ["VALID", "SAME", ((1, 0), (2, 1))]
    )
]


@pytest.mark.parametrize("h, w, kh, kw, strides, dilations, padding", GEOMETRIES)
def test_convolution_gradients_match_the_references(monkeypatch, h, w, kh, kw, strides, dilations, padding):
    oh, ow, _, _ = conv_geometry("conv2d", h, w, kh, kw, strides, padding, dilations)
    if oh <= 0 or ow <= 0:
        pytest.skip("the filter does not fit")
    rng = np.random.default_rng(0)
    x, dy, filters = rng.normal(size=(2, h, w, 3)), rng.normal(size=(2, oh, ow, 4)), rng.normal(size=(kh, kw, 3, 4))
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    want_filter = get_op("conv2d_filter_grad").reference(x, dy, filter_size=(kh, kw), **attrs)
    want_input = get_op("conv2d_input_grad").reference(dy, filters, input_size=(h, w), **attrs)
    use_strict_arrays(cupy_backend, monkeypatch)
    on = cupy_backend.from_host
    got_filter = cupy_backend.conv2d_filter_grad(on(x), on(dy), (kh, kw), strides, padding, dilations)
    got_input = cupy_backend.conv2d_input_grad(on(dy), on(filters), (h, w), strides, padding, dilations)
    np.testing.assert_allclose(unwrap(got_filter), want_filter, atol=1e-10)
    np.testing.assert_allclose(unwrap(got_input), want_input, atol=1e-10)


POOLS = list(itertools.product([4, 7], [6], [2, 3], [1, 3], [(1, 1), (2, 3)], ["VALID", "SAME"]))


@pytest.mark.parametrize("h, w, kh, kw, strides, padding", POOLS)
def test_pooling_and_its_gradients_match_the_references(monkeypatch, h, w, kh, kw, strides, padding):
    oh, ow, _, _ = conv_geometry("max_pool2d", h, w, kh, kw, strides, padding, (1, 1))
    rng = np.random.default_rng(1)
    x = np.round(rng.normal(size=(2, h, w, 3)), 1)  # rounded: windows with tied maxima
    dy, g = rng.normal(size=(2, oh, ow, 3)), rng.normal(size=x.shape)
    attrs = {"ksize": (kh, kw), "strides": strides, "padding": padding}
    want = {
        "max_pool2d": get_op("max_pool2d").reference(x, **attrs),
        "max_pool2d_grad": get_op("max_pool2d_grad").reference(x, dy, **attrs),
        "max_pool2d_grad_grad": get_op("max_pool2d_grad_grad").reference(x, g, **attrs),
        "avg_pool2d": get_op("avg_pool2d").reference(x, **attrs),
        "avg_pool2d_grad": get_op("avg_pool2d_grad").reference(dy, input_size=(h, w), **attrs),
    }
    use_strict_arrays(cupy_backend, monkeypatch)
    on = cupy_backend.from_host
    got = {
        "max_pool2d": cupy_backend.max_pool2d(on(x), **attrs),
        "max_pool2d_grad": cupy_backend.max_pool2d_grad(on(x), on(dy), **attrs),
        "max_pool2d_grad_grad": cupy_backend.max_pool2d_grad_grad(on(x), on(g), **attrs),
        "avg_pool2d": cupy_backend.avg_pool2d(on(x), **attrs),
        "avg_pool2d_grad": cupy_backend.avg_pool2d_grad(on(dy), (h, w), **attrs),
    }
    for name, value in want.items():
        np.testing.assert_allclose(unwrap(got[name]), value, atol=1e-12, err_msg=name)


VOLUMES = list(
    itertools.product([(1, 2, 2), (2, 3, 1)], [(1, 1, 1), (2, 1, 2)], [(1, 1, 1), (1, 2, 1)], ["VALID", "SAME"])
)


@pytest.mark.parametrize("ksize, strides, dilations, padding", VOLUMES)
def test_3d_convolution_and_pooling_match_the_references(monkeypatch, ksize, strides, dilations, padding):
    sizes = (4, 5, 6)
    outs, _ = window_ops.geometry("conv3d", sizes, ksize, strides, padding, dilations)
    pool_outs, _ = window_ops.geometry("max_pool3d", sizes, ksize, strides, padding, (1, 1, 1))
    rng = np.random.default_rng(2)
    x = np.round(rng.normal(size=(2, *sizes, 3)), 1)
    filters, dy = rng.normal(size=(*ksize, 3, 4)), rng.normal(size=(2, *outs, 4))
    pool_dy, g = rng.normal(size=(2, *pool_outs, 3)), rng.normal(size=x.shape)
    conv = {"strides": strides, "padding": padding, "dilations": dilations}
    pool = {"ksize": ksize, "strides": strides, "padding": padding}
    ref = {name: get_op(name).reference for name in ("conv3d", "conv3d_filter_grad", "conv3d_input_grad")}
    want = [
        ref["conv3d"](x, filters, **conv),
        ref["conv3d_filter_grad"](x, dy, filter_size=ksize, **conv),
        ref["conv3d_input_grad"](dy, filters, input_size=sizes, **conv),
        get_op("max_pool3d").reference(x, **pool),
        get_op("max_pool3d_grad").reference(x, pool_dy, **pool),
        get_op("max_pool3d_grad_grad").reference(x, g, **pool),
        get_op("avg_pool3d").reference(x, **pool),
        get_op("avg_pool3d_grad").reference(pool_dy, input_size=sizes, **pool),
    ]
    use_strict_arrays(cupy_backend, monkeypatch)
    on, b = cupy_backend.from_host, cupy_backend
    got = [
        b.conv3d(on(x), on(filters), **conv),
        b.conv3d_filter_grad(on(x), on(dy), ksize, **conv),
        b.conv3d_input_grad(on(dy), on(filters), sizes, **conv),
        b.max_pool3d(on(x), **pool),
        b.max_pool3d_grad(on(x), on(pool_dy), **pool),
        b.max_pool3d_grad_grad(on(x), on(g), **pool),
        b.avg_pool3d(on(x), **pool),
        b.avg_pool3d_grad(on(pool_dy), sizes, **pool),
    ]
    for k, (value, expected) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(unwrap(value), expected, atol=1e-10, err_msg=f"result {k}")


@pytest.mark.parametrize("h, w, kh, kw, strides, dilations, padding", GEOMETRIES[::3])
def test_depthwise_convolution_matches_the_references(monkeypatch, h, w, kh, kw, strides, dilations, padding):
    oh, ow, _, _ = conv_geometry("depthwise_conv2d", h, w, kh, kw, strides, padding, dilations)
    if oh <= 0 or ow <= 0:
        pytest.skip("the filter does not fit")
    rng = np.random.default_rng(3)
    x, filters, dy = rng.normal(size=(2, h, w, 3)), rng.normal(size=(kh, kw, 3, 2)), rng.normal(size=(2, oh, ow, 6))
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    want = [
        get_op("depthwise_conv2d").reference(x, filters, **attrs),
        get_op("depthwise_conv2d_filter_grad").reference(x, dy, filter_size=(kh, kw), **attrs),
        get_op("depthwise_conv2d_input_grad").reference(dy, filters, input_size=(h, w), **attrs),
    ]
    use_strict_arrays(cupy_backend, monkeypatch)
    on, b = cupy_backend.from_host, cupy_backend
    got = [
        b.depthwise_conv2d(on(x), on(filters), **attrs),
        b.depthwise_conv2d_filter_grad(on(x), on(dy), (kh, kw), **attrs),
        b.depthwise_conv2d_input_grad(on(dy), on(filters), (h, w), **attrs),
    ]
    for k, (value, expected) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(unwrap(value), expected, atol=1e-10, err_msg=f"result {k}")
