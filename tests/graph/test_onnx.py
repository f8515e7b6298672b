"""ONNX export: onnxruntime must compute what the tapeflow graph computes."""

import os

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph.onnx import ExportError, exportable_ops, to_onnx
from tapeflow.graph.passes.epilogue import BiasActivationFusion
from tapeflow.graph.passes.fuse import ElementwiseFusion
from tapeflow.ops.registry import apply, get_op

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

BATCHES = (1, 5)


def session_for(graph, tmp_path, opset=17):
    path = tmp_path / f"{graph.name}.onnx"
    graph.export_onnx(path, opset=opset)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def assert_same_outputs(graph, session, arrays, rtol=1e-5, atol=1e-5):
    want = graph(*arrays)
    want = [np.asarray(w) for w in (want if isinstance(want, list | tuple) else [want])]
    feeds = {i.name: a for i, a in zip(session.get_inputs(), arrays, strict=True)}
    got = session.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def check_export(fn, specs, make_inputs, tmp_path, opset=17, optimize=True):
    """Freeze `fn` with a dynamic batch, export it, and compare at each batch size."""
    graph = tp.freeze(fn, *specs, optimize=optimize)
    session = session_for(graph, tmp_path, opset)
    for batch in BATCHES:
        assert_same_outputs(graph, session, make_inputs(batch))
    return graph


def floats(*shape, low=-2.0, high=2.0, seed=0):
    return lambda batch: [np.random.default_rng(seed + batch).uniform(low, high, (batch, *shape)).astype(np.float32)]


# ------------------------------------------------------------------ models
def test_mlp_matches(tmp_path):
    layers = [tp.layers.Dense(64, activation="relu"), tp.layers.Dense(32, activation="relu"), tp.layers.Dense(10)]
    model = tp.Sequential(layers)
    model.build((None, 20))
    graph = check_export(lambda x: model(x, training=False), [tp.TensorSpec((None, 20))], floats(20), tmp_path)
    proto = onnx.load(str(tmp_path / f"{graph.name}.onnx"))
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 20]
    assert len(proto.graph.initializer) == 6  # three kernels and three biases


def test_deep_mnist_cnn_matches(tmp_path):
    model = tp.Sequential(
        [
            tp.layers.Conv2D(32, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Conv2D(64, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(1024, activation="relu"),
            tp.layers.Dropout(0.4),
            tp.layers.Dense(10),
        ]
    )
    model.build((None, 28, 28, 1))
    spec = tp.TensorSpec((None, 28, 28, 1))
    graph = check_export(lambda x: model(x, training=False), [spec], floats(28, 28, 1, low=0.0, high=1.0), tmp_path)
    proto = onnx.load(str(tmp_path / f"{graph.name}.onnx"))
    shapes = sorted(tuple(t.dims) for t in proto.graph.initializer if len(t.dims) == 4)
    assert shapes == [(32, 1, 5, 5), (64, 32, 5, 5)]  # filters stored OIHW; the HWIO originals are gone


def test_lstm_model_matches(tmp_path):
    model = tp.Sequential([tp.layers.Embedding(50, 8), tp.layers.LSTM(16), tp.layers.Dense(4)])
    model(np.zeros((2, 7), np.int64))

    def ids(batch):
        return [np.random.default_rng(batch).integers(0, 50, (batch, 7)).astype(np.int64)]

    check_export(lambda x: model(x, training=False), [tp.TensorSpec((None, 7), "int64")], ids, tmp_path)


# ------------------------------------------------------------------ per op
W = np.random.default_rng(7).normal(size=(6, 4)).astype(np.float32)
ROW = np.random.default_rng(8).uniform(0.5, 1.5, size=(6,)).astype(np.float32)

UNARY = {
    "neg": tp.neg,
    "abs": tp.abs,
    "sign": tp.sign,
    "exp": tp.exp,
    "sin": tp.sin,
    "cos": tp.cos,
    "tanh": tp.tanh,
    "sigmoid": tp.nn.sigmoid,
    "erf": tp.erf,
    "relu": tp.nn.relu,
    "softplus": tp.nn.softplus,
    "square": tp.square,
    "identity": tp.identity,
    "stop_gradient": tp.stop_gradient,
    "copy_to_device": lambda x: tp.copy_to_device(x, "cpu"),
    "softmax": tp.nn.softmax,
    "log_softmax": tp.nn.log_softmax,
    "gelu": tp.nn.gelu,
    "gelu_tanh": lambda x: tp.nn.gelu(x, approximate=True),
    "leaky_relu": tp.nn.leaky_relu,
    "elu": tp.nn.elu,
}
POSITIVE = {
    "log": tp.log,
    "log1p": tp.log1p,
    "sqrt": tp.sqrt,
    "rsqrt": tp.rsqrt,
    "reciprocal": tp.reciprocal,
    "pow": lambda x: tp.pow(x, ROW),
}


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as_traced"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, optimize, tmp_path):
    check_export(UNARY[name], [tp.TensorSpec((None, 6))], floats(6, low=-3.0, high=3.0), tmp_path, optimize=optimize)


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_positive_domain(name, tmp_path):
    check_export(POSITIVE[name], [tp.TensorSpec((None, 6))], floats(6, low=0.1, high=3.0), tmp_path)


BINARY = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - ROW,
    "multiply": lambda x, y: x * y * 0.5,
    "divide": lambda x, y: x / (tp.abs(y) + 0.5),
    "maximum": tp.maximum,
    "minimum": lambda x, y: tp.minimum(x, 0.25),
    "matmul": lambda x, y: x @ W,
    "where": lambda x, y: tp.where(x > y, x, y * 2.0),
    "clip": lambda x, y: tp.clip(x, -0.5, 1.0),
    "clip_low": lambda x, y: tp.clip(x, clip_value_min=-0.5),
    "clip_high": lambda x, y: tp.clip(y, clip_value_max=0.5),
    "concat": lambda x, y: tp.concat([x, y, x], axis=1),
    "stack": lambda x, y: tp.stack([x, y], axis=1),
    "full_like": lambda x, y: tp.zeros_like(x) + tp.ones_like(y, "int32"),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, tmp_path):
    def make(batch):
        return floats(6)(batch) + floats(6, seed=100)(batch)

    check_export(BINARY[name], [tp.TensorSpec((None, 6))] * 2, make, tmp_path)


COMPARE = {
    "equal": lambda x, y: tp.equal(x, y),
    "not_equal": lambda x, y: tp.not_equal(x, y),
    "less": lambda x, y: x < y,
    "less_equal": lambda x, y: x <= y,
    "greater": lambda x, y: x > y,
    "greater_equal": lambda x, y: x >= y,
    "logic": lambda x, y: tp.logical_or(tp.logical_and(x > 0, y > 0), tp.logical_not(x < y)),
    "int_divide": lambda x, y: x / (tp.abs(y) + 1),
    "int_sum_of_bools": lambda x, y: tp.sum(x > y, axis=1),
    "int_max": lambda x, y: tp.maximum(x, y) * 3 - y,
}


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_integer_and_bool(name, tmp_path):
    def make(batch):
        rng = np.random.default_rng(batch)
        return [rng.integers(-3, 4, (batch, 6)).astype(np.int64), rng.integers(-3, 4, (batch, 6)).astype(np.int64)]

    check_export(COMPARE[name], [tp.TensorSpec((None, 6), "int64")] * 2, make, tmp_path)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: tp.cast(x, "int32"),
        lambda x: tp.cast(x > 0, "float32"),
        lambda x: tp.cast(tp.cast(x * 4.0, "int64"), "float64"),
    ],
    ids=["to_int32", "bool_to_float", "int_to_float64"],
)
def test_cast(fn, tmp_path):
    check_export(fn, [tp.TensorSpec((None, 6))], floats(6, low=-3.0, high=3.0), tmp_path)


