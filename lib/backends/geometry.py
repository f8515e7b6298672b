"""Window arithmetic of convolution and pooling: output sizes and padding, shared by
the op references and the backend kernels (the layers and exporters reach it through
`tapeflow.ops.shapes`).

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


def axis_geometry(name: str, size, k: int, stride: int, dilation: int, padding, pads) -> tuple:
    """(output size, padding before) along one axis of a window op; an unknown size (None)
    gives (None, None).

    >>> axis_geometry("pool", 7, 3, 2, 1, "SAME", (0, 0))
    (4, 1)
    """
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
    out_h, top = axis_geometry(name, in_h, kh, sh, dh, padding, pads[0:2])
    out_w, left = axis_geometry(name, in_w, kw, sw, dw, padding, pads[2:4])
    return out_h, out_w, top, left


def padded_extent(size: int, out: int, k: int, stride: int, dilation: int, before: int) -> int:
    """Rows (or columns) after padding that the windows of an op reach."""
    return max(size + before, (out - 1) * stride + (k - 1) * dilation + 1)
