"""Sparse optimizer updates: an IndexedSlices gradient updates only its rows, equal to the
dense update there and bit-identical elsewhere, eagerly and in a frozen train step; and
a step on a 1,000,000 x 128 embedding allocates memory in proportion to the batch."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(11)
ROWS, DIM = 40, 6

OPTIMIZERS = {
    "sgd": lambda **kw: tp.optimizers.SGD(0.1, **kw),
    "momentum": lambda **kw: tp.optimizers.SGD(0.1, momentum=0.9, **kw),
    "nesterov": lambda **kw: tp.optimizers.SGD(0.1, momentum=0.9, nesterov=True, **kw),
    "adagrad": lambda **kw: tp.optimizers.Adagrad(0.1, **kw),
    "adam": lambda **kw: tp.optimizers.Adam(0.01, **kw),
    "rmsprop": lambda **kw: tp.optimizers.RMSprop(0.01, **kw),
}
# Rules whose untouched rows do not move under a zero dense gradient, at any step.
EXACT_EVERY_STEP = {"sgd", "adagrad"}


def _loss(table, ids, weights):
    return tp.sum(tp.nn.embedding_lookup(table, ids) * weights)


def _sparse_and_dense_gradients(table, ids, weights):
    with tp.GradientTape() as tape:
        loss = _loss(table, ids, weights)
    sparse = tape.gradient(loss, table)
    assert isinstance(sparse, tp.IndexedSlices)
    return sparse, tp.convert_to_tensor(sparse)


def _batch(step):
    ids = RNG.integers(0, ROWS // 2, (8, 3))  # repeats within a batch; rows >= ROWS / 2 never touched
    return ids, tp.tensor(RNG.standard_normal((8, 3, DIM)).astype(np.float32))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("clip", [{}, {"clipnorm": 0.5}, {"global_clipnorm": 0.5}, {"clipvalue": 0.05}])
def test_sparse_update_equals_dense_on_touched_rows(name, clip):
    start = RNG.standard_normal((ROWS, DIM)).astype(np.float32)
    sparse_table, dense_table = tp.Variable(start, name="t"), tp.Variable(start, name="t")
    sparse_opt, dense_opt = OPTIMIZERS[name](**clip), OPTIMIZERS[name](**clip)
    steps = 3 if name in EXACT_EVERY_STEP else 1  # lazy rules differ from dense after step 1 on skipped rows
    for step in range(steps):
        ids, weights = _batch(step)
        sparse, _ = _sparse_and_dense_gradients(sparse_table, ids, weights)
        _, dense = _sparse_and_dense_gradients(dense_table, ids, weights)
        sparse_opt.apply_gradients([(sparse, sparse_table)])
        dense_opt.apply_gradients([(dense, dense_table)])
        np.testing.assert_allclose(sparse_table.numpy(), dense_table.numpy(), rtol=2e-6, atol=1e-7)
    untouched = slice(ROWS // 2, None)
    np.testing.assert_array_equal(sparse_table.numpy()[untouched], start[untouched])
    for slot, value in sparse_opt.slots(sparse_table).items():
        np.testing.assert_allclose(value.numpy(), dense_opt.slots(dense_table)[slot].numpy(), rtol=2e-6, atol=1e-7)


def test_lazy_adam_leaves_absent_rows_alone_where_dense_adam_moves_them():
    start = RNG.standard_normal((4, 2)).astype(np.float32)
    lazy, dense = tp.Variable(start), tp.Variable(start)
    lazy_opt, dense_opt = tp.optimizers.Adam(0.1), tp.optimizers.Adam(0.1)
    for ids in ([0, 1], [0]):  # row 1 is absent from the second batch
        sparse, full = _sparse_and_dense_gradients(lazy, ids, tp.ones((len(ids), 2)))
        lazy_opt.apply_gradients([(sparse, lazy)])
        dense_opt.apply_gradients([(full, dense)])
    after_first = start[1] - 0.1 * np.sign(np.ones(2))  # Adam's first step moves each weight by ~lr
    np.testing.assert_allclose(lazy.numpy()[1], after_first, rtol=1e-5)
    assert np.all(dense.numpy()[1] < lazy.numpy()[1] - 0.05)  # dense momentum kept moving row 1
    np.testing.assert_allclose(lazy.numpy()[0], dense.numpy()[0], rtol=1e-6)
    np.testing.assert_array_equal(lazy.numpy()[2:], start[2:])


def _embedding_model(rows, dim, jit, optimizer):
    model = tp.Sequential([tp.Input((3,), dtype="int64"), tp.layers.Embedding(rows, dim), tp.layers.Flatten()])
    model.compile(optimizer=optimizer, loss="mse", jit=jit)
    return model


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_frozen_train_step_matches_eager_sparse_step(optimizer):
    x = RNG.integers(0, 30, (16, 3))
    y = RNG.standard_normal((16, 3 * 4)).astype(np.float32)
    eager, frozen = _embedding_model(50, 4, False, optimizer), _embedding_model(50, 4, True, optimizer)
    frozen.set_weights(eager.get_weights())
    start = eager.get_weights()[0]
    for _ in range(3):
        eager.train_on_batch(x, y)
        frozen.train_on_batch(x, y)
    np.testing.assert_allclose(frozen.get_weights()[0], eager.get_weights()[0], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(frozen.get_weights()[0][30:], start[30:])
    assert not np.array_equal(frozen.get_weights()[0][:30], start[:30])


@pytest.mark.parametrize(
    "optimizer", [lambda: tp.optimizers.Adam(0.01), lambda: tp.optimizers.AdamW(0.01)], ids=["adam", "adamw"]
)
def test_a_frozen_adam_step_writes_the_rows_of_the_tables_in_place(optimizer):
    """Lazy Adam's frozen step is one op on the embedding's and its slots' own arrays (no table
    copied; AdamW's decayed table is the decay's result), with the eager step's numbers."""
    x = RNG.integers(0, 30, (16, 3))
    y = RNG.standard_normal((16, 3 * 4)).astype(np.float32)
    eager, frozen = _embedding_model(50, 4, False, optimizer()), _embedding_model(50, 4, True, optimizer())
    frozen.set_weights(eager.get_weights())
    eager.train_on_batch(x, y)
    frozen.train_on_batch(x, y)
    table = frozen.layers[0].embeddings
    slots = frozen.optimizer.slots(table)
    held = [slots["momentum"], slots["velocity"]]
    if not isinstance(frozen.optimizer, tp.optimizers.AdamW):  # AdamW's decay gives the table a new array
        held.append(table)
    addresses = [v._value.__array_interface__["data"][0] for v in held]  # no reference kept
    with tp.profiler.trace() as profile:
        eager.train_on_batch(x, y)
        frozen.train_on_batch(x, y)  # a copy would be made while the old array lives: a new address
    assert [v._value.__array_interface__["data"][0] for v in held] == addresses
    assert "sparse_adam_update" in {e.op for e in profile.events}
    gathers = [e for e in profile.events if e.kind == "node" and e.op == "gather" and e.input_shapes[0] == [50, 4]]
    assert len(gathers) == 1  # the lookup only: no rows taken out of the tables to update them
    eager.train_on_batch(x, y)
    frozen.train_on_batch(x, y)
    np.testing.assert_allclose(table.numpy(), eager.layers[0].embeddings.numpy(), rtol=1e-6, atol=1e-7)
    eager_slots = eager.optimizer.slots(eager.layers[0].embeddings)
    for name in ("momentum", "velocity"):
        np.testing.assert_allclose(slots[name].numpy(), eager_slots[name].numpy(), rtol=1e-6, atol=1e-9)


