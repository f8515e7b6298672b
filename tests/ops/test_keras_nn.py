"""`tp.ops.nn` (= `tp.nn`) Keras names against `keras.ops.nn` on the torch backend, a
NumPy float64 oracle for a few, finite-difference gradients in float64 and frozen graphs."""

import numpy as np
import pytest
from keras_oracle import check_frozen_equals_eager, check_gradients

import tapeflow as tp
from tapeflow.ops import nn

keras = pytest.importorskip("keras")
KN = keras.ops.nn


def _x(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _k(x):
    return keras.ops.convert_to_numpy(x)


ACTIVATIONS = [
    ("relu6", {}),
    ("sparse_sigmoid", {}),
    ("softsign", {}),
    ("soft_shrink", {"threshold": 0.3}),
    ("sparse_plus", {}),
    ("silu", {}),
    ("swish", {}),
    ("squareplus", {"b": 2}),
    ("log_sigmoid", {}),
    ("hard_sigmoid", {}),
    ("hard_silu", {}),
    ("hard_swish", {}),
    ("selu", {}),
    ("celu", {"alpha": 0.7}),
    ("glu", {"axis": -1}),
    ("tanh_shrink", {}),
    ("hard_tanh", {}),
    ("hard_shrink", {"threshold": 0.4}),
    ("threshold", {"threshold": 0.1, "default_value": -2.0}),
    ("sparsemax", {"axis": -1}),
    ("sparsemax", {"axis": 0}),
    ("softmax", {"axis": (0, 1)}),
    ("log_softmax", {"axis": 0}),
    ("gelu", {"approximate": True}),
    ("gelu", {"approximate": False}),
    ("leaky_relu", {"negative_slope": 0.3}),
    ("elu", {"alpha": 0.5}),
    ("softplus", {}),
    ("relu", {}),
    ("sigmoid", {}),
]


@pytest.mark.parametrize("name, kwargs", ACTIVATIONS)
def test_activations_match_keras_and_finite_differences(name, kwargs):
    x = _x(4, 6) * 2
    want = _k(getattr(KN, name)(x, **kwargs))
    np.testing.assert_allclose(getattr(nn, name)(x, **kwargs).numpy(), want, rtol=1e-5, atol=1e-6)
    x64 = _x(3, 4, seed=1).astype("float64") * 2
    check_gradients(lambda t: getattr(nn, name)(t, **kwargs), x64, rtol=1e-4)


def test_tapeflow_spellings_still_work():
    x = _x(3, 4)
    np.testing.assert_allclose(nn.leaky_relu(x, 0.1).numpy(), nn.leaky_relu(x, alpha=0.1).numpy())
    np.testing.assert_allclose(nn.softmax(logits=x).numpy(), nn.softmax(x).numpy())
    np.testing.assert_allclose(nn.log_softmax(x, 0).numpy(), _k(KN.log_softmax(x, axis=0)), atol=1e-6)


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_conv_and_pools_match_keras(fmt, dims, padding):
    spatial = (7, 6, 5)[:dims]
    shape = (2, *spatial, 4) if fmt == "channels_last" else (2, 4, *spatial)
    x = _x(*shape)
    kernel = _x(*(3, 2, 2)[:dims], 4, 5, seed=1)
    for strides, dilation in ((1, 1), (2, 1), (1, 2)):
        if strides > 1 and dilation > 1:
            continue
        want = _k(KN.conv(x, kernel, strides, padding, fmt, dilation))
        got = nn.conv(x, kernel, strides, padding, fmt, dilation)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-4, err_msg=f"conv {strides} {dilation}")
    grouped = _x(*(3, 2, 2)[:dims], 2, 6, seed=2)
    np.testing.assert_allclose(
        nn.conv(x, grouped, 1, padding, fmt).numpy(), _k(KN.conv(x, grouped, 1, padding, fmt)), atol=1e-4
    )
    depthwise = _x(*(3, 2, 2)[:dims], 4, 2, seed=3)
    if dims < 3:
        want = _k(KN.depthwise_conv(x, depthwise, 1, padding, fmt))
        np.testing.assert_allclose(nn.depthwise_conv(x, depthwise, 1, padding, fmt).numpy(), want, atol=1e-4)
        pointwise = _x(*(1, 1)[:dims], 8, 3, seed=4)
        want = _k(KN.separable_conv(x, depthwise, pointwise, 1, padding, fmt))
        np.testing.assert_allclose(nn.separable_conv(x, depthwise, pointwise, 1, padding, fmt).numpy(), want, atol=1e-4)
    for pool in ("max_pool", "average_pool"):
        for size, strides in ((2, None), (3, 2), (2, 1)):
            want = _k(getattr(KN, pool)(x, size, strides, padding, fmt))
            got = getattr(nn, pool)(x, size, strides, padding, fmt)
            np.testing.assert_allclose(got.numpy(), want, atol=1e-5, err_msg=f"{pool} {size} {strides}")


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_conv_transpose_matches_keras(dims, padding):
    x = _x(2, *(4, 3, 3)[:dims], 3)
    kernel = _x(*(3, 2, 3)[:dims], 5, 3, seed=1)
    for strides, output_padding in ((1, None), (2, None), (2, 1)):
        if dims == 3 and output_padding is not None:
            continue
        want = _k(KN.conv_transpose(x, kernel, strides, padding, output_padding))
        got = nn.conv_transpose(x, kernel, strides, padding, output_padding)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-4, err_msg=f"{strides} {output_padding}")


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
def test_adaptive_pools_and_space_depth_match_keras(fmt):
    x = _x(2, 7, 5, 3) if fmt == "channels_last" else _x(2, 3, 7, 5)
    for name in ("adaptive_max_pool", "adaptive_average_pool"):
        for size in ((3, 2), (7, 5), (4, 4)):
            want = _k(getattr(KN, name)(x, size, data_format=fmt))
            np.testing.assert_allclose(getattr(nn, name)(x, size, data_format=fmt).numpy(), want, atol=1e-5)
    y = _x(2, 4, 6, 8) if fmt == "channels_last" else _x(2, 8, 4, 6)
    np.testing.assert_array_equal(nn.depth_to_space(y, 2, fmt).numpy(), _k(KN.depth_to_space(y, 2, fmt)))
    np.testing.assert_array_equal(nn.space_to_depth(y, 2, fmt).numpy(), _k(KN.space_to_depth(y, 2, fmt)))


