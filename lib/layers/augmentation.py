"""Image augmentation layers: random flips, rotations, zooms, translations, shears,
perspective warps, crops and erasing; random contrast, brightness, saturation, hue,
grayscale, inversion, solarization, posterization, sharpness, blur and colour
degeneration (and RandomColorJitter, four of them in turn); AutoContrast, Equalization,
and Pipeline (layers applied in turn); MixUp and CutMix (images blended across the
batch), RandAugment and AugMix (random chains of the above), RandomElasticTransform, and
MaxNumBoundingBoxes.

They act only when called with `training=True` (Keras also applies them when a layer is
called directly without `training`); at inference they pass images through (RandomCrop
resizes them to its size instead; AutoContrast and MaxNumBoundingBoxes always act). Each
layer draws from its own random stream (`seed`). Inputs are image tensors; MixUp and
CutMix also take Keras's dict {"images", "labels"}, and MaxNumBoundingBoxes the dict
{"images", "bounding_boxes": {"boxes", "labels"}} (other layers take no dicts).

Each layer splits its work as Keras does: `get_random_transformation(images)` draws the
random parameters and `transform_images(images, transformation)` applies them.

>>> import tapeflow as tp
>>> flip = tp.layers.RandomFlip("horizontal", seed=0)
>>> x = tp.reshape(tp.arange(4.0), (1, 2, 2, 1))
>>> flip(x)[0, :, :, 0].numpy().tolist()
[[0.0, 1.0], [2.0, 3.0]]
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tapeflow.layers.base import Layer, deserialize, serialize, snake_case
from tapeflow.layers.preprocessing import _data_format, _float_images, _image_size_axes, _positive_int
from tapeflow.layers.regularization import layer_generator
from tapeflow.ops import image as image_ops
from tapeflow.ops import nn, random
from tapeflow.ops.array import concat, gather, pad, reshape, scatter_add
from tapeflow.ops.array_keras import argsort
from tapeflow.ops.core import cast, transpose
from tapeflow.ops.creation import constant
from tapeflow.ops.math import clip, cos, exp, logical_and, matmul, sin, sqrt, square, where
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import mean
from tapeflow.ops.reduce import min as reduce_min
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor

_FILL_MODES = ("reflect", "wrap", "constant", "nearest")
_INTERPOLATIONS = ("nearest", "bilinear")


def _uniform(layer, shape, low: float, high: float, dtype):
    """Uniform draws in [low, high) from the layer's stream (exactly `low` when low == high)."""
    return random.uniform(shape, 0.0, 1.0, dtype, generator=layer.generator) * (high - low) + low


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _factor_pair(layer: str, label: str, factor, bounds=(-1.0, 1.0)) -> tuple:
    """(lower, upper) from a number f ((-f, f), floored at the lower bound) or a pair."""
    message = f"{layer}: {label} must be a number or a pair of numbers in [{bounds[0]}, {bounds[1]}], got {factor!r}"
    if isinstance(factor, list | tuple):
        if len(factor) != 2 or not all(_is_number(f) for f in factor):
            raise ValueError(message)
        if factor[0] > bounds[1] or factor[1] < bounds[0]:
            raise ValueError(message)
        return tuple(sorted(factor))
    if not _is_number(factor) or not bounds[0] <= factor <= bounds[1]:
        raise ValueError(message)
    factor = abs(factor)
    return (max(-factor, bounds[0]), factor)


def _zoom_pair(layer: str, label: str, factor) -> tuple:
    """(lower, upper) of a zoom or translation factor, each in (-1, 1]."""
    values = factor if isinstance(factor, list | tuple) else [factor]
    if len(values) not in (1, 2) or not all(_is_number(v) and -1.0 < v <= 1.0 for v in values):
        raise ValueError(f"{layer}: {label} must be a number or a pair of numbers in (-1, 1], got {factor!r}")
    if isinstance(factor, list | tuple):
        return tuple(sorted(factor))
    return (-abs(factor), abs(factor))


def _value_range(layer: str, value_range) -> list:
    if not isinstance(value_range, list | tuple) or len(value_range) != 2 or not all(map(_is_number, value_range)):
        raise ValueError(f"{layer}: value_range must be a pair of numbers (low, high), got {value_range!r}")
    return sorted(value_range)


class _ImageAugmentation(Layer):
    """Shared pieces: the seed and stream, the data format, and the call that draws a
    transformation and applies it in training only."""

    def __init__(self, seed=None, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.seed = seed
        self.generator = layer_generator(seed)
        self.data_format = _data_format(self.name, data_format)

    def _batch_shape(self, images, *rest) -> tuple:
        """(batch, *rest) for a batch of images, (1, *rest) for one image."""
        if images.ndim not in (3, 4):
            raise ValueError(f"{self.name}: expected images of rank 3 or 4, got shape {images.shape}")
        return ((images.shape[0] if images.ndim == 4 else 1), *rest)

    def _size(self, images) -> tuple:
        h, w = _image_size_axes(self.data_format, images.ndim)
        height, width = images.shape[h], images.shape[w]
        if height is None or width is None:
            raise ValueError(f"{self.name}: the height and width of the images must be known, got {images.shape}")
        return height, width

    def get_random_transformation(self, images, training=True):
        raise NotImplementedError

    def transform_images(self, images, transformation, training=True):
        raise NotImplementedError

    def call(self, inputs, training=False):
        images = _float_images(self, inputs)
        if not training:
            return images
        return self.transform_images(images, self.get_random_transformation(images), training=True)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "seed": self.seed, "data_format": self.data_format}


def _reverse(images, axis: int):
    """`images` reversed along `axis`."""
    size = images.shape[axis]
    return gather(images, constant(np.arange(size - 1, -1, -1, dtype=np.int64)), axis=axis)


class RandomFlip(_ImageAugmentation):
    """In training, flip each image left-right and/or top-bottom with probability 1/2.

    Args:
        mode: "horizontal", "vertical" or "horizontal_and_vertical" (default; both flips
            happen together, one draw per image).
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(4.0), (1, 2, 2, 1))
    >>> flip = tp.layers.RandomFlip("horizontal")
    >>> flips = tp.tensor([[[[True]]]])
    >>> flip.transform_images(x, {"flips": flips})[0, :, :, 0].numpy().tolist()
    [[1.0, 0.0], [3.0, 2.0]]
    """

    def __init__(self, mode="horizontal_and_vertical", seed=None, data_format=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        if mode not in ("horizontal", "vertical", "horizontal_and_vertical"):
            raise ValueError(
                f"{self.name}: mode must be 'horizontal', 'vertical' or 'horizontal_and_vertical', got {mode!r}"
            )
        self.mode = mode

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images, 1, 1, 1)
        return {"flips": _uniform(self, shape, 0.0, 1.0, images.dtype) <= 0.5}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        flips = transformation["flips"]
        single = images.ndim == 3
        out = images[None] if single else images
        vertical, horizontal = _image_size_axes(self.data_format, 4)
        if self.mode in ("horizontal", "horizontal_and_vertical"):
            out = where(flips, _reverse(out, horizontal), out)
        if self.mode in ("vertical", "horizontal_and_vertical"):
            out = where(flips, _reverse(out, vertical), out)
        return out[0] if single else out

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}


class _AffineAugmentation(_ImageAugmentation):
    """Augmentations that warp images by a per-image transform (image.affine_transform)."""

    def __init__(self, fill_mode, interpolation, seed, fill_value, data_format, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        if fill_mode not in _FILL_MODES:
            raise NotImplementedError(f"{self.name}: fill_mode must be one of {_FILL_MODES}, got {fill_mode!r}")
        if interpolation not in _INTERPOLATIONS:
            raise NotImplementedError(
                f"{self.name}: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}"
            )
        self.fill_mode = fill_mode
        self.interpolation = interpolation
        self.fill_value = float(fill_value)

    def _warp(self, images, transform):
        single = images.ndim == 3
        out = image_ops.affine_transform(
            images[None] if single else images,
            transform,
            interpolation=self.interpolation,
            fill_mode=self.fill_mode,
            fill_value=self.fill_value,
            data_format=self.data_format,
        )
        return out[0] if single else out

    def get_config(self):
        return {
            **super().get_config(),
            "fill_mode": self.fill_mode,
            "interpolation": self.interpolation,
            "fill_value": self.fill_value,
        }


def _columns(*columns):
    """A [batch, len(columns)] tensor from [batch, 1] columns."""
    return concat(list(columns), axis=1)


class RandomRotation(_AffineAugmentation):
    """In training, rotate each image about its centre by a random angle of
    `factor * 360` degrees (factor drawn from [lower, upper]; positive is counter-clockwise).

    Args:
        factor: a number f (angles in [-f, f] turns) or a pair (lower, upper), in [-1, 1].
        fill_mode: how points outside the image are filled: "reflect" (default), "wrap",
            "constant" or "nearest".
        interpolation: "bilinear" (default) or "nearest".
        seed: the seed of the layer's random stream.
        fill_value: the value for fill_mode="constant".
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(4.0), (1, 2, 2, 1))
    >>> y = tp.layers.RandomRotation((0.25, 0.25))(x, training=True)
    >>> [[round(v) for v in row] for row in y[0, :, :, 0].numpy().tolist()]
    [[1, 3], [0, 2]]
    """

    def __init__(
        self,
        factor,
        fill_mode="reflect",
        interpolation="bilinear",
        seed=None,
        fill_value=0.0,
        data_format=None,
        **kwargs,
    ):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor)

    def rotation_matrix(self, angle, height: int, width: int):
        """The [batch, 8] transforms rotating images by `angle` degrees about their centre."""
        radians = reshape(angle, (-1, 1)) * (math.pi / 180.0)
        cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
        c, s = cos(radians), sin(radians)
        zeros = radians * 0.0
        return _columns(c, -s, cx - cx * c + cy * s, s, c, cy - cx * s - cy * c, zeros, zeros)

    def get_random_transformation(self, images, training=True):
        height, width = self._size(images)
        angle = _uniform(self, self._batch_shape(images), self.factor[0] * 360.0, self.factor[1] * 360.0, images.dtype)
        return {"angle": angle, "rotation_matrix": self.rotation_matrix(angle, height, width)}

    def transform_images(self, images, transformation, training=True):
        return self._warp(images, transformation["rotation_matrix"]) if training else images

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class RandomZoom(_AffineAugmentation):
    """In training, zoom each image about its centre: a factor z draws a scale in
    [1 + lower, 1 + upper]; positive factors zoom out, negative ones zoom in.

    Args:
        height_factor: a number f (in [-f, f]) or a pair (lower, upper), each in (-1, 1].
        width_factor: the same for the width, or None to keep the aspect ratio (the height's draw).
        fill_mode: "reflect" (default), "wrap", "constant" or "nearest".
        interpolation: "bilinear" (default) or "nearest".
        seed: the seed of the layer's random stream.
        fill_value: the value for fill_mode="constant".
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.RandomZoom(0.2, seed=1)(tp.ones((2, 4, 4, 3)), training=True).shape
    (2, 4, 4, 3)
    """

    def __init__(
        self,
        height_factor,
        width_factor=None,
        fill_mode="reflect",
        interpolation="bilinear",
        seed=None,
        fill_value=0.0,
        data_format=None,
        **kwargs,
    ):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self._height = _zoom_pair(self.name, "height_factor", height_factor)
        self._width = None if width_factor is None else _zoom_pair(self.name, "width_factor", width_factor)

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images, 1)
        height_zoom = _uniform(self, shape, 1.0 + self._height[0], 1.0 + self._height[1], images.dtype)
        width_zoom = height_zoom
        if self._width is not None:
            width_zoom = _uniform(self, shape, 1.0 + self._width[0], 1.0 + self._width[1], images.dtype)
        return {"height_zoom": height_zoom, "width_zoom": width_zoom}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        height, width = self._size(images)
        zw, zh = transformation["width_zoom"], transformation["height_zoom"]
        zeros = zw * 0.0
        transform = _columns(zw, zeros, (width - 1) / 2.0 * (1.0 - zw), zeros, zh, (height - 1) / 2.0 * (1.0 - zh))
        return self._warp(images, _columns(transform, zeros, zeros))

    def get_config(self):
        config = super().get_config()
        return {**config, "height_factor": self.height_factor, "width_factor": self.width_factor}