def test_a_frozen_adam_step_copies_a_table_that_something_else_holds():
    """A table still held elsewhere (here a NumPy view) is updated in a copy: the view keeps the
    values it had."""
    x = RNG.integers(0, 30, (16, 3))
    y = RNG.standard_normal((16, 3 * 4)).astype(np.float32)
    model = _embedding_model(50, 4, True, tp.optimizers.Adam(0.01))
    model.train_on_batch(x, y)
    table = model.layers[0].embeddings
    view = table._value[:]
    held = view.copy()
    model.train_on_batch(x, y)
    np.testing.assert_array_equal(view, held)
    assert not np.array_equal(table.numpy(), held)


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_large_embedding_step_allocates_in_proportion_to_the_batch(jit, optimizer):
    """A 1,000,000 x 128 float32 table is 512 MB (Adam adds two more); a step on a batch of
    1024 x 3 ids touches ~3,000 rows (1.5 MB of them), and must allocate a few MB, not a table."""
    rows, dim = 1_000_000, 128
    model = _embedding_model(rows, dim, jit, optimizer)
    x = RNG.integers(0, rows, (1024, 3))
    y = np.zeros((1024, 3 * dim), np.float32)
    model.train_on_batch(x, y)  # builds the slots and, with jit, the frozen step
    table = model.layers[0].embeddings
    before = table.numpy()[x[:, 0]].copy()
    tracemalloc.start()
    model.train_on_batch(x, y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    table_bytes = rows * dim * 4
    assert peak < table_bytes / 20, f"a step allocated {peak / 1e6:.1f} MB for a {table_bytes / 1e6:.0f} MB table"
    assert not np.array_equal(table.numpy()[x[:, 0]], before)


def test_an_optimizer_with_its_own_update_step_gets_dense_gradients():
    class HalfStep(tp.optimizers.Optimizer):
        def update_step(self, gradient, variable, learning_rate):
            assert isinstance(gradient, tp.Tensor)
            variable.assign(variable - gradient * 0.5)

    table = tp.Variable(np.ones((5, 2), np.float32))
    sparse, dense = _sparse_and_dense_gradients(table, [1, 1, 3], tp.ones((3, 2)))
    HalfStep().apply_gradients([(sparse, table)])
    np.testing.assert_allclose(table.numpy(), 1.0 - 0.5 * dense.numpy())


@pytest.mark.parametrize("frozen", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_fixed_shape_update_equals_the_coalesced_one(name, frozen, monkeypatch):
    """Where a device cannot coalesce (XLA), the rule runs on a dense gradient and only the
    touched rows take the result: the same tables and slots as coalescing gives."""
    start = RNG.standard_normal((ROWS, DIM)).astype(np.float32)
    batches = [_batch(step) for step in range(3)]
    results = []
    for coalesces in (True, False):
        monkeypatch.setattr(tp.ops.sparse, "coalesces_on", lambda device, answer=coalesces: answer)
        table, opt = tp.Variable(start, name="t"), OPTIMIZERS[name](global_clipnorm=2.0)

        def step(ids, weights, table=table, opt=opt):
            with tp.GradientTape() as tape:
                loss = _loss(table, ids, weights)
            opt.apply_gradients([(tape.gradient(loss, table), table)])
            return loss

        if frozen:
            step = tp.freeze(step, tp.TensorSpec((8, 3), "int64"), tp.TensorSpec((8, 3, DIM)))
            assert ("unique_sum" in step.op_counts()) == coalesces
        for ids, weights in batches:
            step(ids, weights)
        results.append([table.numpy(), *(v.numpy() for v in opt.variables)])
    for coalesced, fixed in zip(*results, strict=True):
        np.testing.assert_allclose(fixed, coalesced, rtol=2e-6, atol=1e-7)
    untouched = slice(ROWS // 2, None)
    np.testing.assert_array_equal(results[1][0][untouched], start[untouched])