def test_unfold_and_fold_match_keras():
    x = _x(2, 3, 6, 5)
    for kwargs in (dict(kernel_size=2), dict(kernel_size=(3, 2), stride=2, padding=1), dict(kernel_size=2, dilation=2)):
        want = _k(KN.unfold(keras.ops.convert_to_tensor(x), **kwargs))
        cols = nn.unfold(x, **kwargs)
        np.testing.assert_allclose(cols.numpy(), want, atol=1e-6)
        np.testing.assert_allclose(
            nn.fold(cols, (6, 5), **kwargs).numpy(),
            _k(KN.fold(keras.ops.convert_to_tensor(want), (6, 5), **kwargs)),
            atol=1e-5,
        )


def test_categorical_ops_and_losses_match_keras():
    idx = np.array([[0, 2, -1], [3, 1, 1]])
    for axis in (-1, 0, 1):
        np.testing.assert_array_equal(nn.one_hot(idx, 4, axis=axis).numpy(), _k(KN.one_hot(idx, 4, axis=axis)))
    np.testing.assert_array_equal(nn.multi_hot(idx, 4).numpy(), _k(KN.multi_hot(idx, 4)))
    np.testing.assert_array_equal(nn.multi_hot(idx[0], 4).numpy(), _k(KN.multi_hot(idx[0], 4)))
    p = np.random.default_rng(0).uniform(0.01, 0.99, size=(4, 5)).astype("float32")
    t = (np.random.default_rng(1).uniform(size=(4, 5)) > 0.5).astype("float32")
    logits = _x(4, 5)
    for from_logits, out in ((False, p), (True, logits)):
        np.testing.assert_allclose(
            nn.binary_crossentropy(t, out, from_logits).numpy(),
            _k(KN.binary_crossentropy(t, out, from_logits)),
            rtol=1e-5,
            atol=1e-6,
        )
        for axis in (-1, 0):
            want = _k(KN.categorical_crossentropy(t, out, from_logits, axis))
            got = nn.categorical_crossentropy(t, out, from_logits, axis)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
        labels = np.array([0, 4, 2, 1])
        want = _k(KN.sparse_categorical_crossentropy(labels, out, from_logits))
        np.testing.assert_allclose(
            nn.sparse_categorical_crossentropy(labels, out, from_logits).numpy(), want, rtol=1e-5
        )
    check_gradients(lambda a: nn.categorical_crossentropy(tp.tensor(t.astype("float64")), a, True), logits)
    check_gradients(lambda a: nn.binary_crossentropy(tp.tensor(t.astype("float64")), a), p)


