"""CPU kernels of the whole-sequence recurrent ops (see tapeflow.ops.nn.recurrent), which
the CPU backend serves by op name. Float32 and float64 run as they are; other floating
dtypes run in float32 and are cast back.

>>> import numpy as np
>>> ys, h, c, cs, acts = lstm_sequence(np.zeros((2, 3, 8)), np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 8)))
>>> ys.shape, acts.shape, float(acts[0, 0, 0])
((2, 3, 2), (2, 3, 8), 0.5)
"""

from __future__ import annotations

import numpy as np

from tapeflow import _kernels

_FAST = (np.float32, np.float64)


def _compute_dtype(dtype) -> np.dtype:
    return np.dtype(dtype) if np.dtype(dtype).type in _FAST else np.dtype(np.float32)


def _arrays(dtype, *arrays) -> list[np.ndarray]:
    return [np.ascontiguousarray(a, dtype=dtype) for a in arrays]


def _mask(mask: tuple, batch: int, steps: int, op: str):
    if not mask:
        return None
    if np.shape(mask[0]) != (batch, steps):  # checked before the kernel indexes by them
        raise ValueError(f"{op}: the mask has shape {np.shape(mask[0])}, expected (batch, steps) = {(batch, steps)}")
    return np.ascontiguousarray(mask[0], dtype=np.bool_).view(np.uint8)


def lstm_sequence(xp, h0, c0, kernel, *mask, go_backwards=False):
    out_dtype = xp.dtype
    dtype = _compute_dtype(out_dtype)
    xp, h0, c0, kernel = _arrays(dtype, xp, h0, c0, kernel)
    batch, steps, width = xp.shape
    units = width // 4
    if width != 4 * units or h0.shape != (batch, units) or c0.shape != (batch, units) or kernel.shape != (units, width):
        # dimensions unknown until run time are checked here, before the kernel indexes by them
        raise ValueError(
            f"lstm_sequence: shapes do not fit together: inputs {xp.shape}, h0 {h0.shape}, c0 {c0.shape}, "
            f"recurrent kernel {kernel.shape}"
        )
    ys = np.empty((batch, steps, units), dtype)
    cs = np.empty_like(ys)
    acts = np.empty_like(xp)
    h, c = np.empty_like(h0), np.empty_like(c0)
    _kernels.lstm_forward(
        xp, h0, c0, kernel, _mask(mask, batch, steps, "lstm_sequence"), bool(go_backwards), ys, cs, acts, h, c
    )
    out = (ys, h, c, cs, acts)
    return out if dtype == out_dtype else tuple(a.astype(out_dtype) for a in out)


def lstm_sequence_grad(gys, gh, gc, h0, c0, kernel, ys, cs, acts, *mask, go_backwards=False):
    out_dtype = acts.dtype
    dtype = _compute_dtype(out_dtype)
    gys, gh, gc, h0, c0, kernel, ys, cs, acts = _arrays(dtype, gys, gh, gc, h0, c0, kernel, ys, cs, acts)
    batch, steps, width = acts.shape
    units = width // 4
    state, sequence = (batch, units), (batch, steps, units)
    expected = [gys, sequence], [gh, state], [gc, state], [h0, state], [c0, state], [kernel, (units, width)]
    expected += [ys, sequence], [cs, sequence]
    if width != 4 * units or any(a.shape != shape for a, shape in expected):
        # dimensions unknown until run time are checked here, before the kernel indexes by them
        raise ValueError(
            "lstm_sequence_grad: shapes do not fit together: "
            + ", ".join(str(a.shape) for a, _ in expected)
            + f" for gate activations {acts.shape}"
        )
    dxp = np.empty_like(acts)
    dh0, dc0, dkernel = np.empty_like(h0), np.empty_like(c0), np.empty_like(kernel)
    mask = _mask(mask, batch, steps, "lstm_sequence_grad")
    _kernels.lstm_backward(gys, gh, gc, h0, c0, kernel, ys, cs, acts, mask, bool(go_backwards),
                           dxp, dh0, dc0, dkernel)  # fmt: skip
    out = (dxp, dh0, dc0, dkernel)
    return out if dtype == out_dtype else tuple(a.astype(out_dtype) for a in out)


def gru_sequence(xp, h0, kernel, bias, *mask, reset_after=True, go_backwards=False):
    out_dtype = xp.dtype
    dtype = _compute_dtype(out_dtype)
    xp, h0, kernel, bias = _arrays(dtype, xp, h0, kernel, bias)
    batch, steps, width = xp.shape
    units = width // 3
    if width != 3 * units or h0.shape != (batch, units) or kernel.shape != (units, width) or bias.shape != (width,):
        # dimensions unknown until run time are checked here, before the kernel indexes by them
        raise ValueError(
            f"gru_sequence: shapes do not fit together: inputs {xp.shape}, h0 {h0.shape}, "
            f"recurrent kernel {kernel.shape}, recurrent bias {bias.shape}"
        )
    ys = np.empty((batch, steps, units), dtype)
    acts = np.empty((batch, steps, 4 * units), dtype)
    h = np.empty_like(h0)
    mask = _mask(mask, batch, steps, "gru_sequence")
    _kernels.gru_forward(xp, h0, kernel, bias, mask, bool(reset_after), bool(go_backwards), ys, acts, h)
    out = (ys, h, acts)
    return out if dtype == out_dtype else tuple(a.astype(out_dtype) for a in out)


def gru_sequence_grad(gys, gh, h0, kernel, ys, acts, *mask, reset_after=True, go_backwards=False):
    out_dtype = acts.dtype
    dtype = _compute_dtype(out_dtype)
    gys, gh, h0, kernel, ys, acts = _arrays(dtype, gys, gh, h0, kernel, ys, acts)
    batch, steps, width = acts.shape
    units = width // 4
    state, sequence = (batch, units), (batch, steps, units)
    expected = [gys, sequence], [gh, state], [h0, state], [kernel, (units, 3 * units)], [ys, sequence]
    if width != 4 * units or any(a.shape != shape for a, shape in expected):
        # dimensions unknown until run time are checked here, before the kernel indexes by them
        raise ValueError(
            "gru_sequence_grad: shapes do not fit together: "
            + ", ".join(str(a.shape) for a, _ in expected)
            + f" for gate activations {acts.shape}"
        )
    dxp = np.empty((batch, steps, 3 * units), dtype)
    dh0, dkernel, dbias = np.empty_like(h0), np.empty_like(kernel), np.empty(3 * units, dtype)
    mask = _mask(mask, batch, steps, "gru_sequence_grad")
    _kernels.gru_backward(gys, gh, h0, kernel, ys, acts, mask, bool(reset_after), bool(go_backwards),
                          dxp, dh0, dkernel, dbias)  # fmt: skip
    out = (dxp, dh0, dkernel, dbias)
    return out if dtype == out_dtype else tuple(a.astype(out_dtype) for a in out)
