"""Geometry and value checks shared by op references and backend kernels.

>>> conv_geometry("conv2d", 14, 14, 5, 5, (1, 1), "SAME", (1, 1))
(14, 14, 2, 2)
"""

from __future__ import annotations

import numpy as np

MAX_EXTENT = 2**31 - 1  # what the compiled kernels take as a window size, stride or padding


def _explicit_pads(name: str, padding) -> tuple:
    try:
        (pt, pb), (pl, pr) = padding
        pads = tuple(int(p) for p in (pt, pb, pl, pr))
    except (TypeError, ValueError):
        raise ValueError(
            f"{name}: padding must be 'SAME', 'VALID' or ((top, bottom), (left, right)), got {padding!r}"
        ) from None
    if min(pads) < 0 or max(pads) > MAX_EXTENT:
        raise ValueError(f"{name}: padding must be in [0, {MAX_EXTENT}], got {padding!r}")
    return pads


def _axis_geometry(name, size, k, stride, dilation, padding, pads):
    eff = (k - 1) * dilation + 1
    if size is None:  # an unknown size (while tracing) gives an unknown output size
        return None, None
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        return out, total // 2
    if padding == "VALID":
        before, after = 0, 0
    else:
        before, after = pads
    span = size + before + after
    if span < eff:
        raise ValueError(
            f"{name}: window of size {eff} (kernel {k}, dilation {dilation}) is larger than "
            f"the padded input size {span}"
        )
    return (span - eff) // stride + 1, before


def conv_geometry(name: str, in_h: int, in_w: int, kh: int, kw: int, strides, padding, dilations):
    """Output size and the top/left padding of a 2-D window op.

    Returns (out_h, out_w, pad_top, pad_left); bottom/right padding is implied.
    """
    sh, sw = strides
    dh, dw = dilations
    for label, value in (("strides", strides), ("dilations", dilations), ("window", (kh, kw))):
        if any(isinstance(v, bool) or not isinstance(v, int | np.integer) or not 1 <= v <= MAX_EXTENT for v in value):
            raise ValueError(f"{name}: {label} must be integers in [1, {MAX_EXTENT}], got {tuple(value)!r}")
    if isinstance(padding, str):
        if padding not in ("SAME", "VALID"):
            raise ValueError(f"{name}: padding must be 'SAME', 'VALID' or explicit pairs, got {padding!r}")
        pads = (0, 0, 0, 0)
    else:
        pads = _explicit_pads(name, padding)
    out_h, top = _axis_geometry(name, in_h, kh, sh, dh, padding, pads[0:2])
    out_w, left = _axis_geometry(name, in_w, kw, sw, dw, padding, pads[2:4])
    return out_h, out_w, top, left


def window_output_size(name: str, in_h, in_w, kh: int, kw: int, strides, padding: str, dilations=(1, 1)) -> tuple:
    """(out_h, out_w) of a 'SAME' or 'VALID' window op, for layers: an unknown size (None)
    stays unknown, and a window larger than the input is an error in the layer's words.

    >>> window_output_size("pool", None, 7, 3, 3, (2, 2), "SAME")
    (None, 4)
    >>> window_output_size("pool", 2, 5, 3, 3, (1, 1), "VALID")
    Traceback (most recent call last):
    ...
    ValueError: pool: input size 2 is smaller than the window 3 with 'valid' padding
    """
    sizes = []
    for size, k, stride, dilation in zip((in_h, in_w), (kh, kw), strides, dilations, strict=True):
        span = (k - 1) * dilation + 1
        if padding == "VALID" and size is not None and size < span:
            raise ValueError(f"{name}: input size {size} is smaller than the window {span} with 'valid' padding")
        sizes.append(_axis_geometry(name, size, k, stride, dilation, padding, (0, 0))[0])
    return tuple(sizes)


def conv_transpose_output_size(in_h, in_w, kh: int, kw: int, strides, padding, output_padding, dilations):
    """(out_h, out_w) of a transposed convolution by Keras' rule, for layers that must give
    the op its output size: without `output_padding`, in * stride ('SAME') or
    in * stride + max(window - stride, 0) ('VALID'). An unknown size (None) stays unknown.

    >>> conv_transpose_output_size(4, 4, 3, 3, (2, 2), "VALID", None, (1, 1))
    (9, 9)
    >>> conv_transpose_output_size(4, 4, 3, 3, (2, 2), "SAME", (1, 0), (1, 1))
    (8, 7)
    """
    sizes = []
    axes = zip((in_h, in_w), (kh, kw), strides, output_padding or (None, None), dilations, strict=True)
    for size, k, stride, extra, dilation in axes:
        span = (k - 1) * dilation + 1
        if size is None:
            sizes.append(None)
        elif extra is None:
            sizes.append(size * stride + max(span - stride, 0) if padding == "VALID" else size * stride)
        else:
            pad = span // 2 if padding == "SAME" else 0
            sizes.append((size - 1) * stride + span - 2 * pad + extra)
    return tuple(sizes)


def padded_extent(size: int, out: int, k: int, stride: int, dilation: int, before: int) -> int:
    """Rows (or columns) after padding that the windows of an op reach."""
    return max(size + before, (out - 1) * stride + (k - 1) * dilation + 1)


def check_labels(name: str, labels: np.ndarray, num_classes: int) -> None:
    """Class labels must lie in [0, num_classes)."""
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)].flat[0]
        raise ValueError(f"{name}: label {bad} is out of range [0, {num_classes})")


class IndexOutOfRange(IndexError, ValueError):
    """An index outside a tensor's bounds (both an IndexError and a ValueError)."""


def check_index_range(name: str, idx: np.ndarray, size: int, axis: int) -> None:
    """Indices must lie in [-size, size)."""
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx[(idx < -size) | (idx >= size)].flat[0]
        raise IndexOutOfRange(f"{name}: index {bad} is out of range for axis {axis} of size {size}")
