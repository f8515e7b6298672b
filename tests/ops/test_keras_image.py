"""`tp.ops.image` against Keras's `keras.ops.image` (torch backend), finite-difference
gradients in float64, and frozen graphs against eager runs."""

import numpy as np
import pytest
from keras_oracle import check_frozen_equals_eager, check_gradients

import tapeflow as tp
from tapeflow.ops import image

keras = pytest.importorskip("keras")
KI = keras.ops.image


def _images(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _k(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("size", [(3, 4), (14, 5), (7, 9), (11, 20)])
@pytest.mark.parametrize("antialias", [False, True])
def test_resize_matches_keras(interpolation, size, antialias):
    x = _images(2, 7, 9, 3)
    for crop in (False, True):
        want = _k(KI.resize(x, size, interpolation=interpolation, antialias=antialias, crop_to_aspect_ratio=crop))
        got = image.resize(x, size, interpolation=interpolation, antialias=antialias, crop_to_aspect_ratio=crop)
        np.testing.assert_allclose(got.numpy(), want, atol=2e-5)


def test_resize_pads_to_aspect_ratio_channels_first_and_integers_like_keras():
    x = _images(2, 7, 9, 3)
    want = _k(KI.resize(x, (5, 5), pad_to_aspect_ratio=True, fill_value=2.0))
    np.testing.assert_allclose(
        image.resize(x, (5, 5), pad_to_aspect_ratio=True, fill_value=2.0).numpy(), want, atol=2e-5
    )
    xc = np.transpose(x, (0, 3, 1, 2))
    want = _k(KI.resize(xc, (4, 6), data_format="channels_first"))
    np.testing.assert_allclose(image.resize(xc, (4, 6), data_format="channels_first").numpy(), want, atol=2e-5)
    xi = np.random.default_rng(1).integers(0, 255, size=(7, 9, 3)).astype("int32")
    want = _k(KI.resize(xi, (4, 5)))
    got = image.resize(xi, (4, 5))
    assert got.dtype == tp.int32
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("method", ["lanczos3", "lanczos5"])
def test_resize_lanczos_is_jax_scale_and_translate(method):
    # Keras's torch backend has no Lanczos resize; its JAX backend resizes with
    # scale_and_translate at scale out / in, which Keras's torch backend also has.
    x = _images(2, 7, 9, 3)
    for size, antialias in (((4, 5), True), ((4, 5), False), ((12, 15), True)):
        scale = (size[0] / 7, size[1] / 9)
        want = _k(KI.scale_and_translate(x, (2, *size, 3), scale, (0.0, 0.0), (1, 2), method, antialias))
        got = image.resize(x, size, interpolation=method, antialias=antialias)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_resize_gradient_and_frozen():
    x = _images(1, 4, 5, 2).astype("float64")
    for method in ("bilinear", "bicubic", "nearest"):
        check_gradients(lambda t, m=method: image.resize(t, (3, 7), interpolation=m), x)
    check_frozen_equals_eager(lambda t: image.resize(t, (3, 7)), _images(2, 4, 5, 2))


def test_resize_rejects_bad_arguments():
    with pytest.raises(ValueError, match="interpolation"):
        image.resize(_images(1, 4, 4, 1), (2, 2), interpolation="cubic")
    with pytest.raises(NotImplementedError, match="area"):
        image.resize(_images(1, 4, 4, 1), (2, 2), interpolation="area")
    with pytest.raises(ValueError, match="rank"):
        image.resize(_images(4, 4), (2, 2))
    with pytest.raises(ValueError, match="size"):
        image.resize(_images(1, 4, 4, 1), (2, 2, 2))


def _transforms(n, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.normal(size=(n, 8)).astype("float32") * 0.3 + np.array([1, 0, 0, 0, 1, 0, 0, 0], "float32")
    t[:, 2] *= 10
    t[:, 5] *= 10
    t[:, 6:] = 0
    return t


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("fill_mode", ["constant", "nearest", "wrap", "mirror", "reflect"])
def test_affine_transform_matches_keras(interpolation, fill_mode):
    x, t = _images(2, 7, 9, 3), _transforms(2)
    want = _k(KI.affine_transform(x, t, interpolation=interpolation, fill_mode=fill_mode, fill_value=0.5))
    got = image.affine_transform(x, t, interpolation=interpolation, fill_mode=fill_mode, fill_value=0.5)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_affine_transform_single_image_channels_first_and_projective_terms():
    x = np.transpose(_images(7, 9, 3), (2, 0, 1))
    t = np.array([1, 0.1, 2, 0.2, 1, -1, 0.01, 0.02], "float32")
    want = _k(KI.affine_transform(x, t, data_format="channels_first"))
    np.testing.assert_allclose(image.affine_transform(x, t, data_format="channels_first").numpy(), want, atol=1e-5)


def test_affine_transform_gradient_and_frozen():
    x, t = _images(2, 4, 5, 2).astype("float64"), _transforms(2).astype("float64")
    check_gradients(lambda a: image.affine_transform(a, tp.tensor(t)), x)
    offsets = np.array([[1.02, 0.1, 0.37, 0.05, 0.97, -0.31, 0.0, 0.0]])
    check_gradients(lambda a, b: image.affine_transform(a, b), x[:1], offsets, rtol=1e-4)
    coords = np.random.default_rng(1).uniform(-2, 7, size=(2, 3, 4))
    check_gradients(lambda a, c: image.map_coordinates(a, [c[0], c[1]], 1, "reflect"), x[0, :, :, 0], coords, rtol=1e-4)
    check_frozen_equals_eager(lambda a, b: image.affine_transform(a, b, fill_mode="reflect"), x, t)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("fill_mode", ["constant", "nearest", "wrap", "mirror", "reflect"])
def test_map_coordinates_matches_keras(order, fill_mode):
    x = _images(5, 6)
    coords = np.random.default_rng(2).uniform(-3, 9, size=(2, 4, 3)).astype("float32")
    want = _k(keras.ops.image.map_coordinates(x, coords, order, fill_mode=fill_mode, fill_value=0.25))
    got = image.map_coordinates(x, coords, order, fill_mode=fill_mode, fill_value=0.25)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
def test_pad_and_crop_match_keras(fmt):
    x = _images(2, 5, 6, 3) if fmt == "channels_last" else _images(2, 3, 5, 6)
    for kwargs in (
        dict(top_padding=1, left_padding=2, target_height=8, target_width=9),
        dict(bottom_padding=2, right_padding=0, top_padding=1, left_padding=3),
    ):
        np.testing.assert_array_equal(
            image.pad_images(x, data_format=fmt, **kwargs).numpy(), _k(KI.pad_images(x, data_format=fmt, **kwargs))
        )
    for kwargs in (
        dict(top_cropping=1, left_cropping=2, target_height=3, target_width=2),
        dict(bottom_cropping=1, right_cropping=2, top_cropping=0, left_cropping=1),
    ):
        np.testing.assert_array_equal(
            image.crop_images(x, data_format=fmt, **kwargs).numpy(), _k(KI.crop_images(x, data_format=fmt, **kwargs))
        )
    np.testing.assert_array_equal(
        image.crop_images(x[0], 1, 1, 2, 2, data_format=fmt).numpy(),
        _k(KI.crop_images(x[0], 1, 1, 2, 2, data_format=fmt)),
    )
    with pytest.raises(ValueError, match="top_padding"):
        image.pad_images(x, top_padding=1, bottom_padding=1, target_height=4, left_padding=0, right_padding=0)


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
def test_colour_conversions_match_keras(fmt):
    x = np.random.default_rng(3).uniform(0, 1, size=(2, 4, 5, 3)).astype("float32")
    x[0, 0, 0] = [0.5, 0.5, 0.5]
    x[0, 0, 1] = [0.0, 0.0, 0.0]
    if fmt == "channels_first":
        x = np.transpose(x, (0, 3, 1, 2))
    for name in ("rgb_to_grayscale", "rgb_to_hsv", "hsv_to_rgb"):
        want = _k(getattr(KI, name)(x, data_format=fmt))
        np.testing.assert_allclose(getattr(image, name)(x, data_format=fmt).numpy(), want, atol=1e-6, err_msg=name)
    hsv = image.rgb_to_hsv(x, data_format=fmt)
    np.testing.assert_allclose(image.hsv_to_rgb(hsv, data_format=fmt).numpy(), x, atol=1e-6)
    with pytest.raises(ValueError, match="float"):
        image.rgb_to_hsv(np.ones((2, 2, 3), "int32"))


def test_filters_and_patches_match_keras():
    # Keras's torch backend reads data_format=None as channels_first in these two: name it.
    x = _images(2, 7, 8, 3)
    for kernel_size, sigma in (((3, 3), (1.0, 1.0)), ((5, 5), (0.7, 1.3))):
        want = _k(KI.gaussian_blur(x, kernel_size, sigma, data_format="channels_last"))
        np.testing.assert_allclose(image.gaussian_blur(x, kernel_size, sigma).numpy(), want, atol=1e-5)
    np.testing.assert_allclose(
        image.sobel_edges(x).numpy(), _k(KI.sobel_edges(x, data_format="channels_last")), atol=1e-5
    )
    xc = np.transpose(x, (0, 3, 1, 2))
    want = _k(KI.sobel_edges(xc, data_format="channels_first"))
    np.testing.assert_allclose(image.sobel_edges(xc, data_format="channels_first").numpy(), want, atol=1e-5)
    for kwargs in (
        dict(size=2),
        dict(size=(3, 2), strides=(1, 2)),
        dict(size=3, strides=1, padding="same"),
        dict(size=2, dilation_rate=2, strides=1),
    ):
        want = _k(KI.extract_patches(x, **kwargs))
        np.testing.assert_allclose(image.extract_patches(x, **kwargs).numpy(), want, atol=1e-6, err_msg=str(kwargs))


def test_colour_and_filter_gradients():
    x = np.random.default_rng(4).uniform(0.05, 0.95, size=(1, 3, 3, 3))
    for fn in (
        image.rgb_to_grayscale,
        image.hsv_to_rgb,
        image.sobel_edges,
        image.gaussian_blur,
        lambda t: image.extract_patches(t, 2, strides=1),
    ):
        check_gradients(fn, x)
    check_gradients(image.rgb_to_hsv, x, rtol=1e-4)
    check_frozen_equals_eager(image.rgb_to_hsv, x.astype("float32"))


def test_perspective_ssim_and_3d_patches_match_keras():
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(2, 9, 10, 3)).astype("float32")
    start = np.array([[0, 0], [9, 0], [0, 8], [9, 8]], "float32")
    end = start + rng.uniform(-1.5, 1.5, size=(4, 2)).astype("float32")
    for interpolation in ("bilinear", "nearest"):
        want = _k(KI.perspective_transform(x, start, end, interpolation=interpolation, fill_value=0.3))
        got = image.perspective_transform(x, start, end, interpolation=interpolation, fill_value=0.3)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-4)
    y = np.clip(x + rng.normal(size=x.shape).astype("float32") * 0.1, 0, 1)
    np.testing.assert_allclose(image.ssim(x, y, filter_size=5).numpy(), _k(KI.ssim(x, y, filter_size=5)), atol=1e-5)
    want = _k(KI.ssim(x[0], y[0], filter_size=7))
    np.testing.assert_allclose(image.ssim(x[0], y[0], filter_size=7).numpy(), want, atol=1e-5)
    v = rng.normal(size=(2, 4, 6, 5, 3)).astype("float32")
    for kwargs in (dict(size=2), dict(size=(2, 3, 2), strides=1), dict(size=3, strides=2, padding="same")):
        want = _k(KI.extract_patches_3d(v, **kwargs))
        np.testing.assert_allclose(image.extract_patches_3d(v, **kwargs).numpy(), want, atol=1e-6)
    check_gradients(lambda t: image.perspective_transform(t, start, end), x[:1, :4, :4, :1].astype("float64"))
    check_gradients(lambda a, b: image.ssim(a, b, filter_size=3), x[:1, :4, :4, :1], y[:1, :4, :4, :1], rtol=1e-4)


def test_elastic_transform_is_seeded_and_keeps_shape():
    x = _images(2, 8, 9, 3)
    a = image.elastic_transform(x, seed=3)
    np.testing.assert_array_equal(a.numpy(), image.elastic_transform(x, seed=3).numpy())
    assert a.shape == x.shape
    np.testing.assert_allclose(image.elastic_transform(x, alpha=0.0, seed=3).numpy(), x, atol=1e-6)


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos3", "lanczos5"])
@pytest.mark.parametrize("antialias", [True, False])
def test_scale_and_translate_matches_keras(method, antialias):
    x = _images(2, 7, 9, 3)
    for shape, scale, translation in (
        ((2, 4, 5, 3), (0.6, 0.5), (0.3, -0.2)),
        ((2, 12, 14, 3), (1.7, 1.5), (0.0, 1.0)),
    ):
        want = _k(KI.scale_and_translate(x, shape, scale, translation, (1, 2), method, antialias))
        got = image.scale_and_translate(x, shape, scale, translation, (1, 2), method, antialias)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    check_gradients(
        lambda t: image.scale_and_translate(t, (1, 3, 2, 1), (0.7, 0.4), (0.1, 0.0), (1, 2), method), x[:1, :4, :4, :1]
    )


def test_float64_images_keep_their_dtype_like_keras():
    x = _images(2, 6, 7, 3).astype("float64")
    t = _transforms(2).astype("float64")
    for name, call in (
        ("resize", lambda m: m.resize(x, (4, 9))),
        ("affine_transform", lambda m: m.affine_transform(x, t)),
        ("rgb_to_grayscale", lambda m: m.rgb_to_grayscale(x)),
        ("gaussian_blur", lambda m: m.gaussian_blur(x, data_format="channels_last")),
    ):
        want = _k(call(KI))
        got = call(image)
        assert got.dtype.name == str(want.dtype), name
        np.testing.assert_allclose(got.numpy(), want, atol=1e-10, err_msg=name)