class RandomTranslation(_AffineAugmentation):
    """In training, shift each image by a random fraction of its height and width.

    Args:
        height_factor: a number f (shifts in [-f, f] of the height) or a pair (lower, upper),
            each in (-1, 1]; positive moves the image down.
        width_factor: the same for the width; positive moves the image right.
        fill_mode: "reflect" (default), "wrap", "constant" or "nearest".
        interpolation: "bilinear" (default) or "nearest".
        seed: the seed of the layer's random stream.
        fill_value: the value for fill_mode="constant".
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(4.0), (1, 1, 4, 1))
    >>> shift = tp.layers.RandomTranslation(0.0, (0.25, 0.25), fill_mode="constant")
    >>> shift(x, training=True)[0, 0, :, 0].numpy().tolist()
    [0.0, 0.0, 1.0, 2.0]
    """

    def __init__(
        self,
        height_factor,
        width_factor,
        fill_mode="reflect",
        interpolation="bilinear",
        seed=None,
        fill_value=0.0,
        data_format=None,
        **kwargs,
    ):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self._height = _zoom_pair(self.name, "height_factor", height_factor)
        self._width = _zoom_pair(self.name, "width_factor", width_factor)

    def get_random_transformation(self, images, training=True):
        height, width = self._size(images)
        shape = self._batch_shape(images, 1)
        dy = _uniform(self, shape, *self._height, images.dtype) * float(height)
        dx = _uniform(self, shape, *self._width, images.dtype) * float(width)
        return {"translations": _columns(dx, dy)}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        shifts = transformation["translations"]
        dx, dy = shifts[:, 0:1], shifts[:, 1:2]
        ones, zeros = dx * 0.0 + 1.0, dx * 0.0
        return self._warp(images, _columns(ones, zeros, -dx, zeros, ones, -dy, zeros, zeros))

    def get_config(self):
        config = super().get_config()
        return {**config, "height_factor": self.height_factor, "width_factor": self.width_factor}


class RandomCrop(_ImageAugmentation):
    """In training, crop a random (height, width) window (one position per batch); at
    inference, and for images not larger than the window, crop the centre to the window's
    aspect ratio and resize to (height, width), as Keras documents.

    Args:
        height: the output height.
        width: the output width.
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        name: the layer's name.
        **kwargs: the base layer's arguments (`trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> crop = tp.layers.RandomCrop(2, 2, seed=0)
    >>> crop(tp.ones((3, 5, 6, 1)), training=True).shape, crop(tp.ones((3, 4, 4, 1))).shape
    ((3, 2, 2, 1), (3, 2, 2, 1))
    """

    def __init__(self, height, width, seed=None, data_format=None, name=None, **kwargs):
        super().__init__(seed, data_format, name=name, **kwargs)
        self.height = _positive_int(self.name, "height", height)
        self.width = _positive_int(self.name, "width", width)

    def get_random_transformation(self, images, training=True):
        height, width = self._size(images)
        if not (training and height > self.height and width > self.width):
            return None
        top = _uniform(self, (), 0.0, float(height - self.height + 1), "float32")
        left = _uniform(self, (), 0.0, float(width - self.width + 1), "float32")
        return cast(top, "int64"), cast(left, "int64")

    def _resized(self, images):
        return image_ops.resize(
            images, (self.height, self.width), crop_to_aspect_ratio=True, data_format=self.data_format
        )

    def transform_images(self, images, transformation, training=True):
        if transformation is None:
            height, width = self._size(images)
            return images if (height, width) == (self.height, self.width) else self._resized(images)
        top, left = transformation
        h_axis, w_axis = _image_size_axes(self.data_format, images.ndim)
        rows = top + constant(np.arange(self.height, dtype=np.int64))
        cols = left + constant(np.arange(self.width, dtype=np.int64))
        return gather(gather(images, rows, axis=h_axis), cols, axis=w_axis)

    def call(self, inputs, training=False):
        images = _float_images(self, inputs)
        return self.transform_images(images, self.get_random_transformation(images, training=training))

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        h, w = _image_size_axes(self.data_format, len(shape))
        shape[h], shape[w] = self.height, self.width
        return tuple(shape)

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width}


class RandomContrast(_ImageAugmentation):
    """In training, scale each image's deviation from its per-channel mean by a random
    factor in [1 - lower, 1 + upper], then clip to `value_range`.

    Args:
        factor: a number f in [0, 1] (factors in [1, 1 + f], as Keras's bounds give) or a pair
            (lower, upper) (factors in [1 - lower, 1 + upper]).
        value_range: the (low, high) range of pixel values, to clip to. Default (0, 255).
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`) and
            `data_format`.

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.tensor([0.0, 2.0, 4.0, 6.0]), (1, 2, 2, 1))
    >>> contrast = tp.layers.RandomContrast((0.5, 0.5), value_range=(0, 10))
    >>> contrast.transform_images(x, {"contrast_factor": tp.full((1, 1, 1, 1), 2.0)})[0, :, :, 0].numpy().tolist()
    [[0.0, 1.0], [5.0, 9.0]]
    """

    def __init__(self, factor, value_range=(0, 255), seed=None, **kwargs):
        data_format = kwargs.pop("data_format", None)
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (0.0, 1.0))
        self.value_range = tuple(_value_range(self.name, value_range)) if value_range is not None else None

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images, 1, 1, 1)
        return {"contrast_factor": _uniform(self, shape, 1.0 - self.factor[0], 1.0 + self.factor[1], images.dtype)}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        h, w = _image_size_axes(self.data_format, images.ndim)
        centre = mean(images, (h, w), keepdims=True)
        factor = cast(transformation["contrast_factor"], images.dtype)
        out = (images - centre) * (factor[0] if images.ndim == 3 else factor) + centre
        return clip(out, self.value_range[0], self.value_range[1])

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


class RandomBrightness(_ImageAugmentation):
    """In training, add a random delta (a fraction in [lower, upper] of the value range) to
    each image, then clip to `value_range`.

    Args:
        factor: a number f (deltas in [-f, f]) or a pair (lower, upper), in [-1, 1].
        value_range: the (low, high) range of pixel values. Default (0, 255).
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`) and
            `data_format`.

    >>> import tapeflow as tp
    >>> bright = tp.layers.RandomBrightness((0.1, 0.1), value_range=(0, 1))
    >>> bright(tp.full((1, 1, 2, 1), 0.5), training=True)[0, 0, :, 0].numpy().tolist()
    [0.6000000238418579, 0.6000000238418579]
    """

    def __init__(self, factor, value_range=(0, 255), seed=None, **kwargs):
        data_format = kwargs.pop("data_format", None)
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor)
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images, 1, 1, 1)
        delta = _uniform(self, shape, self.factor[0], self.factor[1], images.dtype)
        return {"rgb_delta": delta * float(self.value_range[1] - self.value_range[0])}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        delta = cast(transformation["rgb_delta"], images.dtype)
        out = images + (delta[0] if images.ndim == 3 else delta)
        return clip(out, self.value_range[0], self.value_range[1])

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


def _to_range(images, source, target):
    """Images mapped linearly from the value range `source` to `target`."""
    if tuple(source) == tuple(target):
        return images
    scale = (target[1] - target[0]) / (source[1] - source[0])
    return (images - source[0]) * scale + target[0]


