"""Every reduction and normalization op, and the normalization and pooling layers under the
mixed policies, on float16 and bfloat16 inputs of 10,000 elements, eagerly and frozen,
against NumPy in float64 on the same (already rounded) inputs.

Inputs are large (near 1000, and near 60000 where float16 ends), small (near 1e-4), of mixed
signs, offset (1000 plus small noise, where a variance cancels) and a vector whose running
float16 sum overflows although its total does not. A result must have the graph's shape and
the expected dtype, and lie within a few ulps of that dtype of the float64 answer (plus a
float32-sized allowance where the answer is a cancellation of larger terms).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.ops.fused import FUSED_ELEMENTWISE
from tapeflow.ops.registry import all_ops

ml_dtypes = pytest.importorskip("ml_dtypes")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

N = 10_000
SHAPE = (100, 100)
DTYPES = ("float16", "bfloat16")
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23}
# Absolute precision near 0: float16's smallest subnormal, bfloat16's smallest normal (float32 may flush below it).
TINY = {"float16": 2.0**-24, "bfloat16": 2.0**-126}
ULPS = 4  # allowed error, in units of the output dtype's epsilon relative to the answer
F32_SLACK = 64 * EPS["float32"]  # float32 accumulation, relative to the terms' magnitude


def _np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _raw_values(kind: str) -> np.ndarray:
    """10,000 float64 values of one kind, in a fixed order."""
    rng = np.random.default_rng(KINDS.index(kind))
    signs = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    if kind == "large":
        return rng.uniform(900.0, 1100.0, N) * signs
    if kind == "huge":
        return rng.uniform(50_000.0, 65_000.0, N) * signs
    if kind == "small":
        return rng.uniform(0.7e-4, 1.3e-4, N) * signs
    if kind == "offset":
        return 1000.0 + rng.normal(0.0, 3.0, N)
    if kind == "overflow":  # float16 partial sums pass 65504; the total is small
        half = rng.uniform(20.0, 30.0, N // 2)
        return np.concatenate([half, -half[::-1] + rng.uniform(-0.5, 0.5, N // 2)])
    raise AssertionError(kind)


KINDS = ("large", "huge", "small", "offset", "overflow")
# Frozen runs check the graph's shapes and dtypes and that freezing keeps the float32 path; eager runs every kind.
KINDS_BY_MODE = {"eager": KINDS, "function": ("huge", "offset"), "saved": ("huge",)}


# ------------------------------------------------------------------ NumPy references
def _sparsemax(z, axis):
    """Keras's sparsemax: support {1 + k_i z_i > s_i}, with k_i, s_i the count and sum of the z_j >= z_i."""
    z = np.moveaxis(z, axis, -1)
    above = z[..., None, :] >= z[..., :, None]
    k = above.sum(-1)
    s = (above * z[..., None, :]).sum(-1)
    support = 1 + k * z > s
    tau = ((support * s).sum(-1, keepdims=True) - 1) / support.sum(-1, keepdims=True)
    return np.moveaxis(np.maximum(z - tau, 0.0), -1, axis)


