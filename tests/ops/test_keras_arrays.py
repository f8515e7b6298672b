"""Keras 3's array functions in tp.ops (lib/ops/array_keras.py): values against NumPy in
float64, gradients against central finite differences, a representative set against
keras.ops itself (torch backend: values and result dtypes), frozen against eager, and the
errors bad input gets."""

from __future__ import annotations

import numpy as np
import pytest
from keras_oracle import check_vjp

import tapeflow as tp

keras = pytest.importorskip("keras")
K = keras.ops

_RNG = np.random.default_rng(11)


def normal(*shape):
    return _RNG.standard_normal(shape)


def distinct(*shape):
    """Values 0.1 apart, shuffled: no ties, so sorts and their gradients are unambiguous."""
    n = int(np.prod(shape))
    return (_RNG.permutation(n) - n // 2).reshape(shape) * 0.1


# ============================================================== sorting
@pytest.mark.parametrize("axis", [-1, 0, None])
def test_sort_and_argsort_match_numpy(axis):
    x = distinct(3, 4)
    np.testing.assert_array_equal(tp.ops.sort(x, axis=axis).numpy(), np.sort(x, axis=axis))
    got = tp.ops.argsort(x, axis=axis)
    assert got.dtype == tp.int32
    np.testing.assert_array_equal(got.numpy(), np.argsort(x, axis=axis))


def test_sort_ties_are_stable_and_ints_keep_their_dtype():
    x = np.array([[2, 1, 2, 1, 0]])
    np.testing.assert_array_equal(tp.ops.argsort(x).numpy(), np.argsort(x, kind="stable"))
    assert tp.ops.sort(x).dtype == tp.int64


@pytest.mark.parametrize("axis", [1, 0, None])
def test_sort_gradient(axis):
    check_vjp(lambda x: tp.ops.sort(x, axis=axis), distinct(3, 4))


def test_sort_gradient_frozen_equals_eager():
    x = distinct(2, 5)

    def loss_grad(t):
        with tp.GradientTape() as tape:
            tape.watch(t)
            y = tp.sum(tp.ops.sort(t) * tp.tensor(np.arange(5.0)))
        return tape.gradient(y, t)

    graph = tp.freeze(loss_grad, tp.TensorSpec((2, 5), "float64"))
    np.testing.assert_array_equal(graph(tp.tensor(x)).numpy(), loss_grad(tp.tensor(x)).numpy())


def test_argpartition_partitions():
    x = distinct(3, 6)
    idx = tp.ops.argpartition(x, 2, axis=1).numpy()
    part = np.take_along_axis(x, idx, axis=1)
    kth = np.sort(x, axis=1)[:, 2:3]
    assert (part[:, :2] <= kth).all() and (part[:, 3:] >= kth).all()
    np.testing.assert_array_equal(part[:, 2:3], kth)
    with pytest.raises(ValueError, match="argpartition: kth"):
        tp.ops.argpartition(x, 6, axis=1)


# ======================================================= take_along_axis
def test_take_along_axis_matches_numpy_with_broadcast_and_negative_indices():
    x = normal(3, 4, 2)
    idx = np.array([[[0], [-1], [2]]]).reshape(1, 3, 1)
    got = tp.ops.take_along_axis(x, idx, axis=1)
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(x, np.broadcast_to(idx, (3, 3, 1)) % 4, axis=1))
    flat = np.array([5, 0, -2])
    np.testing.assert_array_equal(tp.ops.take_along_axis(x, flat).numpy(), x.ravel()[flat])


def test_take_along_axis_gradient_accumulates_repeats():
    idx = np.array([[0, 0, 2], [1, 3, 1]])
    check_vjp(lambda x: tp.ops.take_along_axis(x, tp.tensor(idx), axis=1), normal(2, 4))


