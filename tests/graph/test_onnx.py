"""ONNX export: onnxruntime must compute what the tapeflow graph computes."""

import os

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph.onnx import ExportError, exportable_ops, to_onnx
from tapeflow.graph.passes.epilogue import BiasActivationFusion
from tapeflow.graph.passes.fuse import ElementwiseFusion

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
    from tapeflow.ops.registry import get_op

    for name in exportable_ops():
        assert get_op(name).name == name


# ------------------------------------------------------------------ refusals
def test_unsupported_op_names_op_and_node(tmp_path):
    w = tp.tensor(FILTER)
    graph = tp.freeze(lambda x: tp.nn.conv2d_transpose(x, w, (9, 9), strides=2), tp.TensorSpec((None, 4, 4, 4)))
    node = next(n for n in graph.nodes if n.op == "conv2d_input_grad")
    with pytest.raises(ExportError, match=rf"op 'conv2d_input_grad' \(node '{node.name}'"):
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
