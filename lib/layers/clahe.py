"""ContrastLimitedAdaptiveHistogramEqualization (CLAHE): histogram equalization per tile of
an image, with each tile's histogram clipped, and the tiles' mappings blended bilinearly.

>>> import tapeflow as tp
>>> x = tp.reshape(tp.tensor([10.0, 20.0, 30.0, 40.0]), (1, 2, 2, 1))
>>> clahe = tp.layers.ContrastLimitedAdaptiveHistogramEqualization(clip_limit=0, tile_grid_size=(1, 1))
>>> clahe(x).numpy().ravel().tolist()
[63.75, 127.5, 191.25, 255.0]
"""

from __future__ import annotations

import numbers

import numpy as np

from tapeflow.layers.base import Layer
from tapeflow.layers.preprocessing import _data_format
from tapeflow.ops.array import gather, one_hot, reshape
from tapeflow.ops.array_keras import take_along_axis
from tapeflow.ops.core import cast, expand_dims, squeeze, transpose
from tapeflow.ops.creation import constant
from tapeflow.ops.keras_names import cumsum
from tapeflow.ops.math import clip, where
from tapeflow.ops.reduce import min as reduce_min
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.tensor import Tensor

_BINS = 256
_PIXEL_RANGE = (0, 255)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _rescaled(images, source, target):
    """Float32 images mapped affinely from the range `source` to the range `target`."""
    images = cast(images, "float32")
    low, high = np.float32(source[0]), np.float32(source[1])
    images = (images - float(low)) / float(high - low)
    return images * float(np.float32(target[1]) - np.float32(target[0])) + float(np.float32(target[0]))


def _edge_index(size: int, padded: int) -> np.ndarray:
    """Indices 0..size-1, then the last one repeated up to `padded` entries."""
    return np.minimum(np.arange(padded), size - 1).astype(np.int32)


def _grid_position(size: int, tile: int, tiles: int):
    """For each pixel row (or column): the two neighbouring tile centres, as indices into a
    grid with one repeated tile at each end, and the weight of the second one."""
    position = (np.arange(size, dtype=np.float32) - np.float32(tile / 2.0)) / np.float32(tile) + np.float32(1.0)
    first = np.floor(position)
    weight = position - first
    first = np.clip(first, 0, tiles + 1).astype(np.int32)
    second = np.clip(first + 1, 0, tiles + 1).astype(np.int32)
    return first, second, weight