def test_take_along_axis_bad_input():
    with pytest.raises(ValueError, match=r"take_along_axis: indices of rank 1 .*\(2, 3\)"):
        tp.ops.take_along_axis(np.zeros((2, 3)), np.zeros(2, np.int64), axis=1)
    with pytest.raises(ValueError, match="take_along_axis: index 3 is out of range"):
        tp.ops.take_along_axis(np.zeros((2, 3)), np.full((2, 1), 3), axis=1)
    with pytest.raises(TypeError, match="take_along_axis: indices must be integers"):
        tp.ops.take_along_axis(np.zeros((2, 3)), np.zeros((2, 1)), axis=1)


# ============================================== values against NumPy
X = normal(3, 4, 5)
S = np.sort(normal(6))
V = normal(5)
IDX = np.array([[0, 1], [2, 3], [0, 1]])
NUMPY_CASES = {
    "flip-axes": (lambda m: m.flip(X, (0, 2)), lambda: np.flip(X, (0, 2))),
    "flip-all": (lambda m: m.flip(X), lambda: np.flip(X)),
    "fliplr": (lambda m: m.fliplr(X), lambda: np.fliplr(X)),
    "flipud": (lambda m: m.flipud(X), lambda: np.flipud(X)),
    **{
        f"rot90-k{k}": (lambda m, k=k: m.rot90(X, k, (2, 1)), lambda k=k: np.rot90(X, k, (2, 1))) for k in (-1, 1, 2, 3)
    },
    "roll-flat": (lambda m: m.roll(X, 7), lambda: np.roll(X, 7)),
    "roll-axes": (lambda m: m.roll(X, (1, -3), (0, 2)), lambda: np.roll(X, (1, -3), (0, 2))),
    "tril": (lambda m: m.tril(X, 1), lambda: np.tril(X, 1)),
    "triu": (lambda m: m.triu(X, -1), lambda: np.triu(X, -1)),
    "diag-vector": (lambda m: m.diag(V, -2), lambda: np.diag(V, -2)),
    "diag-matrix": (lambda m: m.diag(X[0], 1), lambda: np.diag(X[0], 1)),
    "diagflat": (lambda m: m.diagflat(X[0, :2], 1), lambda: np.diagflat(X[0, :2], 1)),
    "diagonal": (lambda m: m.diagonal(X, 1, 2, 0), lambda: np.diagonal(X, 1, 2, 0)),
    "trace": (lambda m: m.trace(X, -1, 1, 2), lambda: np.trace(X, -1, 1, 2)),
    "append-flat": (lambda m: m.append(X[0], X), lambda: np.append(X[0], X)),
    "append-axis": (lambda m: m.append(X, X, 1), lambda: np.append(X, X, 1)),
    "hstack": (lambda m: m.hstack([X, X]), lambda: np.hstack([X, X])),
    "hstack-vectors": (lambda m: m.hstack([V, V]), lambda: np.hstack([V, V])),
    "vstack": (lambda m: m.vstack([V, X[0, :, :5]]), lambda: np.vstack([V, X[0]])),
    "dstack": (lambda m: m.dstack([X[0], X[1]]), lambda: np.dstack([X[0], X[1]])),
    "dstack-vectors": (lambda m: m.dstack([V, V]), lambda: np.dstack([V, V])),
    "unstack": (lambda m: m.unstack(X, axis=1), lambda: [X[:, i] for i in range(4)]),
    "meshgrid-xy": (lambda m: m.meshgrid(V, V[:3], V[:2]), lambda: np.meshgrid(V, V[:3], V[:2])),
    "meshgrid-ij": (lambda m: m.meshgrid(V, V[:3], indexing="ij"), lambda: np.meshgrid(V, V[:3], indexing="ij")),
    "split-indices": (lambda m: m.split(X, indices_or_sections=[1, 3, -1], axis=2), lambda: np.split(X, [1, 3, -1], 2)),
    "split-indices-decreasing": (
        lambda m: m.split(X, indices_or_sections=[3, 1], axis=2),
        lambda: np.split(X, [3, 1], 2),
    ),
    "split-sections": (lambda m: m.split(X, indices_or_sections=2, axis=1), lambda: np.split(X, 2, axis=1)),
    "array_split": (lambda m: m.array_split(X, 3, axis=2), lambda: np.array_split(X, 3, axis=2)),
    "hsplit": (lambda m: m.hsplit(X, 2), lambda: np.hsplit(X, 2)),
    "vsplit": (lambda m: m.vsplit(X, [1]), lambda: np.vsplit(X, [1])),
    "dsplit": (lambda m: m.dsplit(X, 5), lambda: np.dsplit(X, 5)),
    "repeat-axis": (lambda m: m.repeat(X, 2, axis=1), lambda: np.repeat(X, 2, axis=1)),
    "repeat-flat": (lambda m: m.repeat(X, 3), lambda: np.repeat(X, 3)),
    "repeat-counts": (lambda m: m.repeat(X, [1, 0, 2], axis=0), lambda: np.repeat(X, [1, 0, 2], axis=0)),
    "tile-short": (lambda m: m.tile(X, 2), lambda: np.tile(X, 2)),
    "tile-long": (lambda m: m.tile(X, (2, 1, 1, 2)), lambda: np.tile(X, (2, 1, 1, 2))),
    **{
        f"pad-{mode}": (
            lambda m, mode=mode: m.pad(X, ((1, 2), (0, 3), (2, 2)), mode=mode),
            lambda mode=mode: np.pad(X, ((1, 2), (0, 3), (2, 2)), mode=mode),
        )
        for mode in ("constant", "edge", "reflect", "symmetric", "wrap")
    },
    "pad-int-value": (lambda m: m.pad(X, 1, constant_values=3.0), lambda: np.pad(X, 1, constant_values=3.0)),
    "take-axis": (lambda m: m.take(X, np.array([[0, -1]]), axis=1), lambda: np.take(X, [[0, -1]], axis=1)),
    "take-flat": (lambda m: m.take(X, np.array([7, -2])), lambda: np.take(X, [7, -2])),
    "slice": (lambda m: m.slice(X, (1, 0, 2), (2, 3, 2)), lambda: X[1:3, 0:3, 2:4]),
    "select": (
        lambda m: m.select([X > 0.5, X < -0.5], [X, 2 * X], 9.0),
        lambda: np.select([X > 0.5, X < -0.5], [X, 2 * X], 9.0),
    ),
    "diff": (lambda m: m.diff(X, 2, axis=1), lambda: np.diff(X, 2, axis=1)),
    "vander": (lambda m: m.vander(V), lambda: np.vander(V)),
    "vander-increasing": (lambda m: m.vander(V, 3, increasing=True), lambda: np.vander(V, 3, increasing=True)),
    "moveaxis": (lambda m: m.moveaxis(X, [0, 1], [-1, 0]), lambda: np.moveaxis(X, [0, 1], [-1, 0])),
    "swapaxes": (lambda m: m.swapaxes(X, 0, 2), lambda: np.swapaxes(X, 0, 2)),
    "ravel": (lambda m: m.ravel(X), lambda: np.ravel(X)),
    "nonzero": (lambda m: m.nonzero(X > 0), lambda: np.nonzero(X > 0)),
    "searchsorted": (lambda m: m.searchsorted(S, X), lambda: np.searchsorted(S, X)),
    "searchsorted-right": (lambda m: m.searchsorted(S, S, side="right"), lambda: np.searchsorted(S, S, side="right")),
    "digitize": (lambda m: m.digitize(X, S), lambda: np.digitize(X, S)),
    "unravel_index": (
        lambda m: m.unravel_index(np.array([[3, 7]]), (2, 4)),
        lambda: np.unravel_index([[3, 7]], (2, 4)),
    ),
    "scatter": (lambda m: m.scatter(IDX, np.array([1.0, 2.0, 3.0]), (3, 4)), lambda: _scatter_oracle()),
    "rearrange-merge": (lambda m: m.rearrange(X, "a b c -> c (a b)"), lambda: X.transpose(2, 0, 1).reshape(5, 12)),
    "rearrange-split": (
        lambda m: m.rearrange(X.reshape(12, 5), "(a b) c -> b c a", a=3),
        lambda: X.transpose(1, 2, 0),
    ),
    "saturate_cast": (
        lambda m: m.saturate_cast(np.array([3e9, -3e9, 5.5]), "int32"),
        lambda: np.array([2**31 - 1, -(2**31), 5], np.int32),
    ),
    "saturate_cast-int": (
        lambda m: m.saturate_cast(np.array([2**40, -(2**40), 5]), "int32"),
        lambda: np.array([2**31 - 1, -(2**31), 5], np.int32),
    ),
    "view": (lambda m: m.view(np.float32([[1.0, 2.0]]), "float64"), lambda: np.float32([[1.0, 2.0]]).view(np.float64)),
}