def _grayscale(images, data_format: str):
    """The luma of RGB images (one channel), or the images as they are if not RGB."""
    axis = images.ndim - 1 if data_format == "channels_last" else images.ndim - 3
    if images.shape[axis] != 3:
        return images
    shape = [1] * images.ndim
    shape[axis] = 3
    weights = np.array([0.2989, 0.587, 0.114], dtype=images.dtype.np).reshape(shape)
    return reduce_sum(images * constant(weights), axis, keepdims=True)


class RandomGrayscale(_ImageAugmentation):
    """In training, turn each RGB image to grayscale (kept in 3 channels) with probability `factor`.

    Args:
        factor: the probability of converting an image, in [0, 1]. Default 0.5.
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> gray = tp.layers.RandomGrayscale(factor=1.0)
    >>> gray(tp.tensor([[[[1.0, 0.0, 0.0]]]]), training=True).numpy().ravel().tolist()
    [0.2989000082015991, 0.2989000082015991, 0.2989000082015991]
    """

    def __init__(self, factor=0.5, data_format=None, seed=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        if not _is_number(factor) or not 0.0 <= factor <= 1.0:
            raise ValueError(f"{self.name}: factor must be a number in [0, 1], got {factor!r}")
        self.factor = factor

    def get_random_transformation(self, images, training=True):
        return _uniform(self, self._batch_shape(images, 1, 1, 1), 0.0, 1.0, images.dtype) < self.factor

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        apply = transformation if images.ndim == 4 else transformation[0]
        return where(apply, _grayscale(images, self.data_format) + images * 0.0, images)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class RandomInvert(_ImageAugmentation):
    """In training, invert each image (`value_range[1] - x`) with a probability drawn from
    [lower, upper] of `factor`.

    Args:
        factor: a number p (probabilities in [-p, p], so p itself for p=1) or a pair (lower,
            upper), in [0, 1]. Default 1.0.
        value_range: the (low, high) range of pixel values. Default (0, 255).
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> invert = tp.layers.RandomInvert(factor=(1.0, 1.0), value_range=(0, 1))
    >>> invert(tp.full((1, 1, 2, 1), 0.25), training=True).numpy().ravel().tolist()
    [0.75, 0.75]
    """

    def __init__(self, factor=1.0, value_range=(0, 255), seed=None, data_format=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (0.0, 1.0))
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images)
        probability = _uniform(self, shape, self.factor[0], self.factor[1], images.dtype)
        return {"apply_inversion": _uniform(self, shape, 0.0, 1.0, images.dtype) < probability}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        apply = reshape(transformation["apply_inversion"], (-1, 1, 1, 1))
        out = where(apply, self.value_range[1] - (images[None] if images.ndim == 3 else images), images)
        return out[0] if images.ndim == 3 else out

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


def _unit_pair(layer: str, label: str, factor) -> tuple:
    """(lower, upper) in [0, 1]: a number f gives (0, f)."""
    values = factor if isinstance(factor, list | tuple) else [factor]
    if len(values) not in (1, 2) or not all(_is_number(v) and 0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"{layer}: {label} must be a number or a pair of numbers in [0, 1], got {factor!r}")
    return tuple(sorted(factor)) if isinstance(factor, list | tuple) else (0.0, float(factor))


class Solarization(_ImageAugmentation):
    """In training, add a random amount to the pixels (on a 0-255 scale), then invert the
    ones at or above a random threshold (`255 - x`).

    As Keras draws them, additions lie in [addition_factor[0], 255 * addition_factor[1]) and
    thresholds in [threshold_factor[0], 255 * threshold_factor[1]).

    Args:
        addition_factor: a number f (in [0, f]) or a pair (lower, upper), in [0, 1]. Default 0.
        threshold_factor: a number f (in [0, f]) or a pair (lower, upper), in [0, 1]. Default 0.
        value_range: the (low, high) range of pixel values. Default (0, 255).
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`) and
            `data_format`.

    >>> import tapeflow as tp
    >>> solarize = tp.layers.Solarization()
    >>> solarize(tp.full((1, 1, 2, 1), 64.0), training=True).numpy().ravel().tolist()
    [191.0, 191.0]
    """

    def __init__(self, addition_factor=0.0, threshold_factor=0.0, value_range=(0, 255), seed=None, **kwargs):
        data_format = kwargs.pop("data_format", None)
        super().__init__(seed, data_format, **kwargs)
        self.addition_factor = _unit_pair(self.name, "addition_factor", addition_factor)
        self.threshold_factor = _unit_pair(self.name, "threshold_factor", threshold_factor)
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images, 1, 1, 1)
        (a0, a1), (t0, t1) = self.addition_factor, self.threshold_factor
        return {
            "additions": _uniform(self, shape, a0, a1 * 255.0, images.dtype),
            "thresholds": _uniform(self, shape, t0, t1 * 255.0, images.dtype),
        }

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        single = images.ndim == 3
        x = _to_range(images[None] if single else images, self.value_range, (0, 255))
        x = clip(x + transformation["additions"], 0.0, 255.0)
        x = where(x < transformation["thresholds"], x, 255.0 - x)
        out = _to_range(x, (0, 255), self.value_range)
        return out[0] if single else out

    def get_config(self):
        return {
            **super().get_config(),
            "addition_factor": self.addition_factor,
            "threshold_factor": self.threshold_factor,
            "value_range": self.value_range,
        }


class RandomColorDegeneration(_ImageAugmentation):
    """In training, blend each image with its grayscale version by a random factor drawn
    from [lower, upper] (0 keeps the colours, 1 gives gray), then clip to `value_range`.

    Args:
        factor: a number f (factors in [-f, f], as Keras's bounds give) or a pair (lower,
            upper), in [-1, 1].
        value_range: the (low, high) range of pixel values. Default (0, 255).
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> fade = tp.layers.RandomColorDegeneration((1.0, 1.0))
    >>> [round(v, 2) for v in fade(tp.tensor([[[[100.0, 0.0, 0.0]]]]), training=True).numpy().ravel().tolist()]
    [29.89, 29.89, 29.89]
    """

    def __init__(self, factor, value_range=(0, 255), data_format=None, seed=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor)
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images, 1, 1, 1)
        return {"factor": _uniform(self, shape, self.factor[0], self.factor[1], images.dtype)}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        factor = cast(transformation["factor"], images.dtype)
        if images.ndim == 3:
            factor = factor[0]
        out = images + factor * (_grayscale(images, self.data_format) - images)
        return clip(out, self.value_range[0], self.value_range[1])

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


class RandomShear(_AffineAugmentation):
    """In training, shear each image along x and y by random factors (drawn from
    [lower, upper] of `x_factor` and `y_factor`, with one random sign per image).

    Args:
        x_factor: a number f in [0, 1] (factors in [-f, f]) or a pair (lower, upper). Default 0.
        y_factor: the same for the y axis. Default 0.
        interpolation: "bilinear" (default) or "nearest".
        fill_mode: "reflect" (default), "wrap", "constant" or "nearest".
        fill_value: the value for fill_mode="constant".
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.RandomShear(0.3, 0.2, seed=1)(tp.ones((2, 4, 4, 3)), training=True).shape
    (2, 4, 4, 3)
    """

    def __init__(
        self,
        x_factor=0.0,
        y_factor=0.0,
        interpolation="bilinear",
        fill_mode="reflect",
        fill_value=0.0,
        data_format=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.x_factor = self._factor(x_factor, "x_factor")
        self.y_factor = self._factor(y_factor, "y_factor")

    def _factor(self, factor, label) -> tuple:
        # a pair may hold negative values: the (-f, f) pair a config saves reads back
        pair = isinstance(factor, list | tuple)
        low = -1.0 if pair else 0.0
        values = factor if pair else [factor]
        if len(values) not in (1, 2) or not all(_is_number(v) and low <= v <= 1.0 for v in values):
            raise ValueError(
                f"{self.name}: {label} must be a number in [0, 1] or a pair of numbers in [-1, 1], got {factor!r}"
            )
        return tuple(sorted(factor)) if pair else (-abs(factor), abs(factor))

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images, 1)
        sign = where(_uniform(self, shape, 0.0, 1.0, images.dtype) > 0.5, -1.0, 1.0)
        shear_y = _uniform(self, shape, *self.y_factor, images.dtype)
        shear_x = _uniform(self, shape, *self.x_factor, images.dtype)
        return {"shear_factor": _columns(shear_x, shear_y) * sign}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        shear = transformation["shear_factor"]
        sx, sy = shear[:, 0:1], shear[:, 1:2]
        ones, zeros = sx * 0.0 + 1.0, sx * 0.0
        return self._warp(images, _columns(ones, sx, zeros, sy, ones, zeros, zeros, zeros))

    def get_config(self):
        return {**super().get_config(), "x_factor": self.x_factor, "y_factor": self.y_factor}


def _channel_axis(data_format: str, ndim: int) -> int:
    return ndim - 1 if data_format == "channels_last" else ndim - 3


def _per_image(values, images):
    """[batch] values shaped to broadcast against one channel plane of the images."""
    return reshape(values, (-1, 1, 1, 1)) if images.ndim == 4 else reshape(values, (1, 1, 1))


def _replace_channel(images, axis: int, index: int, plane):
    """`images` with channel `index` (along `axis`) replaced by `plane` (that channel's shape)."""
    parts = [images[(slice(None),) * axis + (slice(c, c + 1),)] for c in range(images.shape[axis])]
    parts[index] = plane
    return concat(parts, axis=axis)


