"""Numeric preprocessing layers: Rescaling, Resizing, CenterCrop, Normalization,
Discretization, CategoryEncoding and IntegerLookup. Layers with statistics learn them
with `adapt(data)` (arrays, tensors, `tp.data` datasets or iterables of batches).

>>> import tapeflow as tp
>>> tp.layers.Rescaling(0.5)(tp.tensor([[255.0, 51.0]])).numpy().tolist()
[[127.5, 25.5]]
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tapeflow import dtypes
from tapeflow.layers.base import Layer
from tapeflow.ops import image as image_ops
from tapeflow.ops.array import one_hot, reshape
from tapeflow.ops.core import cast
from tapeflow.ops.creation import constant
from tapeflow.ops.half import in_float32
from tapeflow.ops.math import maximum, sqrt
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.tensor import Tensor

_EPSILON = 1e-7  # Keras's backend.epsilon()
_DATA_FORMATS = (None, "channels_last", "channels_first")


def _data_format(layer: str, data_format) -> str:
    if data_format not in _DATA_FORMATS:
        raise ValueError(f"{layer}: data_format must be 'channels_last' or 'channels_first', got {data_format!r}")
    return data_format or "channels_last"


def _positive_int(layer: str, label: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{layer}: {label} must be a positive int, got {value!r}")
    return int(value)


def _float_images(layer: Layer, images):
    """Images in the layer's compute dtype (integer pixels are cast, as Keras does)."""
    return images if images.dtype.kind == "f" else cast(images, layer.compute_dtype)


def _image_size_axes(data_format: str, ndim: int) -> tuple[int, int]:
    if ndim not in (3, 4):
        raise ValueError(f"expected images of rank 3 or 4, got rank {ndim}")
    offset = ndim - 3
    return (offset + 1, offset + 2) if data_format == "channels_first" else (offset, offset + 1)


def _batches(data):
    """The batches of `data`: one array or tensor, or each element of an iterable (the
    first entry of tuples such as (x, y))."""
    if isinstance(data, np.ndarray | Tensor):
        yield np.asarray(data)
        return
    if not hasattr(data, "__iter__"):
        raise TypeError(f"adapt: expected an array, a tensor, a dataset or an iterable of batches, got {type(data)}")
    for batch in data:
        if isinstance(batch, tuple | list):
            batch = batch[0]
        yield np.asarray(batch)


# ------------------------------------------------------------------ Rescaling
class Rescaling(Layer):
    """`inputs * scale + offset` (scale and offset: numbers, or per-channel lists).

    Args:
        scale: the factor (a number or a list broadcast against the last axis).
        offset: added after scaling. Default 0.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.Rescaling(2.0, offset=-1.0)(tp.tensor([0.0, 1.0])).numpy().tolist()
    [-1.0, 1.0]
    """

    supports_masking = True

    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        self.scale, self.offset = scale, offset

    def call(self, inputs):
        inputs = _float_images(self, inputs)
        scale = constant(np.asarray(self.scale, dtype=inputs.dtype.np))
        offset = constant(np.asarray(self.offset, dtype=inputs.dtype.np))
        return inputs * scale + offset

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "scale": self.scale, "offset": self.offset}


