"""tapeflow.tree against torch.utils._pytree (the same containers; dicts put in sorted key
order first, the order keras.tree and dm-tree flatten them in), its edge cases, and the
places that flatten through it."""

from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import torch.utils._pytree as pytree

import tapeflow as tp
from tapeflow import tree
from tapeflow.graph.structure import flatten_structure, rebuild_structure

Point = namedtuple("Point", "x y")


def _random_structure(rng, depth=0):
    kind = rng.integers(0, 6) if depth < 4 else 0
    if kind <= 1:
        return int(rng.integers(0, 1000)) if kind == 0 else None
    width = int(rng.integers(0, 4))
    items = [_random_structure(rng, depth + 1) for _ in range(width)]
    if kind == 2:
        return items
    if kind == 3:
        return tuple(items)
    if kind == 4 and width == 2:
        return Point(*items)
    keys = [str(k) for k in rng.permutation(["k", "b", "zz", "a"])[:width]]
    return dict(zip(keys, items, strict=True))


def _sorted_dicts(structure):
    """A copy whose dicts hold their keys in sorted order (what torch's insertion order sees)."""
    if isinstance(structure, dict):
        return {k: _sorted_dicts(structure[k]) for k in sorted(structure)}
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*map(_sorted_dicts, structure))
    if isinstance(structure, list | tuple):
        return type(structure)(map(_sorted_dicts, structure))
    return structure


def _key_orders(structure):
    """Every dict's keys in order, depth first: what packing must keep."""
    if isinstance(structure, dict):
        return [list(structure)] + [o for v in structure.values() for o in _key_orders(v)]
    if isinstance(structure, list | tuple):
        return [o for v in structure for o in _key_orders(v)]
    return []


def _reference(structure):
    return pytree.tree_flatten(_sorted_dicts(structure), is_leaf=lambda x: x is None)


@pytest.mark.parametrize("seed", range(40))
def test_flatten_and_pack_match_torch_pytree_with_sorted_dict_keys(seed):
    structure = _random_structure(np.random.default_rng(seed))
    expected, spec = _reference(structure)
    assert tree.flatten(structure) == expected
    values = [f"v{i}" for i in range(len(expected))]
    packed = tree.pack_sequence_as(structure, values)
    assert packed == pytree.tree_unflatten(values, spec)
    assert _key_orders(packed) == _key_orders(structure)
    assert tree.map_structure(lambda v: v, structure) == structure
    assert [leaf for _, leaf in tree.flatten_with_path(structure)] == expected


def test_dicts_flatten_by_sorted_key_and_pack_in_their_own_order():
    structure = {"b": 1, "a": {"d": 2, "c": 3}}
    assert tree.flatten(structure) == [3, 2, 1]
    packed = tree.pack_sequence_as(structure, ["c", "d", "b"])
    assert packed == {"b": "b", "a": {"d": "d", "c": "c"}}
    assert list(packed) == ["b", "a"] and list(packed["a"]) == ["d", "c"]
    assert tree.flatten({"b": 1, "a": 2}) == tree.flatten({"a": 2, "b": 1})


def test_empty_containers_have_no_leaves_and_pack_back():
    for empty in ([], (), {}, [[], {}, ()]):
        assert tree.flatten(empty) == []
        assert tree.pack_sequence_as(empty, []) == empty
        assert tree.map_structure(lambda v: v, empty) == empty


def test_none_is_a_leaf():
    assert tree.flatten(None) == [None]
    assert tree.flatten([None, {"a": None}]) == [None, None]
    assert tree.map_structure(lambda v: v is None, [None, 1]) == [True, False]
    assert tree.is_nested(None) is False


def test_other_values_are_leaves():
    array = np.zeros(3)
    assert tree.flatten(array)[0] is array
    assert tree.flatten("text") == ["text"]
    assert tree.flatten({1, 2}) == [{1, 2}]
    assert tree.flatten([tp.ones((2,))])[0].shape == (2,)


def test_namedtuples_and_container_types_are_kept():
    packed = tree.pack_sequence_as([Point(0, 0), (0,), OrderedDict(b=0, a=0)], [1, 2, 3, 4, 5])
    assert packed == [Point(1, 2), (3,), OrderedDict(b=5, a=4)]
    assert type(packed[0]) is Point and type(packed[2]) is OrderedDict
    assert list(packed[2]) == ["b", "a"]