def _scatter_oracle():
    out = np.zeros((3, 4))
    np.add.at(out, (IDX[:, 0], IDX[:, 1]), [1.0, 2.0, 3.0])
    return out


def _as_list(value):
    return list(value) if isinstance(value, list | tuple) else [value]


@pytest.mark.parametrize("name", sorted(NUMPY_CASES))
def test_matches_numpy(name):
    ours, oracle = NUMPY_CASES[name]
    got, want = _as_list(ours(tp.ops)), _as_list(oracle())
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_array_equal(g.numpy(), w)


def test_slice_update_and_scatter_update():
    x = normal(3, 4)
    want = x.copy()
    want[1:2, 2:4] = 7.0
    np.testing.assert_array_equal(tp.ops.slice_update(x, (1, 2), np.full((1, 2), 7.0)).numpy(), want)
    want = x.copy()
    want[[0, 2], [1, 3]] = [5.0, 6.0]
    np.testing.assert_array_equal(tp.ops.scatter_update(x, [[0, 1], [2, 3]], [5.0, 6.0]).numpy(), want)
    want = x.copy()
    want[1] = 7.0
    np.testing.assert_array_equal(tp.ops.scatter_update(x, [[1]], np.full((1, 4), 7.0)).numpy(), want)
    np.testing.assert_array_equal(tp.ops.scatter_update(x, [1], np.full((1, 4), 7.0)).numpy(), want)  # rows
    want = x.copy()
    np.add.at(want, ([0, 0], [1, 1]), [1.0, 2.0])
    np.testing.assert_allclose(tp.ops.scatter_update(x, [[0, 1], [0, 1]], [1.0, 2.0], reduction="add").numpy(), want)
    want = x.copy()
    want[0, 1] = max(want[0, 1], 9.0)
    np.testing.assert_array_equal(tp.ops.scatter_update(x, [[0, 1]], [9.0], reduction="max").numpy(), want)


