"""Geometry and value checks shared by op references and backend kernels.

>>> conv_geometry("conv2d", 14, 14, 5, 5, (1, 1), "SAME", (1, 1))
(14, 14, 2, 2)
"""

from __future__ import annotations

import numpy as np


def _explicit_pads(name: str, padding) -> tuple:
    try:
        (pt, pb), (pl, pr) = padding
        pads = tuple(int(p) for p in (pt, pb, pl, pr))
    except (TypeError, ValueError):
        raise ValueError(
            f"{name}: padding must be 'SAME', 'VALID' or ((top, bottom), (left, right)), got {padding!r}"
        ) from None
    if min(pads) < 0:
        raise ValueError(f"{name}: negative padding {padding!r}")
    return pads


def _axis_geometry(name, size, k, stride, dilation, padding, pads):
    eff = (k - 1) * dilation + 1
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
    for label, value in (("strides", strides), ("dilations", dilations)):
        if any(not isinstance(v, int | np.integer) or v < 1 for v in value):
            raise ValueError(f"{name}: {label} must be positive integers, got {value!r}")
    if kh < 1 or kw < 1:
        raise ValueError(f"{name}: window must be at least 1x1, got {kh}x{kw}")
    if isinstance(padding, str):
        if padding not in ("SAME", "VALID"):
            raise ValueError(f"{name}: padding must be 'SAME', 'VALID' or explicit pairs, got {padding!r}")
        pads = (0, 0, 0, 0)
    else:
        pads = _explicit_pads(name, padding)
    out_h, top = _axis_geometry(name, in_h, kh, sh, dh, padding, pads[0:2])
    out_w, left = _axis_geometry(name, in_w, kw, sw, dw, padding, pads[2:4])
    return out_h, out_w, top, left


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
