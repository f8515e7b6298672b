"""Layers that move values without learning: upsampling by repetition (or interpolation),
zero padding and cropping of sequences, images and volumes, RepeatVector and Permute.

>>> import tapeflow as tp
>>> tp.layers.ZeroPadding2D(1)(tp.ones((1, 3, 3, 2))).shape
(1, 5, 5, 2)
"""

from __future__ import annotations

import numpy as np

from tapeflow.layers.base import InputSpec, Layer
from tapeflow.layers.conv import data_format_of, from_channels_last, ints, to_channels_last
from tapeflow.ops.array import expand_dims, gather, pad, tile
from tapeflow.ops.core import transpose
from tapeflow.ops.image import resize
from tapeflow.ops.shapes import as_int


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _pairs(layer: str, label: str, value, rank: int) -> tuple[tuple[int, int], ...]:
    """(before, after) per axis from an int (all sides), `rank` ints (both sides of each
    axis) or `rank` pairs; for one axis a pair is (before, after)."""
    if rank == 1 and isinstance(value, list | tuple) and len(value) == 2 and all(_is_int(v) for v in value):
        value = (tuple(value),)
    if _is_int(value):
        pairs = ((value, value),) * rank
    elif isinstance(value, list | tuple) and len(value) == rank:
        pairs = tuple((v, v) if _is_int(v) else v for v in value)
    else:
        pairs = None
    if pairs is None or any(not isinstance(p, list | tuple) or len(p) != 2 for p in pairs):
        kinds = "an int or a pair of ints" if rank == 1 else f"an int, {rank} ints or {rank} pairs of ints"
        raise ValueError(f"{layer}: {label} must be {kinds}, got {value!r}")
    return tuple((as_int(layer, label, a), as_int(layer, label, b)) for a, b in pairs)


def _repeat(layer: str, x, times: int, axis: int):
    """Each entry along `axis` repeated `times` times in place."""
    size = x.shape[axis]
    if size is None:
        raise ValueError(f"{layer}: the upsampled axes must be known, got shape {tuple(x.shape)}")
    return gather(x, np.repeat(np.arange(size), times), axis=axis) if times > 1 else x


