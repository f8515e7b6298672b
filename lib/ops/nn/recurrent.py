"""Whole-sequence recurrent ops: an LSTM run over every time step in one op, with a
gradient op that runs back through time in one op.

`lstm_sequence(xp, h0, c0, recurrent_kernel[, mask], go_backwards=False)` takes the input
projection of every step at once (`xp` = inputs @ kernel + bias, [batch, time, 4 * units],
gates i, f, c, o), the initial states h0, c0 [batch, units] and the recurrent kernel
[units, 4 * units], and returns (outputs [batch, time, units], h, c, cell states [batch,
time, units], gate activations [batch, time, 4 * units]). The gates use sigmoid and the
cell tanh. With a bool `mask` [batch, time], a False step keeps the previous states and
repeats the previous output (zeros before the first True step). Outputs and cell states
come in the order the steps run (reversed with go_backwards); the last two outputs are kept
for the gradient and are not differentiable themselves.

>>> import tapeflow as tp
>>> from tapeflow.ops.nn.recurrent import lstm_sequence
>>> ys, h, c = lstm_sequence(tp.zeros((2, 5, 12)), tp.zeros((2, 3)), tp.zeros((2, 3)), tp.zeros((3, 12)))
>>> ys.shape, h.shape, c.shape
((2, 5, 3), (2, 3), (2, 3))
"""

from __future__ import annotations

import numpy as np

from tapeflow.ops.core import zeros_like
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor

__all__: list[str] = []

_NAME = "lstm_sequence"
_GRAD_NAME = "lstm_sequence_grad"


def _same(name: str, what: str, got, want) -> None:
    if len(got) != len(want) or any(g is not None and w is not None and g != w for g, w in zip(got, want, strict=True)):
        raise ValueError(f"{name}: {what} must have shape {tuple(want)}, got {tuple(got)}")


def _check(name: str, xp, h0, c0, kernel, mask) -> tuple:
    """(batch, time, units) of consistent inputs, or a clear error."""
    if len(xp.shape) != 3:
        raise ValueError(f"{name}: the projected inputs must be 3-D [batch, time, 4 * units], got shape {xp.shape}")
    if xp.dtype.kind != "f":
        raise TypeError(f"{name}: the projected inputs must be floating point, got {xp.dtype}")
    if len(kernel.shape) != 2 or kernel.shape[0] is None or kernel.shape[1] != 4 * kernel.shape[0]:
        raise ValueError(f"{name}: the recurrent kernel must be [units, 4 * units], got shape {kernel.shape}")
    batch, steps, units = xp.shape[0], xp.shape[1], kernel.shape[0]
    _same(name, "the projected inputs", xp.shape, (batch, steps, 4 * units))
    _same(name, "h0", h0.shape, (batch, units))
    _same(name, "c0", c0.shape, (batch, units))
    for what, t in (("h0", h0), ("c0", c0), ("the recurrent kernel", kernel)):
        if t.dtype is not xp.dtype:
            raise TypeError(f"{name}: {what} has dtype {t.dtype}, the projected inputs {xp.dtype}")
    if mask is not None:
        if mask.dtype.kind != "b":
            raise TypeError(f"{name}: the mask must be bool, got {mask.dtype}")
        _same(name, "the mask", mask.shape, (batch, steps))
    return batch, steps, units


def _one_mask(name: str, mask: tuple):
    if len(mask) > 1:
        raise TypeError(f"{name}: takes at most one mask input, got {len(mask)}")
    return mask[0] if mask else None


def _infer(xp, h0, c0, kernel, *mask, go_backwards):
    if not isinstance(go_backwards, bool):
        raise TypeError(f"{_NAME}: go_backwards must be a bool, got {go_backwards!r:.40}")
    batch, steps, units = _check(_NAME, xp, h0, c0, kernel, _one_mask(_NAME, mask))
    d = xp.dtype
    return [((batch, steps, units), d), ((batch, units), d), ((batch, units), d), ((batch, steps, units), d),
            ((batch, steps, 4 * units), d)]  # fmt: skip


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _order(steps: int, go_backwards: bool):
    return range(steps - 1, -1, -1) if go_backwards else range(steps)


def _vjp(gs, xs, ys, go_backwards, needs=None):
    if gs[3] is not None or gs[4] is not None:
        raise NotImplementedError(
            f"{_NAME}: its cell-state and gate outputs are kept for the gradient and are not differentiable"
        )
    xp, h0, c0, kernel, *mask = xs
    grads = [g if g is not None else zeros_like(y) for g, y in zip(gs[:3], ys[:3], strict=True)]
    dxp, dh0, dc0, dkernel = apply(
        _LSTM_GRAD, (*grads, h0, c0, kernel, ys[0], ys[3], ys[4], *mask), {"go_backwards": go_backwards}
    )
    return (dxp, dh0, dc0, dkernel, *([None] * len(mask)))


