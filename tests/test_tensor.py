"""Tensor and Variable basics: dtypes and promotion, conversion, devices, creation, randomness."""

import numpy as np
import pytest

import tapeflow as tp


# ------------------------------------------------------------ dtypes
@pytest.mark.parametrize(
    "value, dtype",
    [
        ([1.0, 2.0], tp.float32),
        ([1, 2], tp.int64),
        ([True], tp.bool_),
        (3.5, tp.float32),
        (7, tp.int64),
    ],
)
def test_python_values_get_default_dtypes(value, dtype):
    t = tp.tensor(value)
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), np.asarray(value, dtype=dtype.np))


@pytest.mark.parametrize("npdtype", [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_numpy_arrays_keep_their_dtype(npdtype):
    a = np.arange(4).astype(npdtype)
    t = tp.tensor(a)
    assert t.dtype == tp.as_dtype(npdtype) and t.dtype.np == np.dtype(npdtype)
    np.testing.assert_array_equal(t.numpy(), a)


def test_tensor_copies_its_input():
    a = np.array([1.0, 2.0])
    t = tp.tensor(a)
    a[0] = 100.0
    assert t.numpy()[0] == 1.0


@pytest.mark.parametrize(
    "left, right, want",
    [
        (tp.float32, tp.float32, tp.float32),
        (tp.float16, tp.float32, tp.float32),
        (tp.float32, tp.float64, tp.float64),
        (tp.int32, tp.int64, tp.int64),
        (tp.int64, tp.float16, tp.float16),  # an integer meeting a float becomes that float
        (tp.int32, tp.float32, tp.float32),
        (tp.bool_, tp.int32, tp.int32),
        (tp.bool_, tp.float16, tp.float16),
    ],
)
def test_tensor_tensor_promotion(left, right, want):
    a, b = tp.ones((2,), dtype=left), tp.ones((2,), dtype=right)
    assert tp.result_type(left, right) == want
    assert (a + b).dtype == want and (b * a).dtype == want
    np.testing.assert_array_equal((a + b).numpy(), np.full(2, 2, dtype=want.np))


@pytest.mark.parametrize(
    "tensor_dtype, scalar, want",
    [
        (tp.float32, 1.5, tp.float32),  # a Python float never upcasts float32
        (tp.float16, 1.5, tp.float16),
        (tp.float64, 2, tp.float64),
        (tp.int32, 2, tp.int32),
        (tp.int32, 2.5, tp.float32),  # int tensor + float scalar
        (tp.bool_, 2, tp.int64),
        (tp.bool_, 2.5, tp.float32),
        (tp.bool_, True, tp.bool_),
    ],
)
def test_python_scalars_are_weak(tensor_dtype, scalar, want):
    t = tp.ones((3,), dtype=tensor_dtype)
    assert tp.result_type(tensor_dtype, scalar) == want
    for out in (t + scalar, scalar + t, tp.add(t, scalar)):
        assert out.dtype == want
        np.testing.assert_array_equal(out.numpy(), np.full(3, 1 + scalar, dtype=want.np))


def test_bool_arithmetic_and_logic():
    a, b = tp.tensor([True, True, False]), tp.tensor([True, False, False])
    assert (a + b).dtype == tp.bool_
    np.testing.assert_array_equal((a + b).numpy(), [True, True, False])
    np.testing.assert_array_equal((a & b).numpy(), [True, False, False])
    np.testing.assert_array_equal((a | b).numpy(), [True, True, False])
    np.testing.assert_array_equal((~a).numpy(), [False, False, True])


def test_sum_of_bool_counts():
    mask = tp.tensor([[True, True, False], [True, False, False]])
    total, per_row = tp.sum(mask), tp.sum(mask, axis=1)
    assert total.dtype == tp.int64 and per_row.dtype == tp.int64
    assert total.item() == 3
    np.testing.assert_array_equal(per_row.numpy(), [2, 1])


def test_int_division_gives_float():
    q = tp.tensor([1, 2, 3]) / 2
    assert q.dtype == tp.float32
    np.testing.assert_allclose(q.numpy(), [0.5, 1.0, 1.5])


def test_comparisons_give_bool():
    x = tp.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal((x > 1.5).numpy(), [False, True, True])
    np.testing.assert_array_equal((x == 2.0).numpy(), [False, True, False])
    assert (x <= 2).dtype == tp.bool_


def test_as_dtype_and_dtype_objects():
    assert tp.as_dtype("float32") is tp.float32
    assert tp.as_dtype(np.float64) is tp.float64
    assert tp.as_dtype(float) is tp.float32 and tp.as_dtype(int) is tp.int64 and tp.as_dtype(bool) is tp.bool_
    assert tp.float32 == "float32" and tp.float32 != tp.float64
    assert tp.float16.is_floating and tp.int32.is_integer and tp.bool_.is_bool
    assert repr(tp.float32) == "tapeflow.float32" and str(tp.int64) == "int64"
    with pytest.raises(TypeError, match="dtype"):
        tp.as_dtype("complex64")
    with pytest.raises(TypeError, match="dtype"):
        tp.tensor(np.array([1 + 2j]))


def test_cast():
    x = tp.tensor([1.7, -1.7, 0.2])
    np.testing.assert_array_equal(tp.cast(x, "int32").numpy(), np.array([1.7, -1.7, 0.2], np.float32).astype(np.int32))
    assert x.astype(tp.float64).dtype == tp.float64
    np.testing.assert_array_equal(tp.cast(x, "bool").numpy(), [True, True, True])


# -------------------------------------------------------- conversion
def test_numpy_and_asarray_are_read_only():
    t = tp.tensor([[1.0, 2.0], [3.0, 4.0]])
    for arr in (t.numpy(), np.asarray(t)):
        assert not arr.flags.writeable
        np.testing.assert_array_equal(arr, [[1.0, 2.0], [3.0, 4.0]])
        with pytest.raises(ValueError):
            arr[0, 0] = 5.0
    assert t.numpy()[0, 0] == 1.0
    copy = np.array(t)
    copy[0, 0] = 9.0  # an explicit copy is writable and independent
    assert t.numpy()[0, 0] == 1.0
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


def test_numpy_functions_accept_tensors():
    t = tp.tensor(np.array([1.0, 4.0, 9.0]))
    np.testing.assert_allclose(np.sqrt(t), [1.0, 2.0, 3.0])
    assert float(tp.sum(t)) == 14.0 and int(tp.tensor(3)) == 3


def test_metadata_and_python_protocols():
    t = tp.tensor(np.zeros((2, 3, 4), np.float32))
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.size == 24 and len(t) == 2
    assert [r.shape for r in t] == [(3, 4), (3, 4)]
    assert tp.tensor([[1, 2]]).tolist() == [[1, 2]] and tp.tensor(2.5).item() == 2.5
    with pytest.raises(ValueError, match="bool"):
        bool(tp.ones((2,)))
    assert bool(tp.tensor([1.0])) and not bool(tp.tensor(0))


def test_repr_shows_values_shape_and_dtype():
    r = repr(tp.tensor([[1.5, 2.0]]))
    assert "1.5" in r and "2." in r and "shape=(1, 2)" in r and "float32" in r
    v = repr(tp.Variable([7, 8], name="counts"))
    assert "counts" in v and "7" in v and "8" in v and "shape=(2,)" in v and "int64" in v


# ------------------------------------------------------------- devices
def test_device_context_and_list_devices():
    devices = tp.list_devices()
    assert devices[0] == tp.Device("cpu", 0) and str(devices[0]) == "cpu:0"
    with tp.device("cpu") as dev:
        assert dev == tp.Device("cpu", 0)
        t = tp.ones((2,))
    assert t.device == tp.Device("cpu", 0)
    assert t.to("cpu") is t
    assert (t + 1.0).device == t.device


# ------------------------------------------------------------ Variable
def test_variable_assign_family():
    v = tp.Variable(tp.zeros((2, 2)), name="w")
    assert v.name == "w" and v.trainable and v.dtype == tp.float32
    assert v.assign(np.array([[1.0, 2.0], [3.0, 4.0]])) is v
    np.testing.assert_array_equal(v.numpy(), [[1.0, 2.0], [3.0, 4.0]])
    v.assign_add(tp.ones((2, 2)))
    np.testing.assert_array_equal(v.numpy(), [[2.0, 3.0], [4.0, 5.0]])
    v.assign_sub([[2.0, 2.0], [2.0, 2.0]])
    np.testing.assert_array_equal(v.numpy(), [[0.0, 1.0], [2.0, 3.0]])
    assert v.dtype == tp.float32


def test_variable_read_value_is_a_snapshot():
    v = tp.Variable([1.0, 2.0])
    snap = v.read_value()
    before = v.numpy()
    v.assign([5.0, 6.0])
    np.testing.assert_array_equal(snap.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(before, [1.0, 2.0])


def test_variable_construction():
    src = np.array([1.0, 2.0])
    v = tp.Variable(src)
    src[0] = 50.0
    assert v.numpy()[0] == 1.0 and v.dtype == tp.float64  # copied; ndarray dtype kept
    assert tp.Variable([1.0]).dtype == tp.float32
    assert tp.Variable(lambda: tp.ones((3,)), dtype="float64").dtype == tp.float64
    frozen = tp.Variable(1.0, trainable=False)
    assert not frozen.trainable and frozen.name == "Variable"
    np.testing.assert_array_equal((tp.Variable([1.0, 2.0]) * 2).numpy(), [2.0, 4.0])


# ---------------------------------------------------------- creation
@pytest.mark.parametrize(
    "made, want",
    [
        (lambda: tp.zeros((2, 3)), np.zeros((2, 3), np.float32)),
        (lambda: tp.zeros(4, dtype="int32"), np.zeros(4, np.int32)),
        (lambda: tp.ones((3,), dtype=tp.float64), np.ones(3)),
        (lambda: tp.full((2, 2), 7), np.full((2, 2), 7, np.int64)),
        (lambda: tp.full((2,), 1.5), np.full(2, 1.5, np.float32)),
        (lambda: tp.full((2,), True), np.full(2, True)),
        (lambda: tp.full((2,), 3, dtype="float16"), np.full(2, 3, np.float16)),
        (lambda: tp.arange(5), np.arange(5, dtype=np.int64)),
        (lambda: tp.arange(2, 11, 3), np.arange(2, 11, 3, dtype=np.int64)),
        (lambda: tp.arange(5, 0, -2), np.arange(5, 0, -2, dtype=np.int64)),
        (lambda: tp.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25, dtype=np.float32)),
        (lambda: tp.arange(3, dtype="float64"), np.arange(3, dtype=np.float64)),
        (lambda: tp.linspace(-1, 1, 5), np.linspace(-1, 1, 5).astype(np.float32)),
        (lambda: tp.linspace(0, 1, 1, dtype="float64"), np.linspace(0, 1, 1)),
        (lambda: tp.eye(3), np.eye(3, dtype=np.float32)),
        (lambda: tp.eye(2, 4, dtype="int64"), np.eye(2, 4, dtype=np.int64)),
        (lambda: tp.zeros_like(tp.ones((2, 3), dtype="int32")), np.zeros((2, 3), np.int32)),
        (lambda: tp.ones_like(tp.zeros((2,)), dtype="float64"), np.ones(2)),
        (lambda: tp.full_like(tp.zeros((1, 2), dtype="float64"), 2.5), np.full((1, 2), 2.5)),
        (lambda: tp.zeros((0, 3)), np.zeros((0, 3), np.float32)),
    ],
)
def test_creation_functions_match_numpy(made, want):
    t = made()
    assert t.shape == want.shape and t.dtype.np == want.dtype
    np.testing.assert_array_equal(t.numpy(), want)


def test_creation_rejects_bad_shapes():
    with pytest.raises(ValueError, match="zeros"):
        tp.zeros((2, -1))
    with pytest.raises(TypeError, match="ones"):
        tp.ones("abc")
    with pytest.raises(ValueError, match="arange"):
        tp.arange(0, 5, 0)


# ------------------------------------------------------------ random
def test_global_seed_is_reproducible():
    tp.random.seed(42)
    a = tp.random.normal((3, 4))
    b = tp.random.uniform((5,), 2.0, 3.0)
    tp.random.seed(42)
    np.testing.assert_array_equal(tp.random.normal((3, 4)).numpy(), a.numpy())
    np.testing.assert_array_equal(tp.random.uniform((5,), 2.0, 3.0).numpy(), b.numpy())
    assert not np.array_equal(tp.random.normal((3, 4)).numpy(), a.numpy())  # the stream moves on


def test_generator_matches_numpy_pcg64():
    g = tp.random.Generator(7)
    ref = np.random.Generator(np.random.PCG64(7))
    n = g.normal((2, 3), mean=1.0, stddev=2.0)
    np.testing.assert_array_equal(n.numpy(), (ref.standard_normal((2, 3)) * 2.0 + 1.0).astype(np.float32))
    u = g.uniform((4,), -1.0, 1.0, dtype="float64")
    np.testing.assert_array_equal(u.numpy(), ref.uniform(-1.0, 1.0, (4,)))
    assert n.dtype == tp.float32 and u.dtype == tp.float64


def test_generators_are_independent_streams():
    g1, g2 = tp.random.Generator(3), tp.random.Generator(3)
    first = g1.normal((6,)).numpy()
    tp.random.seed(0)
    tp.random.normal((100,))  # drawing from the global stream does not move g2
    np.testing.assert_array_equal(g2.normal((6,)).numpy(), first)
    assert not np.array_equal(tp.random.Generator(4).normal((6,)).numpy(), first)
    state = g1.get_state()
    nxt = g1.uniform((3,)).numpy()
    g1.set_state(state)
    np.testing.assert_array_equal(g1.uniform((3,)).numpy(), nxt)


def test_random_distributions_sanity():
    g = tp.random.Generator(0)
    u = g.uniform((20000,), 2.0, 5.0, dtype="float64").numpy()
    assert u.min() >= 2.0 and u.max() < 5.0
    assert abs(u.mean() - 3.5) < 0.05
    n = g.normal((20000,), 1.0, 3.0, dtype="float64").numpy()
    assert abs(n.mean() - 1.0) < 0.1 and abs(n.std() - 3.0) < 0.1
    t = g.truncated_normal((5000,), 0.0, 1.0).numpy()
    assert np.abs(t).max() <= 2.0
