"""The recurrent cells of the GPU backend's LSTM and GRU steps: each cell's arithmetic written
once, run either on arrays (any array module) or traced into the CUDA C of one
ElementwiseKernel.

A cell is a function of a math namespace and its named inputs ([batch, units] arrays, bools
[batch, 1]) that returns its named outputs. `run_cell` runs it with array operations;
`cell_source` traces it, one register per operation in the order Python evaluates them (the
order the NumPy references of `tapeflow.ops.nn.recurrent` use), into a `KernelSource` whose
parameters are `tf_in_<input>` and `tf_out_<output>`. Sigmoid is `1 / (1 + exp(-x))`, as the
references compute it.

>>> src = cell_source("gru_backward_update", "float32")
>>> src.in_params.split(", ")[:2], src.out_params
(['float32 tf_in_dreset', 'float32 tf_in_h_prev'], 'float32 tf_out_dr, float32 tf_out_dh_rest')
>>> print(src.operation.splitlines()[0])
const float r0 = tf_in_dreset * tf_in_h_prev;
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tapeflow._kernels.cuda.elementwise_source import CTYPES, KernelSource, literal

__all__ = ["CELLS", "Cell", "cell_source", "run_cell"]


@dataclass(frozen=True)
class Cell:
    """One kernel's worth of a recurrent step: `inputs` and `outputs` in parameter order, the
    bool inputs among them in `bools`, and `body(m, **inputs) -> {output: value}`."""

    name: str
    inputs: tuple
    outputs: tuple
    bools: frozenset
    body: object


def _lstm_forward(m, xi, xf, xg, xo, ri, rf, rg, ro, c, h, y, keep):
    i, f = m.sigmoid(xi + ri), m.sigmoid(xf + rf)
    g, o = m.tanh(xg + rg), m.sigmoid(xo + ro)
    c_new = f * c + i * g
    h_new = o * m.tanh(c_new)
    acts = {name: m.select(keep, v, 0.0) for name, v in (("i", i), ("f", f), ("g", g), ("o", o))}
    return {"c": m.select(keep, c_new, c), "h": m.select(keep, h_new, h), "y": m.select(keep, h_new, y), **acts}


def _lstm_backward(m, gy, carry, dh_rec, dh_rest, dc, i, f, g, o, c, c_prev, keep):
    dh = dh_rec + dh_rest
    dy = gy + carry
    dhn = dh + dy
    tc = m.tanh(c)
    dcn = dc + dhn * o * (1.0 - tc * tc)
    dz = (
        dcn * g * i * (1.0 - i),
        dcn * c_prev * f * (1.0 - f),
        dcn * i * (1.0 - g * g),
        dhn * tc * o * (1.0 - o),
    )
    out = {name: m.select(keep, v, 0.0) for name, v in zip(("dzi", "dzf", "dzg", "dzo"), dz, strict=True)}
    out["carry"] = m.select(keep, 0.0, dy)
    out["dc"] = m.select(keep, dcn * f, dc)
    out["dh_rest"] = m.select(keep, 0.0, dh)
    return out


def _gru_candidate_update(m, z, r, candidate, extra, h, y, keep):
    h_new = z * h + (1.0 - z) * candidate
    acts = {"az": z, "ar": r, "acandidate": candidate, "aextra": extra}
    out = {"h": m.select(keep, h_new, h), "y": m.select(keep, h_new, y)}
    return out | {name: m.select(keep, v, 0.0) for name, v in acts.items()}


def _gru_forward(m, xz, xr, xh, mz, mr, mh, bz, br, bh, h, y, keep):
    rz, rr, extra = mz + bz, mr + br, mh + bh
    z, r = m.sigmoid(xz + rz), m.sigmoid(xr + rr)
    candidate = m.tanh(xh + r * extra)
    return _gru_candidate_update(m, z, r, candidate, extra, h, y, keep)


def _gru_forward_gates(m, xz, xr, mz, mr, bz, br, h):
    z, r = m.sigmoid(xz + (mz + bz)), m.sigmoid(xr + (mr + br))
    return {"z": z, "r": r, "extra": r * h}


def _gru_forward_update(m, xh, mh, bh, z, r, extra, h, y, keep):
    candidate = m.tanh(xh + mh + bh)
    return _gru_candidate_update(m, z, r, candidate, extra, h, y, keep)


def _gru_backward_head(m, gy, carry, dh_rec, dh_rest, keep_prev, h_prev, z, candidate, keep):
    dh = m.select(keep_prev, dh_rest + dh_rec, dh_rest)
    dy = gy + carry
    dhn = dh + dy
    dz = m.select(keep, dhn * (h_prev - candidate) * z * (1.0 - z), 0.0)
    dc = m.select(keep, dhn * (1.0 - z) * (1.0 - candidate * candidate), 0.0)
    return dh, dy, dhn, dz, dc


def _gru_backward(m, gy, carry, dh_rec, dh_rest, keep_prev, h_prev, z, r, candidate, extra, keep):
    dh, dy, dhn, dz, dc = _gru_backward_head(m, gy, carry, dh_rec, dh_rest, keep_prev, h_prev, z, candidate, keep)
    dr = dc * extra * r * (1.0 - r)
    dcr = dc * r
    return {
        **{"dz": dz, "dr": dr, "dc": dc, "rec_z": dz, "rec_r": dr, "rec_h": dcr},
        "carry": m.select(keep, 0.0, dy),
        "dh_rest": m.select(keep, dhn * z, dh),
    }


def _gru_backward_gates(m, gy, carry, dh_rec, dh_rest, keep_prev, h_prev, z, candidate, keep):
    dh, dy, dhn, dz, dc = _gru_backward_head(m, gy, carry, dh_rec, dh_rest, keep_prev, h_prev, z, candidate, keep)
    return {"dz": dz, "dc": dc, "dhn": dhn, "dh": dh, "carry": m.select(keep, 0.0, dy)}


def _gru_backward_update(m, dreset, h_prev, r, dhn, z, dh, keep):
    dr = dreset * h_prev * r * (1.0 - r)
    return {"dr": dr, "dh_rest": m.select(keep, dhn * z + dreset * r, dh)}


def _cell(name, body, outputs, bools=("keep",)) -> Cell:
    inputs = body.__code__.co_varnames[1 : body.__code__.co_argcount]
    return Cell(name, tuple(inputs), tuple(outputs), frozenset(bools), body)


CELLS = {
    c.name: c
    for c in (
        _cell("lstm_forward", _lstm_forward, ("c", "h", "y", "i", "f", "g", "o")),
        _cell("lstm_backward", _lstm_backward, ("dzi", "dzf", "dzg", "dzo", "carry", "dc", "dh_rest")),
        _cell("gru_forward", _gru_forward, ("h", "y", "az", "ar", "acandidate", "aextra")),
        _cell("gru_forward_gates", _gru_forward_gates, ("z", "r", "extra"), bools=()),
        _cell("gru_forward_update", _gru_forward_update, ("h", "y", "az", "ar", "acandidate", "aextra")),
        _cell(
            "gru_backward",
            _gru_backward,
            ("dz", "dr", "dc", "rec_z", "rec_r", "rec_h", "carry", "dh_rest"),
            bools=("keep_prev", "keep"),
        ),
        _cell(
            "gru_backward_gates", _gru_backward_gates, ("dz", "dc", "dhn", "dh", "carry"), bools=("keep_prev", "keep")
        ),
        _cell("gru_backward_update", _gru_backward_update, ("dr", "dh_rest")),
    )
}


class _ArrayMath:
    """The cells' operations on arrays of the array module `xp`."""

    def __init__(self, xp):
        self.xp = xp

    def sigmoid(self, x):
        return 1.0 / (1.0 + self.xp.exp(-x))

    def tanh(self, x):
        return self.xp.tanh(x)

    def select(self, keep, a, b):
        return self.xp.where(keep, a, b)