# ------------------------------------------------------------ Resizing, crops
class Resizing(Layer):
    """Resize images (NHWC, or NCHW with data_format="channels_first") to (height, width).

    Args:
        height: the output height.
        width: the output width.
        interpolation: "bilinear" (default), "nearest" or "bicubic".
        crop_to_aspect_ratio: first crop the centre to the target's aspect ratio.
        pad_to_aspect_ratio: first pad to the target's aspect ratio (with `fill_value`).
        fill_mode: how padding is filled: "constant".
        fill_value: the padding value.
        antialias: low-pass filter when downsampling.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.Resizing(4, 6)(tp.ones((1, 2, 3, 3))).shape
    (1, 4, 6, 3)
    """

    def __init__(
        self,
        height,
        width,
        interpolation="bilinear",
        crop_to_aspect_ratio=False,
        pad_to_aspect_ratio=False,
        fill_mode="constant",
        fill_value=0.0,
        antialias=False,
        data_format=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.height = _positive_int(self.name, "height", height)
        self.width = _positive_int(self.name, "width", width)
        if interpolation not in ("bilinear", "nearest", "bicubic"):
            raise ValueError(
                f"{self.name}: interpolation must be 'bilinear', 'nearest' or 'bicubic', got {interpolation!r}"
            )
        if crop_to_aspect_ratio and pad_to_aspect_ratio:
            raise ValueError(f"{self.name}: crop_to_aspect_ratio and pad_to_aspect_ratio cannot both be True")
        if fill_mode != "constant":
            raise ValueError(f"{self.name}: fill_mode must be 'constant', got {fill_mode!r}")
        self.interpolation = interpolation
        self.crop_to_aspect_ratio = bool(crop_to_aspect_ratio)
        self.pad_to_aspect_ratio = bool(pad_to_aspect_ratio)
        self.fill_mode = fill_mode
        self.fill_value = float(fill_value)
        self.antialias = bool(antialias)
        self.data_format = _data_format(self.name, data_format)

    def call(self, inputs):
        return image_ops.resize(
            _float_images(self, inputs),
            (self.height, self.width),
            interpolation=self.interpolation,
            antialias=self.antialias,
            crop_to_aspect_ratio=self.crop_to_aspect_ratio,
            pad_to_aspect_ratio=self.pad_to_aspect_ratio,
            fill_mode=self.fill_mode,
            fill_value=self.fill_value,
            data_format=self.data_format,
        )

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        h, w = _image_size_axes(self.data_format, len(shape))
        shape[h], shape[w] = self.height, self.width
        return tuple(shape)

    def get_config(self):
        return {
            **super().get_config(),
            "height": self.height,
            "width": self.width,
            "interpolation": self.interpolation,
            "crop_to_aspect_ratio": self.crop_to_aspect_ratio,
            "pad_to_aspect_ratio": self.pad_to_aspect_ratio,
            "fill_mode": self.fill_mode,
            "fill_value": self.fill_value,
            "antialias": self.antialias,
            "data_format": self.data_format,
        }


def center_crop(images, height: int, width: int, data_format: str):
    """The central height x width window of images at least that large; smaller images are
    cropped to the target's aspect ratio and resized (bilinear), as Keras's CenterCrop does."""
    h_axis, w_axis = _image_size_axes(data_format, images.ndim)
    in_h, in_w = images.shape[h_axis], images.shape[w_axis]
    if in_h is None or in_w is None:
        raise ValueError(f"center crop: the height and width of the images must be known, got {images.shape}")
    if in_h >= height and in_w >= width:
        top, left = (in_h - height) // 2, (in_w - width) // 2
        index = [slice(None)] * images.ndim
        index[h_axis], index[w_axis] = slice(top, top + height), slice(left, left + width)
        return images[tuple(index)]
    return image_ops.resize(images, (height, width), crop_to_aspect_ratio=True, data_format=data_format)


class CenterCrop(Layer):
    """Crop the centre (height, width) of images; smaller images are resized to fit instead.

    Args:
        height: the output height.
        width: the output width.
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(16.0), (1, 4, 4, 1))
    >>> tp.layers.CenterCrop(2, 2)(x)[0, :, :, 0].numpy().tolist()
    [[5.0, 6.0], [9.0, 10.0]]
    """

    def __init__(self, height, width, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.height = _positive_int(self.name, "height", height)
        self.width = _positive_int(self.name, "width", width)
        self.data_format = _data_format(self.name, data_format)

    def call(self, inputs):
        return center_crop(_float_images(self, inputs), self.height, self.width, self.data_format)

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        h, w = _image_size_axes(self.data_format, len(shape))
        shape[h], shape[w] = self.height, self.width
        return tuple(shape)

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width, "data_format": self.data_format}


# -------------------------------------------------------------- Normalization
class Normalization(Layer):
    """`(inputs - mean) / sqrt(variance)` per position of `axis` (the features kept);
    `invert=True` undoes it. Give `mean` and `variance`, or learn them with `adapt(data)`.

    Args:
        axis: the axis or axes with their own statistics (-1 by default); None for one
            mean and variance over everything.
        mean: the mean (a number or an array broadcast over the kept axes), or None to adapt.
        variance: the variance, given with `mean`.
        invert: map normalized values back (`mean + inputs * sqrt(variance)`).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import numpy as np
    >>> import tapeflow as tp
    >>> norm = tp.layers.Normalization()
    >>> norm.adapt(np.array([[0.0, 10.0], [2.0, 30.0]]))
    >>> norm(tp.tensor([[1.0, 20.0]])).numpy().tolist()
    [[0.0, 0.0]]
    """

    supports_masking = True

    def __init__(self, axis=-1, mean=None, variance=None, invert=False, **kwargs):
        super().__init__(**kwargs)
        if axis is None:
            axis = ()
        self.axis = (axis,) if isinstance(axis, int) else tuple(axis)
        if (mean is None) != (variance is None):
            raise ValueError(f"{self.name}: give both mean and variance, or neither; got {mean!r} and {variance!r}")
        if mean is not None:
            if np.shape(mean) != np.shape(variance):
                raise ValueError(
                    f"{self.name}: mean and variance must have the same shape, got {np.shape(mean)} and "
                    f"{np.shape(variance)}"
                )
            if np.ndim(mean) > len(self.axis):
                raise ValueError(
                    f"{self.name}: the rank of mean ({np.ndim(mean)}) must not exceed the number of axes {self.axis}"
                )
        self.input_mean, self.input_variance = mean, variance
        self.invert = bool(invert)
        self.adapt_mean = self.adapt_variance = None

    def build(self, input_shape):
        ndim = len(input_shape)
        if any(not -ndim <= a < ndim for a in self.axis):
            raise ValueError(f"{self.name}: axis {self.axis} is out of range for inputs of rank {ndim}")
        self._keep_axis = tuple(sorted(a % ndim for a in self.axis))
        if any(input_shape[a] is None for a in self._keep_axis):
            raise ValueError(f"{self.name}: the kept axes {self.axis} must be known, got shape {input_shape}")
        self._reduce_axis = tuple(d for d in range(ndim) if d not in self._keep_axis)
        self._broadcast_shape = tuple(input_shape[d] if d in self._keep_axis else 1 for d in range(ndim))
        self._stat_shape = tuple(input_shape[d] for d in self._keep_axis)
        self._build_shape = tuple(input_shape)
        if self.input_mean is None:
            self.adapt_mean = self.add_weight("mean", self._stat_shape, "zeros", trainable=False)
            self.adapt_variance = self.add_weight("variance", self._stat_shape, "ones", trainable=False)
            self.count = self.add_weight("count", (), "zeros", trainable=False, dtype="int64")

    def _given(self, value) -> np.ndarray:
        """A given mean or variance broadcast to the inputs' rank."""
        array = np.asarray(value, dtype=self.dtype.np)
        shape = [1] * len(self._broadcast_shape)
        for i in range(1, array.ndim + 1):
            shape[self._keep_axis[-i]] = array.shape[-i]
        return np.broadcast_to(array.reshape(shape), self._broadcast_shape)

    def adapt(self, data) -> None:
        """Learn the mean and variance of `data` per kept position: an array, a tensor, or a
        `tp.data` dataset / iterable of batches (for (x, y) elements, x is used)."""
        batches = _batches(data)
        first = next(batches, None)
        if first is None:
            raise ValueError(f"{self.name}.adapt: the data holds no batch")
        if not self.built:
            self._maybe_build(tuple(first.shape))
        if self.input_mean is not None:
            raise ValueError(f"{self.name}.adapt: the layer was given mean and variance; it has nothing to adapt")
        total_mean = np.zeros(self._stat_shape)
        total_var = np.zeros(self._stat_shape)
        count = 0
        for batch in (first, *batches):
            if batch.ndim != len(self._build_shape) or any(
                batch.shape[d] != self._build_shape[d] for d in self._keep_axis
            ):
                raise ValueError(
                    f"{self.name}.adapt: a batch of shape {batch.shape} does not fit the layer's input shape "
                    f"{self._build_shape}"
                )
            batch = batch.astype(np.float64)
            batch_mean, batch_var = batch.mean(self._reduce_axis), batch.var(self._reduce_axis)
            batch_count = math.prod(batch.shape[d] for d in self._reduce_axis)
            count += batch_count
            w = batch_count / count
            new_mean = total_mean * (1.0 - w) + batch_mean * w
            total_var = (total_var + (total_mean - new_mean) ** 2) * (1.0 - w) + (
                batch_var + (batch_mean - new_mean) ** 2
            ) * w
            total_mean = new_mean
        self.adapt_mean.assign(total_mean.astype(self.dtype.np))
        self.adapt_variance.assign(total_var.astype(self.dtype.np))

    @in_float32
    def call(self, inputs):
        inputs = _float_images(self, inputs)
        if self.input_mean is not None:
            mean = constant(self._given(self.input_mean).astype(inputs.dtype.np))
            variance = constant(self._given(self.input_variance).astype(inputs.dtype.np))
        else:
            mean = cast(reshape(self.adapt_mean, self._broadcast_shape), inputs.dtype)
            variance = cast(reshape(self.adapt_variance, self._broadcast_shape), inputs.dtype)
        std = maximum(sqrt(variance), _EPSILON)
        return mean + inputs * std if self.invert else (inputs - mean) / std

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "axis": self.axis,
            "invert": self.invert,
            "mean": np.array(self.input_mean).tolist(),
            "variance": np.array(self.input_variance).tolist(),
        }