class ContrastLimitedAdaptiveHistogramEqualization(Layer):
    """Contrast limited adaptive histogram equalization, as Keras's layer of that name: each
    image is cut into a `tile_grid_size` grid of tiles, each channel of each tile is
    equalized through its own 256-bin histogram (whose counts above
    `clip_limit * pixels_per_tile / 256`, rounded down to a whole count as Keras does, are
    spread evenly over all bins), and each pixel blends the mappings of the four nearest
    tile centres bilinearly. It has no weights and acts in training and inference alike.

    Values are binned as integers after clipping to [0, 255] (`value_range` first maps the
    images onto that range and the result back). Images whose size is not a multiple of
    the grid are padded by repeating their last row and column, as Keras does on its torch
    backend. The output has the input's dtype (integer images give integers, truncated); it
    does not depend differentiably on the input. As in Keras, histograms are counted from
    one-hot rows of 256 entries per pixel value, so memory grows as 256 times the images'.

    Args:
        value_range: the (low, high) range of pixel values. Default (0, 255).
        clip_limit: the contrast limit; 0 or less equalizes without clipping. Default 4.0.
        tile_grid_size: (rows, columns) of tiles. Default (8, 8).
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import numpy as np
    >>> import tapeflow as tp
    >>> images = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3)).astype("float32")
    >>> tp.layers.ContrastLimitedAdaptiveHistogramEqualization(tile_grid_size=(4, 4))(images).shape
    (2, 16, 16, 3)
    """

    def __init__(self, value_range=(0, 255), clip_limit=4.0, tile_grid_size=(8, 8), data_format=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(value_range, list | tuple) or len(value_range) != 2 or not all(map(_is_number, value_range)):
            raise ValueError(f"{self.name}: value_range must be a pair of numbers (low, high), got {value_range!r}")
        if value_range[0] == value_range[1]:
            raise ValueError(f"{self.name}: value_range must have two different ends, got {value_range!r}")
        if not _is_number(clip_limit):
            raise TypeError(f"{self.name}: clip_limit must be a number, got {clip_limit!r}")
        if (
            not isinstance(tile_grid_size, list | tuple)
            or len(tile_grid_size) != 2
            or not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) and t >= 1 for t in tile_grid_size)
        ):
            raise ValueError(
                f"{self.name}: tile_grid_size must be a pair of positive ints (rows, columns), got {tile_grid_size!r}"
            )
        self.value_range = value_range
        self.clip_limit = clip_limit
        self.tile_grid_size = tile_grid_size
        self.data_format = _data_format(self.name, data_format)

    def call(self, inputs):
        if not isinstance(inputs, Tensor):
            raise TypeError(f"{self.name}: expected an image tensor, got {type(inputs).__name__}")
        if inputs.ndim not in (3, 4):
            raise ValueError(
                f"{self.name}: expected images of rank 3 (one image) or 4 (a batch), got shape {inputs.shape}"
            )
        dtype = inputs.dtype
        images = inputs if inputs.ndim == 4 else expand_dims(inputs, 0)
        if self.data_format == "channels_first":
            images = transpose(images, (0, 2, 3, 1))
        if None in images.shape[1:]:
            raise ValueError(
                f"{self.name}: the height, width and channels of the images must be known, got {inputs.shape}"
            )
        rescale = tuple(self.value_range) != _PIXEL_RANGE
        if rescale:
            images = _rescaled(images, self.value_range, _PIXEL_RANGE)
        out = self._equalize(images)
        if rescale:
            out = _rescaled(out, _PIXEL_RANGE, self.value_range)
        out = cast(out, dtype)
        if self.data_format == "channels_first":
            out = transpose(out, (0, 3, 1, 2))
        return out if inputs.ndim == 4 else squeeze(out, 0)

    def _equalize(self, images):
        """Float32 CLAHE of channels-last images of shape (batch, height, width, channels)."""
        _, height, width, channels = images.shape
        rows, cols = (int(t) for t in self.tile_grid_size)
        tile_h, tile_w = -(-height // rows), -(-width // cols)
        padded_h, padded_w = tile_h * rows, tile_w * cols
        pixels = cast(clip(images, *_PIXEL_RANGE), "int32")
        if padded_h != height:
            pixels = gather(pixels, _edge_index(height, padded_h), axis=1)
        if padded_w != width:
            pixels = gather(pixels, _edge_index(width, padded_w), axis=2)

        # one histogram per (image, tile row, tile column, channel)
        tiles = reshape(pixels, (-1, rows, tile_h, cols, tile_w, channels))
        tiles = reshape(transpose(tiles, (0, 1, 3, 5, 2, 4)), (-1, rows, cols, channels, tile_h * tile_w))
        hist = reduce_sum(one_hot(tiles, _BINS, dtype="float32"), axis=-2)
        if self.clip_limit > 0:
            limit = float(int(self.clip_limit * (tile_h * tile_w) / _BINS))  # whole pixels, rounded down
            clipped = clip(hist, 0.0, limit)
            hist = clipped + reduce_sum(hist - clipped, axis=-1, keepdims=True) / float(_BINS)
        cdf = cast(cumsum(cast(hist, "float64"), axis=-1), "float32")
        cdf_min = reduce_min(cdf, axis=-1, keepdims=True)
        denominator = float(tile_h * tile_w) - cdf_min
        denominator = where(denominator == 0.0, denominator * 0.0 + 1.0, denominator)
        table = clip((cdf - cdf_min) * 255.0 / denominator, *_PIXEL_RANGE)
        table = gather(table, np.arange(-1, rows + 1).clip(0, rows - 1).astype(np.int32), axis=1)
        table = gather(table, np.arange(-1, cols + 1).clip(0, cols - 1).astype(np.int32), axis=2)
        table = reshape(table, (-1, (rows + 2) * (cols + 2) * channels * _BINS))

        # each pixel reads its value's entry in the tables of the four nearest tile centres
        y0, y1, wy = _grid_position(padded_h, tile_h, rows)
        x0, x1, wx = _grid_position(padded_w, tile_w, cols)
        stride_x = channels * _BINS
        stride_y = stride_x * (cols + 2)
        offset_c = np.arange(channels, dtype=np.int32) * _BINS
        corners = np.stack(
            [
                y[:, None, None] * stride_y + x[None, :, None] * stride_x + offset_c[None, None, :]
                for y in (y0, y1)
                for x in (x0, x1)
            ]
        ).astype(np.int32)
        index = constant(corners) + expand_dims(pixels, 1)
        values = take_along_axis(table, reshape(index, (-1, 4 * padded_h * padded_w * channels)), axis=1)
        values = reshape(values, (-1, 4, padded_h, padded_w, channels))
        wx = wx[None, :, None]
        wy = wy[:, None, None]
        top = values[:, 0] * (np.float32(1.0) - wx) + values[:, 1] * wx
        bottom = values[:, 2] * (np.float32(1.0) - wx) + values[:, 3] * wx
        out = top * (np.float32(1.0) - wy) + bottom * wy
        return out[:, :height, :width, :]

    def get_config(self):
        return {
            **super().get_config(),
            "data_format": self.data_format,
            "value_range": self.value_range,
            "clip_limit": self.clip_limit,
            "tile_grid_size": self.tile_grid_size,
        }