def test_unique():
    x = np.array([3, 1, 3, 2, 1])
    for got, want in zip(
        tp.ops.unique(x, return_index=True, return_inverse=True, return_counts=True),
        np.unique(x, return_index=True, return_inverse=True, return_counts=True),
        strict=True,
    ):
        np.testing.assert_array_equal(got.numpy(), want)
    values, inverse = tp.ops.unique(x, sorted=False, return_inverse=True)
    assert values.numpy().tolist() == [3, 1, 2]
    np.testing.assert_array_equal(values.numpy()[inverse.numpy()], x)
    assert tp.ops.unique(x, size=5, fill_value=-1).numpy().tolist() == [1, 2, 3, -1, -1]
    assert tp.ops.unique(x, size=2).numpy().tolist() == [1, 2]
    rows = np.array([[1, 2], [0, 1], [1, 2]])
    np.testing.assert_array_equal(tp.ops.unique(rows, axis=0).numpy(), np.unique(rows, axis=0))


def test_shape_and_dtype_queries():
    x = tp.ones((2, 3), dtype="float64")
    assert tp.ops.ndim(x) == 2 and tp.ops.size(x).item() == 6
    assert tp.ops.dtype(x) == "float64" and tp.ops.dtype([1, 2]) == "int64"
    assert tp.ops.is_tensor(x) and not tp.ops.is_tensor(np.ones(2))
    assert tp.ops.get_item(x, (1, slice(0, 2))).shape == (2,)
    assert tp.ops.view(x, "float64") is x