REDUCE = {
    "sum": lambda x: tp.sum(x, axis=1),
    "sum_all": lambda x: tp.sum(x),
    "mean_keepdims": lambda x: tp.mean(x, axis=(1, 2), keepdims=True),
    "max": lambda x: tp.max(x, axis=-1),
    "min_keepdims": lambda x: tp.min(x, axis=0, keepdims=True),
    "prod": lambda x: tp.prod(x, axis=2),
    "logsumexp": lambda x: tp.logsumexp(x * 300.0, axis=1),
    "argmax": lambda x: tp.argmax(x, axis=2),
    "argmin_flat": lambda x: tp.argmin(x),
    "var": lambda x: tp.var(x, axis=1),
}


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce(name, opset, tmp_path):
    check_export(REDUCE[name], [tp.TensorSpec((None, 3, 4))], floats(3, 4), tmp_path, opset=opset)


SHAPE = {
    "reshape": lambda x: tp.reshape(x, (-1, 2, 6)),
    "transpose": lambda x: tp.transpose(x, (2, 0, 1)),
    "expand_squeeze": lambda x: tp.squeeze(tp.expand_dims(x, 1), 1) + tp.expand_dims(x[:, 0], 1),
    "split": lambda x: tp.split(x, [1, 3], axis=2),
    "split_equal": lambda x: tp.split(x, 3, axis=1)[2],
    "broadcast_to": lambda x: tp.broadcast_to(tp.tensor(ROW[:4]), (3, 4)) + x,
    "pad": lambda x: tp.pad(x, [(0, 0), (1, 2), (0, 1)], constant_values=-1.5),
    "tile": lambda x: tp.tile(x, (1, 2, 3)),
    "batched_matmul": lambda x: x @ tp.transpose(x, (0, 2, 1)),
    "matmul_broadcast": lambda x: tp.matmul(x, tp.tensor(W[:4])),
    "slice": lambda x: x[:, 1:3],
    "slice_step": lambda x: x[:, ::2, 1::2],
    "reverse": lambda x: x[:, ::-1, -2::-1],
    "reverse_batch": lambda x: x[::-1],
    "negative_bounds": lambda x: x[:, -2:, :-1],
    "int_index": lambda x: x[:, -1],
    "ints_and_none": lambda x: x[:, 1, None, 2],
    "ellipsis": lambda x: x[..., 0],
    "ellipsis_none": lambda x: x[None, ..., 1:, None],
    "int_array": lambda x: x[:, [2, 0, 2, -1]],
    "int_array_2d": lambda x: x[:, :, np.array([[0, 3], [1, 1]])],
    "int_array_beside_int": lambda x: x[:, 1, [3, 0]],
    "gather_axis1": lambda x: tp.gather(x, [2, 0, 1], axis=1),
    "gather_nd": lambda x: tp.gather_nd(tp.transpose(x, (1, 2, 0)), [[0, 1], [2, 3]]),
}


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as_traced"])
@pytest.mark.parametrize("name", sorted(SHAPE))
def test_shape_ops(name, optimize, tmp_path):
    check_export(SHAPE[name], [tp.TensorSpec((None, 3, 4))], floats(3, 4), tmp_path, optimize=optimize)


