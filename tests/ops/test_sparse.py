"""IndexedSlices: the sparse gradient of gather and embedding_lookup, through tapes,
graph gradients and frozen functions, and the Variable row writes it drives."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(5)


def _dense_gather_grad(shape, ids, upstream):
    """d sum(upstream * gather(x, ids)) / dx in float64, row by row."""
    out = np.zeros(shape)
    for k, i in enumerate(np.ravel(ids)):
        out[i] += upstream.reshape(-1, *shape[1:])[k]
    return out


def test_gather_gradient_is_indexed_slices_equal_to_dense():
    x = tp.Variable(RNG.standard_normal((7, 3)), name="x")
    ids = np.array([[4, 1], [4, -1]])
    upstream = RNG.standard_normal((2, 2, 3))
    with tp.GradientTape() as tape:
        loss = tp.sum(tp.gather(x, ids) * tp.tensor(upstream))
    g = tape.gradient(loss, x)
    assert isinstance(g, tp.IndexedSlices)
    assert g.dense_shape == (7, 3) and g.values.shape == (4, 3) and g.indices.shape == (4,)
    np.testing.assert_allclose(np.asarray(g), _dense_gather_grad((7, 3), ids % 7, upstream), rtol=1e-12)
    np.testing.assert_allclose(tp.convert_to_tensor(g).numpy(), np.asarray(g))
    assert g.numpy().shape == (7, 3) and g.dtype == tp.float64 and g.shape == (7, 3)


def test_sparse_gradients_concatenate_and_dense_ones_densify():
    x = tp.Variable(RNG.standard_normal((6, 2)), name="x")
    with tp.GradientTape(persistent=True) as tape:
        two_lookups = tp.sum(tp.nn.embedding_lookup(x, [1, 2])) + tp.sum(tp.nn.embedding_lookup(x, [2, 5]) * 3.0)
        mixed = two_lookups + tp.sum(x * x)
    sparse = tape.gradient(two_lookups, x)
    assert isinstance(sparse, tp.IndexedSlices) and sparse.indices.numpy().tolist() == [2, 5, 1, 2]
    expected = np.zeros((6, 2))
    expected[[1, 2]] += 1.0
    expected[[2, 5]] += 3.0
    np.testing.assert_allclose(np.asarray(sparse), expected)
    dense = tape.gradient(mixed, x)
    assert isinstance(dense, tp.Tensor)
    np.testing.assert_allclose(dense.numpy(), expected + 2 * x.numpy(), rtol=1e-12)


def test_gradient_through_an_op_after_gather_of_a_computed_tensor():
    """An IndexedSlices reaching another op's VJP is densified there."""
    x = tp.tensor(RNG.standard_normal((5, 2)))
    with tp.GradientTape() as tape:
        tape.watch(x)
        loss = tp.sum(tp.gather(tp.exp(x), [0, 0, 3]))
    g = tape.gradient(loss, x)
    expected = np.zeros((5, 2))
    expected[0] = 2 * np.exp(x.numpy()[0])
    expected[3] = np.exp(x.numpy()[3])
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-12)


