"""Small graph-editing helpers shared by the passes."""

from __future__ import annotations

import struct

import numpy as np

from tapeflow.graph.ir import GraphIR, Value


def replace_uses(graph: GraphIR, replacements: dict[int, Value]) -> bool:
    """Make every reader (nodes and graph outputs) of a value `v` read `replacements[id(v)]`
    instead; True if any did."""
    if not replacements:
        return False
    changed = False
    for node in graph.nodes:
        if any(id(v) in replacements for v in node.inputs):
            node.inputs = [replacements.get(id(v), v) for v in node.inputs]
            changed = True
    if any(id(v) in replacements for v in graph.outputs):
        graph.outputs = [replacements.get(id(v), v) for v in graph.outputs]
        changed = True
    return changed


def consumer_counts(graph: GraphIR) -> dict[int, int]:
    """id(value) -> how many distinct nodes read it, plus one per graph output it is."""
    counts: dict[int, int] = {}
    for node in graph.nodes:
        for key in {id(v) for v in node.inputs}:
            counts[key] = counts.get(key, 0) + 1
    for v in graph.outputs:
        counts[id(v)] = counts.get(id(v), 0) + 1
    return counts


def attr_key(value):
    """A hashable form of an attribute that compares by value: arrays by dtype, shape and
    bytes, floats by their bits (0.0 and -0.0 differ, and a NaN equals itself).

    >>> attr_key((1, 2)) == attr_key((1, 2)), attr_key(1) == attr_key(1.0), attr_key(0.0) == attr_key(-0.0)
    (True, False, False)
    """
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(attr_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), attr_key(v)) for k, v in value.items())))
    if isinstance(value, np.generic):
        return ("np", value.dtype.str, value.tobytes())
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return (type(value).__name__, value)
    return ("object", id(value))  # anything else is equal only to itself


def scalar_value(v: Value):
    """The single value of a constant whose elements are all the same (bit for bit: 0.0 and
    -0.0 differ), else None."""
    if v.kind != "const" or v.data is None or v.data.size == 0:
        return None
    flat = v.data.reshape(-1)
    first = flat[0]
    same = flat == first
    if flat.dtype.kind == "f":
        same &= np.signbit(flat) == np.signbit(first)
    return first.item() if np.all(same) else None