def test_fused_elementwise_programs(tmp_path):
    def fn(x, y):
        a = tp.sqrt(tp.abs(x)) + tp.rsqrt(tp.abs(y) + 0.5)
        b = tp.maximum(-a, tp.log(tp.abs(y) + 1.0)) * tp.reciprocal(tp.abs(x) + 1.0)
        return tp.minimum(b, 0.3) - tp.square(tp.tanh(y)) / (tp.exp(x) + tp.nn.sigmoid(y))

    def make(batch):
        return floats(6)(batch) + floats(6, seed=50)(batch)

    graph = tp.freeze(fn, tp.TensorSpec((None, 6)), tp.TensorSpec((None, 6)))
    ElementwiseFusion().run(graph)
    graph.changed()
    assert graph.op_counts().get("fused_elementwise")
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        assert_same_outputs(graph, session, make(batch))


FUSED_PROGRAMS = {
    "every_instruction": (
        ("input", 0), ("input", 1), ("abs", 1), ("sqrt", 2), ("rsqrt", 3), ("neg", 0), ("exp", 5),
        ("log", 6), ("tanh", 7), ("sigmoid", 8), ("relu", 9), ("square", 10), ("reciprocal", 4),
        ("add", 11, 12), ("subtract", 13, 0), ("multiply", 14, 1), ("const", 0.5), ("divide", 15, 16),
        ("maximum", 17, 0), ("minimum", 18, 3),
    ),
    "ignores_an_input": (("input", 0), ("exp", 0), ("const", 2.0), ("multiply", 1, 2)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FUSED_PROGRAMS))
def test_fused_program(name, tmp_path):
    graph = tp.Graph("fused")
    x = graph.add_input("x", (None, 1), "float32")
    y = graph.add_input("y", (None, 4), "float32")
    attrs = {"program": FUSED_PROGRAMS[name]}
    graph.outputs = graph.add_node("fused_elementwise", [x, y], attrs, [((None, 4), "float32")])
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        assert_same_outputs(graph, session, floats(1, low=0.1)(batch) + floats(4, seed=9)(batch))


def test_embedding_gather_and_one_hot(tmp_path):
    table = tp.tensor(np.random.default_rng(3).normal(size=(10, 5)).astype(np.float32))

    def fn(ids):
        return tp.nn.embedding_lookup(table, ids), tp.one_hot(ids - 2, 10, on_value=2.0, off_value=-1.0)

    def make(batch):
        return [np.random.default_rng(batch).integers(0, 10, (batch, 3)).astype(np.int64)]

    check_export(fn, [tp.TensorSpec((None, 3), "int64")], make, tmp_path)


FILTER = np.random.default_rng(11).normal(size=(3, 3, 2, 4)).astype(np.float32)
CONV = {
    "same": dict(strides=1, padding="SAME"),
    "valid": dict(strides=1, padding="VALID"),
    "explicit": dict(strides=1, padding=((1, 0), (2, 1))),
    "stride2_same": dict(strides=2, padding="SAME"),
    "stride2_valid": dict(strides=(2, 1), padding="VALID"),
    "dilation2_same": dict(strides=1, padding="SAME", dilations=2),
    "dilation2_valid": dict(strides=1, padding="VALID", dilations=(2, 1)),
}


@pytest.mark.parametrize("name", sorted(CONV))
def test_conv2d(name, tmp_path):
    w = tp.Variable(tp.tensor(FILTER), name="w")
    fn = lambda x: tp.nn.conv2d(x, w, **CONV[name])  # noqa: E731
    check_export(fn, [tp.TensorSpec((None, 9, 8, 2))], floats(9, 8, 2), tmp_path)


def test_conv2d_with_a_computed_filter(tmp_path):
    def fn(x, w):
        return tp.nn.conv2d(x, w * 2.0, strides=2, padding="SAME")

    def make(batch):
        return floats(7, 7, 2)(batch) + [FILTER]

    check_export(fn, [tp.TensorSpec((None, 7, 7, 2)), tp.TensorSpec((3, 3, 2, 4))], make, tmp_path)


@pytest.mark.parametrize("activation", [None, tp.nn.relu], ids=["linear", "relu"])
@pytest.mark.parametrize("layer", ["matmul", "conv2d"])
def test_fused_layer_ops(layer, activation, tmp_path):
    w = tp.tensor(FILTER if layer == "conv2d" else W)
    b = tp.tensor(ROW[:4])

    def fn(x):
        y = (tp.nn.conv2d(x, w, strides=2, padding="SAME") if layer == "conv2d" else x @ w) + b
        return activation(y) if activation else y

    shape = (7, 7, 2) if layer == "conv2d" else (6,)
    graph = tp.freeze(fn, tp.TensorSpec((None, *shape)), optimize=False)
    BiasActivationFusion().run(graph)
    graph.changed()
    assert graph.op_counts() == {f"fused_{layer}": 1}
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        assert_same_outputs(graph, session, floats(*shape)(batch))


POOL = {
    "max_valid": (tp.nn.max_pool2d, dict(ksize=2)),
    "max_same_stride": (tp.nn.max_pool2d, dict(ksize=3, strides=2, padding="SAME")),
    "avg_valid": (tp.nn.avg_pool2d, dict(ksize=(2, 3), strides=(1, 2))),
    "avg_same": (tp.nn.avg_pool2d, dict(ksize=3, strides=2, padding="SAME")),
}


@pytest.mark.parametrize("name", sorted(POOL))
def test_pool(name, tmp_path):
    pool, kwargs = POOL[name]
    check_export(lambda x: pool(x, **kwargs), [tp.TensorSpec((None, 9, 8, 2))], floats(9, 8, 2), tmp_path)


