"""Nested structures of tensors: TensorSpec, and the JSON-able description of a structure
that graph files store, to rebuild it from its leaves.

>>> leaves, spec = flatten_structure({"b": [1.0, None], "a": 3.0})
>>> leaves, rebuild_structure(spec, [4.0, 2.0])
([3.0, 1.0], {'b': [2.0, None], 'a': 4.0})
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes, tree
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
    """The leaves of a nested structure in `tapeflow.tree` order, and a JSON-able description
    (the form graph files store) to rebuild it: None stays in the description unless `leaf`
    takes it; numbers, arrays and IndexedSlices (densified) are leaves too."""
    leaves: list = []
    marks = []
    for value in tree.flatten(obj):
        if leaf(value) or isinstance(value, _CONSTANTS):
            marks.append(_Leaf(len(leaves)))
            leaves.append(value)
        elif value is None:
            marks.append(None)
        else:
            raise TypeError(
                f"freeze: cannot return or accept a {type(value).__name__}; use tensors, lists, tuples or dicts"
            )
    return leaves, _describe(tree.pack_sequence_as(obj, marks))


_CONSTANTS = (bool, int, float, np.number, np.ndarray, IndexedSlices)


class _Leaf:
    """A leaf's place among the flattened leaves, while the description is written."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _describe(marked):
    if isinstance(marked, _Leaf):
        return {"leaf": marked.index}
    if marked is None:
        return {"none": None}
    if isinstance(marked, dict):
        return {"dict": [[str(k), _describe(v)] for k, v in marked.items()]}
    return {"list" if isinstance(marked, list) else "tuple": [_describe(x) for x in marked]}


def rebuild_structure(spec, leaves):
    """The inverse of flatten_structure: each {"leaf": i} takes leaves[i]."""
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