# ----------------------------------------------------------- category encodings
_OUTPUT_MODES = ("int", "one_hot", "multi_hot", "count")


def encode_categories(indices, output_mode: str, depth: int, dtype):
    """Integer category ids as one-hot rows (a trailing axis of 1 is dropped first), or as
    multi-hot / count rows over axis 1 (axis 0 for a rank-1 input, a single sample)."""
    if output_mode == "int":
        return cast(indices, dtype)
    if indices.ndim == 0:
        indices = reshape(indices, (1,))
    if output_mode == "one_hot":
        if indices.ndim > 1 and indices.shape[-1] == 1:
            indices = indices[..., 0]
        return one_hot(indices, depth, dtype=dtype)
    hot = one_hot(indices, depth, dtype=dtype)
    axis = 1 if indices.ndim > 1 else 0
    return reduce_max(hot, axis) if output_mode == "multi_hot" else reduce_sum(hot, axis)


def _encoded_shape(input_shape, output_mode: str, depth: int) -> tuple:
    shape = tuple(input_shape)
    if output_mode == "int":
        return shape
    if not shape:
        return (depth,)
    if output_mode == "one_hot":
        return (shape[:-1] if len(shape) > 1 and shape[-1] == 1 else shape) + (depth,)
    return (shape[0], *shape[2:], depth) if len(shape) > 1 else (depth,)


