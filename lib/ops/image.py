"""`tp.ops.image`, as Keras 3's `keras.ops.image`: resizing, affine warps, colour spaces,
padding and cropping, patches, blurs and edges, all written from tapeflow ops so that
they differentiate with respect to the images.

Images are batches `(batch, height, width, channels)` ("channels_last", the default of
`data_format=None`) or `(batch, channels, height, width)` ("channels_first"); a single
image without the batch axis is accepted too.

>>> import tapeflow as tp
>>> tp.ops.image.resize(tp.ones((1, 4, 4, 3)), (2, 2)).shape
(1, 2, 2, 3)
"""

from __future__ import annotations

import numpy as np

from tapeflow.backends.common import ufunc_at
from tapeflow.ops import linalg, math, random
from tapeflow.ops.array import gather, pad, stack
from tapeflow.ops.core import cast, ones_like, reshape, transpose, zeros_like
from tapeflow.ops.creation import constant
from tapeflow.ops.keras_names import cumsum
from tapeflow.ops.nn.conv3d import conv3d
from tapeflow.ops.nn.functions import conv2d
from tapeflow.ops.reduce import mean as reduce_mean
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor

__all__ = [
    "affine_transform",
    "crop_images",
    "elastic_transform",
    "extract_patches",
    "extract_patches_3d",
    "gaussian_blur",
    "hsv_to_rgb",
    "map_coordinates",
    "pad_images",
    "perspective_transform",
    "resize",
    "rgb_to_grayscale",
    "rgb_to_hsv",
    "scale_and_translate",
    "sobel_edges",
    "ssim",
]

_DATA_FORMATS = ("channels_last", "channels_first")
_RESIZE_METHODS = ("bilinear", "nearest", "bicubic", "lanczos3", "lanczos5")
_FILL_MODES = ("constant", "nearest", "wrap", "mirror", "reflect")


# ----------------------------------------------------------------- helpers
def _data_format(op: str, data_format) -> str:
    fmt = "channels_last" if data_format is None else str(data_format).lower()
    if fmt not in _DATA_FORMATS:
        raise ValueError(f"{op}: data_format must be one of {_DATA_FORMATS} or None, got {data_format!r}")
    return fmt


def _images(op: str, images, ranks=(3, 4)) -> Tensor:
    images = as_tensor(images, name=op)
    if images.ndim not in ranks:
        raise ValueError(
            f"{op}: expected images of rank {' or '.join(map(str, ranks))} (a single image or a batch), "
            f"got shape {images.shape}"
        )
    return images


def _to_nhwc(images: Tensor, fmt: str) -> tuple[Tensor, bool]:
    """A rank-4 channels_last view of `images`, and whether a batch axis was added."""
    single = images.ndim == 3
    if single:
        images = reshape(images, (1, *images.shape))
    if fmt == "channels_first":
        images = transpose(images, (0, 2, 3, 1))
    return images, single


def _from_nhwc(images: Tensor, fmt: str, single: bool) -> Tensor:
    if fmt == "channels_first":
        images = transpose(images, (0, 3, 1, 2))
    if single:
        images = reshape(images, images.shape[1:])
    return images


def _as_float(images: Tensor) -> Tensor:
    return images if images.dtype.kind == "f" else cast(images, "float32")


def _back_to(result: Tensor, dtype) -> Tensor:
    """`result` in `dtype`, rounded first when `dtype` is an integer type."""
    if result.dtype is dtype:
        return result
    if dtype.kind in "iu":
        result = _round_half_even(result)
    return cast(result, dtype)


def _floor(x: Tensor) -> Tensor:
    """floor(x), without a gradient, for index arithmetic on float tensors."""
    x = math.stop_gradient(x)
    t = cast(cast(x, "int64"), x.dtype)
    return math.where(math.greater(t, x), t - 1.0, t)


def _round_half_even(x: Tensor) -> Tensor:
    f = _floor(x)
    d = math.stop_gradient(x) - f
    odd = f - 2.0 * _floor(f * 0.5)
    return math.where(math.greater(d, 0.5), f + 1.0, math.where(math.less(d, 0.5), f, f + odd))


def _fmod(x: Tensor, n) -> Tensor:
    return x - n * _floor(x / n)


def _mirror(index: Tensor, size: int) -> Tensor:
    s = size - 1
    if s == 0:
        return zeros_like(index)
    return math.abs(_fmod(index + s, 2 * s) - s)


def _fix_index(index: Tensor, size: int, fill_mode: str) -> Tensor:
    if fill_mode in ("constant", "nearest"):
        return math.clip(index, 0.0, float(size - 1))
    if fill_mode == "wrap":
        return _fmod(index, float(size))
    if fill_mode == "mirror":
        return _mirror(index, size)
    return _floor((_mirror(2.0 * index + 1.0, 2 * size + 1) - 1.0) * 0.5)


def _interpolation_nodes(coordinate: Tensor, order: int):
    """(index, weight) pairs of one axis: index a float tensor holding integers."""
    if order == 0:
        return [(_round_half_even(coordinate), None)]
    lower = _floor(coordinate)
    upper_weight = coordinate - lower
    return [(lower, 1.0 - upper_weight), (lower + 1.0, upper_weight)]


