"""The whole-sequence LSTM and GRU ops of `tapeflow.ops.nn.recurrent` written against an
array module `xp` (CuPy, or NumPy and its stand-ins), with the references' signatures and
outputs: per time step one GEMM of the state with the recurrent kernel (a GRU without
reset_after needs a second one, for the candidate's reset state) and one fused cell kernel
for everything elementwise (the gates' nonlinearities, the state update, the mask's select,
and what the gradient keeps). The gradient runs back through time the same way, one cell
kernel and one GEMM a step, and forms the recurrent kernel's gradient in one GEMM over all
steps at the end. A cell never reads memory it writes (states alternate between two buffers,
and sequences are kept step-major, each step's block apart from the others), so CuPy has no
input to copy before a launch.

`elementwise` compiles a cell's `KernelSource` (`tapeflow._kernels.cuda.elementwise`, on a
GPU); without it, or for dtypes other than float32 and float64, the cells run as array
operations of `xp` with the same arithmetic (`recurrent_source.run_cell`).

>>> import numpy as np
>>> ys, h, c, cs, acts = lstm_sequence(np, np.zeros((2, 3, 8)), np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 8)))
>>> ys.shape, acts.shape, float(acts[0, 0, 0])
((2, 3, 2), (2, 3, 8), 0.5)
"""

from __future__ import annotations

from tapeflow._kernels.cuda.elementwise_source import CTYPES
from tapeflow._kernels.cuda.recurrent_source import cell_source, run_cell

__all__ = ["gru_sequence", "gru_sequence_grad", "lstm_sequence", "lstm_sequence_grad"]


def _cell(xp, name: str, dtype, elementwise):
    """`run(inputs, outputs)` of cell `name`: its compiled kernel (built once here, for the
    whole sequence) where `elementwise` is given and the dtype has one, else array math."""
    if elementwise is not None and dtype.name in CTYPES:
        kernel = elementwise(cell_source(name, dtype.name))
        return lambda inputs, outputs: kernel(*inputs, *outputs)
    return lambda inputs, outputs: run_cell(xp, name, inputs, outputs)


def _keep(xp, mask: tuple, batch: int, steps: int):
    return mask[0].astype(bool) if mask else xp.ones((batch, steps), dtype=bool)


def _order(steps: int, go_backwards: bool) -> list:
    return list(range(steps - 1, -1, -1) if go_backwards else range(steps))


def _blocks(a, n: int, width: int) -> list:
    """The `n` column blocks of `width` of `a` [..., n * width], as views."""
    return [a[..., j * width : (j + 1) * width] for j in range(n)]


def _run_order(a, go_backwards: bool):
    """[batch, time, ...] in time order to [steps, batch, ...] in run order (a view)."""
    a = a.transpose(1, 0, *range(2, a.ndim))
    return a[::-1] if go_backwards else a


def _time_order(xp, a, go_backwards: bool):
    """[steps, batch, ...] in run order to a new [batch, time, ...] in time order."""
    return _batch_major(xp, a[::-1] if go_backwards else a)


def _batch_major(xp, a):
    """[steps, batch, ...] to a new [batch, steps, ...]."""
    return xp.ascontiguousarray(a.transpose(1, 0, *range(2, a.ndim)))


def _previous_outputs(xp, ys, h0, keep, go_backwards: bool):
    """[steps, batch, units], in run order: the state each step started from, that is the
    previous output once a step has run, h0 before."""
    steps = ys.shape[1]
    ran = xp.cumsum(keep[:, ::-1] if go_backwards else keep, axis=1) > 0
    earlier = xp.where(ran.T[:-1, :, None], ys.transpose(1, 0, 2)[:-1], h0[None])
    return xp.concatenate([h0[None], earlier], axis=0)[:steps]