def _output_mode(layer: str, mode, allowed=_OUTPUT_MODES) -> str:
    if mode == "binary":
        mode = "multi_hot"
    if mode not in allowed:
        raise ValueError(f"{layer}: output_mode must be one of {allowed}, got {mode!r}")
    return mode


def _no_sparse(layer: str, sparse) -> None:
    if sparse:
        raise NotImplementedError(f"{layer}: sparse=True is not supported (tapeflow layers return dense tensors)")


class CategoryEncoding(Layer):
    """Integer ids in [0, num_tokens) as one-hot, multi-hot or count vectors.

    Args:
        num_tokens: the number of categories (the output's last axis).
        output_mode: "multi_hot" (default; also "binary"), "one_hot" or "count".
        sparse: not supported (False only).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.CategoryEncoding(4, output_mode="count")(tp.tensor([[0, 1, 1]])).numpy().tolist()
    [[1.0, 2.0, 0.0, 0.0]]
    """

    def __init__(self, num_tokens=None, output_mode="multi_hot", sparse=False, **kwargs):
        super().__init__(**kwargs)
        if num_tokens is None:
            raise ValueError(f"{self.name}: num_tokens must be set (IntegerLookup learns a vocabulary instead)")
        self.num_tokens = _positive_int(self.name, "num_tokens", num_tokens)
        self.output_mode = _output_mode(self.name, output_mode, _OUTPUT_MODES[1:])
        _no_sparse(self.name, sparse)
        self.sparse = False

    def _convert_input(self, value):
        value = super()._convert_input(value)
        return value if value.dtype.kind in "iu" else cast(value, "int64")

    def call(self, inputs, count_weights=None):
        if count_weights is None:
            return encode_categories(inputs, self.output_mode, self.num_tokens, self.compute_dtype)
        if self.output_mode != "count":
            raise ValueError(f"{self.name}: count_weights is only used with output_mode='count'")
        hot = one_hot(inputs, self.num_tokens, dtype=self.compute_dtype)
        weighted = hot * cast(count_weights, self.compute_dtype)[..., None]
        return reduce_sum(weighted, 1 if inputs.ndim > 1 else 0)

    def compute_output_shape(self, input_shape):
        return _encoded_shape(input_shape, self.output_mode, self.num_tokens)

    def get_config(self):
        return {**super().get_config(), "num_tokens": self.num_tokens, "output_mode": self.output_mode}