def test_embedding_layer_gradient_is_sparse_and_matches_torch():
    torch = pytest.importorskip("torch")
    layer = tp.layers.Embedding(9, 4)
    ids = np.array([[1, 8, 1], [0, 3, 3]])
    upstream = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    with tp.GradientTape() as tape:
        loss = tp.sum(layer(ids) * tp.tensor(upstream))
    (g,) = tape.gradient(loss, layer.trainable_weights)
    assert isinstance(g, tp.IndexedSlices)
    table = torch.tensor(layer.embeddings.numpy(), requires_grad=True)
    (torch.nn.functional.embedding(torch.tensor(ids), table) * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(np.asarray(g), table.grad.numpy(), rtol=1e-6)


def test_graph_gradient_stays_sparse():
    w = tp.Variable(RNG.standard_normal((8, 3)), name="w")
    graph = tp.freeze(lambda ids: tp.sum(tp.gather(w, ids) ** 2), tp.TensorSpec((None,), "int64"), optimize=False)
    (read,) = [n.outputs[0] for n in graph.nodes if n.op == "read_variable"]
    (dw,) = tp.gradients(graph, graph.outputs, [read])
    ids = np.array([2, 7, 2])
    got = graph.run({"ids": ids}, dw)
    assert isinstance(got, tp.IndexedSlices)
    np.testing.assert_allclose(np.asarray(got), _dense_gather_grad((8, 3), ids, 2 * w.numpy()[ids]), rtol=1e-12)


def test_frozen_function_returns_sparse_gradient_densified():
    w = tp.Variable(RNG.standard_normal((5, 2)), name="w")

    def grad_of(ids):
        with tp.GradientTape() as tape:
            loss = tp.sum(tp.gather(w, ids))
        return tape.gradient(loss, w)

    graph = tp.freeze(grad_of, tp.TensorSpec((3,), "int64"))
    np.testing.assert_allclose(graph(np.array([1, 1, 4])).numpy(), _dense_gather_grad((5, 2), [1, 1, 4], np.ones(6)))


def test_variable_scatter_writes_only_the_rows_and_in_place():
    table = RNG.standard_normal((6, 3)).astype(np.float32)
    v = tp.Variable(table, name="t")
    address = v._value.ctypes.data
    rows = RNG.standard_normal((2, 3)).astype(np.float32)
    v.scatter_update(tp.IndexedSlices(rows, [4, 0], (6, 3)))
    expected = table.copy()
    expected[[4, 0]] = rows
    np.testing.assert_array_equal(v.numpy(), expected)
    assert v._value.ctypes.data == address  # nothing else held the array: written in place
    v.scatter_add(tp.IndexedSlices(np.ones((3, 3), np.float32), [1, 1, 5], (6, 3)))
    expected[1] += 2.0
    expected[5] += 1.0
    np.testing.assert_array_equal(v.numpy(), expected)
    v.scatter_sub(tp.IndexedSlices(np.ones((1, 3), np.float32), [-1], (6, 3)))
    expected[5] -= 1.0
    np.testing.assert_array_equal(v.numpy(), expected)


def test_variable_scatter_copies_when_the_array_is_shared():
    v = tp.Variable(np.zeros((4, 2), np.float32), name="t")
    seen = v.numpy()
    read = v.read_value()
    v.scatter_update(tp.IndexedSlices(np.ones((1, 2), np.float32), [2], (4, 2)))
    assert seen.sum() == 0 and read.numpy().sum() == 0
    assert v.numpy()[2].tolist() == [1.0, 1.0]


def test_tape_keeps_the_value_it_saw_across_a_sparse_write():
    w = tp.Variable(np.array([[1.0], [2.0]]), name="w")
    with tp.GradientTape(persistent=True) as tape:
        loss = tp.sum(w * w)
    w.scatter_update(tp.IndexedSlices(np.array([[10.0]]), [0], (2, 1)))
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), [[2.0], [4.0]])


def test_frozen_scatter_update_writes_the_variable():
    v = tp.Variable(np.zeros((5, 2), np.float32), name="v")

    @tp.function
    def step(ids, rows):
        v.scatter_update(tp.IndexedSlices(rows, ids, (5, 2)))
        return tp.sum(v)

    step(tp.tensor([1, 3]), tp.ones((2, 2)))
    address = v._value.ctypes.data
    total = step(tp.tensor([0, 3]), tp.ones((2, 2)) * 2.0)
    assert float(total) == 10.0
    assert v.numpy().tolist() == [[2.0, 2.0], [1.0, 1.0], [0.0, 0.0], [2.0, 2.0], [0.0, 0.0]]
    assert v._value.ctypes.data == address


def test_coalesce_sums_repeated_rows():
    g = tp.IndexedSlices(tp.tensor([[1.0], [2.0], [3.0], [4.0]]), [3, -1, 0, 3], (5, 1))
    c = tp.sparse.coalesce(g)
    assert c.indices.numpy().tolist() == [0, 3, 4]
    assert c.values.numpy().tolist() == [[3.0], [5.0], [2.0]]
    np.testing.assert_array_equal(np.asarray(c), np.asarray(g))


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: tp.IndexedSlices(tp.ones((2, 3)), [0, 1], (4, 2)), ValueError, "dense_shape"),
        (lambda: tp.IndexedSlices(tp.ones((2, 3)), tp.tensor([0.0, 1.0]), (4, 3)), TypeError, "indices"),
        (lambda: tp.Variable(tp.zeros((3, 2))).scatter_update(tp.ones((1, 2))), TypeError, "IndexedSlices"),
        (
            lambda: tp.Variable(tp.zeros((3, 2))).scatter_update(tp.IndexedSlices(tp.ones((1, 2)), [3], (3, 2))),
            ValueError,
            "scatter_update",
        ),
        (lambda: tp.scatter_update(tp.zeros((3, 2)), [0], tp.ones((1, 3))), ValueError, "scatter_update"),
    ],
)
def test_bad_input_names_the_problem(make, error, match):
    with pytest.raises(error, match=match):
        make()