def _pair(xp, like) -> list:
    return [xp.empty_like(like), xp.empty_like(like)]


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def lstm_sequence(xp, x, h0, c0, kernel, *mask, go_backwards=False, elementwise=None):
    """(outputs, h, c, cell states, gate activations) as `lstm_sequence`'s reference."""
    batch, steps, width = x.shape
    units, dtype = width // 4, x.dtype
    keep = _keep(xp, mask, batch, steps)
    cell = _cell(xp, "lstm_forward", dtype, elementwise)
    ys = xp.empty((steps, batch, units), dtype)  # in run order, each step's block apart from the last one's
    cs = xp.empty_like(ys)
    acts = xp.empty((batch, steps, width), dtype)
    hs = _pair(xp, h0)
    h, c, y = h0, c0, xp.zeros_like(h0)
    for s, t in enumerate(_order(steps, go_backwards)):
        rec = xp.matmul(h, kernel)
        inputs = (*_blocks(x[:, t], 4, units), *_blocks(rec, 4, units), c, h, y, keep[:, t, None])
        cell(inputs, (cs[s], hs[s % 2], ys[s], *_blocks(acts[:, t], 4, units)))
        h, c, y = hs[s % 2], cs[s], ys[s]
    return _batch_major(xp, ys), h.copy(), c.copy(), _batch_major(xp, cs), acts


def lstm_sequence_grad(xp, gys, gh, gc, h0, c0, kernel, ys, cs, acts, *mask, go_backwards=False, elementwise=None):
    """(d inputs, d h0, d c0, d recurrent kernel) as `lstm_sequence_grad`'s reference."""
    batch, steps, width = acts.shape
    units, dtype = width // 4, acts.dtype
    keep = _keep(xp, mask, batch, steps)
    order = _order(steps, go_backwards)
    cell = _cell(xp, "lstm_backward", dtype, elementwise)
    dz = xp.empty((steps, batch, width), dtype)  # in run order
    carries, dcs, rests = _pair(xp, gh), _pair(xp, gc), _pair(xp, gh)
    carry, dc, dh_rest, dh_rec = xp.zeros_like(gh), gc, gh, xp.zeros_like(gh)
    for n, s in enumerate(range(steps - 1, -1, -1)):
        t, w = order[s], n % 2
        c_prev = cs[:, s - 1] if s > 0 else c0
        inputs = (gys[:, s], carry, dh_rec, dh_rest, dc, *_blocks(acts[:, t], 4, units), cs[:, s], c_prev)
        cell((*inputs, keep[:, t, None]), (*_blocks(dz[s], 4, units), carries[w], dcs[w], rests[w]))
        carry, dc, dh_rest = carries[w], dcs[w], rests[w]
        dh_rec = xp.matmul(dz[s], kernel.T)
    h_prev = _previous_outputs(xp, ys, h0, keep, go_backwards)
    dkernel = xp.matmul(_flat(h_prev).T, _flat(dz))
    return _time_order(xp, dz, go_backwards), dh_rec + dh_rest, dc.copy(), dkernel


def gru_sequence(xp, x, h0, kernel, bias, *mask, reset_after=True, go_backwards=False, elementwise=None):
    """(outputs, h, gate activations) as `gru_sequence`'s reference."""
    batch, steps, width = x.shape
    units, dtype = width // 3, x.dtype
    keep = _keep(xp, mask, batch, steps)
    ys = xp.empty((steps, batch, units), dtype)  # in run order
    acts = xp.empty((batch, steps, 4 * units), dtype)
    bz, br, bh = _blocks(bias, 3, units)
    hs = _pair(xp, h0)
    h, y = h0, xp.zeros_like(h0)
    if reset_after:
        cell = _cell(xp, "gru_forward", dtype, elementwise)
    else:
        gates = _cell(xp, "gru_forward_gates", dtype, elementwise)
        update = _cell(xp, "gru_forward_update", dtype, elementwise)
        k_zr, k_h = xp.ascontiguousarray(kernel[:, : 2 * units]), xp.ascontiguousarray(kernel[:, 2 * units :])
        z, r, extra = (xp.empty_like(h0) for _ in range(3))
    for s, t in enumerate(_order(steps, go_backwards)):
        xz, xr, xh = _blocks(x[:, t], 3, units)
        outputs = (hs[s % 2], ys[s], *_blocks(acts[:, t], 4, units))
        if reset_after:
            rec = xp.matmul(h, kernel)
            cell((xz, xr, xh, *_blocks(rec, 3, units), bz, br, bh, h, y, keep[:, t, None]), outputs)
        else:
            mz, mr = _blocks(xp.matmul(h, k_zr), 2, units)
            gates((xz, xr, mz, mr, bz, br, h), (z, r, extra))
            update((xh, xp.matmul(extra, k_h), bh, z, r, extra, h, y, keep[:, t, None]), outputs)
        h, y = hs[s % 2], ys[s]
    return _batch_major(xp, ys), h.copy(), acts


