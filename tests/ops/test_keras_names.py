"""The `keras.ops` spellings against Keras itself (torch backend): values, and gradients
against torch autograd through Keras's ops, on the same inputs."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import ops

keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")
K = keras.ops


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _grad_tp(fn, *arrays, cot):
    xs = [tp.tensor(a) for a in arrays]
    with tp.GradientTape() as tape:
        tape.watch(xs)
        y = fn(*xs)
    grads = tape.gradient(y, xs, output_gradients=tp.tensor(cot))
    return y.numpy(), [g.numpy() for g in grads]


def _grad_keras(fn, *arrays, cot):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    y.backward(torch.tensor(cot))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


DIFFERENTIABLE = [
    ("relu", lambda m: m.relu, (3, 4)),
    ("softmax", lambda m: lambda x: m.softmax(x, axis=0), (3, 4)),
    ("softmax-tuple", lambda m: lambda x: m.softmax(x, axis=(0, 1)), (3, 4)),
    ("sigmoid", lambda m: m.sigmoid, (5,)),
    ("tanh", lambda m: m.tanh, (5,)),
    ("square", lambda m: m.square, (2, 3)),
    ("exp", lambda m: m.exp, (2, 3)),
    ("abs", lambda m: m.abs, (2, 3)),
    ("mean", lambda m: lambda x: m.mean(x, axis=-1, keepdims=True), (2, 3)),
    ("sum", lambda m: lambda x: m.sum(x, axis=0), (2, 3)),
    ("max", lambda m: lambda x: m.max(x, axis=1, keepdims=True), (2, 3)),
    ("min", lambda m: lambda x: m.min(x, axis=1), (2, 3)),
    ("reshape", lambda m: lambda x: m.reshape(x, newshape=(3, -1)), (2, 3)),
    ("transpose", lambda m: lambda x: m.transpose(x, axes=(1, 2, 0)), (2, 3, 4)),
    ("transpose-none", lambda m: lambda x: m.transpose(x), (2, 3, 4)),
    ("expand_dims", lambda m: lambda x: m.expand_dims(x, axis=1), (2, 3)),
    ("squeeze", lambda m: lambda x: m.squeeze(x, axis=1), (2, 1, 3)),
    ("cumsum", lambda m: lambda x: m.cumsum(x, axis=1), (2, 4)),
    ("cumsum-flat", lambda m: lambda x: m.cumsum(x), (2, 3)),
    ("concatenate", lambda m: lambda x: m.concatenate([x, 2.0 * x], axis=-1), (2, 3)),
    ("stack", lambda m: lambda x: m.stack([x, m.square(x)], axis=1), (2, 3)),
    ("maximum", lambda m: lambda x: m.maximum(x1=x, x2=0.1), (2, 3)),
    ("minimum", lambda m: lambda x: m.minimum(x, 0.1), (2, 3)),
    ("where", lambda m: lambda x: m.where(x > 0, x1=x, x2=-2.0 * x), (2, 3)),
]


@pytest.mark.parametrize(("name", "make", "shape"), DIFFERENTIABLE, ids=[c[0] for c in DIFFERENTIABLE])
def test_values_and_gradients_match_keras(name, make, shape):
    x = _x(*shape)
    expected = K.convert_to_numpy(make(K)(x))
    cot = _x(*expected.shape, seed=5)
    y, (g,) = _grad_tp(make(ops), x, cot=cot)
    yk, (gk,) = _grad_keras(make(K), x, cot=cot)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, yk, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g, gk, rtol=1e-5, atol=1e-6)


def test_matmul_takes_keras_and_tapeflow_names():
    a, b = _x(2, 3), _x(3, 4, seed=1)
    cot = _x(2, 4, seed=2)
    y, grads = _grad_tp(lambda p, q: ops.matmul(x1=p, x2=q), a, b, cot=cot)
    yk, gradsk = _grad_keras(lambda p, q: K.matmul(x1=p, x2=q), a, b, cot=cot)
    np.testing.assert_allclose(y, yk, rtol=1e-5, atol=1e-6)
    for g, gk in zip(grads, gradsk, strict=True):
        np.testing.assert_allclose(g, gk, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tp.matmul(a=tp.tensor(a), b=tp.tensor(b)).numpy(), yk, rtol=1e-5)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", [None, "int32"])
def test_one_hot_matches_keras(axis, dtype):
    ids = np.array([[0, 2, 1], [3, -1, 2]])
    got = ops.one_hot(tp.tensor(ids), num_classes=4, axis=axis, dtype=dtype)
    want = K.convert_to_numpy(K.one_hot(ids, num_classes=4, axis=axis, dtype=dtype))
    assert got.dtype.name == want.dtype.name
    np.testing.assert_array_equal(got.numpy(), want)


def test_one_hot_keeps_tapeflow_arguments():
    got = tp.one_hot(tp.tensor([1, 0]), depth=2, on_value=5.0, off_value=-1.0)
    assert got.numpy().tolist() == [[-1.0, 5.0], [5.0, -1.0]]
    with pytest.raises(TypeError, match="one_hot: got both num_classes= and depth="):
        tp.one_hot(tp.tensor([1]), num_classes=2, depth=2)
    with pytest.raises(ValueError, match="sparse=True"):
        ops.one_hot(tp.tensor([1]), 2, sparse=True)


def test_transpose_and_reshape_keep_tapeflow_keywords():
    x = tp.ones((2, 3, 4))
    assert tp.transpose(x, perm=(2, 0, 1)).shape == (4, 2, 3)
    assert tp.reshape(x, shape=(6, 4)).shape == (6, 4)
    assert (x.T if hasattr(x, "T") else tp.transpose(x)).shape == (4, 3, 2)
    with pytest.raises(TypeError, match="transpose: got both axes= and perm="):
        tp.transpose(x, axes=(0, 1, 2), perm=(0, 1, 2))


def test_shape_eager_is_a_tuple_of_ints():
    assert ops.shape(tp.ones((2, 3))) == K.shape(np.ones((2, 3))) == (2, 3)
    assert all(type(d) is int for d in ops.shape(tp.ones((2, 3))))
    assert ops.shape(np.ones((4,))) == (4,)


def test_shape_of_a_symbolic_tensor_names_its_dynamic_batch():
    x = tp.Input((3,))
    batch, dim = ops.shape(x)
    assert dim == 3 and isinstance(batch, tp.ops.shapes.DynamicDim) and batch.axis == 0
    with pytest.raises(TypeError, match="known only when the model runs"):
        int(batch)


def test_shape_in_a_traced_train_step_is_concrete():
    seen = []

    @tp.function
    def f(x):
        seen.append(ops.shape(x))
        return tp.random.normal(shape=ops.shape(x), seed=1) + x

    assert f(tp.ones((5, 2))).shape == (5, 2)
    assert seen[0] == (5, 2)


def test_convert_to_numpy_and_tensor_match_keras():
    x = tp.tensor([[1.0, 2.0]])
    got = ops.convert_to_numpy(x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, K.convert_to_numpy(K.convert_to_tensor([[1.0, 2.0]])))
    assert ops.convert_to_numpy([1, 2]).tolist() == [1, 2]
    t = ops.convert_to_tensor([1, 2], dtype="float32")
    assert t.dtype.name == K.convert_to_tensor([1, 2], dtype="float32").dtype.__str__().split(".")[-1]
    assert ops.convert_to_tensor(value=[1]).numpy().tolist() == [1]
    with pytest.raises(ValueError, match="convert_to_tensor: sparse=True"):
        ops.convert_to_tensor([1], sparse=True)


def test_creation_and_cast_match_keras():
    for fn, args in [("zeros", ((2, 3),)), ("ones", ((2,),))]:
        got, want = getattr(ops, fn)(*args), K.convert_to_numpy(getattr(K, fn)(*args))
        assert got.dtype.name == want.dtype.name
        np.testing.assert_array_equal(got.numpy(), want)
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(ops.zeros_like(tp.tensor(x)).numpy(), K.convert_to_numpy(K.zeros_like(x)))
    np.testing.assert_array_equal(ops.ones_like(tp.tensor(x)).numpy(), K.convert_to_numpy(K.ones_like(x)))
    for args in [(5,), (1, 7, 2), (0.0, 1.0, 0.25)]:
        got, want = ops.arange(*args), K.convert_to_numpy(K.arange(*args))
        np.testing.assert_allclose(got.numpy(), want)
    assert ops.arange(3, step=None).numpy().tolist() == [0, 1, 2]
    assert ops.cast(tp.tensor([1.7]), "int32").numpy().tolist() == K.convert_to_numpy(K.cast([1.7], "int32")).tolist()
    assert ops.cumsum(tp.tensor([1, 2, 3]), dtype="float32").dtype.name == "float32"


def test_where_with_only_a_condition_gives_indices_like_keras():
    c = np.array([[True, False], [False, True]])
    got = [i.numpy().tolist() for i in ops.where(tp.tensor(c))]
    want = [K.convert_to_numpy(i).tolist() for i in K.where(c)]
    assert got == want
    with pytest.raises(TypeError, match="where: give both x1 and x2"):
        ops.where(tp.tensor(c), x1=1.0)


def test_keras_names_work_in_a_functional_model_and_its_frozen_graph():
    x = tp.Input((4,))
    y = ops.concatenate([ops.relu(x), ops.softmax(x, axis=-1)], axis=-1)
    model = tp.Model(x, ops.cumsum(y, axis=1))
    data = _x(3, 4)
    eager = model(tp.tensor(data)).numpy()
    expected = np.cumsum(np.concatenate([np.maximum(data, 0), K.convert_to_numpy(K.softmax(data))], -1), axis=1)
    np.testing.assert_allclose(eager, expected, rtol=1e-5, atol=1e-6)
    frozen = tp.freeze(model, tp.TensorSpec((None, 4), "float32"))
    np.testing.assert_allclose(frozen(tp.tensor(data)).numpy(), eager, rtol=1e-6)


class _Sampling(tp.layers.Layer):
    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch, dim = ops.shape(z_mean)
        eps = tp.random.normal(shape=(batch, dim), seed=1)
        return z_mean + ops.exp(0.5 * z_log_var) * eps + ops.ones((batch, 1)) + tp.random.uniform((batch, dim))


def test_shape_of_a_functional_input_sizes_draws_in_the_model_and_its_frozen_graph():
    x = tp.Input((4,))
    z = _Sampling()([tp.layers.Dense(2)(x), tp.layers.Dense(2)(x)])
    assert z.shape == (None, 2)
    model = tp.Model(x, z)
    assert model(tp.ones((3, 4))).shape == (3, 2)
    frozen = tp.freeze(model, tp.TensorSpec((None, 4), "float32"))
    assert frozen(tp.ones((5, 4))).shape == (5, 2)
    assert frozen(tp.ones((2, 4))).shape == (2, 2)


def test_dynamic_sizes_give_zeros_ones_and_full_in_a_frozen_function():
    @tp.function(input_signature=[tp.TensorSpec((None, 3), "float32")])
    def f(x):
        batch = ops.shape(x)[0]
        return ops.zeros((batch, 2)) + ops.ones((1, batch, 1))[0] + tp.full((batch, 2), 2.0)

    assert f(tp.ones((4, 3))).numpy().tolist() == [[3.0, 3.0]] * 4
    assert ops.zeros((2,), dtype=None).dtype == K.zeros((2,)).dtype.__str__().split(".")[-1] == "float32"