def test_normalizations_and_psnr_match_keras():
    x = _x(3, 4, 5)
    for order in (1, 2, 3):
        np.testing.assert_allclose(nn.normalize(x, -1, order).numpy(), _k(KN.normalize(x, -1, order)), rtol=1e-5)
    mean, var = _x(5, seed=1), np.abs(_x(5, seed=2)) + 0.1
    off, scale = _x(5, seed=3), _x(5, seed=4)
    want = _k(KN.batch_normalization(x, mean, var, -1, off, scale, 1e-3))
    np.testing.assert_allclose(nn.batch_normalization(x, mean, var, -1, off, scale).numpy(), want, rtol=1e-5, atol=1e-5)
    want = _k(KN.batch_normalization(x, mean[:4], var[:4], 1))
    np.testing.assert_allclose(nn.batch_normalization(x, mean[:4], var[:4], 1).numpy(), want, rtol=1e-5, atol=1e-5)
    want = _k(KN.layer_normalization(x, scale, off, epsilon=1e-5))
    np.testing.assert_allclose(nn.layer_normalization(x, scale, off, epsilon=1e-5).numpy(), want, atol=1e-5)
    want = _k(KN.layer_normalization(x, scale, off, rms_scaling=True))
    np.testing.assert_allclose(nn.layer_normalization(x, scale, off, rms_scaling=True).numpy(), want, atol=1e-5)
    gamma = _x(4, 5, seed=6)
    want = _k(KN.layer_normalization(x, gamma, gamma, axis=(1, 2)))
    np.testing.assert_allclose(nn.layer_normalization(x, gamma, gamma, axis=(1, 2)).numpy(), want, atol=1e-5)
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    want = (x - mu) / np.sqrt(var + 1e-7) * gamma[:, :1]
    np.testing.assert_allclose(nn.layer_normalization(x, gamma[:, 0], None, axis=1).numpy(), want, atol=1e-5)
    want = _k(KN.rms_normalization(x, scale, epsilon=1e-5))
    np.testing.assert_allclose(nn.rms_normalization(x, scale, epsilon=1e-5).numpy(), want, atol=1e-5)
    y = x + 0.1 * _x(3, 4, 5, seed=9)
    np.testing.assert_allclose(float(nn.psnr(x, y, 2.0)), float(_k(KN.psnr(x, y, 2.0))), rtol=1e-5)
    check_gradients(lambda a: nn.layer_normalization(a, epsilon=1e-5), x[:2, :2].astype("float64"))
    check_gradients(lambda a: nn.normalize(a), x[:2, :2].astype("float64"))


@pytest.mark.parametrize("case", ["plain", "causal", "mask", "bias", "gqa"])
def test_dot_product_attention_matches_keras(case):
    q, k, v = _x(2, 3, 4, 8), _x(2, 5, 4, 8, seed=1), _x(2, 5, 4, 8, seed=2)
    kwargs = {}
    if case == "causal":
        kwargs["is_causal"] = True
        k, v = k[:, :3], v[:, :3]
    elif case == "mask":
        kwargs["mask"] = np.random.default_rng(0).uniform(size=(2, 4, 3, 5)) > 0.3
    elif case == "bias":
        kwargs["bias"] = _x(2, 4, 3, 5, seed=5)
    elif case == "gqa":
        k, v = k[:, :, :2], v[:, :, :2]
    want = _k(KN.dot_product_attention(q, k, v, scale=0.3, **kwargs))
    np.testing.assert_allclose(nn.dot_product_attention(q, k, v, scale=0.3, **kwargs).numpy(), want, atol=1e-5)