@defop(_NAME, infer=_infer, vjp=_vjp, num_outputs=5)
def _LSTM_SEQUENCE(xp, h0, c0, kernel, *mask, go_backwards):
    batch, steps, width = xp.shape
    units = width // 4
    keep = mask[0].astype(bool) if mask else np.ones((batch, steps), bool)
    ys = np.zeros_like(xp, shape=(batch, steps, units))
    cs = np.zeros_like(ys)
    acts = np.zeros_like(xp)
    h, c, y = h0, c0, np.zeros_like(h0)
    for s, t in enumerate(_order(steps, go_backwards)):
        z = xp[:, t] + h @ kernel
        zi, zf, zg, zo = (z[:, j * units : (j + 1) * units] for j in range(4))
        i, f, g, o = _sigmoid(zi), _sigmoid(zf), np.tanh(zg), _sigmoid(zo)
        c_new = f * c + i * g
        h_new = o * np.tanh(c_new)
        k = keep[:, t, None]
        c, h, y = np.where(k, c_new, c), np.where(k, h_new, h), np.where(k, h_new, y)
        ys[:, s], cs[:, s] = y, c
        acts[:, t] = np.where(k, np.concatenate([i, f, g, o], axis=1), 0.0)
    return ys, h.astype(xp.dtype, copy=False), c.astype(xp.dtype, copy=False), cs, acts


def _grad_infer(gys, gh, gc, h0, c0, kernel, ys, cs, acts, *mask, go_backwards):
    mask = _one_mask(_GRAD_NAME, mask)
    batch, steps, units = _check(_GRAD_NAME, acts, h0, c0, kernel, mask)
    for what, t in (("the output gradient", gys), ("outputs", ys), ("cell states", cs)):
        _same(_GRAD_NAME, what, t.shape, (batch, steps, units))
    for what, t in (("the h gradient", gh), ("the c gradient", gc)):
        _same(_GRAD_NAME, what, t.shape, (batch, units))
    for t in (gys, gh, gc, ys, cs):
        if t.dtype is not acts.dtype:
            raise TypeError(f"{_GRAD_NAME}: inputs of dtypes {t.dtype} and {acts.dtype} differ")
    d = acts.dtype
    return [((batch, steps, 4 * units), d), ((batch, units), d), ((batch, units), d), ((units, 4 * units), d)]


@defop(_GRAD_NAME, infer=_grad_infer, num_outputs=4)
def _LSTM_GRAD(gys, gh, gc, h0, c0, kernel, ys, cs, acts, *mask, go_backwards):
    batch, steps, width = acts.shape
    units = width // 4
    keep = mask[0].astype(bool) if mask else np.ones((batch, steps), bool)
    order = list(_order(steps, go_backwards))
    ran = np.maximum.accumulate(np.stack([keep[:, t] for t in order], axis=1), axis=1)  # [batch, step]: has run
    dxp = np.zeros_like(acts)
    dkernel = np.zeros_like(kernel)
    dh, dc, carry = gh.copy(), gc.copy(), np.zeros_like(gh)
    for s in range(steps - 1, -1, -1):
        t = order[s]
        k = keep[:, t, None]
        h_prev = np.where(ran[:, s - 1, None], ys[:, s - 1], h0) if s > 0 else h0
        c_prev = cs[:, s - 1] if s > 0 else c0
        i, f, g, o = (acts[:, t, j * units : (j + 1) * units] for j in range(4))
        dy = gys[:, s] + carry
        dhn = dh + dy
        tc = np.tanh(cs[:, s])
        dcn = dc + dhn * o * (1.0 - tc * tc)
        dz = np.concatenate(
            [dcn * g * i * (1.0 - i), dcn * c_prev * f * (1.0 - f), dcn * i * (1.0 - g * g), dhn * tc * o * (1.0 - o)],
            axis=1,
        )
        dz = np.where(k, dz, 0.0)
        dxp[:, t] = dz
        dkernel += h_prev.T @ dz
        carry = np.where(k, 0.0, dy)
        dc = np.where(k, dcn * f, dc)
        dh = dz @ kernel.T + np.where(k, 0.0, dh)
    return dxp, dh.astype(acts.dtype, copy=False), dc.astype(acts.dtype, copy=False), dkernel


def lstm_sequence(xp, h0, c0, recurrent_kernel, mask=None, go_backwards: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Run an LSTM (sigmoid gates, tanh cell) over the projected inputs `xp` [batch, time,
    4 * units]; returns (outputs [batch, time, units], h, c), the outputs in the order the
    steps run. A bool `mask` [batch, time] keeps the states over its False steps.

    >>> import tapeflow as tp
    >>> ys, h, c = lstm_sequence(tp.ones((1, 3, 4)), tp.zeros((1, 1)), tp.zeros((1, 1)), tp.zeros((1, 4)))
    >>> round(float(h.numpy()[0, 0]), 4)
    0.6225
    """
    inputs = [as_tensor(a, name=_NAME) for a in (xp, h0, c0, recurrent_kernel)]
    if mask is not None:
        inputs.append(as_tensor(mask, name=_NAME))
    ys, h, c, _, _ = apply(_LSTM_SEQUENCE, tuple(inputs), {"go_backwards": bool(go_backwards)})
    return ys, h, c
