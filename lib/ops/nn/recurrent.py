"""Whole-sequence recurrent ops: an LSTM or a GRU run over every time step in one op, each
with a gradient op that runs back through time in one op.

`lstm_sequence(xp, h0, c0, recurrent_kernel[, mask], go_backwards=False)` takes the input
projection of every step at once (`xp` = inputs @ kernel + bias, [batch, time, 4 * units],
gates i, f, c, o), the initial states h0, c0 [batch, units] and the recurrent kernel
[units, 4 * units], and returns (outputs [batch, time, units], h, c, cell states [batch,
time, units], gate activations [batch, time, 4 * units]). The gates use sigmoid and the
cell tanh. With a bool `mask` [batch, time], a False step keeps the previous states and
repeats the previous output (zeros before the first True step). Outputs and cell states
come in the order the steps run (reversed with go_backwards); the last two outputs are kept
for the gradient and are not differentiable themselves.

`gru_sequence(xp, h0, recurrent_kernel, recurrent_bias[, mask], reset_after=True,
go_backwards=False)` is the same for Keras's GRU: `xp` is [batch, time, 3 * units] (gates z,
r, h), the recurrent kernel [units, 3 * units] and the recurrent bias [3 * units]; it returns
(outputs, h, gate activations [batch, time, 4 * units]: z, r, the candidate, and the
candidate's recurrent term (reset_after) or the reset state r * h (otherwise)).

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


def _check(name: str, xp, states: dict, kernel, mask, gates: int = 4) -> tuple:
    """(batch, time, units) of consistent inputs, or a clear error."""
    if len(xp.shape) != 3:
        raise ValueError(
            f"{name}: the projected inputs must be 3-D [batch, time, {gates} * units], got shape {xp.shape}"
        )
    if xp.dtype.kind != "f":
        raise TypeError(f"{name}: the projected inputs must be floating point, got {xp.dtype}")
    if len(kernel.shape) != 2 or kernel.shape[0] is None or kernel.shape[1] != gates * kernel.shape[0]:
        raise ValueError(f"{name}: the recurrent kernel must be [units, {gates} * units], got shape {kernel.shape}")
    batch, steps, units = xp.shape[0], xp.shape[1], kernel.shape[0]
    _same(name, "the projected inputs", xp.shape, (batch, steps, gates * units))
    for what, t in states.items():
        _same(name, what, t.shape, (batch, units))
    for what, t in (*states.items(), ("the recurrent kernel", kernel)):
        if t.dtype is not xp.dtype:
            raise TypeError(f"{name}: {what} has dtype {t.dtype}, the projected inputs {xp.dtype}")
    _check_mask(name, mask, batch, steps)
    return batch, steps, units


def _check_mask(name: str, mask, batch, steps) -> None:
    if mask is not None:
        if mask.dtype.kind != "b":
            raise TypeError(f"{name}: the mask must be bool, got {mask.dtype}")
        _same(name, "the mask", mask.shape, (batch, steps))


def _one_mask(name: str, mask: tuple):
    if len(mask) > 1:
        raise TypeError(f"{name}: takes at most one mask input, got {len(mask)}")
    return mask[0] if mask else None


def _infer(xp, h0, c0, kernel, *mask, go_backwards):
    if not isinstance(go_backwards, bool):
        raise TypeError(f"{_NAME}: go_backwards must be a bool, got {go_backwards!r:.40}")
    batch, steps, units = _check(_NAME, xp, {"h0": h0, "c0": c0}, kernel, _one_mask(_NAME, mask))
    d = xp.dtype
    return [((batch, steps, units), d), ((batch, units), d), ((batch, units), d), ((batch, steps, units), d),
            ((batch, steps, 4 * units), d)]  # fmt: skip


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _order(steps: int, go_backwards: bool):
    return range(steps - 1, -1, -1) if go_backwards else range(steps)


def _keep(mask: tuple, like):
    """The [batch, time] bools of the steps that run, on the device of `like` [batch, time, ...]."""
    return mask[0].astype(bool) if mask else np.ones_like(like, dtype=bool, shape=like.shape[:2])


def _ran(keep, order: list):
    """[batch, step] bools: whether any step up to this one (in run order) has run."""
    if not order:
        return keep
    return np.cumsum(np.stack([keep[:, t] for t in order], axis=1), axis=1) > 0


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
    keep = _keep(mask, xp)
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
    batch, steps, units = _check(_GRAD_NAME, acts, {"h0": h0, "c0": c0}, kernel, mask)
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
    keep = _keep(mask, acts)
    order = list(_order(steps, go_backwards))
    ran = _ran(keep, order)
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


_GRU_NAME = "gru_sequence"
_GRU_GRAD_NAME = "gru_sequence_grad"


def _gru_attrs(name: str, reset_after, go_backwards) -> None:
    for what, value in (("reset_after", reset_after), ("go_backwards", go_backwards)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: {what} must be a bool, got {value!r:.40}")


def _gru_infer(xp, h0, kernel, bias, *mask, reset_after, go_backwards):
    _gru_attrs(_GRU_NAME, reset_after, go_backwards)
    batch, steps, units = _check(_GRU_NAME, xp, {"h0": h0}, kernel, _one_mask(_GRU_NAME, mask), gates=3)
    _same(_GRU_NAME, "the recurrent bias", bias.shape, (3 * units,))
    if bias.dtype is not xp.dtype:
        raise TypeError(f"{_GRU_NAME}: the recurrent bias has dtype {bias.dtype}, the projected inputs {xp.dtype}")
    d = xp.dtype
    return [((batch, steps, units), d), ((batch, units), d), ((batch, steps, 4 * units), d)]


def _gru_vjp(gs, xs, ys, reset_after, go_backwards, needs=None):
    if gs[2] is not None:
        raise NotImplementedError(f"{_GRU_NAME}: its gate outputs are kept for the gradient and are not differentiable")
    xp, h0, kernel, bias, *mask = xs
    grads = [g if g is not None else zeros_like(y) for g, y in zip(gs[:2], ys[:2], strict=True)]
    dxp, dh0, dkernel, dbias = apply(
        _GRU_GRAD,
        (*grads, h0, kernel, ys[0], ys[2], *mask),
        {"reset_after": reset_after, "go_backwards": go_backwards},
    )
    return (dxp, dh0, dkernel, dbias, *([None] * len(mask)))


@defop(_GRU_NAME, infer=_gru_infer, vjp=_gru_vjp, num_outputs=3)
def _GRU_SEQUENCE(xp, h0, kernel, bias, *mask, reset_after, go_backwards):
    batch, steps, width = xp.shape
    u = width // 3
    keep = _keep(mask, xp)
    ys = np.zeros_like(xp, shape=(batch, steps, u))
    acts = np.zeros_like(xp, shape=(batch, steps, 4 * u))
    h, y = h0, np.zeros_like(h0)
    for s, t in enumerate(_order(steps, go_backwards)):
        x = xp[:, t]
        if reset_after:
            rec = h @ kernel + bias
            extra = rec[:, 2 * u :]  # the candidate's recurrent term, which the reset gate scales
            z, r = _sigmoid(x[:, :u] + rec[:, :u]), _sigmoid(x[:, u : 2 * u] + rec[:, u : 2 * u])
            candidate = np.tanh(x[:, 2 * u :] + r * extra)
        else:
            rec = h @ kernel[:, : 2 * u] + bias[: 2 * u]
            z, r = _sigmoid(x[:, :u] + rec[:, :u]), _sigmoid(x[:, u : 2 * u] + rec[:, u:])
            extra = r * h  # the reset state, which the candidate's recurrent kernel reads
            candidate = np.tanh(x[:, 2 * u :] + extra @ kernel[:, 2 * u :] + bias[2 * u :])
        h_new = z * h + (1.0 - z) * candidate
        k = keep[:, t, None]
        h, y = np.where(k, h_new, h), np.where(k, h_new, y)
        ys[:, s] = y
        acts[:, t] = np.where(k, np.concatenate([z, r, candidate, extra], axis=1), 0.0)
    return ys, h.astype(xp.dtype, copy=False), acts


def _gru_grad_infer(gys, gh, h0, kernel, ys, acts, *mask, reset_after, go_backwards):
    _gru_attrs(_GRU_GRAD_NAME, reset_after, go_backwards)
    if len(acts.shape) != 3 or acts.dtype.kind != "f":
        raise ValueError(
            f"{_GRU_GRAD_NAME}: the gate activations must be 3-D floats [batch, time, 4 * units], "
            f"got shape {acts.shape} and dtype {acts.dtype}"
        )
    if len(kernel.shape) != 2 or kernel.shape[0] is None or kernel.shape[1] != 3 * kernel.shape[0]:
        raise ValueError(f"{_GRU_GRAD_NAME}: the recurrent kernel must be [units, 3 * units], got shape {kernel.shape}")
    batch, steps, units = acts.shape[0], acts.shape[1], kernel.shape[0]
    _same(_GRU_GRAD_NAME, "the gate activations", acts.shape, (batch, steps, 4 * units))
    for what, t in (("the output gradient", gys), ("outputs", ys)):
        _same(_GRU_GRAD_NAME, what, t.shape, (batch, steps, units))
    for what, t in (("the h gradient", gh), ("h0", h0)):
        _same(_GRU_GRAD_NAME, what, t.shape, (batch, units))
    for t in (gys, gh, h0, kernel, ys):
        if t.dtype is not acts.dtype:
            raise TypeError(f"{_GRU_GRAD_NAME}: inputs of dtypes {t.dtype} and {acts.dtype} differ")
    _check_mask(_GRU_GRAD_NAME, _one_mask(_GRU_GRAD_NAME, mask), batch, steps)
    d, width = acts.dtype, 3 * units
    return [((batch, steps, width), d), ((batch, units), d), ((units, width), d), ((width,), d)]


@defop(_GRU_GRAD_NAME, infer=_gru_grad_infer, num_outputs=4)
def _GRU_GRAD(gys, gh, h0, kernel, ys, acts, *mask, reset_after, go_backwards):
    batch, steps, width = acts.shape
    u = width // 4
    keep = _keep(mask, acts)
    order = list(_order(steps, go_backwards))
    ran = _ran(keep, order)
    dxp = np.zeros_like(acts, shape=(batch, steps, 3 * u))
    dkernel, dbias = np.zeros_like(kernel), np.zeros_like(kernel[0])
    dh, carry = gh.copy(), np.zeros_like(gh)
    for s in range(steps - 1, -1, -1):
        t = order[s]
        k = keep[:, t, None]
        h_prev = np.where(ran[:, s - 1, None], ys[:, s - 1], h0) if s > 0 else h0
        z, r, candidate, extra = (acts[:, t, j * u : (j + 1) * u] for j in range(4))
        dy = gys[:, s] + carry
        dhn = dh + dy
        dz = np.where(k, dhn * (h_prev - candidate) * z * (1.0 - z), 0.0)
        dc = np.where(k, dhn * (1.0 - z) * (1.0 - candidate * candidate), 0.0)
        if reset_after:
            dr = dc * extra * r * (1.0 - r)
            drec = np.concatenate([dz, dr, dc * r], axis=1)  # of h_prev @ kernel + bias
            dkernel += h_prev.T @ drec
            dh_prev = dhn * z + drec @ kernel.T
        else:
            dreset = dc @ kernel[:, 2 * u :].T  # of the reset state r * h_prev
            dr = dreset * h_prev * r * (1.0 - r)
            dzr = np.concatenate([dz, dr], axis=1)
            dkernel[:, : 2 * u] += h_prev.T @ dzr
            dkernel[:, 2 * u :] += extra.T @ dc
            dh_prev = dhn * z + dreset * r + dzr @ kernel[:, : 2 * u].T
            drec = np.concatenate([dzr, dc], axis=1)
        dxp[:, t] = np.concatenate([dz, dr, dc], axis=1)
        dbias += drec.sum(axis=0)
        carry = np.where(k, 0.0, dy)
        dh = np.where(k, dh_prev, dh)
    return dxp, dh.astype(acts.dtype, copy=False), dkernel, dbias


def gru_sequence(
    xp, h0, recurrent_kernel, recurrent_bias=None, mask=None, reset_after: bool = True, go_backwards: bool = False
) -> tuple[Tensor, Tensor]:
    """Run a GRU (sigmoid gates, tanh candidate; gates z, r, h as Keras orders them) over the
    projected inputs `xp` [batch, time, 3 * units] (inputs @ kernel + input bias) from the state
    `h0` [batch, units]; returns (outputs [batch, time, units], h), the outputs in the order the
    steps run. `recurrent_bias` [3 * units] (zeros when None) is added to the recurrent matmul:
    with reset_after (Keras's default) the reset gate scales the candidate's recurrent term after
    it; otherwise the candidate's recurrent kernel reads the reset state r * h. A bool `mask`
    [batch, time] keeps the state over its False steps and repeats the previous output.

    >>> import tapeflow as tp
    >>> ys, h = gru_sequence(tp.ones((1, 3, 3)), tp.zeros((1, 1)), tp.zeros((1, 3)))
    >>> ys.shape, round(float(h.numpy()[0, 0]), 4)
    ((1, 3, 1), 0.464)
    """
    inputs = [as_tensor(a, name=_GRU_NAME) for a in (xp, h0, recurrent_kernel)]
    inputs.append(zeros_like(inputs[2][0]) if recurrent_bias is None else as_tensor(recurrent_bias, name=_GRU_NAME))
    if mask is not None:
        inputs.append(as_tensor(mask, name=_GRU_NAME))
    attrs = {"reset_after": bool(reset_after), "go_backwards": bool(go_backwards)}
    ys, h, _ = apply(_GRU_SEQUENCE, tuple(inputs), attrs)
    return ys, h
