"""Nested structures: lists, tuples (named ones too) and dicts, flattened to their leaves,
packed back and mapped over.

Everything else is a leaf: tensors, arrays, numbers, strings and None (as in Keras 3).
A dict flattens in sorted key order, as `keras.tree` and dm-tree do, so that two dicts
with the same keys line up whatever order they were built in; packing gives each dict
back in its own key order. Where `is_leaf(value)` holds, the value is a leaf even if it
is a list, tuple or dict (for example, a list that stands for an array).

>>> flatten({"b": [1, 2], "a": (3, None)})
[3, None, 1, 2]
>>> pack_sequence_as({"b": [0, 0], "a": 0}, ["A", "B1", "B2"])
{'b': ['B1', 'B2'], 'a': 'A'}
>>> map_structure(lambda x: x * 10, {"b": (2, 3), "a": 1})
{'b': (20, 30), 'a': 10}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator

_CONTAINERS = (list, tuple, dict)


def is_nested(value) -> bool:
    """Whether `value` is a list, tuple or dict (a container, not a leaf).

    >>> is_nested([1]), is_nested({}), is_nested(None), is_nested("ab")
    (True, True, False, False)
    """
    return isinstance(value, _CONTAINERS)


def sorted_keys(mapping: dict) -> list:
    """The keys of `mapping` in the order `flatten` visits them: sorted, or, for keys that
    do not compare with each other, sorted by type name and then by repr.

    >>> sorted_keys({"b": 0, "a": 0}), sorted_keys({1: 0, "a": 0})
    (['a', 'b'], [1, 'a'])
    """
    try:
        return sorted(mapping)
    except TypeError:
        return sorted(mapping, key=lambda key: (type(key).__name__, repr(key)))


def flatten(structure, is_leaf: Callable | None = None) -> list:
    """The leaves of `structure`, depth first, dicts by sorted key.

    >>> flatten([1, {"y": 2, "x": (3, 4)}]), flatten(5), flatten([])
    ([1, 3, 4, 2], [5], [])
    >>> flatten(([1, 2], (3,)), is_leaf=lambda v: isinstance(v, list))
    [[1, 2], 3]
    """
    if not isinstance(structure, _CONTAINERS):
        return [structure]
    leaves: list = []
    _flatten_into(structure, leaves, is_leaf)
    return leaves


def _flatten_into(value, leaves: list, is_leaf) -> None:
    if _is_leaf(value, is_leaf):
        leaves.append(value)
    elif isinstance(value, dict):
        for key in sorted_keys(value):
            _flatten_into(value[key], leaves, is_leaf)
    else:
        for item in value:
            _flatten_into(item, leaves, is_leaf)


def flatten_with_path(structure, is_leaf: Callable | None = None) -> list[tuple[tuple, object]]:
    """(path, leaf) for each leaf, in `flatten` order; a path holds the dict keys and
    sequence indices that lead to the leaf.

    >>> flatten_with_path({"b": [7], "a": 8})
    [(('a',), 8), (('b', 0), 7)]
    """
    found: list = []

    def walk(value, path: tuple) -> None:
        if _is_leaf(value, is_leaf):
            found.append((path, value))
        elif isinstance(value, dict):
            for key in sorted_keys(value):
                walk(value[key], (*path, key))
        else:
            for i, item in enumerate(value):
                walk(item, (*path, i))

    walk(structure, ())
    return found


def pack_sequence_as(structure, flat_sequence, is_leaf: Callable | None = None):
    """`structure` with its leaves replaced, in `flatten` order, by `flat_sequence`: the
    inverse of `flatten`. Containers keep their type (a namedtuple stays one) and dicts
    their own key order.

    >>> from collections import namedtuple
    >>> Point = namedtuple("Point", "x y")
    >>> pack_sequence_as({"b": Point(0, 0), "a": None}, [1, 2, 3])
    {'b': Point(x=2, y=3), 'a': 1}
    """
    values = list(flat_sequence)
    if not isinstance(structure, _CONTAINERS) and len(values) == 1:
        return values[0]
    stream = iter(values)
    try:
        packed = _pack(structure, stream, is_leaf)
        extra = next(stream, _END) is not _END
    except StopIteration:
        extra = True
    if extra:
        count = len(flatten(structure, is_leaf))
        raise ValueError(f"pack_sequence_as: the structure has {count} leaves but {len(values)} values were given")
    return packed


_END = object()


def _pack(template, values: Iterator, is_leaf):
    if _is_leaf(template, is_leaf):
        return next(values)
    if isinstance(template, dict):
        packed = {key: _pack(template[key], values, is_leaf) for key in sorted_keys(template)}
        return _dict_like(template, [(key, packed[key]) for key in template])
    return _sequence_like(template, [_pack(item, values, is_leaf) for item in template])


def _dict_like(template: dict, items: list):
    kind = type(template)
    if kind is dict:
        return dict(items)
    if isinstance(template, defaultdict):
        return defaultdict(template.default_factory, items)
    return kind(items)


def _sequence_like(template, items: list):
    kind = type(template)
    if kind is list or kind is tuple:
        return kind(items)
    if isinstance(template, tuple) and hasattr(kind, "_fields"):  # a namedtuple
        return kind(*items)
    return kind(items)


def map_structure(fn: Callable, *structures, is_leaf: Callable | None = None):
    """`fn` applied to the leaves of `structures` (one leaf from each, at the same place),
    in the form of the first; `fn` is called in `flatten` order.

    >>> map_structure(lambda a, b: a + b, [1, {"k": 2}], [10, {"k": 20}])
    [11, {'k': 22}]
    """
    if not structures:
        raise TypeError("map_structure: expected at least one structure")
    first = structures[0]
    if len(structures) == 1:
        return _map(fn, first, is_leaf)
    for other in structures[1:]:
        assert_same_structure(first, other, is_leaf)
    columns = zip(*(flatten(s, is_leaf) for s in structures), strict=True)
    return pack_sequence_as(first, [fn(*leaves) for leaves in columns], is_leaf)


def _map(fn: Callable, value, is_leaf):
    if _is_leaf(value, is_leaf):
        return fn(value)
    if isinstance(value, dict):
        mapped = {key: _map(fn, value[key], is_leaf) for key in sorted_keys(value)}
        return _dict_like(value, [(key, mapped[key]) for key in value])
    return _sequence_like(value, [_map(fn, item, is_leaf) for item in value])


def assert_same_structure(a, b, is_leaf: Callable | None = None) -> None:
    """Raise a ValueError unless `a` and `b` nest the same containers (the same type, length
    and dict keys) around their leaves.

    >>> assert_same_structure([1, (2,)], [3, (4,)])
    >>> assert_same_structure([1, 2], (1, 2))
    Traceback (most recent call last):
    ...
    ValueError: assert_same_structure: a list and a tuple at the top
    """
    _compare(a, b, is_leaf, ())


def _compare(a, b, is_leaf, path: tuple) -> None:
    a_leaf, b_leaf = _is_leaf(a, is_leaf), _is_leaf(b, is_leaf)
    if a_leaf and b_leaf:
        return
    where = "at " + "".join(f"[{key!r}]" for key in path) if path else "at the top"
    if a_leaf or b_leaf or type(a) is not type(b):
        what = ["a leaf" if leaf else f"a {type(v).__name__}" for v, leaf in ((a, a_leaf), (b, b_leaf))]
        raise ValueError(f"assert_same_structure: {what[0]} and {what[1]} {where}")
    if isinstance(a, dict):
        if set(a) != set(b):
            raise ValueError(f"assert_same_structure: dict keys {sorted_keys(a)} and {sorted_keys(b)} {where}")
        for key in sorted_keys(a):
            _compare(a[key], b[key], is_leaf, (*path, key))
        return
    if len(a) != len(b):
        raise ValueError(f"assert_same_structure: lengths {len(a)} and {len(b)} {where}")
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        _compare(x, y, is_leaf, (*path, i))


def _is_leaf(value, is_leaf) -> bool:
    return not isinstance(value, _CONTAINERS) or (is_leaf is not None and is_leaf(value))