# ============================================================ gradients
GRADIENT_CASES = {
    "flip": lambda x: tp.ops.flip(x, 1),
    "rot90": lambda x: tp.ops.rot90(x, 3),
    "roll": lambda x: tp.ops.roll(x, (1, 2), (0, 1)),
    "tril": lambda x: tp.ops.tril(x, -1),
    "triu": lambda x: tp.ops.triu(x),
    "take": lambda x: tp.ops.take(x, tp.tensor([[0, -1], [2, 2]]), axis=1),
    "take-flat": lambda x: tp.ops.take(x, tp.tensor([0, 0, 5])),
    "repeat": lambda x: tp.ops.repeat(x, 2, axis=0),
    "repeat-counts": lambda x: tp.ops.repeat(x, [2, 0, 1], axis=0),
    "diag": lambda x: tp.ops.diag(tp.ops.diag(x, 1), -1),
    "diagonal": lambda x: tp.ops.diagonal(x, -1),
    "trace": lambda x: tp.ops.trace(x),
    "pad-reflect": lambda x: tp.ops.pad(x, ((1, 2), (2, 1)), mode="reflect"),
    "pad-symmetric": lambda x: tp.ops.pad(x, 2, mode="symmetric"),
    "pad-edge": lambda x: tp.ops.pad(x, ((0, 2), (1, 0)), mode="edge"),
    "tile": lambda x: tp.ops.tile(x, (2, 1, 2)),
    "slice": lambda x: tp.ops.slice(x, (1, 1), (2, 2)),
    "slice_update": lambda x: tp.ops.slice_update(x, (1, 0), x[:1, :2] * 3.0),
    "scatter_update": lambda x: tp.ops.scatter_update(x, [[0, 1], [2, 3]], x[0, :2] * 2.0),
    "select": lambda x: tp.ops.select([x > 0.25, x < -0.25], [x * x, -x], 0.5),
    "diff": lambda x: tp.ops.diff(x, 2, axis=1),
    "vander": lambda x: tp.ops.vander(x[0], 4),
    "split": lambda x: tp.ops.split(x, indices_or_sections=[1], axis=1),
    "array_split": lambda x: tp.ops.array_split(x, 3, axis=1),
    "unstack": lambda x: tp.ops.unstack(x),
    "meshgrid": lambda x: tp.ops.meshgrid(x[0], x[1, :2]),
    "rearrange": lambda x: tp.ops.rearrange(x, "a (b c) -> c a b", c=2),
    "hstack": lambda x: tp.ops.hstack([x, x * 2.0]),
    "append": lambda x: tp.ops.append(x, x[:1]),
    "associative_scan": lambda x: tp.ops.associative_scan(lambda a, b: a * b, x, axis=1),
    "scan": lambda x: tp.ops.scan(lambda c, v: (c * v, c + v), tp.ones((4,), "float64"), x),
    "map": lambda x: tp.ops.map(lambda r: tp.sum(r * r), x),
}


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_gradients_match_finite_differences(name):
    x = distinct(3, 4)
    check_vjp(GRADIENT_CASES[name], x)


