"""`tp.ops.math` Keras names against `keras.ops.math` on the torch backend and NumPy in
float64, finite-difference gradients in float64, and frozen graphs against eager runs."""

import numpy as np
import pytest
import scipy.special
from keras_oracle import check_frozen_equals_eager, check_gradients

import tapeflow as tp
from tapeflow.ops import math

keras = pytest.importorskip("keras")
KM = pytest.importorskip("keras.src.ops.math")


def _x(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _k(x):
    if isinstance(x, tuple | list):
        return tuple(keras.ops.convert_to_numpy(t) for t in x)
    return keras.ops.convert_to_numpy(x)


def test_erf_family_and_logsumexp():
    x = np.linspace(-0.95, 0.95, 11)
    np.testing.assert_allclose(math.erfinv(x).numpy(), scipy.special.erfinv(x), rtol=1e-12)
    np.testing.assert_allclose(math.erfc(x).numpy(), scipy.special.erfc(x), rtol=1e-12)
    np.testing.assert_allclose(math.erfinv(x.astype("float32")).numpy(), _k(KM.erfinv(x.astype("float32"))), rtol=1e-5)
    check_gradients(math.erfinv, x * 0.9)
    check_gradients(math.erfc, x)
    y = _x(3, 4)
    np.testing.assert_allclose(math.logsumexp(y, axis=1).numpy(), _k(KM.logsumexp(y, axis=1)), rtol=1e-6)
    np.testing.assert_allclose(math.rsqrt(np.abs(y)).numpy(), _k(KM.rsqrt(np.abs(y))), rtol=1e-6)


@pytest.mark.parametrize("name", ["segment_sum", "segment_max", "segment_min", "segment_prod"])
def test_segments_match_keras(name):
    data = _x(6, 3)
    ids = np.array([0, 2, 0, 2, 3, -1])
    for num in (None, 5, 3):
        want = _k(getattr(KM, name)(data, ids, num_segments=num))
        np.testing.assert_allclose(getattr(math, name)(data, ids, num_segments=num).numpy(), want, rtol=1e-6)
    full = np.array([0, 2, 0, 2, 3, 1])
    check_gradients(lambda d: getattr(math, name)(d, tp.tensor(full), 4), data.astype("float64"))
    check_frozen_equals_eager(lambda d, i: getattr(math, name)(d, i, num_segments=4), data, ids)


def test_top_k_and_in_top_k_match_keras():
    x = _x(4, 7)
    for k in (1, 3, 7):
        values, indices = math.top_k(x, k)
        kv, ki = _k(KM.top_k(x, k))
        np.testing.assert_allclose(values.numpy(), kv)
        np.testing.assert_array_equal(indices.numpy(), ki)
        assert indices.dtype == tp.int32
    check_gradients(lambda t: math.top_k(t, 3)[0], x.astype("float64"))
    targets = np.array([0, 3, 6, 2])
    for k in (1, 2, 5):
        want = _k(KM.in_top_k(targets, x, k))
        np.testing.assert_array_equal(math.in_top_k(targets, x, k).numpy(), want)
    check_frozen_equals_eager(lambda t: math.top_k(t, 2)[0], x)


def test_logdet_matches_keras_and_numpy():
    a = _x(3, 4, 4, dtype="float64")
    spd = a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4)
    np.testing.assert_allclose(math.logdet(spd).numpy(), np.linalg.slogdet(spd)[1], rtol=1e-12)
    np.testing.assert_allclose(
        math.logdet(spd.astype("float32")).numpy(), _k(KM.logdet(spd.astype("float32"))), rtol=1e-5
    )
    check_gradients(math.logdet, spd)
    assert np.isnan(math.logdet(np.array([[0.0, 1.0], [1.0, 0.0]])).numpy())