# ------------------------------------------------------------- Discretization
def _summarize(values: np.ndarray, epsilon: float) -> np.ndarray:
    """A [2, n] (value, weight) summary of sorted `values`, one entry per 1/epsilon quantile."""
    values = np.sort(values.ravel())
    step = max(values.size * epsilon, 1.0)
    picked = values[int(step - 1) :: int(step)]
    return np.stack([picked, np.full(picked.shape, step, np.float32)])


def _compress(summary: np.ndarray, epsilon: float) -> np.ndarray:
    """The summary interpolated at the quantiles epsilon, 2 epsilon, ..., 1."""
    if summary.shape[1] * epsilon < 1:
        return summary
    percents = epsilon + np.arange(0.0, 1.0, epsilon)
    cumulative = summary[1].cumsum()
    fractions = cumulative / cumulative[-1]
    values = np.interp(percents, fractions, summary[0])
    cumulative = np.interp(percents, fractions, cumulative)
    weights = np.diff(cumulative, prepend=0.0)
    return np.stack([values, weights]).astype(np.float32)


class Discretization(Layer):
    """Bucket numbers by `bin_boundaries` (bucket i holds boundaries[i-1] <= x < boundaries[i]);
    or learn `num_bins` quantile boundaries with `adapt(data)`.

    Args:
        bin_boundaries: the sorted boundaries (len(boundaries) + 1 buckets).
        num_bins: the number of buckets to learn with `adapt` (instead of bin_boundaries).
        epsilon: the error tolerance of the quantiles learned by `adapt`.
        output_mode: "int" (bucket ids, int32), "one_hot", "multi_hot" or "count".
        sparse: not supported (False only).
        dtype: the layer dtype (floating).
        name: the layer's name.

    >>> import tapeflow as tp
    >>> layer = tp.layers.Discretization(bin_boundaries=[0.0, 1.0])
    >>> layer(tp.tensor([-1.0, 0.0, 0.5, 2.0])).numpy().tolist()
    [0, 1, 1, 2]
    """

    def __init__(
        self, bin_boundaries=None, num_bins=None, epsilon=0.01, output_mode="int", sparse=False, dtype=None, name=None
    ):
        super().__init__(name=name, dtype=dtype)
        self.output_mode = _output_mode(self.name, output_mode)
        _no_sparse(self.name, sparse)
        if num_bins is not None and (isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 0):
            raise ValueError(f"{self.name}: num_bins must be an int >= 0, got {num_bins!r}")
        if num_bins is not None and bin_boundaries is not None:
            raise ValueError(f"{self.name}: give num_bins or bin_boundaries, not both")
        if num_bins is None and bin_boundaries is None:
            raise ValueError(f"{self.name}: give either num_bins or bin_boundaries")
        if bin_boundaries is not None:
            bin_boundaries = [float(b) for b in bin_boundaries]
            if any(b > a for a, b in zip(bin_boundaries[1:], bin_boundaries, strict=False)):
                raise ValueError(f"{self.name}: bin_boundaries must be sorted, got {bin_boundaries}")
        self.bin_boundaries = bin_boundaries
        self.num_bins = num_bins
        self.epsilon = float(epsilon)
        self.sparse = False
        self.summary = np.zeros((2, 0), np.float32)

    def adapt(self, data, steps=None) -> None:
        """Learn `num_bins` boundaries at the quantiles of `data` (an array, tensor, dataset or
        iterable of batches; `steps` caps the number of batches)."""
        if self.num_bins is None:
            raise ValueError(f"{self.name}.adapt: the layer was given bin_boundaries; create it with num_bins to adapt")
        summary = np.zeros((2, 0), np.float32)
        for i, batch in enumerate(_batches(data)):
            if steps is not None and i >= steps:
                break
            merged = np.concatenate([_summarize(batch.astype(np.float32), self.epsilon), summary], axis=1)
            summary = _compress(merged[:, np.argsort(merged[0], kind="stable")], self.epsilon)
        self.summary = summary
        self.bin_boundaries = _compress(summary, 1.0 / self.num_bins)[0, :-1].tolist()

    def _convert_input(self, value):
        value = super()._convert_input(value)
        return value if value.dtype.kind == "f" else cast(value, self.compute_dtype)

    def call(self, inputs):
        if self.bin_boundaries is None:
            raise ValueError(f"{self.name}: pass bin_boundaries or call adapt() before using the layer")
        if self.bin_boundaries:
            edges = constant(np.asarray(self.bin_boundaries, inputs.dtype.np))
            indices = reduce_sum(cast(inputs[..., None] >= edges, "int32"), -1)
        else:
            indices = cast(inputs * 0.0, "int32")
        out_dtype = "int32" if self.output_mode == "int" else self.compute_dtype
        return encode_categories(indices, self.output_mode, len(self.bin_boundaries) + 1, out_dtype)

    def get_config(self):
        return {
            "bin_boundaries": self.bin_boundaries,
            "num_bins": self.num_bins,
            "epsilon": self.epsilon,
            "output_mode": self.output_mode,
            "sparse": self.sparse,
            "name": self.name,
            "dtype": self.dtype_policy.name,
        }

    @classmethod
    def from_config(cls, config: dict):
        config = dict(config)
        boundaries = config.pop("bin_boundaries", None)
        if config.get("num_bins") is None:
            return cls(bin_boundaries=boundaries, **config)
        layer = cls(**config)
        layer.bin_boundaries = boundaries
        return layer