class RandomSaturation(_ImageAugmentation):
    """In training, scale each RGB image's saturation by `f / (1 - f)` for a random f drawn
    from [lower, upper] (0.5 keeps it; 0 gives gray; 1 saturates fully).

    Args:
        factor: a number f (in [-f, f], as Keras's bounds give) or a pair (lower, upper), in [-1, 1].
        value_range: the (low, high) range of pixel values, to clip the saturation to as Keras
            does. Default (0, 255).
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> layer = tp.layers.RandomSaturation((0.0, 0.0), value_range=(0, 1))
    >>> [round(v, 3) for v in layer(tp.tensor([[[[0.8, 0.2, 0.2]]]]), training=True).numpy().ravel().tolist()]
    [0.8, 0.8, 0.8]
    """

    def __init__(self, factor, value_range=(0, 255), data_format=None, seed=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor)
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        f = _uniform(self, self._batch_shape(images), self.factor[0], self.factor[1], images.dtype)
        return {"factor": f / (1.0 - f + 1e-7)}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        axis = _channel_axis(self.data_format, images.ndim)
        hsv = image_ops.rgb_to_hsv(images, data_format=self.data_format)
        saturation = hsv[(slice(None),) * axis + (slice(1, 2),)]
        factor = cast(_per_image(transformation["factor"], images), images.dtype)
        saturation = clip(saturation * factor, self.value_range[0], self.value_range[1])
        return image_ops.hsv_to_rgb(_replace_channel(hsv, axis, 1, saturation), data_format=self.data_format)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


class RandomHue(_ImageAugmentation):
    """In training, rotate each RGB image's hue by a random amount: half a turn times a factor
    drawn from [lower, upper], with a random sign.

    Args:
        factor: a number f (in [0, f]) or a pair (lower, upper), in [0, 1].
        value_range: the (low, high) range of pixel values. Default (0, 255).
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.RandomHue(0.5, seed=1)(tp.ones((2, 3, 3, 3)), training=True).shape
    (2, 3, 3, 3)
    """

    def __init__(self, factor, value_range=(0, 255), data_format=None, seed=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (0.0, 1.0))
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images)
        sign = where(_uniform(self, shape, 0.0, 1.0, images.dtype) > 0.5, -1.0, 1.0)
        factor = _uniform(self, shape, self.factor[0], self.factor[1], images.dtype)
        return {"factor": sign * factor * 0.5}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        axis = _channel_axis(self.data_format, images.ndim)
        x = _to_range(images, self.value_range, (0, 1))
        hsv = image_ops.rgb_to_hsv(x, data_format=self.data_format)
        hue = hsv[(slice(None),) * axis + (slice(0, 1),)]
        hue = hue + cast(_per_image(transformation["factor"], images), images.dtype)
        hue = where(hue > 1.0, hue - 1.0, hue)
        hue = where(hue < 0.0, hue + 1.0, hue)
        rgb = image_ops.hsv_to_rgb(_replace_channel(hsv, axis, 0, hue), data_format=self.data_format)
        return _to_range(clip(rgb, 0.0, 1.0), (0, 1), self.value_range)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


class RandomColorJitter(_ImageAugmentation):
    """In training, apply RandomBrightness, RandomContrast, RandomSaturation and RandomHue in
    turn, each only if its factor is given; they draw from this layer's random stream.

    Args:
        value_range: the (low, high) range of pixel values. Default (0, 255).
        brightness_factor: RandomBrightness's factor, or None to skip it.
        contrast_factor: RandomContrast's factor, or None.
        saturation_factor: RandomSaturation's factor, or None.
        hue_factor: RandomHue's factor, or None.
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> jitter = tp.layers.RandomColorJitter(brightness_factor=(0.5, 0.5), value_range=(0, 1))
    >>> jitter(tp.full((1, 1, 1, 3), 0.25), training=True).numpy().ravel().tolist()
    [0.75, 0.75, 0.75]
    """

    def __init__(
        self,
        value_range=(0, 255),
        brightness_factor=None,
        contrast_factor=None,
        saturation_factor=None,
        hue_factor=None,
        seed=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(seed, data_format, **kwargs)
        self.value_range = _value_range(self.name, value_range)
        self.brightness_factor = brightness_factor
        self.contrast_factor = contrast_factor
        self.saturation_factor = saturation_factor
        self.hue_factor = hue_factor
        common = {"value_range": self.value_range, "data_format": self.data_format, "dtype": self.dtype_policy.name}
        self._steps = []
        for cls, factor in (
            (RandomBrightness, brightness_factor),
            (RandomContrast, contrast_factor),
            (RandomSaturation, saturation_factor),
            (RandomHue, hue_factor),
        ):
            if factor is not None:
                step = cls(factor, name=f"{self.name}/{snake_case(cls.__name__)}", **common)
                step.generator = self.generator  # one stream for the whole jitter
                self._steps.append(step)

    def get_random_transformation(self, images, training=True):
        return None

    def transform_images(self, images, transformation=None, training=True):
        if not training:
            return images
        for step in self._steps:
            images = step.transform_images(images, step.get_random_transformation(images))
        return images

    def get_config(self):
        return {
            **super().get_config(),
            "value_range": self.value_range,
            "brightness_factor": self.brightness_factor,
            "contrast_factor": self.contrast_factor,
            "saturation_factor": self.saturation_factor,
            "hue_factor": self.hue_factor,
        }


class RandomPosterization(_ImageAugmentation):
    """In training, keep only the top `bits` bits of each 8-bit pixel value, with `bits` drawn
    per image from [lower, upper) of `factor` (exactly `lower` when they are equal). Values
    are clipped to the 8-bit range first.

    Args:
        factor: a number f (bits in [1, f)) or a pair (lower, upper), in [1, 8].
        value_range: the (low, high) range of pixel values. Default (0, 255).
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> poster = tp.layers.RandomPosterization((2, 2))
    >>> poster(tp.tensor([[[[200.0, 100.0, 30.0]]]]), training=True).numpy().ravel().tolist()
    [192.0, 64.0, 0.0]
    """

    def __init__(self, factor, value_range=(0, 255), data_format=None, seed=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (1, 8))
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        low, high = self.factor
        bits = _uniform(self, self._batch_shape(images), float(low), float(high), "float32")
        return {"shift_factor": 8 - cast(bits, "int32")}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        steps = gather(constant(2.0 ** np.arange(9, dtype=images.dtype.np)), transformation["shift_factor"])
        step = cast(_per_image(steps, images), images.dtype)
        x = cast(cast(clip(_to_range(images, self.value_range, (0, 255)), 0.0, 255.0), "int32"), images.dtype)
        x = cast(cast(x / step, "int32"), images.dtype) * step
        return _to_range(x, (0, 255), self.value_range)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


class RandomPerspective(_ImageAugmentation):
    """In training, with a probability drawn from [lower, upper] of `factor`, warp each image
    so that its corners move by random fractions (in [-scale / 2, scale / 2]) of their
    coordinates.

    Args:
        factor: a number p (probabilities in [0, p]) or a pair (lower, upper), in [0, 1]. Default 1.
        scale: how far corners may move, in [0, 1]. Default 1.
        interpolation: "bilinear" (default) or "nearest".
        fill_value: the value of points outside the image.
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.RandomPerspective(scale=0.2, seed=1)(tp.ones((2, 5, 5, 3)), training=True).shape
    (2, 5, 5, 3)
    """

    def __init__(
        self, factor=1.0, scale=1.0, interpolation="bilinear", fill_value=0.0, seed=None, data_format=None, **kwargs
    ):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (0.0, 1.0))
        if not _is_number(scale) or not 0.0 <= scale <= 1.0:
            raise ValueError(f"{self.name}: scale must be a number in [0, 1], got {scale!r}")
        if interpolation not in _INTERPOLATIONS:
            raise NotImplementedError(
                f"{self.name}: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}"
            )
        self.scale = float(scale)
        self.interpolation = interpolation
        self.fill_value = float(fill_value)

    def get_random_transformation(self, images, training=True):
        height, width = self._size(images)
        shape = self._batch_shape(images)
        probability = _uniform(self, shape, self.factor[0], self.factor[1], images.dtype)
        apply = _uniform(self, shape, 0.0, 1.0, images.dtype) < probability
        moves = _uniform(self, (*shape, 4, 2), -0.5 * self.scale, 0.5 * self.scale, images.dtype)
        corners = np.array([[0, 0], [width - 1, 0], [0, height - 1], [width - 1, height - 1]], images.dtype.np)
        start = constant(corners) + moves * 0.0
        return {"apply_perspective": apply, "start_points": start, "end_points": start + start * moves}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        single = images.ndim == 3
        x = images[None] if single else images
        warped = image_ops.perspective_transform(
            x,
            transformation["start_points"],
            transformation["end_points"],
            interpolation=self.interpolation,
            fill_value=self.fill_value,
            data_format=self.data_format,
        )
        out = where(reshape(transformation["apply_perspective"], (-1, 1, 1, 1)), warped, x)
        return out[0] if single else out

    def get_config(self):
        return {
            **super().get_config(),
            "factor": self.factor,
            "scale": self.scale,
            "interpolation": self.interpolation,
            "fill_value": self.fill_value,
        }