def test_ffts_match_keras_numpy_and_finite_differences():
    re, im = _x(3, 8), _x(3, 8, seed=1)
    z = re.astype("float64") + 1j * im.astype("float64")
    for name, ref in (("fft", np.fft.fft(z)), ("fft2", np.fft.fft2(z)), ("ifft2", np.fft.ifft2(z))):
        real, imag = getattr(math, name)((re, im))
        np.testing.assert_allclose(real.numpy(), ref.real, atol=1e-4)
        np.testing.assert_allclose(imag.numpy(), ref.imag, atol=1e-4)
        kr, ki = _k(getattr(KM, name)((re, im)))
        np.testing.assert_allclose(real.numpy(), kr, atol=1e-4)
        np.testing.assert_allclose(imag.numpy(), ki, atol=1e-4)
        for part in (0, 1):
            check_gradients(lambda a, b, n=name, p=part: getattr(math, n)((a, b))[p], re[:2, :4], im[:2, :4])
    sig = _x(2, 10)
    for n in (None, 8, 13):
        real, imag = math.rfft(sig, n)
        kr, ki = _k(KM.rfft(sig, n))
        np.testing.assert_allclose(real.numpy(), kr, atol=1e-4)
        np.testing.assert_allclose(imag.numpy(), ki, atol=1e-4)
        for m in (None, 7, 10, 12):
            want = _k(KM.irfft((kr, ki), m))
            np.testing.assert_allclose(math.irfft((real, imag), m).numpy(), want, atol=1e-5)
    check_gradients(lambda a: math.rfft(a, 6)[1], sig[:1, :5])
    check_gradients(lambda a, b: math.irfft((a, b), 7), re[:1, :4], im[:1, :4])
    pair = math.view_as_complex(math.view_as_real((re, im)))
    np.testing.assert_array_equal(pair[0].numpy(), re)
    np.testing.assert_array_equal(pair[1].numpy(), im)
    check_frozen_equals_eager(lambda a, b: math.fft((a, b))[0], re, im)


def test_sequences_stft_and_istft_match_keras():
    x = _x(2, 40)
    for length, stride in ((8, 4), (5, 3), (10, 10)):
        want = _k(KM.extract_sequences(x, length, stride))
        np.testing.assert_array_equal(math.extract_sequences(x, length, stride).numpy(), want)
    for length, stride, n, window, center in (
        (8, 4, 8, "hann", True),
        (6, 3, 8, "hamming", True),
        (8, 4, 16, None, False),
        (8, 2, 8, "hann", False),
        (8, 4, 8, np.linspace(0.5, 1.0, 8).astype("float32"), True),
        (8, 4, 10, np.linspace(0.5, 1.0, 8).astype("float32"), False),
    ):
        real, imag = math.stft(x, length, stride, n, window, center)
        kr, ki = _k(KM.stft(x, length, stride, n, window, center))
        np.testing.assert_allclose(real.numpy(), kr, atol=1e-4)
        np.testing.assert_allclose(imag.numpy(), ki, atol=1e-4)
        for out_length in (None, 40):
            want = _k(KM.istft((kr, ki), length, stride, n, out_length, window, center))
            got = math.istft((real, imag), length, stride, n, out_length, window, center)
            np.testing.assert_allclose(got.numpy(), want, atol=1e-4, err_msg=f"{length} {stride} {n} {center}")
    check_gradients(lambda a: math.stft(a, 4, 2, 4)[0], x[:1, :9])
    check_gradients(lambda a: math.extract_sequences(a, 3, 2), x[:1, :7])


def test_cdist_matches_keras():
    a, b = _x(2, 4, 3), _x(2, 5, 3, seed=1)
    np.testing.assert_allclose(math.cdist(a, b).numpy(), _k(KM.cdist(a, b)), atol=1e-5)
    check_gradients(math.cdist, a[:1].astype("float64"), b[:1].astype("float64"))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="tuple of two"):
        math.fft(np.ones(3))
    with pytest.raises(ValueError, match="segment_ids"):
        math.segment_sum(np.ones((3, 2)), np.array([0, 1]))
    with pytest.raises(ValueError, match="k=5"):
        math.top_k(np.ones((2, 3)), 5)


def test_float64_keeps_its_dtype_like_keras():
    x = _x(3, 8, dtype="float64")
    for name, call in (
        ("top_k", lambda m: m.top_k(x, 3)[0]),
        ("fft", lambda m: m.fft((x, x))[1]),
        ("rfft", lambda m: m.rfft(x)[0]),
        ("segment_sum", lambda m: m.segment_sum(x, np.array([0, 1, 1]))),
        ("erfinv", lambda m: m.erfinv(np.tanh(x))),
    ):
        want = _k(call(KM))
        got = call(math)
        assert got.dtype.name == str(want.dtype), name
        # Keras's torch backend reduces segments in float32 even for float64 data.
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6 if name == "segment_sum" else 1e-10, err_msg=name)