# -------------------------------------------------------------- IntegerLookup
class IntegerLookup(Layer):
    """Map integers to contiguous indices by a vocabulary (or, with `invert=True`, indices
    back to integers). Values outside the vocabulary map to the OOV index.

    With a `mask_token`, index 0 is the mask; then come `num_oov_indices` (0 or 1) OOV
    indices; then the vocabulary in order. `adapt(data)` learns a vocabulary of the most
    frequent values (ties broken by value), up to `max_tokens` indices in all.

    Args:
        max_tokens: the largest number of indices (mask and OOV included), or None.
        num_oov_indices: 0 or 1 (an OOV value maps to the OOV index; with 0, to -1).
        mask_token: the value that marks padding (index 0), or None.
        oov_token: the value an inverted lookup returns for the OOV index (-1).
        vocabulary: the vocabulary (a list or array of distinct integers), or None to adapt.
        vocabulary_dtype: "int64" or "int32" (the dtype of values).
        idf_weights: not supported (tf_idf output is not offered).
        invert: map indices to values instead.
        output_mode: "int" (default), "one_hot", "multi_hot" or "count".
        sparse: not supported (False only).
        pad_to_max_tokens: with multi_hot/count/one_hot, make the last axis max_tokens long.
        name: the layer's name.
        **kwargs: the base layer's `trainable` and `dtype` (an integer dtype, as Keras gives,
            leaves the layer's floating policy as it is: ids follow `vocabulary_dtype`).

    >>> import tapeflow as tp
    >>> lookup = tp.layers.IntegerLookup(vocabulary=[12, 36, 7])
    >>> lookup(tp.tensor([[12, 7, 99]])).numpy().tolist()
    [[1, 3, 0]]
    >>> tp.layers.IntegerLookup(vocabulary=[12, 36, 7], invert=True)(tp.tensor([3, 0])).numpy().tolist()
    [7, -1]
    """

    def __init__(
        self,
        max_tokens=None,
        num_oov_indices=1,
        mask_token=None,
        oov_token=-1,
        vocabulary=None,
        vocabulary_dtype="int64",
        idf_weights=None,
        invert=False,
        output_mode="int",
        sparse=False,
        pad_to_max_tokens=False,
        name=None,
        **kwargs,
    ):
        dtype = kwargs.pop("dtype", None)  # Keras gives integer dtypes here; outputs follow vocabulary_dtype
        if dtype is not None and dtypes.as_dtype(dtype).kind != "f":
            dtype = None
        super().__init__(name=name, dtype=dtype, **kwargs)
        if num_oov_indices not in (0, 1):
            raise NotImplementedError(
                f"{self.name}: num_oov_indices={num_oov_indices!r} is not supported: give 0 or 1 (several OOV "
                "indices need a hash of the values)"
            )
        if idf_weights is not None or output_mode == "tf_idf":
            raise NotImplementedError(f"{self.name}: output_mode='tf_idf' and idf_weights are not supported")
        if vocabulary_dtype not in ("int64", "int32"):
            raise ValueError(f"{self.name}: vocabulary_dtype must be 'int64' or 'int32', got {vocabulary_dtype!r}")
        _no_sparse(self.name, sparse)
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 1):
            raise ValueError(f"{self.name}: max_tokens must be None or an int > 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.num_oov_indices = num_oov_indices
        self.mask_token = None if mask_token is None else int(mask_token)
        self.oov_token = int(oov_token)
        self.vocabulary_dtype = vocabulary_dtype
        self.invert = bool(invert)
        self.output_mode = _output_mode(self.name, output_mode)
        if self.invert and self.output_mode != "int":
            raise ValueError(f"{self.name}: invert=True needs output_mode='int', got {output_mode!r}")
        self.sparse = False
        self.pad_to_max_tokens = bool(pad_to_max_tokens)
        if self.pad_to_max_tokens and max_tokens is None:
            raise ValueError(f"{self.name}: pad_to_max_tokens=True needs max_tokens")
        self._vocabulary = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    def set_vocabulary(self, vocabulary) -> None:
        """Use `vocabulary` (distinct integers, without the mask token)."""
        values = np.asarray(vocabulary).ravel()
        if values.size and values.dtype.kind not in "iu":
            raise ValueError(f"{self.name}: the vocabulary must hold integers, got dtype {values.dtype}")
        values = values.astype(np.int64)
        if len(np.unique(values)) != len(values):
            raise ValueError(f"{self.name}: the vocabulary holds repeated values: {values.tolist()}")
        if self.mask_token is not None and self.mask_token in values:
            raise ValueError(f"{self.name}: the vocabulary must not hold the mask token {self.mask_token}")
        if self.max_tokens is not None and len(values) + self._reserved() > self.max_tokens:
            raise ValueError(
                f"{self.name}: a vocabulary of {len(values)} values and {self._reserved()} reserved indices exceeds "
                f"max_tokens={self.max_tokens}"
            )
        self._vocabulary = values

    def _reserved(self) -> int:
        return (self.mask_token is not None) + self.num_oov_indices

    def adapt(self, data, steps=None) -> None:
        """Learn the vocabulary: the most frequent values of `data`, most frequent first."""
        counts: dict[int, int] = {}
        for i, batch in enumerate(_batches(data)):
            if steps is not None and i >= steps:
                break
            values, n = np.unique(batch.astype(np.int64), return_counts=True)
            for v, c in zip(values.tolist(), n.tolist(), strict=True):
                counts[v] = counts.get(v, 0) + c
        counts.pop(self.mask_token, None)
        ordered = sorted(counts, key=lambda v: (-counts[v], v))
        if self.max_tokens is not None:
            ordered = ordered[: self.max_tokens - self._reserved()]
        self._vocabulary = None
        self.set_vocabulary(np.asarray(ordered, np.int64))

    def get_vocabulary(self, include_special_tokens: bool = True) -> list:
        """The value of each index (the mask and OOV tokens first, when included)."""
        self._require_vocabulary()
        special = ([self.mask_token] if self.mask_token is not None else []) + [self.oov_token] * self.num_oov_indices
        return (special if include_special_tokens else []) + self._vocabulary.tolist()

    def vocabulary_size(self) -> int:
        """The number of indices, mask and OOV included."""
        self._require_vocabulary()
        return len(self._vocabulary) + self._reserved()

    def _require_vocabulary(self) -> None:
        if self._vocabulary is None:
            raise ValueError(f"{self.name}: give a vocabulary or call adapt() before using the layer")

    def _convert_input(self, value):
        value = super()._convert_input(value)
        if value.dtype.kind not in "iu":
            raise TypeError(f"{self.name}: expected integer inputs, got dtype {value.dtype}")
        return value

    def _depth(self) -> int:
        return self.max_tokens if self.pad_to_max_tokens else self.vocabulary_size()

    def call(self, inputs):
        self._require_vocabulary()
        table = self.get_vocabulary()
        if self.invert:
            values = np.asarray(table, np.int64)
            ids = constant(np.arange(len(values), dtype=np.int64))
            hits = cast(cast(inputs, "int64")[..., None] == ids, "int64")
            found = reduce_sum(hits, -1)
            picked = reduce_sum(hits * constant(values), -1) + (1 - found) * self.oov_token
            return cast(picked, self.vocabulary_dtype)
        vocab = constant(self._vocabulary)
        hits = cast(cast(inputs, "int64")[..., None] == vocab, "int64")
        positions = constant(np.arange(self._reserved(), self._reserved() + len(self._vocabulary), dtype=np.int64))
        indices = reduce_sum(hits * positions, -1)
        oov_index = (1 if self.mask_token is not None else 0) if self.num_oov_indices else -1
        indices = indices + (1 - reduce_sum(hits, -1)) * oov_index
        if self.mask_token is not None:
            indices = indices * cast(inputs != self.mask_token, "int64")
        if self.output_mode == "int":
            return indices
        return encode_categories(indices, self.output_mode, self._depth(), self.compute_dtype)

    def get_config(self):
        vocabulary = None if self._vocabulary is None else self._vocabulary.tolist()
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": self.dtype_policy.name,
            "max_tokens": self.max_tokens,
            "num_oov_indices": self.num_oov_indices,
            "mask_token": self.mask_token,
            "oov_token": self.oov_token,
            "vocabulary": vocabulary,
            "vocabulary_dtype": self.vocabulary_dtype,
            "idf_weights": None,
            "invert": self.invert,
            "output_mode": self.output_mode,
            "sparse": self.sparse,
            "pad_to_max_tokens": self.pad_to_max_tokens,
        }