def test_every_exportable_op_is_registered():
    for name in exportable_ops():
        assert get_op(name).name == name


# ------------------------------------------------------------------ refusals
def test_unsupported_op_names_op_and_node(tmp_path):
    graph = tp.freeze(lambda x: tp.cbrt(x) * 2.0, tp.TensorSpec((None, 3)))
    node = next(n for n in graph.nodes if n.op == "cbrt")
    with pytest.raises(ExportError, match=rf"op 'cbrt' \(node '{node.name}'"):
        graph.export_onnx(tmp_path / "model.onnx")
    assert not os.listdir(tmp_path)


def test_bool_mask_index_is_refused():
    graph = tp.freeze(lambda x: x[:, np.array([True, False, True])], tp.TensorSpec((2, 3)))
    with pytest.raises(ExportError, match="getitem.*bool mask"):
        to_onnx(graph)


def test_training_graph_is_refused(tmp_path):
    model = tp.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(1)])
    model.build((None, 3))

    def train_step(x, y):
        with tp.GradientTape() as tape:
            loss = tp.mean(tp.square(model(x, training=True) - y))
        for v, g in zip(model.trainable_weights, tape.gradient(loss, model.trainable_weights), strict=True):
            v.assign_sub(0.1 * g)
        return loss

    graph = tp.freeze(train_step, tp.TensorSpec((8, 3)), tp.TensorSpec((8, 1)))
    with pytest.raises(ExportError, match=r"training graph: node 'assign_\w+' \(assign_variable\) writes state"):
        graph.export_onnx(tmp_path / "train.onnx")
    assert not os.listdir(tmp_path)


def test_random_op_is_refused():
    graph = tp.freeze(lambda x: tp.nn.dropout(x, 0.5, training=True), tp.TensorSpec((2, 3)))
    with pytest.raises(ExportError, match="random op 'random_uniform'"):
        to_onnx(graph)


def test_bad_opset_is_refused():
    graph = tp.freeze(lambda x: x + 1.0, tp.TensorSpec((None, 3)))
    with pytest.raises(ValueError, match="opset must be an int in"):
        to_onnx(graph, opset=9)


def test_failed_export_keeps_the_old_file(tmp_path):
    path = tmp_path / "model.onnx"
    good = tp.freeze(lambda x: tp.exp(x), tp.TensorSpec((None, 3)))
    good.export_onnx(path)
    before = path.read_bytes()
    bad = tp.freeze(lambda x: tp.nn.dropout(x, 0.5, training=True), tp.TensorSpec((2, 3)))
    with pytest.raises(ExportError):
        bad.export_onnx(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["model.onnx"]
    onnx.checker.check_model(str(path))


def test_failed_write_leaves_no_temporary_file(tmp_path):
    (tmp_path / "taken").mkdir()
    graph = tp.freeze(lambda x: tp.exp(x), tp.TensorSpec((None, 3)))
    with pytest.raises(OSError):
        graph.export_onnx(tmp_path / "taken")
    assert os.listdir(tmp_path) == ["taken"] and not os.listdir(tmp_path / "taken")


def test_output_that_is_an_input_or_repeated(tmp_path):
    def fn(x):
        y = tp.exp(x)
        return x, y, y

    check_export(fn, [tp.TensorSpec((None, 3))], floats(3), tmp_path)


# ------------------------------------------------- ops beyond the first set
def apply_op(name, *inputs, **attrs):
    """Call a registered op directly (for ops that only a gradient or a layer reaches)."""
    return apply(get_op(name), inputs, attrs)


def assert_same_bits(graph, session, arrays):
    """Outputs exactly equal: values, NaNs and the signs of zeros."""
    want = graph(*arrays)
    want = [np.asarray(w) for w in (want if isinstance(want, list | tuple) else [want])]
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays, strict=True)})
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
        if w.dtype.kind == "f":  # the sign bit of a NaN means nothing
            np.testing.assert_array_equal(np.signbit(g) & ~np.isnan(g), np.signbit(w) & ~np.isnan(w))


SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 0.3, -0.3, 7.25, -7.75, 1e30, -3.0],
    dtype=np.float64,
)


def special(dtype, seed=0):
    """Special values first, then random ones, for each batch row."""

    def make(batch):
        rng = np.random.default_rng(seed + batch)
        rows = np.concatenate([np.tile(SPECIAL, (batch, 1)), rng.uniform(-9.0, 9.0, (batch, 16))], axis=1)
        return [rows.astype(dtype)]

    return make


FLOAT_FUNCTIONS = {  # name: (function, low, high)
    "arcsin": (tp.arcsin, -0.99, 0.99),
    "arccos": (tp.arccos, -0.99, 0.99),
    "arctan": (tp.arctan, -4.0, 4.0),
    "arcsinh": (tp.arcsinh, -4.0, 4.0),
    "arccosh": (tp.arccosh, 1.01, 4.0),
    "arctanh": (tp.arctanh, -0.99, 0.99),
    "sinh": (tp.sinh, -4.0, 4.0),
    "cosh": (tp.cosh, -4.0, 4.0),
    "tan": (tp.tan, -1.4, 1.4),
    "det": (lambda x: tp.ops.det(tp.reshape(x, (-1, 3, 3))), -2.0, 2.0),
}


@pytest.mark.parametrize("name", sorted(FLOAT_FUNCTIONS))
def test_float_functions(name, tmp_path):
    fn, low, high = FLOAT_FUNCTIONS[name]
    check_export(fn, [tp.TensorSpec((None, 9))], floats(9, low=low, high=high), tmp_path)