def _pool(x, window, reduce):
    """Non-overlapping windows of a (batch, *spatial, channels) array: `reduce` over each."""
    split = [n for d, w in zip(x.shape[1:-1], window, strict=True) for n in (d // w, w)]
    return reduce(x.reshape((x.shape[0], *split, x.shape[-1])), axis=tuple(range(2, 2 * len(window) + 1, 2)))


def _logsumexp(a, axis=None, keepdims=False):
    m = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _normalized(a, axis, eps):
    return (a - a.mean(axis=axis, keepdims=True)) / np.sqrt(a.var(axis=axis, keepdims=True) + eps)


def _near_one(a):
    """Values near 1 (for products): 1 + 0.01 * a / max|a|."""
    return 1.0 + 0.01 * a / np.max(np.abs(a))


def _with_nans(a):
    a = a.copy()
    a.flat[::97] = np.nan
    return a


# ------------------------------------------------------------------ the table
@dataclass
class Case:
    """An op (or composite) `call(x, axis)` beside `ref(x64, axis)`.

    `registered`: the OpDef names this case runs, for the completeness checks. `prep` maps the
    raw float64 values before rounding. `terms`: the magnitude of the terms a result is a
    cancellation of (the op applied to |x| by default for linear ops, else the answer itself).
    `axes`: the axis arguments tried on a (100, 100) input (`"flat"` runs on the 10,000-vector).
    """

    name: str
    call: Callable
    ref: Callable
    registered: tuple = ()
    prep: Callable | None = None
    linear: bool = False
    terms: Callable | None = None
    axes: tuple = ("flat", None, -1)
    integer: bool = False


def _segment(name):
    def call(x, axis):
        ids = tp.tensor(np.arange(x.shape[0]) // 100)
        return getattr(tp.ops, name)(x, ids, num_segments=x.shape[0] // 100)

    return call


def _segment_ref(name):
    reduce = {"segment_sum": np.sum, "segment_max": np.max, "segment_min": np.min, "segment_prod": np.prod}[name]
    return lambda a, axis: reduce(a.reshape((a.shape[0] // 100, 100, *a.shape[1:])), axis=1)


def _reduction(name, np_fn, registered=(), **kw):
    """A case that calls tp.ops.<name>(x, axis=axis) beside np_fn(a, axis=axis)."""
    fn = getattr(tp.ops, name)
    return Case(name, lambda x, axis: fn(x, axis=axis), lambda a, axis: np_fn(a, axis=axis), registered, **kw)


_Q = 0.3
_WEIGHTS = np.arange(100) % 4 + 1.0  # exact in both half dtypes
CASES = [
    _reduction("sum", np.sum, ("sum",), linear=True),
    _reduction("mean", np.mean, ("sum",), linear=True),
    _reduction("average", np.average, ("sum",), linear=True),
    Case(
        "average_weighted",
        lambda x, axis: tp.ops.average(x, axis=axis, weights=tp.cast(tp.tensor(_WEIGHTS), x.dtype)),
        lambda a, axis: np.average(a, axis=axis, weights=_WEIGHTS),
        ("sum",),
        linear=True,
        axes=(-1,),
    ),
    _reduction("var", np.var, ("sum",)),
    _reduction("std", np.std, ("sum",)),
    _reduction("max", np.max, ("max",)),
    _reduction("min", np.min, ("min",)),
    _reduction("amax", np.max, ("max",)),
    _reduction("amin", np.min, ("min",)),
    _reduction("ptp", np.ptp, ("max", "min")),
    _reduction("prod", np.prod, ("prod",), prep=_near_one),
    _reduction("logsumexp", _logsumexp, ("logsumexp",)),
    _reduction("median", np.median, ("quantile",)),
    Case(
        "quantile",
        lambda x, axis: tp.ops.quantile(x, _Q, axis=axis),
        lambda a, axis: np.quantile(a, _Q, axis=axis),
        ("quantile",),
    ),
    Case(
        "percentile",
        lambda x, axis: tp.ops.percentile(x, 100 * _Q, axis=axis),
        lambda a, axis: np.percentile(a, 100 * _Q, axis=axis),
        ("quantile",),
    ),
    Case(
        "norm",
        lambda x, axis: tp.ops.norm(x, axis=axis),
        lambda a, axis: np.linalg.norm(a.reshape(-1) if axis is None else a, axis=axis),
        ("sum",),
    ),
    _reduction("nansum", np.nansum, ("sum",), prep=_with_nans, linear=True),
    _reduction("nanmean", np.nanmean, ("sum",), prep=_with_nans, linear=True),
    _reduction("nanvar", np.nanvar, ("sum",), prep=_with_nans),
    _reduction("nanstd", np.nanstd, ("sum",), prep=_with_nans),
    _reduction("nanmax", np.nanmax, ("max",), prep=_with_nans),
    _reduction("nanmin", np.nanmin, ("min",), prep=_with_nans),
    _reduction("nanprod", np.nanprod, ("prod",), prep=lambda a: _with_nans(_near_one(a))),
    _reduction("nanmedian", np.nanmedian, ("quantile",), prep=_with_nans),
    Case(
        "nanquantile",
        lambda x, axis: tp.ops.nanquantile(x, _Q, axis=axis),
        lambda a, axis: np.nanquantile(a, _Q, axis=axis),
        ("quantile",),
        prep=_with_nans,
    ),
    Case(
        "nanpercentile",
        lambda x, axis: tp.ops.nanpercentile(x, 100 * _Q, axis=axis),
        lambda a, axis: np.nanpercentile(a, 100 * _Q, axis=axis),
        ("quantile",),
        prep=_with_nans,
    ),
    _reduction("argmax", np.argmax, ("argmax",), integer=True),
    _reduction("argmin", np.argmin, ("argmin",), integer=True),
    _reduction("nanargmax", np.nanargmax, ("argmax",), integer=True, prep=_with_nans),
    _reduction("nanargmin", np.nanargmin, ("argmin",), integer=True, prep=_with_nans),
    _reduction("cumsum", np.cumsum, ("cumsum",), linear=True, axes=("flat", -1, 0)),
    _reduction("cumprod", np.cumprod, ("cumprod",), prep=_near_one, axes=("flat", -1, 0)),
    _reduction("nancumsum", np.nancumsum, ("cumsum",), prep=_with_nans, linear=True, axes=("flat", -1)),
    _reduction("nancumprod", np.nancumprod, ("cumprod",), prep=lambda a: _with_nans(_near_one(a)), axes=("flat", -1)),
    Case(
        "trapezoid",
        lambda x, axis: tp.ops.trapezoid(x, axis=-1 if axis is None else axis),
        lambda a, axis: np.trapezoid(a, axis=-1 if axis is None else axis),
        ("sum",),
        linear=True,
    ),
    Case(
        "segment_sum",
        _segment("segment_sum"),
        _segment_ref("segment_sum"),
        ("segment_sum",),
        linear=True,
        axes=("flat", 0),
    ),
    Case("segment_max", _segment("segment_max"), _segment_ref("segment_max"), ("segment_max",), axes=("flat", 0)),
    Case("segment_min", _segment("segment_min"), _segment_ref("segment_min"), ("segment_min",), axes=("flat", 0)),
    Case(
        "segment_prod",
        _segment("segment_prod"),
        _segment_ref("segment_prod"),
        ("segment_prod",),
        prep=_near_one,
        axes=("flat", 0),
    ),
    Case(
        "moments",
        lambda x, axis: tp.nn.moments(x, axes=axis),
        lambda a, axis: (a.mean(axis=axis), a.var(axis=axis)),
        ("sum",),
        axes=((0,), (0, 1), -1),
    ),
    Case(
        "softmax",
        lambda x, axis: tp.nn.softmax(x, axis=axis),
        lambda a, axis: _softmax(a, axis),
        ("max", "sum"),
        axes=(-1, 0),
    ),
    Case(
        "log_softmax",
        lambda x, axis: tp.nn.log_softmax(x, axis=axis),
        lambda a, axis: a - _logsumexp(a, axis=axis, keepdims=True),
        ("logsumexp",),
        axes=(-1, 0),
        terms=lambda a, axis: np.abs(a),
    ),
    Case(
        "sparsemax",
        lambda x, axis: tp.nn.sparsemax(x, axis=axis),
        lambda a, axis: _sparsemax(a, axis),
        ("cumsum",),
        axes=(-1,),
    ),
    Case(
        "normalize",
        lambda x, axis: tp.nn.normalize(x, axis=axis),
        lambda a, axis: a / np.maximum(np.linalg.norm(a, axis=axis, keepdims=True), 1e-7),
        ("sum",),
        axes=(-1, 0),
    ),
    Case(
        "layer_normalization",
        lambda x, axis: tp.nn.layer_normalization(x, axis=axis, epsilon=1e-3),
        lambda a, axis: _normalized(a, axis, 1e-3),
        ("sum",),
        axes=(-1, 0),
        terms=lambda a, axis: np.abs(a) / np.sqrt(a.var(axis=axis, keepdims=True) + 1e-3),
    ),
    Case(
        "rms_normalization",
        lambda x, axis: tp.nn.rms_normalization(x, axis=axis, epsilon=1e-6),
        lambda a, axis: a / np.sqrt(np.mean(a * a, axis=axis, keepdims=True) + 1e-6),
        ("sum",),
        axes=(-1, 0),
    ),
    Case(
        "batch_normalization",
        lambda x, axis: tp.nn.batch_normalization(
            x,
            *(tp.full((100,), v, dtype=x.dtype) for v in (1024.0, 16.0)),
            axis=-1,
            offset=tp.full((100,), 0.5, dtype=x.dtype),
            scale=tp.full((100,), 2.0, dtype=x.dtype),
            epsilon=1e-3,
        ),
        lambda a, axis: (a - 1024.0) / np.sqrt(16.0 + 1e-3) * 2.0 + 0.5,
        ("sum",),
        axes=(-1,),
        terms=lambda a, axis: np.abs(a) / 2.0,
    ),
    Case(
        "avg_pool2d",
        lambda x, axis: tp.nn.avg_pool2d(tp.reshape(x, (1, 100, 100, 1)), 4, 4),
        lambda a, axis: _pool(a.reshape(1, 100, 100, 1), (4, 4), np.mean),
        ("avg_pool2d",),
        axes=(None,),
    ),
    Case(
        "max_pool2d",
        lambda x, axis: tp.nn.max_pool2d(tp.reshape(x, (1, 100, 100, 1)), 4, 4),
        lambda a, axis: _pool(a.reshape(1, 100, 100, 1), (4, 4), np.max),
        ("max_pool2d",),
        axes=(None,),
    ),
    Case(
        "avg_pool3d",
        lambda x, axis: tp.nn.avg_pool3d(tp.reshape(x, (1, 20, 20, 25, 1)), (2, 2, 5), (2, 2, 5)),
        lambda a, axis: _pool(a.reshape(1, 20, 20, 25, 1), (2, 2, 5), np.mean),
        ("avg_pool3d",),
        axes=(None,),
    ),
    Case(
        "max_pool3d",
        lambda x, axis: tp.nn.max_pool3d(tp.reshape(x, (1, 20, 20, 25, 1)), (2, 2, 5), (2, 2, 5)),
        lambda a, axis: _pool(a.reshape(1, 20, 20, 25, 1), (2, 2, 5), np.max),
        ("max_pool3d",),
        axes=(None,),
    ),
]

# Public functions with an axis that are not float reductions or normalizations, and why.
NOT_FLOAT_REDUCTIONS = {
    "all": "boolean result",
    "any": "boolean result",
    "count_nonzero": "integer count",
    "sampled_softmax_loss": "a loss, not a reduction or normalization of its input",
    "softmax_cross_entropy_with_logits": "a loss, not a reduction or normalization of its input",
    "sparse_softmax_cross_entropy_with_logits": "a loss, not a reduction or normalization of its input",
}
# Registered ops the scan below finds that the table does not run, and why.
NOT_RUN = {
    "quantile_weights": "the gradient of quantile, run by its VJP tests",
    "unique_sum": "sums rows of sparse gradients; tested in tests/ops/test_sparse.py",
}


# ------------------------------------------------------------------ running and comparing
def _inputs(kind: str, dtype: str, case: Case, axis):
    raw = _raw_values(kind)
    if case.prep is not None:
        raw = case.prep(raw)
    half = raw.astype(_np_dtype(dtype))
    if axis != "flat":
        half = half.reshape(SHAPE)
    return tp.tensor(half), half.astype(np.float64)


def _run(case: Case, x, axis, mode: str, tmp_path):
    arg = None if axis == "flat" else axis

    def fn(t):
        return case.call(t, arg)

    if mode == "eager":
        return fn(x)
    if mode == "function":
        return tp.function(fn)(x)
    graph = tp.freeze(fn, tp.TensorSpec(x.shape, x.dtype))
    path = str(tmp_path / "graph.tfg")
    graph.save(path)
    return tp.load_graph(path)(x)


def _mismatch(got, want: np.ndarray, terms, dtype: str, integer: bool) -> str | None:
    """Why `got` is not `want` (float64) to the output dtype's precision, or None."""
    if tuple(got.shape) != want.shape:
        return f"shape {tuple(got.shape)}, expected {want.shape}"
    if integer:
        if got.dtype.kind not in "iu":
            return f"dtype {got.dtype.name}, expected an integer dtype"
        bad = got.numpy() != want
        return f"{bad.sum()} indices differ" if bad.any() else None
    if got.dtype.name != dtype:
        return f"dtype {got.dtype.name}, expected {dtype}"
    g = got.numpy().astype(np.float64)
    rounded = want.astype(_np_dtype(dtype)).astype(np.float64)  # overflows to inf where the dtype does
    tol = ULPS * EPS[dtype] * np.abs(want) + F32_SLACK * terms + 2 * TINY[dtype]
    with np.errstate(invalid="ignore"):
        ok = (np.isnan(g) & np.isnan(want)) | (g == rounded) | (np.abs(g - want) <= tol)
    if ok.all():
        return None
    i = np.flatnonzero(~ok.reshape(-1))
    return (
        f"{i.size} of {ok.size} values off, e.g. at {i[0]}: {g.reshape(-1)[i[0]]!r} "
        f"instead of {want.reshape(-1)[i[0]]!r} (tolerance {np.broadcast_to(tol, want.shape).reshape(-1)[i[0]]:.3g})"
    )


def _compare(case: Case, dtype: str, mode: str, tmp_path) -> list[str]:
    problems = []
    for kind in KINDS_BY_MODE[mode]:
        for axis in case.axes:
            x, x64 = _inputs(kind, dtype, case, axis)
            arg = None if axis == "flat" else axis
            wants = case.ref(x64, arg)
            terms = case.ref(np.abs(x64), arg) if case.linear else case.terms(x64, arg) if case.terms else 0.0
            try:
                gots = _run(case, x, axis, mode, tmp_path)
            except Exception as exc:  # noqa: BLE001 - reported with the case that raised it
                problems.append(f"{kind}, axis={axis}: raised {type(exc).__name__}: {exc}")
                continue
            if not isinstance(wants, tuple):
                gots, wants = (gots,), (wants,)
            for k, (got, want) in enumerate(zip(gots, wants, strict=True)):
                why = _mismatch(got, np.asarray(want, dtype=np.float64), np.abs(terms), dtype, case.integer)
                if why:
                    problems.append(f"{kind}, axis={axis}, output {k}: {why}")
    return problems


def _params():
    for case in CASES:
        for dtype in DTYPES:
            for mode in ("eager", "function", "saved"):
                marks = [pytest.mark.slow] if mode == "saved" else []
                yield pytest.param(case, dtype, mode, id=f"{case.name}-{dtype}-{mode}", marks=marks)


@pytest.mark.parametrize("case, dtype, mode", list(_params()))
def test_half_precision_op_matches_float64(case, dtype, mode, tmp_path):
    problems = _compare(case, dtype, mode, tmp_path)
    assert not problems, f"{case.name} ({dtype}, {mode}):\n  " + "\n  ".join(problems)


# ------------------------------------------------------------------ layers under mixed policies
@dataclass
class LayerCase:
    """A layer built by `make()` on inputs of `shape`, beside `ref(x64)` in float64."""

    name: str
    make: Callable
    shape: tuple
    ref: Callable
    training: bool = False
    terms: Callable | None = None
    setup: Callable | None = None


def _groups(a, groups, eps):
    b = a.reshape((*a.shape[:-1], groups, a.shape[-1] // groups))
    axes = tuple(range(1, b.ndim - 2)) + (b.ndim - 1,)
    return _normalized(b, axes, eps).reshape(a.shape)


def _pooled(reduce, window):
    return lambda a: _pool(a, window, reduce)


def _global(reduce):
    return lambda a: reduce(a, axis=tuple(range(1, a.ndim - 1)))


def _set_moving_statistics(layer):
    gamma, beta, _, _ = layer.get_weights()
    layer.set_weights([gamma, beta, np.full(100, 1024.0, "float32"), np.full(100, 16.0, "float32")])


def _layer_norm_terms(axes):
    return lambda a: np.abs(a) / np.sqrt(a.var(axis=axes, keepdims=True) + 1e-3)


L = tp.layers
S1, S2, S3 = (10, 1000, 1), (1, 100, 100, 1), (1, 20, 20, 25, 1)
LAYER_CASES = [
    LayerCase(
        "LayerNormalization",
        lambda: L.LayerNormalization(),
        SHAPE,
        lambda a: _normalized(a, -1, 1e-3),
        terms=_layer_norm_terms(-1),
    ),
    LayerCase(
        "RMSNormalization",
        lambda: L.RMSNormalization(),
        SHAPE,
        lambda a: a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + 1e-6),
    ),
    LayerCase(
        "GroupNormalization",
        lambda: L.GroupNormalization(groups=4),
        (4, 25, 100),
        lambda a: _groups(a, 4, 1e-3),
        terms=lambda a: np.abs(a) / np.sqrt(np.var(a) + 1e-3),
    ),
    LayerCase(
        "UnitNormalization",
        lambda: L.UnitNormalization(),
        SHAPE,
        lambda a: a / np.linalg.norm(a, axis=-1, keepdims=True),
    ),
    LayerCase(
        "BatchNormalization-train",
        lambda: L.BatchNormalization(),
        SHAPE,
        lambda a: _normalized(a, 0, 1e-3),
        training=True,
        terms=_layer_norm_terms(0),
    ),
    LayerCase(
        "BatchNormalization-inference",
        lambda: L.BatchNormalization(),
        SHAPE,
        lambda a: (a - 1024.0) / np.sqrt(16.0 + 1e-3),
        setup=_set_moving_statistics,
        terms=lambda a: np.abs(a) / 4,
    ),
    LayerCase(
        "Normalization",
        lambda: L.Normalization(mean=1024.0, variance=16.0),
        SHAPE,
        lambda a: (a - 1024.0) / 4.0,
        terms=lambda a: np.abs(a) / 4,
    ),
    LayerCase(
        "AveragePooling1D", lambda: L.AveragePooling1D(4), S1, _pooled(np.mean, (4,)), terms=_pooled(np.mean, (4,))
    ),
    LayerCase(
        "AveragePooling2D", lambda: L.AveragePooling2D(4), S2, _pooled(np.mean, (4, 4)), terms=_pooled(np.mean, (4, 4))
    ),
    LayerCase(
        "AveragePooling3D",
        lambda: L.AveragePooling3D((2, 2, 5)),
        S3,
        _pooled(np.mean, (2, 2, 5)),
        terms=_pooled(np.mean, (2, 2, 5)),
    ),
    LayerCase("MaxPooling1D", lambda: L.MaxPooling1D(4), S1, _pooled(np.max, (4,))),
    LayerCase("MaxPooling2D", lambda: L.MaxPooling2D(4), S2, _pooled(np.max, (4, 4))),
    LayerCase("MaxPooling3D", lambda: L.MaxPooling3D((2, 2, 5)), S3, _pooled(np.max, (2, 2, 5))),
    LayerCase(
        "AdaptiveAveragePooling1D",
        lambda: L.AdaptiveAveragePooling1D(250),
        S1,
        _pooled(np.mean, (4,)),
        terms=_pooled(np.mean, (4,)),
    ),
    LayerCase(
        "AdaptiveAveragePooling2D",
        lambda: L.AdaptiveAveragePooling2D(25),
        S2,
        _pooled(np.mean, (4, 4)),
        terms=_pooled(np.mean, (4, 4)),
    ),
    LayerCase(
        "AdaptiveAveragePooling3D",
        lambda: L.AdaptiveAveragePooling3D((10, 10, 5)),
        S3,
        _pooled(np.mean, (2, 2, 5)),
        terms=_pooled(np.mean, (2, 2, 5)),
    ),
    LayerCase("AdaptiveMaxPooling1D", lambda: L.AdaptiveMaxPooling1D(250), S1, _pooled(np.max, (4,))),
    LayerCase("AdaptiveMaxPooling2D", lambda: L.AdaptiveMaxPooling2D(25), S2, _pooled(np.max, (4, 4))),
    LayerCase("AdaptiveMaxPooling3D", lambda: L.AdaptiveMaxPooling3D((10, 10, 5)), S3, _pooled(np.max, (2, 2, 5))),
    LayerCase(
        "GlobalAveragePooling1D", lambda: L.GlobalAveragePooling1D(), S1, _global(np.mean), terms=_global(np.mean)
    ),
    LayerCase(
        "GlobalAveragePooling2D", lambda: L.GlobalAveragePooling2D(), S2, _global(np.mean), terms=_global(np.mean)
    ),
    LayerCase(
        "GlobalAveragePooling3D", lambda: L.GlobalAveragePooling3D(), S3, _global(np.mean), terms=_global(np.mean)
    ),
    LayerCase("GlobalMaxPooling1D", lambda: L.GlobalMaxPooling1D(), S1, _global(np.max)),
    LayerCase("GlobalMaxPooling2D", lambda: L.GlobalMaxPooling2D(), S2, _global(np.max)),
    LayerCase("GlobalMaxPooling3D", lambda: L.GlobalMaxPooling3D(), S3, _global(np.max)),
]
# Normalization and pooling layers the table leaves out, and why.
LAYERS_NOT_RUN = {
    "SpectralNormalization": "a wrapper that normalizes another layer's kernel, not its inputs",
}

POLICIES = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


@pytest.fixture
def policy(request):
    tp.mixed_precision.set_global_policy(request.param)
    yield POLICIES[request.param]
    tp.mixed_precision.set_global_policy(None)


def _layer_problems(case: LayerCase, dtype: str, mode: str) -> list[str]:
    problems = []
    for kind in KINDS_BY_MODE[mode]:
        half = _raw_values(kind).astype(_np_dtype(dtype)).reshape(case.shape)
        x64 = half.astype(np.float64)
        layer = case.make()
        layer.build(case.shape)
        if case.setup is not None:
            case.setup(layer)
        x = tp.tensor(half.astype(np.float32))

        def fn(t, layer=layer):
            return layer(t, training=case.training)

        try:
            got = fn(x) if mode == "eager" else tp.function(fn)(x)
        except Exception as exc:  # noqa: BLE001 - reported with the case that raised it
            problems.append(f"{kind}: raised {type(exc).__name__}: {exc}")
            continue
        terms = np.abs(case.terms(x64)) if case.terms else 0.0
        why = _mismatch(got, case.ref(x64), terms, dtype, False)
        if why:
            problems.append(f"{kind}: {why}")
    return problems


@pytest.mark.parametrize("policy", list(POLICIES), indirect=True)
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", LAYER_CASES, ids=[c.name for c in LAYER_CASES])
def test_layer_under_mixed_policy_matches_float64(case, mode, policy):
    problems = _layer_problems(case, policy, mode)
    assert not problems, f"{case.name} ({policy}, {mode}):\n  " + "\n  ".join(problems)


# ------------------------------------------------------------------ nothing left out
def _public_functions():
    """(namespace, name, function) of every public function of tp, tp.ops and tp.nn."""
    for label, module in (("tp", tp), ("tp.ops", tp.ops), ("tp.nn", tp.nn)):
        for name in dir(module):
            fn = getattr(module, name)
            if not name.startswith("_") and inspect.isfunction(fn):
                yield label, name, fn


def _looks_like_reduction(name, fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    words = ("norm", "softmax", "moments", "cum", "pool", "segment_", "logsumexp")
    return "keepdims" in params or any(w in name for w in words)


def test_every_public_reduction_and_normalization_is_in_the_table():
    covered = {c.name for c in CASES}
    skipped = {"avg_pool", "max_pool", "average_pool", "adaptive_average_pool", "adaptive_max_pool"}
    missing = sorted(
        {
            f"{label}.{name}"
            for label, name, fn in _public_functions()
            if _looks_like_reduction(name, fn) and name not in covered | set(NOT_FLOAT_REDUCTIONS) | skipped
        }
    )
    assert not missing, f"add these to CASES (or NOT_FLOAT_REDUCTIONS with a reason): {missing}"


def _registered_reductions() -> set[str]:
    names = set()
    for op in all_ops():
        if isinstance(op.reference, np.ufunc):
            continue
        params = inspect.signature(op.reference).parameters
        pooling = "pool" in op.name and "grad" not in op.name
        if "keepdims" in params or pooling or op.name.startswith(("argm", "cum", "segment_", "unique_sum")):
            names.add(op.name)
    return names


def test_every_registered_reduction_op_is_run():
    run = {name for c in CASES for name in c.registered}
    missing = sorted(_registered_reductions() - run - set(NOT_RUN))
    assert not missing, f"registered reductions no case runs: {missing}; add a Case or a NOT_RUN reason"


def test_every_normalization_and_pooling_layer_is_run():
    run = {type(c.make()).__name__ for c in LAYER_CASES} | set(LAYERS_NOT_RUN)
    layers = {
        cls.__name__
        for name in dir(tp.layers)
        if inspect.isclass(cls := getattr(tp.layers, name)) and ("Normalization" in name or "Pool" in name)
    }
    assert not sorted(layers - run), f"add these layers to LAYER_CASES (or LAYERS_NOT_RUN): {sorted(layers - run)}"


# ------------------------------------------------------------------ 0-d results of frozen graphs
ZERO_D = {
    "std": lambda x: tp.std(x),
    "mean": lambda x: tp.mean(x),
    "sum": lambda x: tp.sum(x),
    "max": lambda x: tp.max(x),
    "logsumexp": lambda x: tp.logsumexp(x),
    "fused_chain": lambda x: tp.sqrt(tp.exp(tp.sum(x) * 0.01) * 2.0),  # a fused elementwise program on a 0-d value
    "fused_std": lambda x: tp.exp(tp.std(x)) - 1.0,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(ZERO_D))
def test_frozen_half_precision_scalars_keep_the_graph_shape(name, dtype, tmp_path):
    fn = ZERO_D[name]
    x = tp.tensor(np.linspace(-3.0, 3.0, 100).astype(_np_dtype(dtype)))
    eager = fn(x)
    graph = tp.freeze(fn, tp.TensorSpec((100,), dtype))
    graph.save(str(tmp_path / "g.tfg"))
    for out in (tp.function(fn)(x), graph(x), tp.load_graph(str(tmp_path / "g.tfg"))(x)):
        assert out.shape == eager.shape == () and out.dtype.name == dtype
        np.testing.assert_array_equal(out.numpy(), eager.numpy())


def test_fused_elementwise_keeps_a_0d_half_value_0d():
    for dtype in DTYPES:
        out = FUSED_ELEMENTWISE.reference(np.array(4.0, _np_dtype(dtype)), program=(("input", 0), ("sqrt", 0)))
        assert out.shape == () and out.dtype == _np_dtype(dtype) and float(out) == 2.0


def test_a_graph_with_a_bfloat16_constant_saves_and_loads(tmp_path):
    fn = lambda x: tp.ops.nanmax(x)  # noqa: E731 - nanmax fills NaNs with a bfloat16 -inf constant
    x = tp.tensor(np.array([1.0, np.nan, 3.0], dtype=ml_dtypes.bfloat16))
    graph = tp.freeze(fn, tp.TensorSpec((3,), "bfloat16"))
    graph.save(str(tmp_path / "g.tfg"))
    out = tp.load_graph(str(tmp_path / "g.tfg"))(x)
    assert out.dtype.name == "bfloat16" and out.shape == () and float(out) == 3.0