def run_cell(xp, name: str, inputs: tuple, outputs: tuple) -> None:
    """Cell `name` run on arrays of `xp`: `inputs` in the cell's order, its results written
    into the arrays `outputs` (in the cell's output order).

    >>> import numpy as np
    >>> out = [np.empty((1, 2)) for _ in range(3)]
    >>> run_cell(np, "gru_forward_gates", [np.zeros((1, 2))] * 7, out)
    >>> [o.tolist() for o in out]
    [[[0.5, 0.5]], [[0.5, 0.5]], [[0.0, 0.0]]]
    """
    cell = CELLS[name]
    results = cell.body(_ArrayMath(xp), *inputs)
    for key, out in zip(cell.outputs, outputs, strict=True):
        out[...] = results[key]


class _Trace:
    """The cells' operations recorded as C statements, one `const` register each."""

    def __init__(self, dtype: str):
        self.dtype, self.ctype, self.lines = dtype, CTYPES[dtype], []
        self.suffix = "f" if dtype == "float32" else ""

    def value(self, x) -> str:
        return x.text if isinstance(x, _Value) else literal(float(x), self.dtype)

    def register(self, expression: str) -> _Value:
        name = f"r{len(self.lines)}"
        self.lines.append(f"const {self.ctype} {name} = {expression};")
        return _Value(self, name)

    def sigmoid(self, x):
        return self.register(f"tf_rnn_sigmoid({self.value(x)})")

    def tanh(self, x):
        return self.register(f"tanh{self.suffix}({self.value(x)})")

    def select(self, keep, a, b):
        return self.register(f"{keep.text} ? {self.value(a)} : {self.value(b)}")