# ============================================================ control flow
def test_scan_map_and_associative_scan():
    x = normal(4, 3)
    carry, ys = tp.ops.scan(lambda c, v: (c + v, c * 2.0), tp.zeros((3,), "float64"), x, reverse=True)
    np.testing.assert_allclose(carry.numpy(), x.sum(0))
    np.testing.assert_allclose(ys.numpy(), 2.0 * (np.cumsum(x[::-1], 0)[::-1] - x))
    carry, ys = tp.ops.scan(lambda c, _: (c + 1, None), tp.tensor(0), length=5)
    assert carry.item() == 5 and ys is None
    out = tp.ops.map(lambda d: {"s": d["a"] + d["b"]}, {"a": x, "b": 2.0 * x})
    np.testing.assert_allclose(out["s"].numpy(), 3.0 * x)
    np.testing.assert_allclose(tp.ops.vectorized_map(lambda r: r * 2.0, x).numpy(), 2.0 * x)
    np.testing.assert_allclose(tp.ops.associative_scan(lambda a, b: a + b, x).numpy(), np.cumsum(x, 0))
    got = tp.ops.associative_scan(lambda a, b: a * b, x, reverse=True, axis=1).numpy()
    np.testing.assert_allclose(got, np.flip(np.cumprod(np.flip(x, 1), 1), 1))
    pair = tp.ops.associative_scan(lambda a, b: (a[0] + b[0], a[1] * b[1]), (x, x + 2.0))
    np.testing.assert_allclose(pair[1].numpy(), np.cumprod(x + 2.0, 0))


def test_fori_loop_and_switch_eager_and_frozen():
    assert tp.ops.fori_loop(1, 4, lambda i, v: v * i, tp.tensor(1.0)).item() == 6.0
    graph = tp.freeze(
        lambda n, v: tp.ops.fori_loop(0, n, lambda i, v: v + tp.cast(i, "float32"), v),
        tp.TensorSpec((), "int64"),
        tp.TensorSpec((), "float32"),
    )
    assert graph(tp.tensor(5), tp.tensor(0.0)).item() == 10.0
    branches = [lambda a: a + 1.0, lambda a: a * 10.0, lambda a: -a]
    switch = tp.freeze(
        lambda i, v: tp.ops.switch(i, branches, v), tp.TensorSpec((), "int32"), tp.TensorSpec((2,), "float32")
    )
    for i in (-1, 0, 1, 2, 7):
        want = tp.ops.switch(i, branches, tp.tensor([1.0, 2.0])).numpy()
        np.testing.assert_array_equal(switch(tp.tensor(i, dtype="int32"), tp.tensor([1.0, 2.0])).numpy(), want)
    assert tp.ops.switch(tp.tensor(5), branches, tp.tensor(1.0)).item() == -1.0