def _sample(flat: Tensor, base: Tensor, coords: list, sizes: list, strides: list, order, fill_mode, fill_value):
    """Sum over the interpolation corners of weight * flat[base + sum(index * stride)].

    `flat` is the input flattened; `base` the flat offset of the axes that are not
    interpolated; `coords` one float coordinate tensor per interpolated axis.
    """
    per_axis = []
    for coordinate, size in zip(coords, sizes, strict=True):
        nodes = []
        for index, weight in _interpolation_nodes(coordinate, order):
            valid = None
            if fill_mode == "constant":
                valid = math.logical_and(math.greater_equal(index, 0.0), math.less(index, float(size)))
            nodes.append((_fix_index(index, size, fill_mode), valid, weight))
        per_axis.append(nodes)
    total = None
    corners = [[]]
    for nodes in per_axis:
        corners = [c + [n] for c in corners for n in nodes]
    for corner in corners:
        offset = base
        valid = None
        weight = None
        for (index, ok, w), stride in zip(corner, strides, strict=True):
            offset = offset + cast(index, "int64") * stride
            if ok is not None:
                valid = ok if valid is None else math.logical_and(valid, ok)
            if w is not None:
                weight = w if weight is None else weight * w
        value = gather(flat, offset, axis=0)
        if valid is not None:
            value = math.where(valid, value, math.cast(constant(fill_value), value.dtype))
        if weight is not None:
            value = value * cast(weight, value.dtype)
        total = value if total is None else total + value
    return total