class RandomErasing(_ImageAugmentation):
    """In training, with a probability drawn from [lower, upper] of `factor`, replace a random
    rectangle of each image (its sides sqrt(s) of the image's, s drawn from `scale`) by
    `fill_value`, or by normal noise times value_range[1] when fill_value is None.

    Args:
        factor: a number p (probabilities in [0, p]) or a pair (lower, upper), in [0, 1]. Default 1.
        scale: a number s or a pair (lower, upper) in [0, 1]: the area fractions. Default (0.02, 0.33).
        fill_value: a number, three numbers (one per channel), or None for noise.
        value_range: the (low, high) range of pixel values. Default (0, 255).
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> erase = tp.layers.RandomErasing((1.0, 1.0), scale=(0.25, 0.25), fill_value=0.0, seed=1)
    >>> float(tp.sum(erase(tp.ones((1, 4, 4, 1)), training=True)))
    12.0
    """

    def __init__(
        self,
        factor=1.0,
        scale=(0.02, 0.33),
        fill_value=None,
        value_range=(0, 255),
        seed=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (0.0, 1.0))
        self.scale = _factor_pair(self.name, "scale", scale, (0.0, 1.0))
        if fill_value is not None and not (
            _is_number(fill_value)
            or (isinstance(fill_value, list | tuple) and len(fill_value) == 3 and all(map(_is_number, fill_value)))
        ):
            raise ValueError(f"{self.name}: fill_value must be None, a number or three numbers, got {fill_value!r}")
        self.fill_value = fill_value
        self.value_range = _value_range(self.name, value_range)

    def _bounds(self, shape, length: int, ratio, dtype):
        size = ratio * float(length)
        start = _uniform(self, shape, 0.0, 1.0, dtype) * (float(length) - size)
        return reshape(start, (-1, 1, 1, 1)), reshape(start + size, (-1, 1, 1, 1))

    def get_random_transformation(self, images, training=True):
        height, width = self._size(images)
        batch = images if images.ndim == 4 else images[None]
        shape = self._batch_shape(images)
        ratios = sqrt(_uniform(self, (*shape, 2), self.scale[0], self.scale[1], images.dtype))
        x0, x1 = self._bounds(shape, width, ratios[:, 0], images.dtype)
        y0, y1 = self._bounds(shape, height, ratios[:, 1], images.dtype)
        grid_shape = (1, height, width, 1) if self.data_format == "channels_last" else (1, 1, height, width)
        rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
        grid_y = constant(rows.astype(images.dtype.np).reshape(grid_shape))
        grid_x = constant(cols.astype(images.dtype.np).reshape(grid_shape))
        inside = logical_and(logical_and(grid_x >= x0, grid_x < x1), logical_and(grid_y >= y0, grid_y < y1))
        masks = logical_and(inside, batch * 0.0 == 0.0)  # one per pixel and channel
        probability = _uniform(self, shape, self.factor[0], self.factor[1], images.dtype)
        apply = _uniform(self, shape, 0.0, 1.0, images.dtype) < probability
        if self.fill_value is None:
            fill = random.normal(batch.shape, 0.0, 1.0, images.dtype, generator=self.generator) * self.value_range[1]
        else:
            axis = _channel_axis(self.data_format, 4)
            values = np.asarray(self.fill_value, images.dtype.np)
            if values.ndim:
                values = values.reshape([3 if i == axis else 1 for i in range(4)])
            fill = batch * 0.0 + constant(values)
        return {"apply_erasing": apply, "batch_masks": masks, "fill_value": fill}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        single = images.ndim == 3
        x = images[None] if single else images
        erased = where(transformation["batch_masks"], transformation["fill_value"], x)
        out = where(reshape(transformation["apply_erasing"], (-1, 1, 1, 1)), erased, x)
        return out[0] if single else out

    def get_config(self):
        return {
            **super().get_config(),
            "factor": self.factor,
            "scale": self.scale,
            "fill_value": self.fill_value,
            "value_range": self.value_range,
        }


def _smoothed(images):
    """NHWC images filtered per channel by the 3x3 smoothing kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13
    (zero padding)."""
    _, height, width, channels = images.shape
    kernel = np.full((3, 3, 1, 1), 1.0 / 13.0, images.dtype.np)
    kernel[1, 1] = 5.0 / 13.0
    planes = reshape(transpose(images, (0, 3, 1, 2)), (-1, height, width, 1))
    out = nn.conv2d(planes, constant(kernel), padding="SAME")
    return transpose(reshape(out, (-1, channels, height, width)), (0, 2, 3, 1))


class RandomSharpness(_ImageAugmentation):
    """In training, sharpen or blur each image: blend it with a smoothed copy by `1 - 2 f`, f
    drawn from [lower, upper] of `factor` (0.5 keeps it, below blurs, above sharpens), then clip
    to `value_range`.

    Args:
        factor: a number f (in [0, f]) or a pair (lower, upper), in [0, 1].
        value_range: the (low, high) range of pixel values. Default (0, 255).
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> keep = tp.layers.RandomSharpness((0.5, 0.5))
    >>> x = tp.reshape(tp.arange(9.0), (1, 3, 3, 1))
    >>> bool((keep(x, training=True) == x).numpy().all())
    True
    """

    def __init__(self, factor, value_range=(0, 255), data_format=None, seed=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (0.0, 1.0))
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        return {"factor": _uniform(self, self._batch_shape(images), self.factor[0], self.factor[1], images.dtype)}

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        single = images.ndim == 3
        x = images[None] if single else images
        if self.data_format == "channels_first":
            x = transpose(x, (0, 2, 3, 1))
        amount = 1.0 - reshape(cast(transformation["factor"], x.dtype), (-1, 1, 1, 1)) * 2.0
        out = clip(x + amount * (_smoothed(x) - x), self.value_range[0], self.value_range[1])
        if self.data_format == "channels_first":
            out = transpose(out, (0, 3, 1, 2))
        return out[0] if single else out

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "value_range": self.value_range}


class RandomGaussianBlur(_ImageAugmentation):
    """In training, blur each image with probability drawn from [lower, upper] of `factor`,
    by a Gaussian of `kernel_size` whose (x, y) standard deviations are drawn from `sigma`
    once per call; then clip to `value_range`.

    Args:
        factor: a number p (probabilities in [0, p]) or a pair (lower, upper), in [0, 1]. Default 1.
        kernel_size: an odd size of the square kernel (or a pair of equal odd sizes). Default 3.
        sigma: a number s (in [0, s]) or a pair (lower, upper), in [0, 1]. Default 1.
        value_range: the (low, high) range of pixel values. Default (0, 255).
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> blur = tp.layers.RandomGaussianBlur((1.0, 1.0), kernel_size=3, sigma=(1.0, 1.0))
    >>> y = blur(tp.reshape(tp.tensor([0.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0, 0.0, 0.0]), (1, 3, 3, 1)), training=True)
    >>> round(float(tp.sum(y)), 4), round(float(y[0, 1, 1, 0]), 4)
    (9.0, 1.8376)
    """

    def __init__(
        self, factor=1.0, kernel_size=3, sigma=1.0, value_range=(0, 255), data_format=None, seed=None, **kwargs
    ):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, (0.0, 1.0))
        sizes = tuple(kernel_size) if isinstance(kernel_size, list | tuple) else (kernel_size, kernel_size)
        if len(sizes) != 2 or not all(isinstance(k, int) and not isinstance(k, bool) and k % 2 for k in sizes):
            raise ValueError(f"{self.name}: kernel_size must be an odd int or a pair of odd ints, got {kernel_size!r}")
        if sizes[0] != sizes[1]:
            raise NotImplementedError(f"{self.name}: only square kernels are supported, got kernel_size={kernel_size}")
        self.kernel_size = sizes
        self.sigma = _factor_pair(self.name, "sigma", sigma, (0.0, 1.0))
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        shape = self._batch_shape(images)
        probability = _uniform(self, shape, self.factor[0], self.factor[1], images.dtype)
        apply = _uniform(self, shape, 0.0, 1.0, images.dtype) < probability
        sigma = _uniform(self, (2,), self.sigma[0], self.sigma[1], images.dtype) + 1e-6
        return {"should_apply_blur": apply, "blur_factor": sigma}

    def _kernel(self, sigma, dtype):
        """The [k, k, 1, 1] Gaussian kernel for standard deviations sigma = (x, y)."""
        size = self.kernel_size[0]
        offsets = constant(np.arange(size, dtype=dtype.np) - (size - 1) / 2.0)
        gx = exp(-0.5 * square(offsets / sigma[0]))
        gy = exp(-0.5 * square(offsets / sigma[1]))
        gx, gy = gx / reduce_sum(gx), gy / reduce_sum(gy)
        return reshape(reshape(gy, (size, 1)) * reshape(gx, (1, size)), (size, size, 1, 1))

    def transform_images(self, images, transformation, training=True):
        if not training:
            return images
        single = images.ndim == 3
        x = images[None] if single else images
        if self.data_format == "channels_first":
            x = transpose(x, (0, 2, 3, 1))
        _, height, width, channels = x.shape
        planes = reshape(transpose(x, (0, 3, 1, 2)), (-1, height, width, 1))
        blurred = nn.conv2d(planes, self._kernel(transformation["blur_factor"], x.dtype), padding="SAME")
        blurred = transpose(reshape(blurred, (-1, channels, height, width)), (0, 2, 3, 1))
        out = where(reshape(transformation["should_apply_blur"], (-1, 1, 1, 1)), blurred, x)
        out = clip(out, self.value_range[0], self.value_range[1])
        if self.data_format == "channels_first":
            out = transpose(out, (0, 3, 1, 2))
        return out[0] if single else out

    def get_config(self):
        return {
            **super().get_config(),
            "factor": self.factor,
            "kernel_size": self.kernel_size,
            "sigma": self.sigma,
            "value_range": self.value_range,
        }


class AutoContrast(Layer):
    """Stretch each channel of each image to span the whole `value_range` (a channel with a
    single value is left as it is). It is deterministic and acts in training and inference
    alike, as in Keras.

    Args:
        value_range: the (low, high) range of pixel values. Default (0, 255).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`) and
            `data_format`.

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.tensor([2.0, 4.0, 6.0]), (1, 1, 3, 1))
    >>> tp.layers.AutoContrast(value_range=(0, 1))(x).numpy().ravel().tolist()
    [0.0, 0.5, 1.0]
    """

    def __init__(self, value_range=(0, 255), **kwargs):
        data_format = kwargs.pop("data_format", None)
        super().__init__(**kwargs)
        self.data_format = _data_format(self.name, data_format)
        self.value_range = _value_range(self.name, value_range)

    def call(self, inputs):
        images = _float_images(self, inputs)
        axes = _image_size_axes(self.data_format, images.ndim)
        low = reduce_min(images, axes, keepdims=True)
        high = reduce_max(images, axes, keepdims=True)
        spread = high - low
        flat = spread <= 0.0
        safe = where(flat, spread * 0.0 + 1.0, spread)
        stretched = (images - low) / safe * (self.value_range[1] - self.value_range[0]) + self.value_range[0]
        return where(flat, images, clip(stretched, self.value_range[0], self.value_range[1]))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "value_range": self.value_range, "data_format": self.data_format}