class _UpSampling(Layer):
    rank = 2

    def __init__(self, size, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.size = ints(self.name, "size", size, self.rank)
        self.data_format = data_format_of(self.name, data_format)
        self.input_spec = InputSpec(ndim=self.rank + 2)

    def call(self, inputs):
        x = to_channels_last(inputs, self.data_format)
        for axis, times in enumerate(self.size, start=1):
            x = _repeat(self.name, x, times, axis)
        return from_channels_last(x, self.data_format)

    def get_config(self):
        return {**super().get_config(), "size": self.size, "data_format": self.data_format}


class UpSampling1D(Layer):
    """Repeat each step of sequences `size` times: [N, steps, C] -> [N, steps * size, C].

    Args:
        size: the repeat factor. Default 2.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.UpSampling1D(2)(tp.reshape(tp.arange(3.0), (1, 3, 1))).numpy().ravel().tolist()
    [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    """

    def __init__(self, size: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.size = as_int(self.name, "size", size, low=1)
        self.input_spec = InputSpec(ndim=3)

    def call(self, inputs):
        return _repeat(self.name, inputs, self.size, 1)

    def get_config(self):
        return {**super().get_config(), "size": self.size}


class UpSampling2D(_UpSampling):
    """Upsample images by `size` = (rows, columns): repeated rows and columns ("nearest"), or
    resized with "bilinear" or "bicubic" interpolation.

    Args:
        size: the factors (an int or a pair). Default 2.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        interpolation: "nearest" (the default), "bilinear" or "bicubic".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.UpSampling2D((2, 3), interpolation="bilinear")(tp.ones((1, 2, 2, 3))).shape
    (1, 4, 6, 3)
    """

    _methods = ("nearest", "bilinear", "bicubic")

    def __init__(self, size=(2, 2), data_format=None, interpolation: str = "nearest", **kwargs):
        super().__init__(size, data_format, **kwargs)
        method = interpolation.lower() if isinstance(interpolation, str) else interpolation
        if method in ("lanczos3", "lanczos5", "area"):
            raise NotImplementedError(f"{self.name}: interpolation={interpolation!r} is not supported")
        if method not in self._methods:
            raise ValueError(f"{self.name}: interpolation must be one of {self._methods}, got {interpolation!r}")
        self.interpolation = method

    def call(self, inputs):
        if self.interpolation == "nearest":
            return super().call(inputs)
        x = to_channels_last(inputs, self.data_format)
        height, width = x.shape[1:3]
        if height is None or width is None:
            raise ValueError(f"{self.name}: the height and width must be known, got shape {tuple(inputs.shape)}")
        size = (height * self.size[0], width * self.size[1])
        return from_channels_last(resize(x, size, interpolation=self.interpolation), self.data_format)

    def get_config(self):
        return {**super().get_config(), "interpolation": self.interpolation}


class UpSampling3D(_UpSampling):
    """Repeat each cell of volumes `size` = (d, h, w) times along each axis.

    Args:
        size: the factors (an int or three). Default 2.
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.UpSampling3D((1, 2, 3))(tp.ones((1, 2, 2, 2, 4))).shape
    (1, 2, 4, 6, 4)
    """

    rank = 3

    def __init__(self, size=(2, 2, 2), data_format=None, **kwargs):
        super().__init__(size, data_format, **kwargs)


class _ZeroPadding(Layer):
    rank = 2

    def __init__(self, padding, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.padding = _pairs(self.name, "padding", padding, self.rank)
        self.data_format = data_format_of(self.name, data_format)
        self.input_spec = InputSpec(ndim=self.rank + 2)

    def call(self, inputs):
        spatial = list(self.padding)
        pads = [(0, 0), *spatial, (0, 0)] if self.data_format == "channels_last" else [(0, 0), (0, 0), *spatial]
        return pad(inputs, pads)

    def get_config(self):
        padding = self.padding[0] if self.rank == 1 else self.padding
        return {**super().get_config(), "padding": padding, "data_format": self.data_format}


class ZeroPadding1D(_ZeroPadding):
    """Zeros added before and after the steps of sequences.

    Args:
        padding: an int (both ends) or a pair (before, after). Default 1.
        data_format: "channels_last" ([batch, steps, channels], the default, also None) or
            "channels_first" ([batch, channels, steps]).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.ZeroPadding1D((1, 2))(tp.ones((1, 2, 1))).numpy().ravel().tolist()
    [0.0, 1.0, 1.0, 0.0, 0.0]
    """

    rank = 1

    def __init__(self, padding=1, data_format=None, **kwargs):
        super().__init__(padding, data_format, **kwargs)


class ZeroPadding2D(_ZeroPadding):
    """Zero rows and columns added around images.

    Args:
        padding: an int (every side), a pair (rows, columns) padded on both sides, or
            ((top, bottom), (left, right)). Default 1.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.ZeroPadding2D(((1, 0), (2, 1)))(tp.ones((1, 3, 3, 2))).shape
    (1, 4, 6, 2)
    """

    def __init__(self, padding=(1, 1), data_format=None, **kwargs):
        super().__init__(padding, data_format, **kwargs)


class ZeroPadding3D(_ZeroPadding):
    """Zeros added around the depth, height and width of volumes.

    Args:
        padding: an int (every side), three ints (each padded on both sides), or three
            (before, after) pairs. Default 1.
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.ZeroPadding3D((1, 0, 2))(tp.ones((1, 2, 2, 2, 1))).shape
    (1, 4, 2, 6, 1)
    """

    rank = 3

    def __init__(self, padding=((1, 1), (1, 1), (1, 1)), data_format=None, **kwargs):
        super().__init__(padding, data_format, **kwargs)


class _Cropping(Layer):
    rank = 2

    def __init__(self, cropping, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.cropping = _pairs(self.name, "cropping", cropping, self.rank)
        self.data_format = data_format_of(self.name, data_format)
        self.input_spec = InputSpec(ndim=self.rank + 2)

    def call(self, inputs):
        first = 1 if self.data_format == "channels_last" else 2
        index = [slice(None)] * len(inputs.shape)
        for axis, (before, after) in enumerate(self.cropping, start=first):
            size = inputs.shape[axis]
            if size is not None and before + after >= size:
                raise ValueError(
                    f"{self.name}: cropping {self.cropping} leaves nothing of axis {axis} "
                    f"of the input (shape {tuple(inputs.shape)})"
                )
            index[axis] = slice(before, -after if after else None)
        return inputs[tuple(index)]

    def get_config(self):
        return {**super().get_config(), "cropping": self.cropping, "data_format": self.data_format}


class Cropping1D(_Cropping):
    """Steps removed from the start and the end of sequences ([batch, steps, channels]).

    Args:
        cropping: an int (both ends) or a pair (start, end). Default (1, 1).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(5.0), (1, 5, 1))
    >>> tp.layers.Cropping1D((1, 2))(x).numpy().ravel().tolist()
    [1.0, 2.0]
    """

    rank = 1

    def __init__(self, cropping=(1, 1), **kwargs):
        super().__init__(cropping, None, **kwargs)

    def get_config(self):
        config = super().get_config()
        del config["data_format"]
        return {**config, "cropping": self.cropping[0]}


class Cropping2D(_Cropping):
    """Rows and columns removed from the edges of images.

    Args:
        cropping: an int (every side), a pair (rows, columns) cropped on both sides, or
            ((top, bottom), (left, right)). Default no cropping.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.Cropping2D(((1, 0), (1, 2)))(tp.ones((1, 4, 5, 3))).shape
    (1, 3, 2, 3)
    """

    def __init__(self, cropping=((0, 0), (0, 0)), data_format=None, **kwargs):
        super().__init__(cropping, data_format, **kwargs)


class Cropping3D(_Cropping):
    """Cells removed from the edges of the depth, height and width of volumes.

    Args:
        cropping: an int (every side), three ints (each cropped on both sides), or three
            (before, after) pairs. Default 1 on every side.
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.Cropping3D((1, 0, 2))(tp.ones((1, 4, 4, 6, 2))).shape
    (1, 2, 4, 2, 2)
    """

    rank = 3

    def __init__(self, cropping=((1, 1), (1, 1), (1, 1)), data_format=None, **kwargs):
        super().__init__(cropping, data_format, **kwargs)


class RepeatVector(Layer):
    """Repeat vectors `n` times: [N, features] -> [N, n, features].

    Args:
        n: the number of repeats.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.RepeatVector(3)(tp.ones((2, 4))).shape
    (2, 3, 4)
    """

    def __init__(self, n: int, **kwargs):
        super().__init__(**kwargs)
        self.n = as_int(self.name, "n", n, low=1)
        self.input_spec = InputSpec(ndim=2)

    def call(self, inputs):
        return tile(expand_dims(inputs, 1), (1, self.n, 1))

    def get_config(self):
        return {**super().get_config(), "n": self.n}


class Permute(Layer):
    """Reorder the axes after the batch axis: `dims` is a permutation of 1 .. rank - 1
    (output axis i + 1 is input axis dims[i]).

    Args:
        dims: the permutation, counting axes from 1 (the batch axis stays first).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.Permute((2, 1))(tp.ones((2, 3, 4))).shape
    (2, 4, 3)
    """

    def __init__(self, dims, **kwargs):
        super().__init__(**kwargs)
        values = tuple(dims) if isinstance(dims, list | tuple) else None
        if values is None or sorted(values) != list(range(1, len(values) + 1)):
            raise ValueError(
                f"{self.name}: dims must be a permutation of 1 .. n (the batch axis is not permuted), got {dims!r}"
            )
        self.dims = tuple(int(d) for d in values)
        self.input_spec = InputSpec(ndim=len(self.dims) + 1)

    def call(self, inputs):
        return transpose(inputs, (0, *self.dims))

    def get_config(self):
        return {**super().get_config(), "dims": self.dims}