def _check_choice(op: str, arg: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{op}: {arg} must be one of {choices}, got {value!r}")


# ------------------------------------------------------------------ resize
def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    far = ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
    return np.where(t <= 1.0, near, np.where(t < 2.0, far, 0.0))


def _resize_matrix(n_in: int, n_out: int, method: str, antialias: bool) -> np.ndarray:
    """The (n_out, n_in) matrix that resamples one axis, with half-pixel centres: PyTorch's
    weights for bilinear, nearest and bicubic, JAX's for the Lanczos kernels."""
    if method.startswith("lanczos"):
        return _scale_matrix(n_in, n_out, n_out / n_in, 0.0, _SCALE_KERNELS[method], antialias).T
    scale = n_in / n_out
    out = np.arange(n_out, dtype=np.float64)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if antialias and method in ("bilinear", "bicubic"):
        stretch = max(scale, 1.0)
        support = (1.0 if method == "bilinear" else 2.0) * stretch
        centre = scale * (out + 0.5)
        lo = np.maximum((centre - support + 0.5).astype(np.int64), 0)
        hi = np.minimum((centre + support + 0.5).astype(np.int64), n_in)
        for i in range(n_out):
            j = np.arange(lo[i], hi[i])
            t = (j - centre[i] + 0.5) / stretch
            w = np.maximum(1.0 - np.abs(t), 0.0) if method == "bilinear" else _cubic(t, -0.5)
            m[i, j] = w / w.sum()
        return m
    if method == "nearest":
        src = np.minimum(np.floor((out + 0.5) * scale).astype(np.int64), n_in - 1)
        m[rows, src] = 1.0
        return m
    src = (out + 0.5) * scale - 0.5
    if method == "bilinear":
        src = np.maximum(src, 0.0)
        i0 = np.floor(src).astype(np.int64)
        lam = src - i0
        i0 = np.minimum(i0, n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        ufunc_at(np.add, m, (rows, i0), 1.0 - lam)
        ufunc_at(np.add, m, (rows, i1), lam)
        return m
    i0 = np.floor(src).astype(np.int64)
    t = src - i0
    for k in range(-1, 3):
        ufunc_at(np.add, m, (rows, np.clip(i0 + k, 0, n_in - 1)), _cubic(t - k, -0.75))
    return m


def _resample_axis(x: Tensor, matrix: np.ndarray, axis: int) -> Tensor:
    """Apply `matrix` (n_out, n_in) along `axis` (1 or 2) of an NHWC tensor."""
    b, h, w, c = x.shape
    m = constant(matrix.astype(x.dtype.np))
    if axis == 1:
        flat = reshape(x, (-1, h, w * c))
        return reshape(math.matmul(m, flat), (-1, matrix.shape[0], w, c))
    flat = reshape(x, (-1, w, c))
    return reshape(math.matmul(m, flat), (-1, h, matrix.shape[0], c))


def resize(
    images,
    size,
    interpolation="bilinear",
    antialias=False,
    crop_to_aspect_ratio=False,
    pad_to_aspect_ratio=False,
    fill_mode="constant",
    fill_value=0.0,
    data_format=None,
) -> Tensor:
    """Resize images to `size` = (height, width) with half-pixel centres ("bilinear",
    "nearest", "bicubic", "lanczos3" or "lanczos5"); `crop_to_aspect_ratio` / `pad_to_aspect_ratio` first crop or pad
    the centre to the target's aspect ratio.

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(4.0), (1, 2, 2, 1))
    >>> tp.ops.image.resize(x, (1, 1))[0, :, :, 0].numpy().tolist()
    [[1.5]]
    """
    op = "image.resize"
    fmt = _data_format(op, data_format)
    if interpolation == "area":
        raise NotImplementedError(f"{op}: interpolation='area' is not supported; use one of {_RESIZE_METHODS}")
    _check_choice(op, "interpolation", interpolation, _RESIZE_METHODS)
    if fill_mode != "constant":
        raise ValueError(f"{op}: only fill_mode='constant' is supported, got fill_mode={fill_mode!r}")
    if crop_to_aspect_ratio and pad_to_aspect_ratio:
        raise ValueError(f"{op}: only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be True")
    if len(size) != 2:
        raise ValueError(f"{op}: size must be a tuple of two elements (height, width), got size={size!r}")
    out_h, out_w = (int(s) for s in size)
    images = _images(op, images)
    dtype = images.dtype
    x, single = _to_nhwc(_as_float(images), fmt)
    _, height, width, channels = x.shape
    if height is None or width is None:
        raise ValueError(f"{op}: the height and width of the images must be known, got shape {images.shape}")
    if height == 0 or width == 0:
        raise ValueError(f"{op}: cannot resize images of height {height} and width {width} (shape {images.shape})")
    if crop_to_aspect_ratio:
        crop_h = max(min(height, int(float(width * out_h) / out_w)), 1)
        crop_w = max(min(width, int(float(height * out_w) / out_h)), 1)
        top, left = int(float(height - crop_h) / 2), int(float(width - crop_w) / 2)
        x = x[:, top : top + crop_h, left : left + crop_w, :]
    elif pad_to_aspect_ratio:
        pad_h = max(height, int(float(width * out_h) / out_w))
        pad_w = max(width, int(float(height * out_w) / out_h))
        top, left = int(float(pad_h - height) / 2), int(float(pad_w - width) / 2)
        x = pad(x, [[0, 0], [top, top], [left, left], [0, 0]], constant_values=float(fill_value))
    _, height, width, _ = x.shape
    if height != out_h:
        x = _resample_axis(x, _resize_matrix(height, out_h, interpolation, bool(antialias)), 1)
    if width != out_w:
        x = _resample_axis(x, _resize_matrix(width, out_w, interpolation, bool(antialias)), 2)
    if dtype.kind in "iu" and interpolation == "bicubic" and dtype.name == "uint8":
        x = math.clip(x, 0.0, 255.0)
    return _back_to(_from_nhwc(x, fmt, single), dtype)


# -------------------------------------------------------- affine / coordinates
def map_coordinates(inputs, coordinates, order, fill_mode="constant", fill_value=0) -> Tensor:
    """Sample `inputs` at `coordinates` (one array per input axis, each of the output's
    shape) with nearest (order 0) or linear (order 1) interpolation.

    >>> import tapeflow as tp
    >>> x = tp.tensor([0.0, 10.0, 20.0])
    >>> tp.ops.image.map_coordinates(x, [tp.tensor([0.5, 1.25])], order=1).numpy().tolist()
    [5.0, 12.5]
    """
    op = "image.map_coordinates"
    inputs = as_tensor(inputs, name=op)
    if isinstance(coordinates, Tensor):
        coords = [coordinates[i] for i in range(coordinates.shape[0])]
    else:
        coords = [as_tensor(c, name=op) for c in coordinates]
    if len(coords) != inputs.ndim:
        raise ValueError(
            f"{op}: the first dimension of coordinates must equal the rank of inputs ({inputs.ndim}), got {len(coords)}"
        )
    if coords[0].ndim < 1:
        raise ValueError(f"{op}: expected coordinates of rank at least 2, got shape {(len(coords), *coords[0].shape)}")
    _check_choice(op, "fill_mode", fill_mode, _FILL_MODES)
    if order not in (0, 1):
        raise NotImplementedError(f"{op}: only order 0 and 1 are supported, got order={order!r}")
    if any(d is None for d in inputs.shape):
        raise ValueError(f"{op}: the shape of inputs must be known, got {inputs.shape}")
    coords = [c if c.dtype.kind == "f" else cast(c, "float32") for c in coords]
    dtype = inputs.dtype
    values = _as_float(inputs)
    strides = [int(np.prod(inputs.shape[i + 1 :])) for i in range(inputs.ndim)]
    base = zeros_like(coords[0], "int64")
    out = _sample(reshape(values, (-1,)), base, coords, list(inputs.shape), strides, order, fill_mode, fill_value)
    return _back_to(out, dtype)


def _warp(x: Tensor, src_y: Tensor, src_x: Tensor, interpolation, fill_mode, fill_value) -> Tensor:
    """Sample NHWC `x` at source rows `src_y` and columns `src_x` (each broadcast to x's shape)."""
    _, h, w, c = x.shape
    like = zeros_like(x, src_y.dtype)
    src_y, src_x = src_y + like, src_x + like
    batch_index = cumsum(ones_like(x[:, 0, 0, 0], "int64")) - 1
    base = reshape(batch_index, (-1, 1, 1, 1)) * (h * w * c) + constant(np.arange(c, dtype=np.int64))
    order = 0 if interpolation == "nearest" else 1
    return _sample(reshape(x, (-1,)), base, [src_y, src_x], [h, w], [w * c, c], order, fill_mode, fill_value)


def affine_transform(
    images, transform, interpolation="bilinear", fill_mode="constant", fill_value=0, data_format=None
) -> Tensor:
    """Warp images by projective transforms [a0, a1, a2, b0, b1, b2, c0, c1] (one row of 8
    per image, or one for all): output pixel (y, x) reads the input at
    (b0 x + b1 y + b2, a0 x + a1 y + a2).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(9.0), (1, 3, 3, 1))
    >>> shift = tp.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    >>> tp.ops.image.affine_transform(x, shift)[0, :, :, 0].numpy().tolist()
    [[1.0, 2.0, 0.0], [4.0, 5.0, 0.0], [7.0, 8.0, 0.0]]
    """
    op = "image.affine_transform"
    fmt = _data_format(op, data_format)
    _check_choice(op, "interpolation", interpolation, ("nearest", "bilinear"))
    _check_choice(op, "fill_mode", fill_mode, _FILL_MODES)
    images = _images(op, images)
    transform = as_tensor(transform, name=op)
    if transform.ndim not in (1, 2):
        raise ValueError(
            f"{op}: expected a transform of rank 1 (one transform) or 2 (a batch), got shape {transform.shape}"
        )
    if transform.shape[-1] != 8:
        raise ValueError(f"{op}: a transform has 8 values, got shape {transform.shape}")
    dtype = images.dtype
    x, single = _to_nhwc(_as_float(images), fmt)
    _, h, w, c = x.shape
    if any(d is None for d in (h, w, c)):
        raise ValueError(f"{op}: the height, width and channels of the images must be known, got {images.shape}")
    if transform.dtype.kind != "f":
        transform = cast(transform, "float32")
    if transform.ndim == 1:
        transform = reshape(transform, (1, 8))
    t = reshape(transform, (-1, 8, 1, 1, 1))
    grid = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    yy, xx, cc = (constant(g.astype(transform.dtype.np)) for g in grid)
    src_y = t[:, 4] * yy + t[:, 3] * xx + t[:, 6] * cc + t[:, 5]
    src_x = t[:, 1] * yy + t[:, 0] * xx + t[:, 7] * cc + t[:, 2]
    out = _warp(x, src_y, src_x, interpolation, fill_mode, fill_value)
    return _back_to(_from_nhwc(out, fmt, single), dtype)


# ------------------------------------------------------------- pad / crop
def _check_sides(op: str, first, second, target, names) -> None:
    if [first, second, target].count(None) != 1:
        raise ValueError(
            f"{op}: exactly one of {names[0]}, {names[1]} and {names[2]} must be None, got "
            f"{names[0]}={first}, {names[1]}={second}, {names[2]}={target}"
        )


def _non_negative(op: str, **values) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{op}: {name} must be >= 0, got {name}={value}")


def _spatial(images: Tensor, fmt: str) -> tuple[int, int]:
    return (images.shape[-3], images.shape[-2]) if fmt == "channels_last" else (images.shape[-2], images.shape[-1])


def pad_images(
    images,
    top_padding=None,
    left_padding=None,
    bottom_padding=None,
    right_padding=None,
    target_height=None,
    target_width=None,
    data_format=None,
) -> Tensor:
    """Pad images with zeros to `target_height` x `target_width`, or by the given sides.

    >>> import tapeflow as tp
    >>> tp.ops.image.pad_images(tp.ones((2, 2, 1)), 1, 0, target_height=4, target_width=3).shape
    (4, 3, 1)
    """
    op = "image.pad_images"
    fmt = _data_format(op, data_format)
    images = _images(op, images)
    _check_sides(op, top_padding, bottom_padding, target_height, ("top_padding", "bottom_padding", "target_height"))
    _check_sides(op, left_padding, right_padding, target_width, ("left_padding", "right_padding", "target_width"))
    height, width = _spatial(images, fmt)
    if top_padding is None:
        top_padding = target_height - bottom_padding - height
    if bottom_padding is None:
        bottom_padding = target_height - top_padding - height
    if left_padding is None:
        left_padding = target_width - right_padding - width
    if right_padding is None:
        right_padding = target_width - left_padding - width
    _non_negative(
        op,
        top_padding=top_padding,
        left_padding=left_padding,
        right_padding=right_padding,
        bottom_padding=bottom_padding,
    )
    widths = [[top_padding, bottom_padding], [left_padding, right_padding]]
    widths = widths + [[0, 0]] if fmt == "channels_last" else [[0, 0]] + widths
    if images.ndim == 4:
        widths = [[0, 0]] + widths
    return pad(images, widths)


def crop_images(
    images,
    top_cropping=None,
    left_cropping=None,
    bottom_cropping=None,
    right_cropping=None,
    target_height=None,
    target_width=None,
    data_format=None,
) -> Tensor:
    """Crop images to `target_height` x `target_width`, or by the given sides.

    >>> import tapeflow as tp
    >>> tp.ops.image.crop_images(tp.ones((4, 4, 1)), 1, 1, target_height=2, target_width=3).shape
    (2, 3, 1)
    """
    op = "image.crop_images"
    fmt = _data_format(op, data_format)
    images = _images(op, images)
    _check_sides(op, top_cropping, bottom_cropping, target_height, ("top_cropping", "bottom_cropping", "target_height"))
    _check_sides(op, left_cropping, right_cropping, target_width, ("left_cropping", "right_cropping", "target_width"))
    height, width = _spatial(images, fmt)
    if top_cropping is None:
        top_cropping = height - target_height - bottom_cropping
    if target_height is None:
        target_height = height - bottom_cropping - top_cropping
    if left_cropping is None:
        left_cropping = width - target_width - right_cropping
    if target_width is None:
        target_width = width - right_cropping - left_cropping
    _non_negative(
        op,
        top_cropping=top_cropping,
        target_height=target_height,
        left_cropping=left_cropping,
        target_width=target_width,
    )
    rows = slice(top_cropping, top_cropping + target_height)
    cols = slice(left_cropping, left_cropping + target_width)
    index = (rows, cols, slice(None)) if fmt == "channels_last" else (slice(None), rows, cols)
    if images.ndim == 4:
        index = (slice(None), *index)
    return images[index]


# ----------------------------------------------------------------- colour
def _channel_axis(fmt: str) -> int:
    return -1 if fmt == "channels_last" else -3


def _planes(images: Tensor, fmt: str) -> list[Tensor]:
    axis = _channel_axis(fmt)
    index = [slice(None)] * images.ndim
    planes = []
    for i in range(3):
        index[axis] = i
        planes.append(images[tuple(index)])
    return planes


def rgb_to_grayscale(images, data_format=None) -> Tensor:
    """Luma 0.2989 R + 0.587 G + 0.114 B, keeping a channel axis of size 1.

    >>> import tapeflow as tp
    >>> tp.ops.image.rgb_to_grayscale(tp.ones((2, 2, 3))).shape
    (2, 2, 1)
    """
    op = "image.rgb_to_grayscale"
    fmt = _data_format(op, data_format)
    images = _images(op, images)
    axis = _channel_axis(fmt)
    if images.shape[axis] not in (1, 3):
        raise ValueError(f"{op}: expected 3 (RGB) or 1 (grayscale) channels, got images of shape {images.shape}")
    if images.shape[axis] == 1:
        return math.identity(images)
    r, g, b = _planes(_as_float(images), fmt)
    gray = 0.2989 * r + 0.587 * g + 0.114 * b
    return _back_to(stack([gray], axis=axis), images.dtype)


def _float_images(op: str, images) -> Tensor:
    images = _images(op, images)
    if images.dtype.kind != "f":
        raise ValueError(f"{op}: expected images of a float dtype, got {images.dtype}")
    return images


def rgb_to_hsv(images, data_format=None) -> Tensor:
    """RGB in [0, 1] to hue, saturation and value in [0, 1].

    >>> import tapeflow as tp
    >>> tp.ops.image.rgb_to_hsv(tp.tensor([[[1.0, 0.0, 0.0]]])).numpy().tolist()
    [[[0.0, 1.0, 1.0]]]
    """
    op = "image.rgb_to_hsv"
    fmt = _data_format(op, data_format)
    images = _float_images(op, images)
    eps = float(np.finfo(images.dtype.np).eps)
    images = math.where(math.less(math.abs(images), eps), 0.0, images)
    r, g, b = _planes(images, fmt)
    value = math.maximum(math.maximum(r, g), b)
    range_ = value - math.minimum(math.minimum(r, g), b)
    positive_value = math.greater(value, 0.0)
    positive_range = math.greater(range_, 0.0)
    saturation = math.where(positive_value, range_ / math.where(positive_value, value, 1.0), 0.0)
    norm = 1.0 / (6.0 * math.where(positive_range, range_, 1.0))
    hue = math.where(math.equal(value, g), norm * (b - r) + 2.0 / 6.0, norm * (r - g) + 4.0 / 6.0)
    hue = math.where(math.equal(value, r), norm * (g - b), hue)
    hue = math.where(positive_range, hue, 0.0)
    hue = hue + cast(math.less(hue, 0.0), hue.dtype)
    return stack([hue, saturation, value], axis=_channel_axis(fmt))


def hsv_to_rgb(images, data_format=None) -> Tensor:
    """Hue, saturation and value in [0, 1] to RGB.

    >>> import tapeflow as tp
    >>> tp.ops.image.hsv_to_rgb(tp.tensor([[[0.0, 1.0, 1.0]]])).numpy().tolist()
    [[[1.0, 0.0, 0.0]]]
    """
    op = "image.hsv_to_rgb"
    fmt = _data_format(op, data_format)
    images = _float_images(op, images)
    hue, saturation, value = _planes(images, fmt)
    dh = (hue - _floor(hue)) * 6.0
    dr = math.clip(math.abs(dh - 3.0) - 1.0, 0.0, 1.0)
    dg = math.clip(2.0 - math.abs(dh - 2.0), 0.0, 1.0)
    db = math.clip(2.0 - math.abs(dh - 4.0), 0.0, 1.0)
    grey = 1.0 - saturation
    planes = [value * (grey + saturation * d) for d in (dr, dg, db)]
    return stack(planes, axis=_channel_axis(fmt))


# ---------------------------------------------------------------- filters
def _per_channel_conv(x: Tensor, kernel: np.ndarray, padding) -> Tensor:
    """Convolve every channel of NHWC `x` with the same 2-D `kernel`."""
    n, h, w, c = x.shape
    planes = reshape(transpose(x, (0, 3, 1, 2)), (-1, h, w, 1))
    out = conv2d(planes, constant(kernel.astype(x.dtype.np)[:, :, None, None]), 1, padding)
    out = reshape(out, (-1, c, out.shape[1], out.shape[2]))
    return transpose(out, (0, 2, 3, 1))


def _gaussian(size: int, sigma: float) -> np.ndarray:
    t = np.arange(size, dtype=np.float64) - (size - 1) / 2
    k = np.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def gaussian_blur(images, kernel_size=(3, 3), sigma=(1.0, 1.0), data_format=None) -> Tensor:
    """Blur each channel with a Gaussian kernel of `kernel_size` (height, width) and
    standard deviations `sigma`, zero-padded to keep the size.

    >>> import tapeflow as tp
    >>> tp.ops.image.gaussian_blur(tp.ones((1, 5, 5, 2))).shape
    (1, 5, 5, 2)
    """
    op = "image.gaussian_blur"
    fmt = _data_format(op, data_format)
    images = _images(op, images)
    kh, kw = (int(k) for k in kernel_size)
    sy, sx = (float(s) for s in sigma)
    kernel = np.outer(_gaussian(kw, sx), _gaussian(kh, sy)).reshape(kh, kw)
    x, single = _to_nhwc(_as_float(images), fmt)
    p = kh // 2
    out = _per_channel_conv(x, kernel, ((p, p), (p, p)))
    return _back_to(_from_nhwc(out, fmt, single), images.dtype)


def sobel_edges(images, data_format=None) -> Tensor:
    """Sobel gradients of each channel, zero-padded: shape (..., 2) with the vertical
    response first and the horizontal one second.

    >>> import tapeflow as tp
    >>> tp.ops.image.sobel_edges(tp.ones((1, 4, 4, 3))).shape
    (1, 4, 4, 3, 2)
    """
    op = "image.sobel_edges"
    fmt = _data_format(op, data_format)
    images = _images(op, images, ranks=(4,))
    x, _ = _to_nhwc(_as_float(images), fmt)
    kx = np.array([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
    edges = [_per_channel_conv(x, k, ((1, 1), (1, 1))) for k in (kx.T, kx)]
    if fmt == "channels_first":
        edges = [transpose(e, (0, 3, 1, 2)) for e in edges]
    return stack(edges, axis=-1)


# ---------------------------------------------------------------- patches
def extract_patches(images, size, strides=None, dilation_rate=1, padding="valid", data_format=None) -> Tensor:
    """Patches of `size` (an int or (height, width)) flattened into the channel axis:
    (batch, rows, cols, size_h * size_w * channels); `strides` default to `size`.

    >>> import tapeflow as tp
    >>> tp.ops.image.extract_patches(tp.ones((1, 4, 4, 3)), 2).shape
    (1, 2, 2, 12)
    """
    op = "image.extract_patches"
    if not isinstance(size, int) and len(size) == 3:
        return extract_patches_3d(images, size, strides, dilation_rate, padding, data_format)
    if isinstance(size, int):
        ph = pw = size
    elif len(size) == 2:
        ph, pw = (int(s) for s in size)
    else:
        raise TypeError(f"{op}: size must be an int or a tuple of length 2, got size={size!r}")
    fmt = _data_format(op, data_format)
    if str(padding).lower() not in ("valid", "same"):
        raise ValueError(f"{op}: padding must be 'valid' or 'same', got {padding!r}")
    images = _images(op, images)
    x, single = _to_nhwc(images, fmt)
    c = x.shape[-1]
    depth = ph * pw * c
    kernel = constant(np.eye(depth, dtype=x.dtype.np).reshape(ph, pw, c, depth))
    out = conv2d(x, kernel, strides or (ph, pw), str(padding).upper(), dilation_rate)
    return _from_nhwc(out, fmt, single)


def _homographies(start_points: Tensor, end_points: Tensor) -> Tensor:
    """The (batch, 8) projective transforms that map end_points onto start_points."""
    sx, sy = start_points[:, :, 0], start_points[:, :, 1]
    ex, ey = end_points[:, :, 0], end_points[:, :, 1]
    zero, one = zeros_like(ex), ones_like(ex)
    rows = []
    for i in range(4):
        rows.append(
            stack(
                [
                    ex[:, i],
                    ey[:, i],
                    one[:, i],
                    zero[:, i],
                    zero[:, i],
                    zero[:, i],
                    -sx[:, i] * ex[:, i],
                    -sx[:, i] * ey[:, i],
                ],
                axis=-1,
            )
        )
        rows.append(
            stack(
                [
                    zero[:, i],
                    zero[:, i],
                    zero[:, i],
                    ex[:, i],
                    ey[:, i],
                    one[:, i],
                    -sy[:, i] * ex[:, i],
                    -sy[:, i] * ey[:, i],
                ],
                axis=-1,
            )
        )
    matrix = stack(rows, axis=1)
    target = reshape(stack([sx, sy], axis=-1), (-1, 8))
    return linalg.solve(matrix, target)


def perspective_transform(
    images, start_points, end_points, interpolation="bilinear", fill_value=0, data_format=None
) -> Tensor:
    """Warp images so that the four `start_points` (x, y) land on `end_points`; points are
    (4, 2) for all images or (batch, 4, 2).

    >>> import tapeflow as tp
    >>> corners = tp.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0], [3.0, 3.0]])
    >>> x = tp.reshape(tp.arange(16.0), (1, 4, 4, 1))
    >>> bool((tp.ops.image.perspective_transform(x, corners, corners) - x).numpy().max() < 1e-4)
    True
    """
    op = "image.perspective_transform"
    fmt = _data_format(op, data_format)
    _check_choice(op, "interpolation", interpolation, ("nearest", "bilinear"))
    images = _images(op, images)
    start, end = as_tensor(start_points, name=op), as_tensor(end_points, name=op)
    for label, pts in (("start_points", start), ("end_points", end)):
        if pts.ndim not in (2, 3) or tuple(pts.shape[-2:]) != (4, 2):
            raise ValueError(f"{op}: {label} must have shape (4, 2) or (batch, 4, 2), got {pts.shape}")
    if tuple(start.shape) != tuple(end.shape):
        raise ValueError(f"{op}: start_points and end_points must have one shape, got {start.shape} and {end.shape}")
    dtype = images.dtype
    x, single = _to_nhwc(_as_float(images), fmt)
    _, h, w, _ = x.shape
    compute = "float64" if x.dtype.name == "float64" else "float32"
    start, end = cast(start, compute), cast(end, compute)
    if start.ndim == 2:
        start, end = reshape(start, (1, 4, 2)), reshape(end, (1, 4, 2))
    t = reshape(_homographies(start, end), (-1, 8, 1, 1, 1))
    yy, xx = (constant(g.astype(compute)[:, :, None]) for g in np.meshgrid(np.arange(h), np.arange(w), indexing="ij"))
    denom = t[:, 6] * xx + t[:, 7] * yy + 1.0
    src_x = (t[:, 0] * xx + t[:, 1] * yy + t[:, 2]) / denom
    src_y = (t[:, 3] * xx + t[:, 4] * yy + t[:, 5]) / denom
    out = _warp(x, src_y, src_x, interpolation, "constant", fill_value)
    return _back_to(_from_nhwc(out, fmt, single), dtype)


def elastic_transform(
    images,
    alpha=20.0,
    sigma=5.0,
    interpolation="bilinear",
    fill_mode="reflect",
    fill_value=0.0,
    seed=None,
    data_format=None,
) -> Tensor:
    """Displace every pixel by a random field: normal noise times `sigma`, Gaussian-blurred
    with `sigma`, scaled by `alpha`; `seed` makes it repeatable (tapeflow's random stream,
    so the field differs from Keras's for the same seed).

    >>> import tapeflow as tp
    >>> tp.ops.image.elastic_transform(tp.ones((1, 8, 8, 3)), seed=0).shape
    (1, 8, 8, 3)
    """
    op = "image.elastic_transform"
    fmt = _data_format(op, data_format)
    _check_choice(op, "interpolation", interpolation, ("nearest", "bilinear"))
    _check_choice(op, "fill_mode", fill_mode, _FILL_MODES)
    images = _images(op, images)
    dtype = images.dtype
    x, single = _to_nhwc(_as_float(images), fmt)
    n, h, w, _ = x.shape
    sigma, alpha = float(sigma), float(alpha)
    size = int(6 * sigma) | 1
    fields = []
    for k in range(2):
        noise = random.normal((n, h, w, 1), dtype=x.dtype.name, seed=None if seed is None else int(seed) + k) * sigma
        fields.append(gaussian_blur(noise, (size, size), (sigma, sigma)))
    yy, xx = (
        constant(g.astype(x.dtype.np)[:, :, None]) for g in np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    )
    out = _warp(x, yy + alpha * fields[1], xx + alpha * fields[0], interpolation, fill_mode, fill_value)
    return _back_to(_from_nhwc(out, fmt, single), dtype)


def ssim(image1, image2, max_val=1.0, filter_size=11, filter_sigma=1.5, k1=0.01, k2=0.03, data_format=None) -> Tensor:
    """Structural similarity of two images (or batches), per image: Gaussian-weighted local
    means, variances and covariance over `filter_size` windows (no padding), averaged.

    >>> import tapeflow as tp
    >>> x = tp.random.uniform((1, 16, 16, 3), seed=0)
    >>> round(float(tp.ops.image.ssim(x, x)[0]), 4)
    1.0
    """
    op = "image.ssim"
    fmt = _data_format(op, data_format)
    a, b = _images(op, image1), _images(op, image2)
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{op}: image1 and image2 must have one shape, got {a.shape} and {b.shape}")
    size = int(filter_size)
    if size < 1 or size % 2 == 0:
        raise ValueError(f"{op}: filter_size must be an odd integer >= 1, got {filter_size!r}")
    dtype = a.dtype
    a, single = _to_nhwc(_as_float(a), fmt)
    b, _ = _to_nhwc(_as_float(b), fmt)
    g = _gaussian(size, float(filter_sigma))
    kernel = np.outer(g, g)
    c1, c2 = (k1 * max_val) ** 2, (k2 * max_val) ** 2

    def blur(t):
        return _per_channel_conv(t, kernel, "VALID")

    mu1, mu2 = blur(a), blur(b)
    s11 = blur(a * a) - mu1 * mu1
    s22 = blur(b * b) - mu2 * mu2
    s12 = blur(a * b) - mu1 * mu2
    ssim_map = (2.0 * mu1 * mu2 + c1) * (2.0 * s12 + c2) / ((mu1 * mu1 + mu2 * mu2 + c1) * (s11 + s22 + c2))
    out = reduce_mean(ssim_map, (1, 2, 3))
    if single:
        out = reshape(out, ())
    return out if out.dtype is dtype or dtype.kind != "f" else cast(out, dtype)


def extract_patches_3d(volumes, size, strides=None, dilation_rate=1, padding="valid", data_format=None) -> Tensor:
    """Patches of `size` (an int or (depth, height, width)) of volumes flattened into the
    channel axis: (batch, d', h', w', size_d * size_h * size_w * channels).

    >>> import tapeflow as tp
    >>> tp.ops.image.extract_patches_3d(tp.ones((1, 4, 4, 4, 2)), 2).shape
    (1, 2, 2, 2, 16)
    """
    op = "image.extract_patches_3d"
    if isinstance(size, int):
        size = (size, size, size)
    elif len(size) != 3:
        raise TypeError(f"{op}: size must be an int or a tuple of length 3, got size={size!r}")
    size = tuple(int(s) for s in size)
    strides = size if not strides else ((strides,) * 3 if isinstance(strides, int) else tuple(strides))
    if len(strides) != 3:
        raise ValueError(f"{op}: strides must be an int or a tuple of length 3, got strides={strides!r}")
    if str(padding).lower() not in ("valid", "same"):
        raise ValueError(f"{op}: padding must be 'valid' or 'same', got {padding!r}")
    fmt = _data_format(op, data_format)
    v = as_tensor(volumes, name=op)
    if v.ndim not in (4, 5):
        raise ValueError(f"{op}: expected volumes of rank 4 or 5, got shape {v.shape}")
    single = v.ndim == 4
    if single:
        v = reshape(v, (1, *v.shape))
    if fmt == "channels_first":
        v = transpose(v, (0, 2, 3, 4, 1))
    c = v.shape[-1]
    depth = size[0] * size[1] * size[2] * c
    kernel = constant(np.eye(depth, dtype=v.dtype.np).reshape(*size, c, depth))
    out = conv3d(v, kernel, strides, str(padding).upper(), dilation_rate)
    if fmt == "channels_first":
        out = transpose(out, (0, 4, 1, 2, 3))
    return reshape(out, out.shape[1:]) if single else out


def _keys_cubic(t: np.ndarray) -> np.ndarray:
    near = ((1.5 * t - 2.5) * t) * t + 1.0
    far = ((-0.5 * t + 2.5) * t - 4.0) * t + 2.0
    return np.where(t >= 2.0, 0.0, np.where(t >= 1.0, far, near))


def _lanczos(radius: float, t: np.ndarray) -> np.ndarray:
    y = radius * np.sin(np.pi * t) * np.sin(np.pi * t / radius)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(t > 1e-3, y / np.where(t != 0, np.pi**2 * t**2, 1.0), 1.0)
    return np.where(t > radius, 0.0, out)


_SCALE_KERNELS = {
    "linear": lambda t: np.maximum(0.0, 1.0 - t),
    "cubic": _keys_cubic,
    "lanczos3": lambda t: _lanczos(3.0, t),
    "lanczos5": lambda t: _lanczos(5.0, t),
}
_SCALE_METHODS = {
    "linear": "linear",
    "bilinear": "linear",
    "trilinear": "linear",
    "triangle": "linear",
    "cubic": "cubic",
    "bicubic": "cubic",
    "tricubic": "cubic",
    "lanczos3": "lanczos3",
    "lanczos5": "lanczos5",
}


def _scale_matrix(n_in: int, n_out: int, scale: float, translation: float, kernel, antialias: bool) -> np.ndarray:
    """The (n_in, n_out) resampling weights of one axis, as JAX's scale_and_translate."""
    inv = 1.0 / scale
    stretch = max(inv, 1.0) if antialias else 1.0
    sample = (np.arange(n_out) + 0.5) * inv - translation * inv - 0.5
    weights = kernel(np.abs(sample[None, :] - np.arange(n_in)[:, None]) / stretch)
    total = weights.sum(0, keepdims=True)
    weights = np.where(
        np.abs(total) > 1000.0 * float(np.finfo(np.float32).eps), weights / np.where(total != 0, total, 1), 0
    )
    inside = (sample >= -0.5) & (sample <= n_in - 0.5)
    return np.where(inside[None, :], weights, 0.0)


def scale_and_translate(images, output_shape, scale, translation, spatial_dims, method, antialias=True) -> Tensor:
    """Resample `spatial_dims` of `images` to `output_shape` with a scale and translation
    per spatial axis (JAX's `scale_and_translate`); `scale` and `translation` are values
    known when the op runs.

    >>> import tapeflow as tp
    >>> y = tp.ops.image.scale_and_translate(tp.ones((4, 4)), (2, 2), [0.5, 0.5], [0.0, 0.0], (0, 1), "linear")
    >>> y.numpy().tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """
    op = "image.scale_and_translate"
    if method not in _SCALE_METHODS:
        raise ValueError(f"{op}: method must be one of {sorted(_SCALE_METHODS)}, got {method!r}")
    kernel = _SCALE_KERNELS[_SCALE_METHODS[method]]
    x = as_tensor(images, name=op)
    dtype = x.dtype
    out = _as_float(x)
    scale = np.asarray(scale, dtype=np.float64).reshape(-1)
    translation = np.asarray(translation, dtype=np.float64).reshape(-1)
    if len(scale) != len(spatial_dims) or len(translation) != len(spatial_dims):
        raise ValueError(f"{op}: scale and translation need one value per spatial dim {tuple(spatial_dims)}")
    for i, d in enumerate(spatial_dims):
        d = d % x.ndim
        m = _scale_matrix(x.shape[d], int(output_shape[d]), scale[i], translation[i], kernel, bool(antialias))
        moved = transpose(out, (*[a for a in range(x.ndim) if a != d], d))
        moved = math.matmul(moved, constant(m.astype(out.dtype.np)))
        order = list(range(x.ndim - 1))
        order.insert(d, x.ndim - 1)
        out = transpose(moved, tuple(order))
    if dtype.kind in "iu":
        out = math.clip(_round_half_even(out), float(np.asarray(x.numpy()).min()), float(np.asarray(x.numpy()).max()))
        out = cast(out, dtype)
    return out
