"""`tp.nn.depthwise_conv2d` and the Keras `depthwise_conv` written on it, against Keras 3 and
against the grouped convolution they replace, with strides, dilations and both paddings."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.layers.conv import grouped_conv2d

keras = pytest.importorskip("keras")
KN = keras.ops.nn


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize(("strides", "dilation"), [(1, 1), (2, 1), (1, 2)])
def test_depthwise_conv_matches_keras(fmt, dims, padding, strides, dilation):
    spatial = (9, 8)[:dims]
    x = _x(2, *spatial, 3) if fmt == "channels_last" else _x(2, 3, *spatial)
    kernel = _x(*(3, 2)[:dims], 3, 2, seed=1)
    want = keras.ops.convert_to_numpy(KN.depthwise_conv(x, kernel, strides, padding, fmt, dilation))
    got = tp.nn.depthwise_conv(x, kernel, strides, padding, fmt, dilation).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("strides", "padding", "dilations"),
    [((1, 1), "SAME", (1, 1)), ((2, 1), "VALID", (1, 2)), ((1, 2), ((1, 0), (2, 1)), (2, 1))],
)
def test_depthwise_conv2d_and_its_gradients_equal_a_grouped_conv2d(strides, padding, dilations):
    x = tp.tensor(_x(2, 7, 6, 4))
    w = tp.tensor(_x(3, 2, 4, 3, seed=1))
    seed = tp.tensor(_x(*tp.nn.depthwise_conv2d(x, w, strides, padding, dilations).shape, seed=2))
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    results = []
    for conv in (
        lambda: tp.nn.depthwise_conv2d(x, w, **attrs),
        lambda: grouped_conv2d(x, tp.reshape(w, (3, 2, 1, 12)), 4, attrs),
    ):
        with tp.GradientTape() as tape:
            tape.watch([x, w])
            y = conv()
            loss = tp.sum(y * seed)
        results.append([y.numpy(), *(g.numpy() for g in tape.gradient(loss, [x, w]))])
    for ours, grouped in zip(*results, strict=True):
        np.testing.assert_allclose(ours, grouped, rtol=1e-10, atol=1e-10)


def test_depthwise_conv2d_rejects_bad_input():
    with pytest.raises(ValueError, match="depthwise_conv2d: input channels 3"):
        tp.nn.depthwise_conv2d(tp.ones((1, 4, 4, 3)), tp.ones((2, 2, 2, 1)))
    with pytest.raises(ValueError, match="depthwise_conv2d: filter must be 4-D"):
        tp.nn.depthwise_conv2d(tp.ones((1, 4, 4, 3)), tp.ones((2, 2, 3)))
    with pytest.raises(ValueError, match="depthwise_conv: the input channels"):
        tp.nn.depthwise_conv(tp.ones((1, 4, 4, 3)), tp.ones((2, 2, 2, 1)))