class _Value:
    __slots__ = ("text", "trace")

    def __init__(self, trace: _Trace, text: str):
        self.trace, self.text = trace, text

    def _binary(self, symbol: str, a, b):
        return self.trace.register(f"{self.trace.value(a)} {symbol} {self.trace.value(b)}")

    def __add__(self, other):
        return self._binary("+", self, other)

    def __radd__(self, other):
        return self._binary("+", other, self)

    def __sub__(self, other):
        return self._binary("-", self, other)

    def __rsub__(self, other):
        return self._binary("-", other, self)

    def __mul__(self, other):
        return self._binary("*", self, other)

    def __rmul__(self, other):
        return self._binary("*", other, self)

    def __truediv__(self, other):
        return self._binary("/", self, other)

    def __neg__(self):
        return self.trace.register(f"-{self.text}")


def _preamble(dtype: str) -> str:
    t, one = CTYPES[dtype], literal(1.0, dtype)
    e = "expf" if dtype == "float32" else "exp"
    return f"__device__ __forceinline__ {t} tf_rnn_sigmoid({t} x) {{ return {one} / ({one} + {e}(-x)); }}\n"


@functools.cache
def cell_source(name: str, dtype: str) -> KernelSource:
    """The ElementwiseKernel source of cell `name` for "float32" or "float64" arrays (bool
    inputs stay bool), cached: one text per cell and dtype."""
    cell, trace = CELLS[name], _Trace(dtype)
    args = [_Value(trace, f"tf_in_{n}") for n in cell.inputs]
    results = cell.body(trace, *args)
    if set(results) != set(cell.outputs):
        raise ValueError(f"cell {name}: returns {sorted(results)}, declared {sorted(cell.outputs)}")
    stores = [f"tf_out_{key} = {trace.value(results[key])};" for key in cell.outputs]
    inputs = tuple(("bool" if n in cell.bools else dtype, f"tf_in_{n}", False) for n in cell.inputs)
    outputs = tuple((dtype, f"tf_out_{n}", False) for n in cell.outputs)
    operation = "\n".join(trace.lines + stores)
    return KernelSource(f"tapeflow_rnn_{name}_{dtype}", inputs, outputs, operation, _preamble(dtype))