def test_keys_that_do_not_compare_flatten_in_one_fixed_order():
    assert tree.flatten({"a": 1, 2: 2}) == tree.flatten({2: 2, "a": 1}) == [2, 1]


def test_is_leaf_stops_the_walk():
    structure = ([1, 2], {"a": [3]})
    is_list = lambda v: isinstance(v, list)  # noqa: E731
    assert tree.flatten(structure, is_leaf=is_list) == [[1, 2], [3]]
    assert tree.pack_sequence_as(structure, ["x", "y"], is_leaf=is_list) == ("x", {"a": "y"})
    assert tree.map_structure(len, structure, is_leaf=is_list) == (2, {"a": 1})


def test_paths_name_keys_and_indices():
    assert tree.flatten_with_path([{"b": 1, "a": (2,)}, 3]) == [((0, "a", 0), 2), ((0, "b"), 1), ((1,), 3)]
    assert tree.flatten_with_path(5) == [((), 5)]


def test_map_structure_over_several_structures():
    assert tree.map_structure(lambda a, b: a * b, {"b": 2, "a": [3]}, {"a": [4], "b": 5}) == {"b": 10, "a": [12]}


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([1, 2], [1], "lengths 2 and 1 at the top"),
        ([1, 2], (1, 2), "a list and a tuple at the top"),
        ({"a": 1}, {"b": 1}, "dict keys"),
        ([1, [2]], [1, 2], r"a list and a leaf at \[1\]"),
    ],
)
def test_different_structures_are_an_error(a, b, message):
    with pytest.raises(ValueError, match=message):
        tree.assert_same_structure(a, b)
    with pytest.raises(ValueError, match=message):
        tree.map_structure(lambda *v: v, a, b)


@pytest.mark.parametrize("count", [1, 3])
def test_packing_the_wrong_number_of_values_is_an_error(count):
    with pytest.raises(ValueError, match=f"has 2 leaves but {count} values"):
        tree.pack_sequence_as([1, {"a": 2}], list(range(count)))


# ----- the places that flatten through tapeflow.tree -----
def test_graph_structure_follows_the_tree_order_and_reads_older_descriptions():
    leaves, spec = flatten_structure({"b": 1.0, "a": [2.0, None]})
    assert leaves == [2.0, 1.0]
    rebuilt = rebuild_structure(spec, ["A", "B"])
    assert rebuilt == {"b": "B", "a": ["A", None]} and list(rebuilt) == ["b", "a"]
    older = {"dict": [["b", {"leaf": 0}], ["a", {"leaf": 1}]]}  # leaves in insertion order
    assert rebuild_structure(older, ["B", "A"]) == {"b": "B", "a": "A"}


def test_a_function_takes_dicts_and_keywords_in_any_order():
    @tp.function
    def f(d, **kwargs):
        return {"d": d["x"] - d["w"], "k": kwargs["z"] - kwargs["y"]}

    d = {"x": tp.tensor([5.0]), "w": tp.tensor([1.0])}
    out = f(d, z=tp.tensor([9.0]), y=tp.tensor([2.0]))
    assert list(out) == ["d", "k"]
    assert out["d"].numpy().tolist() == [4.0] and out["k"].numpy().tolist() == [7.0]


def test_frozen_graph_takes_a_dict_in_any_order():
    g = tp.freeze(lambda d: d["x"] - d["w"], {"x": tp.TensorSpec((1,)), "w": tp.TensorSpec((1,))})
    assert g({"w": tp.tensor([1.0]), "x": tp.tensor([5.0])}).numpy().tolist() == [4.0]


def test_gradients_come_back_in_the_sources_structure():
    a, b = tp.Variable([1.0]), tp.Variable([2.0])
    with tp.GradientTape() as tape:
        y = tp.sum(3.0 * a + 5.0 * b)
    grads = tape.gradient(y, {"b": b, "a": [a]})
    assert list(grads) == ["b", "a"]
    assert grads["b"].numpy().tolist() == [5.0] and grads["a"][0].numpy().tolist() == [3.0]


def test_a_functional_model_with_dict_outputs_returns_them_by_key():
    x = tp.Input((2,))
    model = tp.Model(x, {"second": tp.layers.Dense(3)(x), "first": tp.layers.Dense(1)(x)})
    out = model(tp.ones((4, 2)))
    assert list(out) == ["second", "first"]
    assert out["second"].shape == (4, 3) and out["first"].shape == (4, 1)
    assert model.output_names == ["first", "second"]
