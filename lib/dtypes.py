"""Dtype objects and the promotion rules between them.

Promotion, for two tensors: bool < integers < floats, and within a family the
wider type wins (int32 + int64 -> int64, float16 + float32 -> float32). An
integer meeting a float becomes that float (int64 + float16 -> float16).

Python scalars are "weak": they take the tensor's dtype when they fit its
family. A float scalar never upcasts a float32 tensor; a float scalar meeting
an integer or bool tensor gives float32; an int scalar meeting a bool tensor
gives int64.

>>> import tapeflow as tp
>>> (tp.ones((2,), dtype="float16") + 1.5).dtype
tapeflow.float16
>>> tp.result_type(tp.int32, tp.float32)
tapeflow.float32
"""

from __future__ import annotations

import numpy as np

from tapeflow import _compat


class DType:
    """A tensor element type: a name, its NumPy dtype and its family."""

    __slots__ = ("name", "np", "kind", "bits")

    def __init__(self, name: str, kind: str, bits: int, npdtype=None):
        self.name = name
        self.np = np.dtype(name if npdtype is None else npdtype)
        self.kind = kind  # "b" bool, "i" integer, "f" floating
        self.bits = bits

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"tapeflow.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, DType):
            return self is other
        try:
            return self is as_dtype(other)
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self):
        return (as_dtype, (self.name,))


float16 = DType("float16", "f", 16)
float32 = DType("float32", "f", 32)
float64 = DType("float64", "f", 64)
int32 = DType("int32", "i", 32)
int64 = DType("int64", "i", 64)
bool_ = DType("bool", "b", 8)

# bfloat16 (8 exponent bits, 7 mantissa bits) comes from ml_dtypes, NumPy's home of it
bfloat16 = DType("bfloat16", "f", 16, _compat.ml_dtypes.bfloat16) if _compat.ml_dtypes is not None else None

ALL_DTYPES = tuple(d for d in (float16, bfloat16, float32, float64, int32, int64, bool_) if d is not None)
DEFAULT_FLOAT = float32
DEFAULT_INT = int64

_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NP = {d.np: d for d in ALL_DTYPES}
_FAMILY_RANK = {"b": 0, "i": 1, "f": 2}


def as_dtype(value) -> DType:
    """Turn a DType, a name, a NumPy dtype or a Python type into a DType.

    >>> as_dtype("float32"), as_dtype(float)
    (tapeflow.float32, tapeflow.float32)
    """
    if isinstance(value, DType):
        return value
    if value is float:
        return DEFAULT_FLOAT
    if value is int:
        return DEFAULT_INT
    if value is bool:
        return bool_
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    try:
        npd = np.dtype(value)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NP:
        return _BY_NP[npd]
    raise TypeError(f"unsupported dtype {value!r}; tapeflow supports " + ", ".join(d.name for d in ALL_DTYPES))


def promote(a: DType, b: DType) -> DType:
    """Promotion of two tensor dtypes (see the module docstring)."""
    if a is b:
        return a
    ra, rb = _FAMILY_RANK[a.kind], _FAMILY_RANK[b.kind]
    if ra != rb:
        return a if ra > rb else b
    if a.bits == b.bits:  # float16 and bfloat16: neither holds the other
        return float32
    return a if a.bits > b.bits else b


def weak_scalar_dtype(tensor_dtype: DType, scalar) -> DType:
    """The dtype a Python scalar takes when it meets a tensor of `tensor_dtype`."""
    if isinstance(scalar, bool):
        return tensor_dtype
    if isinstance(scalar, int):
        return tensor_dtype if tensor_dtype.kind != "b" else DEFAULT_INT
    if isinstance(scalar, float):
        return tensor_dtype if tensor_dtype.kind == "f" else DEFAULT_FLOAT
    raise TypeError(f"not a Python scalar: {scalar!r}")


def result_type(*items) -> DType:
    """Promote any mix of dtypes and Python scalars.

    >>> result_type(int32, 2.0)
    tapeflow.float32
    """
    strong = [as_dtype(i) for i in items if not isinstance(i, (bool, int, float))]
    weak = [i for i in items if isinstance(i, (bool, int, float))]
    if strong:
        out = strong[0]
        for d in strong[1:]:
            out = promote(out, d)
    else:
        out = _scalar_default(weak[0]) if weak else DEFAULT_FLOAT
        weak = weak[1:]
    for s in weak:
        out = promote(out, weak_scalar_dtype(out, s))
    return out


def _scalar_default(value) -> DType:
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return DEFAULT_INT
    return DEFAULT_FLOAT
