"""Hostile numbers for tests: float values at the edges of each dtype's range, salting of
random arrays with them, and a comparison that knows flush-to-zero and NaN."""

from __future__ import annotations

import numpy as np


def edge_values(dtype) -> np.ndarray:
    """±0, ±inf, NaN, subnormals, the extremes, and the thresholds where exp, tanh, sigmoid,
    squares and reciprocals overflow or underflow, in `dtype`."""
    info = np.finfo(dtype)
    log_max, log_tiny = np.log(info.max), np.log(info.smallest_normal)
    log_sub = np.log(info.smallest_subnormal)
    values = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1.0,
        -1.0,
        0.5,
        -2.0,
        3.0,
        0.625,
        -0.625,
        0.62,
        9.0,
        -9.0,
        20.0,
        -20.0,
        1e-20,
        -1e-20,
        1e30,
        -1e30,
        info.smallest_subnormal,
        -info.smallest_subnormal,
        info.smallest_normal,
        -info.smallest_normal,
        info.max,
        -info.max,
        np.sqrt(info.max),
        -np.sqrt(info.max),
        1 / info.max,
        np.sqrt(info.smallest_normal),
        88.0,
        88.5,
        88.72,
        88.73,
        89.0,
        -87.3,
        -87.4,
        -103.0,
        -104.0,
        709.7,
        709.8,
        -708.3,
        -708.5,
        -745.0,
    ]
    for edge in (log_max, log_tiny, log_sub):
        values += [edge, -edge, np.nextafter(edge, 0), np.nextafter(edge, 2 * edge)]
    with np.errstate(over="ignore"):
        return np.array(values, dtype=np.float64).astype(dtype)


def salted(x: np.ndarray, rng: np.random.Generator, fraction: float = 0.25) -> np.ndarray:
    """A copy of float array `x` with about `fraction` of its entries replaced by edge values."""
    if x.dtype.kind != "f" or x.size == 0:
        return x
    out = np.array(x, copy=True)
    edges = edge_values(x.dtype)
    mask = rng.random(x.shape) < fraction
    out[mask] = rng.choice(edges, int(mask.sum()))
    return out


def flushed(x: np.ndarray) -> np.ndarray:
    """x with subnormals of its own dtype replaced by zeros of the same sign."""
    tiny = np.finfo(x.dtype).smallest_normal
    return np.where(np.abs(x) < tiny, np.copysign(0.0, x).astype(x.dtype), x)


def mismatches(actual, expected, dtype, rtol: float) -> np.ndarray:
    """Mask of entries where `actual` (in `dtype`) is not `expected` (any float precision):
    NaN where NaN, infinities with their signs, zeros with their signs, finite values within
    `rtol`; a result in the subnormal range may be any zero or subnormal of its sign (flushed
    or not), and a result within `rtol` of the largest finite value may also overflow."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    a, e = np.broadcast_arrays(a, e)
    info = np.finfo(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isnan(a) & np.isnan(e)
        ok |= (a == e) & (np.signbit(a) == np.signbit(e))
        finite = np.isfinite(a) & np.isfinite(e) & (e != 0)
        ok |= finite & (np.abs(a - e) <= rtol * np.abs(e) + info.smallest_subnormal)
        # flush-to-zero: a result at or below the subnormal range may be any value there (a
        # zero or a subnormal passed through unchanged) of the same sign
        tiny_e = np.abs(e) < info.smallest_normal * (1 + rtol)
        ok |= tiny_e & (np.abs(a) < info.smallest_normal) & (np.signbit(a) == np.signbit(e))
        near_max = np.isfinite(e) & (np.abs(e) >= info.max * (1 - rtol)) & (np.sign(a) == np.sign(e))
        ok |= near_max & (np.isinf(a) | (np.abs(a) == info.max))
    return ~ok


RTOL = {np.dtype(np.float32): 4e-6, np.dtype(np.float64): 1e-13}


PRIMITIVE_ORACLE = {  # the float64 NumPy meaning of each fused elementwise primitive
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0.0),
    "sqrt": np.sqrt,
    "square": np.square,
    "abs": np.abs,
    "reciprocal": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
}