def test_ctc_loss_and_greedy_decode_match_keras():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 8, 5)).astype("float32")
    target = np.array([[1, 2, 2, 0], [3, 4, 0, 0], [1, 1, 1, 1]])
    target_length, output_length = np.array([3, 2, 1]), np.array([8, 6, 7])
    want = _k(KN.ctc_loss(target, logits, target_length, output_length))
    got = nn.ctc_loss(target, logits, target_length, output_length)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4)
    want = _k(KN.ctc_loss(target, logits, target_length, output_length, mask_index=4))
    got = nn.ctc_loss(np.where(target == 4, 0, target), logits, target_length, output_length, mask_index=4)
    check_gradients(
        lambda a: nn.ctc_loss(target, a, target_length, output_length), logits[:, :5].astype("float64"), rtol=1e-4
    )
    for merge in (True, False):
        for mask_index in (0, 2):
            kd, ks = KN.ctc_decode(logits, output_length, merge_repeated=merge, mask_index=mask_index)
            td, ts = nn.ctc_decode(logits, output_length, merge_repeated=merge, mask_index=mask_index)
            np.testing.assert_array_equal(td.numpy(), _k(kd))
            np.testing.assert_allclose(ts.numpy(), _k(ks), rtol=1e-5)
    for beam_width, top_paths, mask_index in ((5, 2, 0), (100, 3, 4), (2, 1, 0)):
        kwargs = dict(strategy="beam_search", beam_width=beam_width, top_paths=top_paths, mask_index=mask_index)
        kd, ks = KN.ctc_decode(logits * 2, output_length, **kwargs)
        td, ts = nn.ctc_decode(logits * 2, output_length, **kwargs)
        np.testing.assert_array_equal(td.numpy(), _k(kd))
        np.testing.assert_allclose(ts.numpy(), _k(ks), rtol=1e-5)
    with pytest.raises(ValueError, match="strategy"):
        nn.ctc_decode(logits, output_length, strategy="best")


def test_frozen_equals_eager_and_errors():
    check_frozen_equals_eager(lambda a: nn.conv(a, tp.ones((3, 4, 2)), padding="same"), _x(2, 6, 4))
    check_frozen_equals_eager(lambda a: nn.sparsemax(a), _x(3, 5))
    check_frozen_equals_eager(lambda a: nn.average_pool(a, 3, 2, "same"), _x(1, 6, 6, 2))
    with pytest.raises(ValueError, match="padding"):
        nn.conv(_x(1, 4, 4, 1), _x(2, 2, 1, 1), padding="causal")
    with pytest.raises(ValueError, match="rank"):
        nn.max_pool(_x(4, 4), 2)
    magnitude, angle = np.abs(_x(5)), _x(5, seed=1)
    want = _k(KN.polar(magnitude, angle))
    real, imag = nn.polar(magnitude, angle)
    np.testing.assert_allclose(real.numpy(), want.real, atol=1e-6)
    np.testing.assert_allclose(imag.numpy(), want.imag, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_representative_dtypes_match_keras(dtype):
    x = (_x(2, 6, 4) * 3).astype(dtype)
    kernel = _x(3, 4, 2, seed=1).astype(dtype)
    cases = [
        ("silu", lambda m: m.silu(x)),
        ("relu6", lambda m: m.relu6(x)),
        ("hard_sigmoid", lambda m: m.hard_sigmoid(x)),
        ("softsign", lambda m: m.softsign(x)),
        ("log_softmax", lambda m: m.log_softmax(x, axis=1)),
        ("conv", lambda m: m.conv(x, kernel, padding="same")),
        ("max_pool", lambda m: m.max_pool(x, 2)),
        ("average_pool", lambda m: m.average_pool(x, 2)),
    ]
    tol = 2e-2 if dtype == "float16" else 1e-6
    for name, call in cases:
        want = _k(call(KN))
        got = call(nn)
        np.testing.assert_allclose(
            got.numpy().astype("float64"), want.astype("float64"), rtol=tol, atol=tol, err_msg=name
        )
        assert got.dtype.name == str(want.dtype), name
