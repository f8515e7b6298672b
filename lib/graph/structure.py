"""Nested structures of tensors: TensorSpec, and flattening to leaves and back.

>>> leaves, spec = flatten_structure({"a": [1.0, None]})
>>> leaves, rebuild_structure(spec, [2.0])
([1.0], {'a': [2.0, None]})
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.ops.shapes import MAX_DIM
from tapeflow.tensor import IndexedSlices, Tensor


class TensorSpec:
    """The shape (None for a dynamic dimension) and dtype of a tensor argument.

    >>> TensorSpec((None, 784), "float32")
    TensorSpec(shape=(None, 784), dtype=float32)
    """

    def __init__(self, shape, dtype="float32", name: str | None = None):
        shape = tuple(shape)
        for d in shape:
            if d is not None and (not isinstance(d, int | np.integer) or isinstance(d, bool) or not 0 <= d <= MAX_DIM):
                raise ValueError(f"TensorSpec: dimensions must be ints in [0, {MAX_DIM}] or None, got shape {shape}")
        self.shape = tuple(None if d is None else int(d) for d in shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, t, name: str | None = None) -> TensorSpec:
        return cls(tuple(t.shape), t.dtype, name)

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorSpec) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.name))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype.name})"


def flatten_structure(obj, leaf=lambda x: isinstance(x, Tensor | TensorSpec)):
    """Leaves of nested lists/tuples/dicts, and a JSON-able description to rebuild them."""
    leaves: list = []

    def walk(o):
        if leaf(o):
            leaves.append(o)
            return {"leaf": len(leaves) - 1}
        if isinstance(o, list | tuple):
            return {"list" if isinstance(o, list) else "tuple": [walk(x) for x in o]}
        if isinstance(o, dict):
            return {"dict": [[str(k), walk(v)] for k, v in o.items()]}
        if o is None:
            return {"none": None}
        if isinstance(o, bool | int | float | np.number | np.ndarray | IndexedSlices):  # IndexedSlices: densified
            leaves.append(o)
            return {"leaf": len(leaves) - 1}
        raise TypeError(f"freeze: cannot return or accept a {type(o).__name__}; use tensors, lists, tuples or dicts")

    return leaves, walk(obj)


def rebuild_structure(spec, leaves):
    """The inverse of flatten_structure."""
    if spec is None:
        return leaves[0] if len(leaves) == 1 else tuple(leaves)
    if "leaf" in spec:
        return leaves[spec["leaf"]]
    if "list" in spec:
        return [rebuild_structure(s, leaves) for s in spec["list"]]
    if "tuple" in spec:
        return tuple(rebuild_structure(s, leaves) for s in spec["tuple"])
    if "dict" in spec:
        return {k: rebuild_structure(s, leaves) for k, s in spec["dict"]}
    return None