def _round_half_even(x):
    """Non-negative x rounded to the nearest integer, ties to even (as NumPy rounds)."""
    whole = cast(cast(x, "int64"), x.dtype)
    rest = x - whole
    odd = whole - cast(cast(whole / 2.0, "int64"), x.dtype) * 2.0
    return where(rest > 0.5, whole + 1.0, where(rest < 0.5, whole, whole + odd))


class Equalization(_ImageAugmentation):
    """In training, equalize the histogram of each channel: values are remapped through the
    channel's cumulative histogram (over `bins` bins, counted over the whole batch as Keras
    does) so that they spread evenly over `value_range`.

    Args:
        value_range: the (low, high) range of pixel values. Default (0, 255).
        bins: the number of histogram bins. Default 256.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.tensor([10.0, 10.0, 20.0, 30.0]), (1, 2, 2, 1))
    >>> tp.layers.Equalization()(x, training=True).numpy().ravel().tolist()
    [0.0, 0.0, 128.0, 255.0]
    """

    def __init__(self, value_range=(0, 255), bins=256, data_format=None, **kwargs):
        super().__init__(None, data_format, **kwargs)
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
            raise ValueError(f"{self.name}: bins must be an int >= 2, got {bins!r}")
        self.bins = bins
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        return None

    def _equalize(self, channel):
        """One channel (any shape) equalized over all its values."""
        bins = self.bins
        channel = _to_range(channel, self.value_range, (0, 255))
        scaled = clip(channel * ((bins - 1) / 255.0), 0.0, float(bins - 1))
        index = reshape(cast(scaled, "int64"), (-1,))
        ones = cast(index * 0 + 1, channel.dtype)
        hist = scatter_add(constant(np.zeros(bins, channel.dtype.np)), index, ones)
        triangle = constant(np.triu(np.ones((bins, bins), channel.dtype.np)))
        cdf = reshape(matmul(reshape(hist, (1, bins)), triangle), (bins,))
        cdf_min = reduce_min(where(cdf > 0.0, cdf, cdf * 0.0 + float(np.finfo(np.float32).max)))
        denominator = cdf[-1] - cdf_min
        denominator = where(denominator == 0.0, denominator * 0.0 + 1.0, denominator)
        table = clip(_round_half_even((cdf - cdf_min) * 255.0 / denominator), 0.0, 255.0)
        equalized = reshape(gather(table, index), tuple(-1 if d is None else d for d in channel.shape))
        used = reduce_sum(cast(hist > 0.0, channel.dtype))
        out = where(used <= 1.0, channel, equalized)
        return _to_range(out, (0, 255), self.value_range)

    def transform_images(self, images, transformation=None, training=True):
        if not training:
            return images
        axis = _channel_axis(self.data_format, images.ndim)
        planes = [images[(slice(None),) * axis + (slice(c, c + 1),)] for c in range(images.shape[axis])]
        return concat([self._equalize(plane) for plane in planes], axis=axis)

    def get_config(self):
        config = super().get_config()
        del config["seed"]
        return {**config, "value_range": self.value_range, "bins": self.bins}