# ================================================================ frozen
def test_frozen_equals_eager():
    def fn(x):
        return (
            tp.ops.flip(x, 0),
            tp.ops.roll(x, 1, 1),
            tp.ops.tril(x),
            tp.ops.pad(x, 1, mode="reflect"),
            tp.ops.sort(x, axis=0),
            tp.ops.argsort(x),
            tp.ops.take_along_axis(x, tp.ops.argsort(x), axis=1),
            tp.ops.repeat(x, 2, axis=1),
            tp.ops.rearrange(x, "a b -> b a"),
            tp.ops.scan(lambda c, v: (c + v, c), tp.zeros((4,)), x)[1],
            tp.ops.searchsorted(tp.tensor([0.0, 0.5]), x),
            tp.ops.trace(x),
            tp.ops.slice_update(x, (0, 1), tp.ones((1, 2))),
        )

    x = distinct(3, 4).astype(np.float32)
    graph = tp.freeze(fn, tp.TensorSpec((3, 4), "float32"))
    for got, want in zip(graph(tp.tensor(x)), fn(tp.tensor(x)), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_dynamic_batch_in_a_frozen_function():
    graph = tp.freeze(
        lambda x: (tp.ops.sort(x), tp.ops.flip(x, 1), tp.ops.size(x), tp.ops.tril(x)),
        tp.TensorSpec((None, 3, 3), "float32"),
    )
    x = distinct(5, 3, 3).astype(np.float32)
    out = graph(tp.tensor(x))
    np.testing.assert_array_equal(out[0].numpy(), np.sort(x))
    np.testing.assert_array_equal(out[1].numpy(), x[:, ::-1])
    assert out[2].item() == 45
    np.testing.assert_array_equal(out[3].numpy(), np.tril(x))


def test_value_dependent_shapes_refuse_traced_tensors():
    for fn in (tp.ops.nonzero, tp.ops.unique):
        with pytest.raises(tp.FreezeError, match="depends on the values"):
            tp.freeze(fn, tp.TensorSpec((3,), "float32"))


# ======================================================= against keras
KERAS_CASES = [
    ("argsort", lambda m, x: m.argsort(x, axis=0)),
    ("sort", lambda m, x: m.sort(x)),
    ("take_along_axis", lambda m, x: m.take_along_axis(x, m.argsort(x, axis=1)[:, :2], axis=1)),
    ("flip", lambda m, x: m.flip(x, 1)),
    ("roll", lambda m, x: m.roll(x, -1, 0)),
    ("rot90", lambda m, x: m.rot90(x)),
    ("tril", lambda m, x: m.tril(x, -1)),
    ("diag", lambda m, x: m.diag(x[0], 1)),
    ("diagonal", lambda m, x: m.diagonal(x, 1)),
    ("trace", lambda m, x: m.trace(x)),
    ("repeat", lambda m, x: m.repeat(x, 2, axis=1)),
    ("tile", lambda m, x: m.tile(x, 2)),
    ("pad", lambda m, x: m.pad(x, ((1, 0), (2, 1)), constant_values=1.5)),
    ("pad-reflect", lambda m, x: m.pad(x, ((1, 1), (2, 2)), mode="reflect")),
    ("split", lambda m, x: m.split(x, 2, axis=1)[1]),
    ("array_split", lambda m, x: m.array_split(x, 3, axis=1)[2]),
    ("hstack", lambda m, x: m.hstack([x, x])),
    ("searchsorted", lambda m, x: m.searchsorted(m.sort(m.ravel(x)), x[0])),
    ("digitize", lambda m, x: m.digitize(x, [-0.5, 0.0, 0.5])),
    ("unravel_index", lambda m, x: m.unravel_index(m.argsort(m.ravel(x)), (3, 4))[1]),
    ("take", lambda m, x: m.take(x, [[0, 1]], axis=1)),
    ("slice", lambda m, x: m.slice(x, (1, 1), (2, 2))),
    ("slice_update", lambda m, x: m.slice_update(x, (1, 1), x[:1, :2])),
    ("scatter", lambda m, x: m.scatter([[0, 1], [0, 1]], x[0, :2], (2, 2))),
    ("scatter_update", lambda m, x: m.scatter_update(x, [[0, 1], [2, 2]], x[0, :2])),
    ("select", lambda m, x: m.select([x > 0.5], [x], 0.0)),
    ("diff", lambda m, x: m.diff(x, axis=0)),
    ("vander", lambda m, x: m.vander(x[0], 3)),
    ("moveaxis", lambda m, x: m.moveaxis(x, 0, 1)),
    ("rearrange", lambda m, x: m.rearrange(x, "a (b c) -> (c a) b", b=2)),
    # (Keras's torch backend wraps positive overflow to the int32 minimum: compared below it)
    ("saturate_cast", lambda m, x: m.saturate_cast(m.minimum(m.cast(x, "float64"), 0.2) * 1e10, "int32")),
    ("associative_scan", lambda m, x: m.associative_scan(lambda a, b: a + b, x, axis=1)),
    ("map", lambda m, x: m.map(lambda r: r * 2.0, x)),
]


@pytest.mark.parametrize("name, call", KERAS_CASES, ids=[c[0] for c in KERAS_CASES])
def test_against_keras(name, call):
    x = distinct(3, 4).astype(np.float32)
    want = K.convert_to_numpy(call(K, x))
    got = call(tp.ops, x).numpy()
    assert got.dtype == want.dtype, f"{name}: {got.dtype} vs keras {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ================================================================ errors
def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match=r"tril: needs a tensor of rank >= 2 .* got shape \(3,\)"):
        tp.ops.tril(np.zeros(3))
    with pytest.raises(ValueError, match=r"split: axis 0 of size 5 cannot be split into 2 equal sections"):
        tp.ops.split(np.zeros(5), indices_or_sections=2)
    with pytest.raises(ValueError, match=r"repeat: 2 repeats for axis 0 of size 3"):
        tp.ops.repeat(np.zeros(3), [1, 2])
    with pytest.raises(NotImplementedError, match="pad: mode 'median'"):
        tp.ops.pad(np.zeros(3), 1, mode="median")
    with pytest.raises(ValueError, match="pad: constant_values is only used with mode='constant'"):
        tp.ops.pad(np.zeros(3), 1, mode="edge", constant_values=1)
    with pytest.raises(ValueError, match=r"pad: pad_width \[1, 2, 3\] does not fit a tensor of shape \(3,\)"):
        tp.ops.pad(np.zeros(3), [1, 2, 3])
    with pytest.raises(ValueError, match=r"slice: the block at \(1,\) of shape \(3,\) overruns shape \(3,\)"):
        tp.ops.slice(np.zeros(3), (1,), (3,))
    with pytest.raises(ValueError, match="searchsorted: sorted_sequence must be 1-D"):
        tp.ops.searchsorted(np.zeros((2, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="rearrange: 'a b -> a' must name each axis once"):
        tp.ops.rearrange(np.zeros((2, 3)), "a b -> a")
    with pytest.raises(ValueError, match=r"rearrange: .*1 axes for a tensor of shape \(2, 3\)"):
        tp.ops.rearrange(np.zeros((2, 3)), "a -> a")
    with pytest.raises(ValueError, match="scatter_update: reduction must be"):
        tp.ops.scatter_update(np.zeros((2, 2)), [[0, 0]], [1.0], reduction="avg")
    with pytest.raises(
        ValueError, match=r"view: a tensor of shape \(3,\) and dtype float32 cannot be viewed as float64"
    ):
        tp.ops.view(np.zeros(3, np.float32), "float64")
    with pytest.raises(TypeError, match="split: give one of"):
        tp.ops.split(np.zeros(4))
    with pytest.raises(ValueError, match="unravel_index: an index is out of range for shape"):
        tp.ops.unravel_index(np.array([6]), (2, 3))


def test_tapeflow_spellings_still_work():
    x = tp.ones((6, 2))
    assert [t.shape for t in tp.split(x, [2, 4])] == [(2, 2), (4, 2)]
    assert [t.shape for t in tp.split(x, num_or_size_splits=3)] == [(2, 2)] * 3
    assert tp.pad(x, paddings=[(1, 1), (0, 0)]).shape == (8, 2)
    assert tp.pad(x, [(1, 1), (0, 0)], constant_values=2.0).numpy()[0, 0] == 2.0
    assert tp.tile(x, multiples=(1, 2)).shape == (6, 4)
    assert tp.scatter_update(tp.zeros((3,)), [1], tp.ones((1,))).numpy().tolist() == [0.0, 1.0, 0.0]


def test_in_a_functional_model_with_a_dynamic_batch():
    inp = tp.Input((3, 3))
    outs = [
        tp.ops.sort(inp),
        tp.ops.repeat(inp, 2, axis=2),
        tp.ops.rearrange(inp, "b h w -> b (w h)"),
        tp.ops.pad(inp, ((0, 0), (1, 1), (0, 0)), mode="reflect"),
        tp.ops.take_along_axis(inp, tp.ops.argsort(inp, axis=1), axis=1),
    ]
    x = distinct(2, 3, 3).astype(np.float32)
    got = tp.Model(inp, outs).predict(x, verbose=0)
    want = [
        np.sort(x),
        np.repeat(x, 2, axis=2),
        x.transpose(0, 2, 1).reshape(2, 9),
        np.pad(x, ((0, 0), (1, 1), (0, 0)), mode="reflect"),
        np.sort(x, axis=1),
    ]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(tp.FreezeError, match="nonzero: the size of the result depends on the values"):
        tp.ops.nonzero(inp)