def gru_sequence_grad(xp, gys, gh, h0, kernel, ys, acts, *mask, reset_after=True, go_backwards=False, elementwise=None):
    """(d inputs, d h0, d recurrent kernel, d recurrent bias) as `gru_sequence_grad`'s reference."""
    batch, steps, width = acts.shape
    units, dtype = width // 4, acts.dtype
    keep = _keep(xp, mask, batch, steps)
    order = _order(steps, go_backwards)
    h_prev = _previous_outputs(xp, ys, h0, keep, go_backwards)
    dxs = xp.empty((steps, batch, 3 * units), dtype)  # d inputs in run order: dz, dr, dc
    carries, rests = _pair(xp, gh), _pair(xp, gh)
    carry, dh_rest, dh_rec = xp.zeros_like(gh), gh, xp.zeros_like(gh)
    keep_prev = xp.zeros((batch, 1), dtype=bool)  # the step run back before this one kept its state
    if reset_after:
        cell = _cell(xp, "gru_backward", dtype, elementwise)
        drec = xp.empty_like(dxs)  # d (h_prev @ kernel + bias): dz, dr, dc * r
    else:
        gates = _cell(xp, "gru_backward_gates", dtype, elementwise)
        update = _cell(xp, "gru_backward_update", dtype, elementwise)
        k_zr, k_h = xp.ascontiguousarray(kernel[:, : 2 * units]), xp.ascontiguousarray(kernel[:, 2 * units :])
        dhn, dh = xp.empty_like(gh), xp.empty_like(gh)
    for n, s in enumerate(range(steps - 1, -1, -1)):
        t, w = order[s], n % 2
        k = keep[:, t, None]
        z, r, candidate, extra = _blocks(acts[:, t], 4, units)
        dz, dr, dc = _blocks(dxs[s], 3, units)
        head = (gys[:, s], carry, dh_rec, dh_rest, keep_prev, h_prev[s])
        if reset_after:
            outputs = (dz, dr, dc, *_blocks(drec[s], 3, units), carries[w], rests[w])
            cell((*head, z, r, candidate, extra, k), outputs)
            dh_rec = xp.matmul(drec[s], kernel.T)
        else:
            gates((*head, z, candidate, k), (dz, dc, dhn, dh, carries[w]))
            update((xp.matmul(dc, k_h.T), h_prev[s], r, dhn, z, dh, k), (dr, rests[w]))
            dh_rec = xp.matmul(dxs[s][:, : 2 * units], k_zr.T)
        carry, dh_rest, keep_prev = carries[w], rests[w], k
    dh0 = xp.where(keep_prev, dh_rest + dh_rec, dh_rest)
    if reset_after:
        dkernel = xp.matmul(_flat(h_prev).T, _flat(drec))
        dbias = _flat(drec).sum(axis=0)
    else:
        extras = _run_order(acts[..., 3 * units :], go_backwards)
        flat = _flat(dxs)
        zr = xp.matmul(_flat(h_prev).T, flat[:, : 2 * units])
        dkernel = xp.concatenate([zr, xp.matmul(_flat(extras).T, flat[:, 2 * units :])], axis=1)
        dbias = flat.sum(axis=0)
    return _time_order(xp, dxs, go_backwards), dh0, dkernel, dbias