class Pipeline(Layer):
    """Apply `layers` one after the other (passing `training` on to those that take it), as a
    single layer that saves them in its config.

    Args:
        layers: the layers, in order.
        name: the layer's name.
        **kwargs: the base layer's arguments (`trainable`, `dtype`).

    >>> import tapeflow as tp
    >>> pipe = tp.layers.Pipeline([tp.layers.Rescaling(2.0), tp.layers.Rescaling(1.0, offset=1.0)])
    >>> pipe(tp.tensor([1.0])).numpy().tolist()
    [3.0]
    """

    def __init__(self, layers, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if not isinstance(layers, list | tuple) or not all(isinstance(layer, Layer) for layer in layers):
            raise ValueError(f"{self.name}: layers must be a list of layers, got {layers!r}")
        self._pipeline_layers = list(layers)

    @property
    def layers(self) -> list:
        return self._pipeline_layers

    def _convert_input(self, value):
        """Inputs pass to the first layer as they are (each layer casts what it takes)."""
        return value if isinstance(value, Tensor) else as_tensor(value)

    def call(self, inputs, training=False):
        for layer in self._pipeline_layers:
            inputs = layer(inputs, training=training)
        return inputs

    def get_config(self):
        return {"layers": [serialize(layer) for layer in self._pipeline_layers], "name": self.name}

    @classmethod
    def from_config(cls, config: dict, custom_objects=None):
        layers = config.get("layers")
        if not isinstance(layers, list | tuple):
            raise ValueError(f"Pipeline.from_config: the config needs a list of serialized 'layers', got {layers!r}")
        config = {**config, "layers": [deserialize(layer, custom_objects) for layer in layers]}
        return cls(**config)


_MIX_KEYS = ("images", "labels")


class _MixAugmentation(_ImageAugmentation):
    """Augmentations that blend each image (and its labels) with another image of the
    batch; they take images, or a dict {"images", "labels"}."""

    def _split(self, inputs):
        if not isinstance(inputs, dict):
            return inputs, None
        unsupported = sorted(k for k in ("bounding_boxes", "segmentation_masks") if k in inputs)
        if unsupported:
            raise NotImplementedError(f"{self.name}: inputs with {', '.join(unsupported)} are not supported")
        if "images" not in inputs:
            raise ValueError(f"{self.name}: a dict input needs an 'images' entry, got keys {sorted(inputs)}")
        return inputs["images"], inputs.get("labels")

    def __call__(self, *args, **kwargs):
        if args and isinstance(args[0], dict):
            self._split(args[0])  # unsupported entries raise before the inputs are converted
        return super().__call__(*args, **kwargs)

    def _maybe_build(self, input_shape) -> None:
        """A dict input builds the layer for its images."""
        super()._maybe_build(input_shape.get("images") if isinstance(input_shape, dict) else input_shape)

    def _permutation(self, batch):
        """A random order of the batch's images (the sort of uniform draws)."""
        return argsort(random.uniform((batch,), 0.0, 1.0, "float32", generator=self.generator))

    def transform_labels(self, labels, transformation, training=True):
        """`labels` mixed as `transform_images` mixes their images."""
        if not training or transformation is None:
            return labels
        labels = as_tensor(labels)
        labels = labels if labels.dtype.kind == "f" else cast(labels, self.compute_dtype)
        weight = reshape(cast(transformation["mix_weight"], labels.dtype), (-1, *[1] * (labels.ndim - 1)))
        others = gather(labels, transformation["permutation_order"], axis=0)
        return weight * labels + (1.0 - weight) * others

    def call(self, inputs, training=False):
        images, labels = self._split(inputs)
        images = _float_images(self, images)
        single = images.ndim == 3
        if training:
            batch = images[None] if single else images
            transformation = self.get_random_transformation(batch)
            batch = self.transform_images(batch, transformation, training=True)
            images = batch[0] if single else batch
            if labels is not None:
                mixed = self.transform_labels(labels[None] if single else labels, transformation, training=True)
                labels = mixed[0] if single else mixed
        if not isinstance(inputs, dict):
            return images
        outputs = {**inputs, "images": images}
        if labels is not None:
            outputs["labels"] = labels
        return outputs


class MixUp(_MixAugmentation):
    """In training, blend each image and its labels with those of another image of the
    batch (a random permutation), with a weight drawn from Beta(alpha, alpha) per image.

    Args:
        alpha: the concentration of the beta distribution of the weights (> 0). Default 0.2.
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    Inputs are images, or a dict {"images", "labels"} (labels one row per image, such as
    one-hot rows); a dict comes back with both mixed.

    >>> import tapeflow as tp
    >>> images = tp.reshape(tp.arange(2.0), (2, 1, 1, 1))
    >>> mix = {"mix_weight": tp.tensor([0.75, 0.5]), "permutation_order": tp.tensor([1, 0])}
    >>> tp.layers.MixUp().transform_images(images, mix).numpy().ravel().tolist()
    [0.25, 0.5]
    """

    def __init__(self, alpha=0.2, data_format=None, seed=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        if not _is_number(alpha) or not alpha > 0:
            raise ValueError(f"{self.name}: alpha must be a positive number, got {alpha!r}")
        self.alpha = alpha

    def get_random_transformation(self, images, training=True):
        batch = self._batch_shape(images)[0]
        return {
            "mix_weight": random.beta((batch,), self.alpha, self.alpha, images.dtype, seed=self.generator),
            "permutation_order": self._permutation(batch),
        }

    def transform_images(self, images, transformation, training=True):
        if not training or transformation is None:
            return images
        weight = reshape(cast(transformation["mix_weight"], images.dtype), (-1, 1, 1, 1))
        others = gather(images, transformation["permutation_order"], axis=0)
        return weight * images + (1.0 - weight) * others

    def get_config(self):
        return {**super().get_config(), "alpha": self.alpha}


class CutMix(_MixAugmentation):
    """In training, paste into each image a box cut from another image of the batch (a
    random permutation), and mix the labels by the areas: the box's sides are sqrt(1 - w)
    of the image's, w drawn from Beta(a, a) per image with a drawn uniformly from `factor`
    per batch.

    Args:
        factor: the range of the concentration a: a number f for (0, f), or a pair in
            [0, 1]. Default 1.
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    Inputs are images, or a dict {"images", "labels"}; a single image (rank 3) passes
    through. The concentration is drawn in Python at each call, so a frozen graph keeps the
    value drawn when it was traced.

    >>> import tapeflow as tp
    >>> images = tp.reshape(tp.arange(2.0), (2, 1, 1, 1))
    >>> cut = {"batch_masks": tp.tensor([True, False]).reshape((2, 1, 1, 1)), "permutation_order": tp.tensor([1, 0])}
    >>> tp.layers.CutMix().transform_images(images, cut).numpy().ravel().tolist()
    [1.0, 1.0]
    """

    def __init__(self, factor=1.0, seed=None, data_format=None, **kwargs):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, bounds=(0.0, 1.0))

    def _bounds(self, batch, length: int, ratio, dtype):
        """Start and end of the box along an axis of `length` pixels, per image."""
        size = ratio * float(length)
        start = _uniform(self, (batch,), 0.0, 1.0, dtype) * (float(length) - size)
        return start, start + size

    def get_random_transformation(self, images, training=True):
        if not training or images.ndim == 3:
            return None
        batch = self._batch_shape(images)[0]
        height, width = self._size(images)
        alpha = float(self.generator.numpy.uniform(*self.factor)) + 1e-6
        weight = random.beta((batch,), alpha, alpha, images.dtype, seed=self.generator)
        ratio = sqrt(1.0 - weight)
        x0, x1 = self._bounds(batch, width, ratio, images.dtype)
        y0, y1 = self._bounds(batch, height, ratio, images.dtype)
        rows = constant(np.arange(height, dtype=images.dtype.np)).reshape((1, height, 1))
        cols = constant(np.arange(width, dtype=images.dtype.np)).reshape((1, 1, width))

        def column(v):
            return reshape(v, (-1, 1, 1))

        inside = logical_and(
            logical_and(cols >= column(x0), cols < column(x1)), logical_and(rows >= column(y0), rows < column(y1))
        )
        masks = inside[:, None] if self.data_format == "channels_first" else inside[..., None]
        return {
            "permutation_order": self._permutation(batch),
            "batch_masks": masks,
            "mix_weight": reshape(1.0 - (x1 - x0) * (y1 - y0) / float(width * height), (-1, 1, 1, 1)),
        }

    def transform_images(self, images, transformation, training=True):
        if not training or transformation is None:
            return images
        others = gather(images, transformation["permutation_order"], axis=0)
        return where(transformation["batch_masks"], others, images)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class RandomElasticTransform(_ImageAugmentation):
    """In training, warp each image, with probability drawn from `factor`, by a smooth
    random displacement field (`tp.ops.image.elastic_transform`) whose strength is drawn
    from `scale` per batch; the result is clipped to `value_range`.

    Args:
        factor: the range of the probability of warping an image: a number f for (0, f),
            or a pair in [0, 1]. Default 1.
        scale: the range of the strength: a number s for (0, s), or a pair in [0, 1]; the
            field's smoothing is 0.05 * strength * min(height, width) pixels and its size
            0.1 * strength * max(height, width) pixels. Default 1.
        interpolation: "bilinear" (default) or "nearest".
        fill_mode: "reflect" (default), "constant", "nearest", "wrap" or "mirror".
        fill_value: the value outside the image with fill_mode "constant". Default 0.
        value_range: the (low, high) of the pixels. Default (0, 255).
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    The strength and the field's seed are drawn in Python at each call, so a frozen graph
    keeps those drawn when it was traced.

    >>> import tapeflow as tp
    >>> layer = tp.layers.RandomElasticTransform(seed=0)
    >>> layer(tp.ones((2, 8, 8, 3)) * 100.0, training=True).shape
    (2, 8, 8, 3)
    """

    def __init__(
        self,
        factor=1.0,
        scale=1.0,
        interpolation="bilinear",
        fill_mode="reflect",
        fill_value=0.0,
        value_range=(0, 255),
        seed=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(seed, data_format, **kwargs)
        self.factor = _factor_pair(self.name, "factor", factor, bounds=(0.0, 1.0))
        self.scale = _factor_pair(self.name, "scale", scale, bounds=(0.0, 1.0))
        if interpolation not in _INTERPOLATIONS:
            raise NotImplementedError(
                f"{self.name}: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}"
            )
        if fill_mode not in (*_FILL_MODES, "mirror"):
            raise NotImplementedError(f"{self.name}: fill_mode must be one of {_FILL_MODES}, got {fill_mode!r}")
        self.interpolation = interpolation
        self.fill_mode = fill_mode
        self.fill_value = fill_value
        self.value_range = _value_range(self.name, value_range)

    def get_random_transformation(self, images, training=True):
        if not training or self.scale[1] == 0 or self.factor[1] == 0:
            return None
        batch = self._batch_shape(images)[0]
        probability = _uniform(self, (batch,), *self.factor, "float32")
        return {
            "apply_transform": _uniform(self, (batch,), 0.0, 1.0, "float32") < probability,
            "distortion_factor": float(self.generator.numpy.uniform(*self.scale)),
            "seed": int(self.generator.numpy.integers(2**31 - 1)),
        }

    def transform_images(self, images, transformation, training=True):
        if not training or transformation is None:
            return images
        height, width = self._size(images)
        strength = float(transformation["distortion_factor"])
        sigma = min(height, width) * 0.05 * strength
        if sigma <= 0.0:
            return images
        warped = image_ops.elastic_transform(
            images,
            alpha=max(height, width) * 0.1 * strength,
            sigma=sigma,
            interpolation=self.interpolation,
            fill_mode=self.fill_mode,
            fill_value=self.fill_value,
            seed=transformation["seed"],
            data_format=self.data_format,
        )
        chosen = reshape(transformation["apply_transform"], (-1, *[1] * (images.ndim - 1)))
        if images.ndim == 3:
            chosen = chosen[0]
        low, high = self.value_range
        return clip(where(chosen, warped, images), float(low), float(high))

    def get_config(self):
        return {
            **super().get_config(),
            "factor": self.factor,
            "scale": self.scale,
            "interpolation": self.interpolation,
            "fill_mode": self.fill_mode,
            "fill_value": self.fill_value,
            "value_range": tuple(self.value_range),
        }


_RAND_AUGMENT_OPS = (
    "random_shear",
    "random_translation",
    "random_rotation",
    "random_brightness",
    "random_color_degeneration",
    "random_contrast",
    "random_sharpness",
    "random_posterization",
    "solarization",
    "auto_contrast",
    "equalization",
)
_AUG_MIX_OPS = (
    "random_shear",
    "random_translation",
    "random_rotation",
    "random_posterization",
    "solarization",
    "auto_contrast",
    "equalization",
)
_AUG_MIX_COLOUR_OPS = ("random_brightness", "random_color_degeneration", "random_contrast", "random_sharpness")


def _augment_ops(owner, names, interpolation: str) -> dict:
    """The augmentation layers `names` of RandAugment and AugMix, of strength `owner.factor`,
    drawing from `owner`'s stream."""
    if interpolation not in _INTERPOLATIONS:
        raise NotImplementedError(
            f"{owner.name}: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}"
        )
    factor = owner.factor
    common = {"data_format": owner.data_format, "dtype": owner.dtype_policy.name}
    valued = {**common, "value_range": owner.value_range}
    makers = {
        "random_shear": lambda: RandomShear(factor, factor, interpolation=interpolation, **common),
        "random_translation": lambda: RandomTranslation(factor, factor, interpolation=interpolation, **common),
        "random_rotation": lambda: RandomRotation(factor, interpolation=interpolation, **common),
        "random_brightness": lambda: RandomBrightness(factor, **valued),
        "random_color_degeneration": lambda: RandomColorDegeneration(factor, **valued),
        "random_contrast": lambda: RandomContrast(factor, **valued),
        "random_sharpness": lambda: RandomSharpness(factor, **valued),
        "random_posterization": lambda: RandomPosterization(max(1, int(8 * factor[1])), **valued),
        "solarization": lambda: Solarization(factor, factor, **valued),
        "auto_contrast": lambda: AutoContrast(**valued),
        "equalization": lambda: Equalization(**valued),
    }
    ops = {}
    for name in names:
        layer = makers[name]()
        if hasattr(layer, "generator"):
            layer.generator = owner.generator  # one stream for the whole layer
        ops[name] = layer
    return ops


def _apply_op(layer, images, transformation):
    """One augmentation layer's transform (AutoContrast, deterministic, is its call)."""
    if isinstance(layer, AutoContrast):
        return layer.call(images)
    return layer.transform_images(images, transformation)


def _draw_op(layer, images):
    return None if isinstance(layer, AutoContrast) else layer.get_random_transformation(images)


class RandAugment(_ImageAugmentation):
    """In training, apply `num_ops` augmentations in turn, each picked at random (per batch)
    among shear, translation, rotation, brightness, colour degeneration, contrast,
    sharpness, posterization, solarization, AutoContrast and Equalization, all of strength
    `factor`.

    Args:
        value_range: the (low, high) range of pixel values. Default (0, 255).
        num_ops: how many augmentations to apply. Default 2.
        factor: the strength: a number f for (0, f), or a pair in [0, 1]. Default 0.5.
        interpolation: "bilinear" (default) or "nearest", for the geometric ones.
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> layer = tp.layers.RandAugment(seed=0)
    >>> layer(tp.ones((2, 8, 8, 3)) * 100.0, training=True).shape
    (2, 8, 8, 3)
    """

    def __init__(
        self,
        value_range=(0, 255),
        num_ops=2,
        factor=0.5,
        interpolation="bilinear",
        seed=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(seed, data_format, **kwargs)
        self.value_range = _value_range(self.name, value_range)
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"{self.name}: num_ops must be a non-negative int, got {num_ops!r}")
        self.num_ops = num_ops
        self.factor = _factor_pair(self.name, "factor", factor, bounds=(0.0, 1.0))
        self.interpolation = interpolation
        self._ops = _augment_ops(self, _RAND_AUGMENT_OPS, interpolation)

    def get_random_transformation(self, images, training=True):
        if not training:
            return None
        indices = random.randint((self.num_ops,), 0, len(self._ops), dtype="int64", seed=self.generator)
        return {
            "transforms": {name: _draw_op(layer, images) for name, layer in self._ops.items()},
            "layer_idxes": indices,
        }

    def transform_images(self, images, transformation, training=True):
        if not training or transformation is None:
            return images
        indices, transforms = transformation["layer_idxes"], transformation["transforms"]
        for step in range(self.num_ops):
            for position, (name, layer) in enumerate(self._ops.items()):
                images = where(indices[step] == position, _apply_op(layer, images, transforms[name]), images)
        return images

    def get_config(self):
        return {
            **super().get_config(),
            "value_range": tuple(self.value_range),
            "num_ops": self.num_ops,
            "factor": self.factor,
            "interpolation": self.interpolation,
        }


class AugMix(_ImageAugmentation):
    """In training, AugMix: `num_chains` chains of up to `chain_depth` random augmentations
    (each step picks one op or none), blended with Dirichlet(alpha) weights, then mixed
    with the original images by a Beta(alpha, alpha) weight and clipped to `value_range`.

    Args:
        value_range: the (low, high) range of pixel values. Default (0, 255).
        num_chains: the number of chains. Default 3.
        chain_depth: the steps of each chain. Default 3.
        factor: the strength of the ops: a number f for (0, f), or a pair in [0, 1]. Default 0.3.
        alpha: the concentration of the Dirichlet and beta weights. Default 1.
        all_ops: whether to include brightness, colour degeneration, contrast and sharpness
            besides shear, translation, rotation, posterization, solarization, AutoContrast
            and Equalization. Default True.
        interpolation: "bilinear" (default) or "nearest", for the geometric ops.
        seed: the seed of the layer's random stream.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    The ops of each chain are picked in Python at each call, so a frozen graph keeps the
    chains picked when it was traced.

    >>> import tapeflow as tp
    >>> layer = tp.layers.AugMix(seed=0)
    >>> layer(tp.ones((2, 8, 8, 3)) * 100.0, training=True).shape
    (2, 8, 8, 3)
    """

    def __init__(
        self,
        value_range=(0, 255),
        num_chains=3,
        chain_depth=3,
        factor=0.3,
        alpha=1.0,
        all_ops=True,
        interpolation="bilinear",
        seed=None,
        data_format=None,
        **kwargs,
    ):
        super().__init__(seed, data_format, **kwargs)
        self.value_range = _value_range(self.name, value_range)
        for label, value in (("num_chains", num_chains), ("chain_depth", chain_depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {label} must be a positive int, got {value!r}")
        if not _is_number(alpha) or not alpha > 0:
            raise ValueError(f"{self.name}: alpha must be a positive number, got {alpha!r}")
        self.num_chains, self.chain_depth, self.alpha = num_chains, chain_depth, alpha
        self.factor = _factor_pair(self.name, "factor", factor, bounds=(0.0, 1.0))
        self.all_ops = bool(all_ops)
        self.interpolation = interpolation
        names = _AUG_MIX_OPS + (_AUG_MIX_COLOUR_OPS if self.all_ops else ())
        self._ops = _augment_ops(self, names, interpolation)

    def get_random_transformation(self, images, training=True):
        if not training:
            return None
        gammas = random.gamma((self.num_chains,), self.alpha, images.dtype, seed=self.generator)
        names = [*self._ops, None]
        chains = []
        for _ in range(self.num_chains):
            picks = [names[i] for i in self.generator.numpy.integers(len(names), size=self.chain_depth)]
            chains.append(
                [
                    {"layer_name": name, "transformation": _draw_op(self._ops[name], images)}
                    for name in picks
                    if name is not None
                ]
            )
        return {
            "chain_mixing_weights": gammas / reduce_sum(gammas),
            "weight_sample": random.beta((), self.alpha, self.alpha, images.dtype, seed=self.generator),
            "chain_transforms": chains,
        }

    def transform_images(self, images, transformation, training=True):
        if not training or transformation is None:
            return images
        weights = cast(transformation["chain_mixing_weights"], images.dtype)
        keep = cast(transformation["weight_sample"], images.dtype)
        mixed = images * 0.0
        for index, chain in enumerate(transformation["chain_transforms"]):
            augmented = images
            for step in chain:
                augmented = _apply_op(self._ops[step["layer_name"]], augmented, step["transformation"])
            mixed = mixed + augmented * weights[index]
        low, high = self.value_range
        return clip(keep * images + (1.0 - keep) * mixed, float(low), float(high))

    def get_config(self):
        return {
            **super().get_config(),
            "value_range": tuple(self.value_range),
            "num_chains": self.num_chains,
            "chain_depth": self.chain_depth,
            "factor": self.factor,
            "alpha": self.alpha,
            "all_ops": self.all_ops,
            "interpolation": self.interpolation,
        }


class MaxNumBoundingBoxes(Layer):
    """Pad or cut the bounding boxes of each image to `max_number` (padding with
    `fill_value`); images pass through, in training and inference alike.

    Args:
        max_number: the number of boxes of each image in the output.
        fill_value: the value of the padding boxes and labels. Default -1.
        bounding_box_format: the boxes' format (such as "xyxy"): needed for inputs with
            bounding boxes, which are left as they are apart from the count.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    Inputs are images, or a dict {"images", "bounding_boxes": {"boxes", "labels"}} with
    dense boxes [batch, boxes, 4] and labels [batch, boxes] (or one image's, without the
    batch axis).

    >>> import tapeflow as tp
    >>> layer = tp.layers.MaxNumBoundingBoxes(3, bounding_box_format="xyxy")
    >>> boxes = {"boxes": tp.ones((1, 2, 4)), "labels": tp.tensor([[4.0, 5.0]])}
    >>> layer({"images": tp.ones((1, 2, 2, 3)), "bounding_boxes": boxes})["bounding_boxes"]["labels"].numpy().tolist()
    [[4.0, 5.0, -1.0]]
    """

    def __init__(self, max_number, fill_value=-1, bounding_box_format=None, data_format=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(max_number, bool) or not _is_number(max_number) or int(max_number) < 1:
            raise ValueError(f"{self.name}: max_number must be a positive int, got {max_number!r}")
        self.max_number = int(max_number)
        self.fill_value = int(fill_value)
        self.bounding_box_format = bounding_box_format
        self.data_format = _data_format(self.name, data_format)

    def __call__(self, inputs, *args, **kwargs):
        if not isinstance(inputs, dict):
            return super().__call__(inputs, *args, **kwargs)
        self.built = True
        return self.call(inputs)

    def transform_bounding_boxes(self, bounding_boxes, transformation=None, training=True):
        """{"boxes", "labels"} padded with `fill_value` or cut to `max_number` boxes."""
        extra = sorted(set(bounding_boxes) - {"boxes", "labels"})
        if extra or not {"boxes", "labels"} <= set(bounding_boxes):
            raise ValueError(
                f"{self.name}: bounding_boxes must have the keys 'boxes' and 'labels' only, "
                f"got {sorted(bounding_boxes)}"
            )
        boxes, labels = as_tensor(bounding_boxes["boxes"]), as_tensor(bounding_boxes["labels"])
        if boxes.ndim != 3 or boxes.shape[-1] != 4 or labels.ndim != 2:
            raise ValueError(
                f"{self.name}: expected boxes [batch, boxes, 4] and labels [batch, boxes], got shapes "
                f"{boxes.shape} and {labels.shape}"
            )
        count = boxes.shape[1]
        short = max(self.max_number - count, 0)
        boxes = pad(boxes[:, : self.max_number], [[0, 0], [0, short], [0, 0]], constant_values=self.fill_value)
        labels = pad(labels[:, : self.max_number], [[0, 0], [0, short]], constant_values=self.fill_value)
        return {**bounding_boxes, "boxes": boxes, "labels": labels}

    def call(self, inputs):
        if not isinstance(inputs, dict):
            return inputs
        if "bounding_boxes" not in inputs:
            return dict(inputs)
        if not self.bounding_box_format:
            raise ValueError(
                f"{self.name}: the input has 'bounding_boxes' but the layer has no bounding_box_format; pass one, "
                "for example bounding_box_format='xyxy'"
            )
        boxes = inputs["bounding_boxes"]
        if not isinstance(boxes, dict):
            raise ValueError(f"{self.name}: bounding_boxes must be a dict {{'boxes', 'labels'}}, got {type(boxes)}")
        single = as_tensor(boxes.get("boxes", np.zeros((0, 4)))).ndim == 2
        if single:
            boxes = {key: as_tensor(value)[None] for key, value in boxes.items()}
        boxes = self.transform_bounding_boxes(boxes)
        if single:
            boxes = {key: value[0] for key, value in boxes.items()}
        return {**inputs, "bounding_boxes": boxes}

    def compute_output_shape(self, input_shape):
        if not isinstance(input_shape, dict) or "bounding_boxes" not in input_shape:
            return input_shape
        boxes = input_shape["bounding_boxes"]
        extra = sorted(set(boxes) - {"boxes", "labels"})
        if extra:
            raise KeyError(f"{self.name}: unsupported keys in bounding_boxes: {extra}; only boxes and labels are")
        shapes = {
            "boxes": (*boxes["boxes"][:-2], self.max_number, boxes["boxes"][-1]),
            "labels": (*boxes["labels"][:-1], self.max_number),
        }
        return {**input_shape, "bounding_boxes": shapes}

    def get_config(self):
        config = {**super().get_config(), "data_format": self.data_format, "max_number": self.max_number}
        if self.bounding_box_format is not None:
            config["bounding_box_format"] = self.bounding_box_format
        return config