EXACT_FLOAT = {
    "floor": tp.floor,
    "ceil": tp.ceil,
    "trunc": tp.trunc,
    "round": tp.ops.round,
    "round_1": lambda x: tp.ops.round(x, 1),
    "round_2": lambda x: tp.ops.round(x, 2),
    "round_minus_1": lambda x: tp.ops.round(x, -1),
    "isnan": tp.isnan,
    "isinf": tp.isinf,
    "isfinite": tp.isfinite,
    "mod": lambda x: tp.mod(x, tp.flip(x, 1)),
    "mod_by_constant": lambda x: (tp.mod(x, 0.7), tp.mod(x, -2.5), tp.mod(x, 0.0)),
    "floor_divide": lambda x: tp.floor_divide(x, tp.flip(x, 1)),
    "floor_divide_by_constant": lambda x: (tp.floor_divide(x, 0.1), tp.floor_divide(x, -2.5), tp.floor_divide(x, 0.0)),
    "fmod": lambda x: (tp.fmod(x, tp.flip(x, 1)), tp.fmod(x, -0.7)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(EXACT_FLOAT))
def test_exact_float_ops(name, dtype, tmp_path):
    graph = tp.freeze(EXACT_FLOAT[name], tp.TensorSpec((None, 32), dtype))
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        with np.errstate(all="ignore"):
            assert_same_bits(graph, session, special(dtype)(batch))


INTEGER = {
    "mod": lambda x, y: tp.mod(x, y),
    "floor_divide": lambda x, y: tp.floor_divide(x, y),
    "fmod": lambda x, y: tp.fmod(x, y),
    "round_minus_1": lambda x, y: tp.ops.round(x * 7, -1),
    "round_2": lambda x, y: tp.ops.round(x, 2),
    "predicates": lambda x, y: (tp.isnan(x), tp.isinf(x), tp.isfinite(x), tp.signbit(x)),
    "bool_predicates": lambda x, y: (tp.isfinite(x > 0), tp.signbit(x > 0)),
    "cumsum": lambda x, y: tp.cumsum(x, axis=1),
    "cumprod": lambda x, y: tp.cumprod(x, axis=1),
    "einsum": lambda x, y: tp.einsum("bi,bj->bij", x, y),
    "top_k": lambda x, y: tp.ops.top_k(tp.floor_divide(x, 4), 4),
    "sort": lambda x, y: (tp.sort(tp.floor_divide(x, 4), axis=1), tp.argsort(tp.floor_divide(x, 4), axis=1)),
    "take_along_axis": lambda x, y: tp.take_along_axis(x, tp.argsort(y, axis=1), axis=1),
}


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("name", sorted(INTEGER))
def test_integer_ops(name, dtype, tmp_path):
    def make(batch):
        rng = np.random.default_rng(batch)
        y = rng.integers(1, 5, (batch, 6)) * rng.choice([-1, 1], (batch, 6))  # no zero divisors
        return [rng.integers(-20, 21, (batch, 6)).astype(dtype), y.astype(dtype)]

    graph = tp.freeze(INTEGER[name], *[tp.TensorSpec((None, 6), dtype)] * 2)
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        assert_same_bits(graph, session, make(batch))


BITWISE = {
    "and": tp.bitwise_and,
    "or": tp.bitwise_or,
    "xor": tp.bitwise_xor,
    "invert": lambda x, y: tp.bitwise_invert(x),
}


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64"])
@pytest.mark.parametrize("name", sorted(BITWISE))
def test_bitwise(name, dtype, tmp_path):
    def make(batch):
        rng = np.random.default_rng(batch)
        return [rng.integers(-50, 50, (batch, 6)).astype(dtype) for _ in range(2)]

    opset = 17 if dtype == "bool" else 18
    check_export(BITWISE[name], [tp.TensorSpec((None, 6), dtype)] * 2, make, tmp_path, opset=opset)


TIES = np.array([3.0, 1.0, 3.0, -2.0, 1.0, np.nan, 3.0, -2.0, np.inf, np.nan, -np.inf, 0.0], np.float32)


def with_ties(batch):
    rng = np.random.default_rng(batch)
    return [np.stack([rng.permutation(TIES) for _ in range(batch)])]


SORTING = {
    "sort": lambda x: tp.sort(x, axis=1),
    "sort_batch_axis": lambda x: tp.sort(x, axis=0),
    "argsort": lambda x: tp.argsort(x, axis=-1),
    "argsort_batch_axis": lambda x: tp.argsort(x, axis=0),
    "top_k": lambda x: tp.ops.top_k(x, 3),
    "top_k_unsorted": lambda x: tp.ops.top_k(x * 2.0, 12, sorted=False),
    "take_along_axis": lambda x: tp.take_along_axis(x, tp.argsort(x, axis=1)[:, ::-2], axis=1),
    "cumsum": lambda x: tp.cumsum(x, axis=1),
    "cumsum_reverse": lambda x: apply_op("cumsum", x, axis=0, reverse=True),
    "cumprod": lambda x: tp.cumprod(x * 0.9, axis=1),
    "cumprod_one": lambda x: tp.cumprod(x[:, :1], axis=1),
}


@pytest.mark.parametrize("name", sorted(SORTING))
def test_sorting_and_scans(name, tmp_path):
    graph = tp.freeze(SORTING[name], tp.TensorSpec((None, 12)))
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        with np.errstate(invalid="ignore"):  # inf + -inf in the sums
            assert_same_bits(graph, session, with_ties(batch))


EINSUM = {
    "batched_matmul": ("bij,jk->bik", (3, 4), [(4, 5)]),
    "outer": ("bi,bj->bij", (3,), [(None, 4)]),
    "trace": ("bii->b", (3, 3), []),
    "diagonal": ("bii->bi", (3, 3), []),
    "ellipsis": ("...ij,...jk->...ik", (2, 3), [(None, 3, 2)]),
    "three_operands": ("bi,ij,j->b", (3,), [(3, 4), (4,)]),
}


@pytest.mark.parametrize("name", sorted(EINSUM))
def test_einsum(name, tmp_path):
    subscripts, first, others = EINSUM[name]
    shapes = [(None, *first)] + [s for s in others]

    def make(batch):
        rng = np.random.default_rng(batch)
        return [rng.normal(size=tuple(batch if d is None else d for d in s)).astype(np.float32) for s in shapes]

    specs = [tp.TensorSpec(s) for s in shapes]
    check_export(lambda *xs: tp.einsum(subscripts, *xs), specs, make, tmp_path)


def test_scatters(tmp_path):
    def fn(x, u):
        by_axis = tp.scatter_add(x, tp.tensor([[2], [0], [-2]]), tp.reshape(u[:, :3], (-1, 3, 1)), axis=1)
        nd = tp.scatter_nd_add(x, tp.tensor([[0, 1], [0, 1], [3, -4]], "int32"), u[0, :3])
        along = apply_op("put_along_axis_add", x, tp.argsort(x, axis=1)[:, :2], u[:, :2], axis=1)
        update = apply_op("scatter_update", x, tp.tensor([3, 0]), u[:2, :1] * tp.ones((2, 4)))
        return by_axis, nd, along, update

    graph = tp.freeze(fn, tp.TensorSpec((5, 4)), tp.TensorSpec((5, 4)))
    session = session_for(graph, tmp_path, opset=16)
    for seed in range(3):
        assert_same_outputs(graph, session, floats(4, seed=seed)(5) + floats(4, seed=seed + 20)(5))
    with pytest.raises(ExportError, match="needs opset 16"):
        to_onnx(graph, opset=15)


def test_relu_grad_and_reshape_like(tmp_path):
    def fn(g, y):
        return apply_op("relu_grad", g, y - 0.5), apply_op("reshape_like", tp.reshape(g, (-1, 2, 3)), y)

    check_export(fn, [tp.TensorSpec((None, 6))] * 2, lambda b: floats(6)(b) + floats(6, seed=3)(b), tmp_path)


def test_relu_bias_grad(tmp_path):
    def fn(g, y):
        rows = apply_op("relu_bias_grad", g, y - 0.5)
        images = apply_op("relu_bias_grad", tp.reshape(g, (-1, 1, 2, 3)), tp.reshape(y, (-1, 1, 2, 3)) - 0.5)
        vector = apply_op("relu_bias_grad", g[0], y[0] - 0.5)
        return (*rows, *images, *vector)

    check_export(fn, [tp.TensorSpec((None, 6))] * 2, lambda b: floats(6)(b) + floats(6, seed=3)(b), tmp_path)


FILTER_3D = np.random.default_rng(12).normal(size=(2, 3, 2, 2, 3)).astype(np.float32)
CONV_3D = {
    "same": dict(strides=1, padding="SAME"),
    "valid": dict(strides=1, padding="VALID"),
    "stride2_same": dict(strides=2, padding="SAME"),
    "strides_valid": dict(strides=(1, 2, 3), padding="VALID"),
    "dilation2_same": dict(strides=1, padding="SAME", dilations=(2, 1, 2)),
}


@pytest.mark.parametrize("name", sorted(CONV_3D))
def test_conv3d(name, tmp_path):
    w = tp.Variable(tp.tensor(FILTER_3D), name="w")
    fn = lambda x: tp.nn.conv3d(x, w, **CONV_3D[name])  # noqa: E731
    check_export(fn, [tp.TensorSpec((None, 5, 7, 6, 2))], floats(5, 7, 6, 2), tmp_path)


POOL_3D = {
    "max_valid": (tp.nn.max_pool3d, dict(ksize=2)),
    "max_same_stride": (tp.nn.max_pool3d, dict(ksize=3, strides=2, padding="SAME")),
    "avg_valid": (tp.nn.avg_pool3d, dict(ksize=(2, 3, 1), strides=(1, 2, 1))),
    "avg_same": (tp.nn.avg_pool3d, dict(ksize=3, strides=2, padding="SAME")),
}


@pytest.mark.parametrize("name", sorted(POOL_3D))
def test_pool3d(name, tmp_path):
    pool, kwargs = POOL_3D[name]
    check_export(lambda x: pool(x, **kwargs), [tp.TensorSpec((None, 5, 7, 6, 2))], floats(5, 7, 6, 2), tmp_path)


CONV_TRANSPOSE = {  # input size, output size, arguments
    "valid": ((4, 4), (9, 9), dict(strides=2)),
    "valid_tail": ((4, 4), (10, 14), dict(strides=(2, 3))),
    "same": ((4, 5), (8, 10), dict(strides=2, padding="SAME")),
    "same_odd": ((4, 5), (7, 9), dict(strides=2, padding="SAME")),
    "stride1_same": ((6, 5), (6, 5), dict(padding="SAME")),
    "dilated": ((4, 4), (8, 6), dict(dilations=(2, 1))),
    "dilated_strided_tail": ((3, 4), (13, 10), dict(strides=(3, 2), dilations=(2, 1))),
}


@pytest.mark.parametrize("name", sorted(CONV_TRANSPOSE))
def test_conv2d_transpose(name, tmp_path):
    size, out, kwargs = CONV_TRANSPOSE[name]
    w = tp.Variable(tp.tensor(FILTER), name="w")  # 4 channels in, 2 out
    fn = lambda x: tp.nn.conv2d_transpose(x, w, out, **kwargs)  # noqa: E731
    check_export(fn, [tp.TensorSpec((None, *size, 4))], floats(*size, 4), tmp_path)


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_conv3d_transpose(padding, tmp_path):
    w = tp.tensor(FILTER_3D)  # 3 channels in, 2 out
    out = (7, 11, 9) if padding == "VALID" else (5, 8, 7)
    fn = lambda x: tp.nn.conv3d_transpose(x, w, out, strides=(2, 3, 2), padding=padding)  # noqa: E731
    check_export(fn, [tp.TensorSpec((None, 3, 3, 4, 3))], floats(3, 3, 4, 3), tmp_path)


SEARCH = np.array([-2.0, -1.0, -1.0, 0.0, 0.5, 3.0, np.inf, np.nan, np.nan], np.float32)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side, dtype, tmp_path):
    sequence = tp.tensor(SEARCH if dtype == "float32" else np.arange(-4, 5, dtype=dtype) // 2)

    def make(batch):
        values = np.concatenate([SEARCH, np.random.default_rng(batch).uniform(-3, 4, 7)])
        return [
            np.tile(values, (batch, 1)).astype(dtype)
            if dtype == "float32"
            else np.tile(values[:6], (batch, 1)).astype(dtype)
        ]

    graph = tp.freeze(lambda v: tp.ops.searchsorted(sequence, v, side=side), tp.TensorSpec((None, None), dtype))
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        assert_same_bits(graph, session, make(batch))


def test_unravel_index(tmp_path):
    def make(batch):
        return [np.random.default_rng(batch).integers(0, 60, (batch, 5)).astype(np.int64)]

    graph = tp.freeze(lambda i: tp.ops.unravel_index(i, (3, 4, 5)), tp.TensorSpec((None, 5), "int64"))
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        assert_same_bits(graph, session, make(batch))


def test_sparse_softmax_cross_entropy(tmp_path):
    def fn(logits, labels):
        return apply_op("sparse_softmax_cross_entropy_with_logits", logits * 30.0, labels)

    def make(batch):
        return floats(6)(batch) + [np.random.default_rng(batch).integers(0, 6, batch).astype(np.int32)]

    check_export(fn, [tp.TensorSpec((None, 6)), tp.TensorSpec((None,), "int32")], make, tmp_path)


SEGMENTS = ["segment_sum", "segment_prod", "segment_max", "segment_min"]


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("name", SEGMENTS)
def test_segments(name, dtype, tmp_path):
    ids = tp.tensor(np.array([0, 3, 1, 0, -1, 5, 2, 3], np.int32))  # -1 and 5 are dropped
    segments = 5 if dtype == "float32" else 4  # an empty segment of integers has no defined extreme

    def make(batch):
        data = np.random.default_rng(batch).uniform(-3, 3, (8, batch)) * (10 if dtype == "int64" else 1)
        return [data.astype(dtype)]

    graph = tp.freeze(lambda x: getattr(tp.ops, name)(x, ids, num_segments=segments), tp.TensorSpec((8, None), dtype))
    session = session_for(graph, tmp_path, opset=18)
    for batch in BATCHES:
        assert_same_bits(graph, session, make(batch))
    with pytest.raises(ExportError, match="needs opset"):
        to_onnx(graph, opset=15)


FFT = {
    "fft": lambda re, im: tp.ops.fft((re, im)),
    "fft2": lambda re, im: tp.ops.fft2((re, im)),
    "ifft2": lambda re, im: tp.ops.ifft2((re, im)),
}


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("name", sorted(FFT))
def test_dft(name, opset, tmp_path):
    def make(batch):
        return floats(5, 6)(batch) + floats(5, 6, seed=30)(batch)

    check_export(FFT[name], [tp.TensorSpec((None, 5, 6))] * 2, make, tmp_path, opset=opset)


@pytest.mark.parametrize(
    "name", ["floor", "ceil", "trunc", "round", "round_1", "round_2", "round_minus_1", "isnan", "isinf", "isfinite"]
)
def test_half_precision(name, tmp_path):
    graph = tp.freeze(EXACT_FLOAT[name], tp.TensorSpec((None, 32), "float16"))
    session = session_for(graph, tmp_path, opset=13)
    for batch in BATCHES:
        with np.errstate(all="ignore"):
            assert_same_bits(graph, session, special("float16")(batch))


DEPTHWISE = np.random.default_rng(13).normal(size=(3, 2, 2, 3)).astype(np.float32)  # 2 channels, multiplier 3


@pytest.mark.parametrize("name", sorted(CONV))
def test_depthwise_conv2d(name, tmp_path):
    w = tp.Variable(tp.tensor(DEPTHWISE), name="w")
    fn = lambda x: tp.nn.depthwise_conv2d(x, w, **CONV[name])  # noqa: E731
    check_export(fn, [tp.TensorSpec((None, 9, 8, 2))], floats(9, 8, 2), tmp_path)


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_depthwise_conv2d_computed_filter_and_input_gradient(padding, tmp_path):
    def fn(dy, w):
        return apply_op(
            "depthwise_conv2d_input_grad",
            dy,
            w * 2.0,
            input_size=(8, 9),
            strides=(2, 3),
            padding=padding,
            dilations=(1, 1),
        )

    dy_size = (3, 3) if padding == "VALID" else (4, 3)
    specs = [tp.TensorSpec((None, *dy_size, 6)), tp.TensorSpec(DEPTHWISE.shape)]
    check_export(fn, specs, lambda b: floats(*dy_size, 6)(b) + [DEPTHWISE], tmp_path)


QUANTILE = {
    "median": lambda x: tp.ops.median(x, axis=1),
    "median_two_axes": lambda x: tp.ops.median(x[:, :, :4], axis=(1, 2)),
    "scalar_q": lambda x: tp.ops.quantile(x, 0.3, axis=-1),
    "scalar_q_high": lambda x: tp.ops.quantile(x, 0.85, axis=(1, 2), keepdims=True),
    "several_q": lambda x: tp.ops.quantile(x, [0.0, 0.1, 0.5, 0.77, 1.0], axis=2),
    "several_q_keepdims": lambda x: tp.ops.quantile(x, [0.25, 0.6], axis=1, keepdims=True),
    "lower": lambda x: tp.ops.quantile(x, [0.2, 0.9], axis=2, method="lower"),
    "higher": lambda x: tp.ops.quantile(x, 0.2, axis=2, method="higher"),
    "midpoint": lambda x: tp.ops.quantile(x, [0.2, 0.5, 1.0], axis=2, method="midpoint"),
    "nearest": lambda x: tp.ops.quantile(x, [0.1, 0.3, 0.5, 0.7], axis=(1, 2), method="nearest"),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(QUANTILE))
def test_quantile(name, dtype, tmp_path):
    def make(batch):
        x = np.random.default_rng(batch).normal(size=(batch, 3, 7)) * 10
        x[0, 1, 2] = np.nan  # a row with a NaN gives NaN
        x[-1, 0, 3] = np.inf
        return [x.astype(dtype)]

    graph = tp.freeze(QUANTILE[name], tp.TensorSpec((None, 3, 7), dtype))
    session = session_for(graph, tmp_path)
    for batch in BATCHES:
        with np.errstate(invalid="ignore"):
            assert_same_bits(graph, session, make(batch))


REFUSED = {  # name: (function, input dtype, error)
    "integer_bitwise_before_opset_18": (lambda x: tp.bitwise_and(x, x), "int32", "needs opset 18"),
    "float_signbit": (tp.signbit, "float32", "signbit.*sign bit"),
    "nan_ignoring_quantile": (lambda x: tp.ops.nanquantile(x, 0.5, axis=1), "float32", "ignores NaNs"),
    "quantile_over_the_batch": (lambda x: tp.ops.median(x), "float32", "size unknown at export"),
    "cumprod_over_the_batch": (lambda x: tp.cumprod(x, axis=0), "float32", "length unknown at export"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused(name):
    fn, dtype, error = REFUSED[name]
    with pytest.raises(ExportError, match=error):
        to_onnx(tp.freeze(fn, tp.TensorSpec((None, 3), dtype)), opset=17)


@pytest.mark.parametrize("name", sorted(POOL) + [f"{n}_3d" for n in sorted(POOL_3D)])
def test_pool_gradient(name, tmp_path):
    """Input gradients through pools (saliency maps) export their pool gradients."""
    pool, kwargs = POOL_3D[name[:-3]] if name.endswith("_3d") else POOL[name]
    shape = (5, 7, 6, 2) if name.endswith("_3d") else (9, 8, 2)

    def saliency(x):
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = tp.sum(tp.square(pool(x, **kwargs)))
        return tape.gradient(y, x)

    def make(batch):
        x = floats(*shape)(batch)[0]
        x.reshape(-1)[::3] = 0.5  # ties: the first maximum takes the gradient
        return [x]

    graph = check_export(saliency, [tp.TensorSpec((None, *shape))], make, tmp_path)
    assert {"max_pool2d_grad", "avg_pool2d_grad", "max_pool3d_grad", "avg_pool3d_grad"} & set(graph.op_counts())


def test_cnn_saliency_map(tmp_path):
    model = tp.Sequential(
        [
            tp.layers.Conv2D(4, 3, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.AveragePooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(3),
        ]
    )
    model.build((None, 8, 8, 1))

    def saliency(x):
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = tp.sum(model(x, training=False))
        return tape.gradient(y, x)

    check_export(saliency, [tp.TensorSpec((None, 8, 8, 1))], floats(8, 8, 1), tmp_path)


GETITEM_GRAD = {
    "slice": lambda x: x[:, 1:3],
    "steps": lambda x: x[:, ::-2, 1::2],
    "int_and_none": lambda x: x[:, 1, None, 2],
    "ellipsis": lambda x: x[..., 0],
    "int_array": lambda x: x[:, [2, 0, 2, -1]],
    "int_array_2d": lambda x: x[:, :, np.array([[0, 3], [1, 1]])],
}


@pytest.mark.parametrize("static", [False, True], ids=["dynamic_batch", "static"])
@pytest.mark.parametrize("name", sorted(GETITEM_GRAD))
def test_getitem_gradient(name, static, tmp_path):
    def saliency(x):
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = tp.sum(tp.square(GETITEM_GRAD[name](x)))
        return tape.gradient(y, x)

    spec = tp.TensorSpec((5 if static else None, 3, 4))
    graph = tp.freeze(saliency, spec)
    assert graph.op_counts().get("getitem_grad")
    session = session_for(graph, tmp_path)
    for batch in (5,) if static else BATCHES:
        assert_same_outputs(graph, session, floats(3, 4)(batch))
