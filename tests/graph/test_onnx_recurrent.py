"""LSTM and GRU layers in inference: the whole sequence runs as one op (lstm_sequence or
gru_sequence), which gives what the step-by-step form gives and exports as ONNX's LSTM or GRU."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.layers.recurrent import _CellRNN
from tapeflow.ops.nn.recurrent import gru_sequence, lstm_sequence

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

STEPS, FEATURES = 6, 5


def session_for(graph, tmp_path):
    path = tmp_path / f"{graph.name}.onnx"
    graph.export_onnx(path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]), onnx.load(str(path))


def inputs(batch, *shape, seed=0):
    return np.random.default_rng(seed + batch).uniform(-2.0, 2.0, (batch, *shape)).astype(np.float32)


def as_list(result):
    return [np.asarray(r) for r in (result if isinstance(result, list | tuple) else [result])]


def step_by_step(monkeypatch, fn, *arrays):
    """What `fn` gives with every recurrent layer run step by step (the reference form)."""
    with monkeypatch.context() as patch:
        patch.setattr(_CellRNN, "_runs_as_one_op", lambda self, mask: False)
        return as_list(fn(*arrays))


def sequential(*layers):
    model = tp.Sequential([tp.Input((STEPS, FEATURES)), *layers])
    for w in model.weights:  # non-zero biases, so that their export is checked too
        w.assign(np.random.default_rng(len(w.shape) + w.shape[-1]).uniform(-0.5, 0.5, w.shape).astype(np.float32))
    return model


MODELS = {
    "lstm_last": lambda: sequential(tp.layers.LSTM(7)),
    "lstm_sequences": lambda: sequential(tp.layers.LSTM(7, return_sequences=True)),
    "lstm_backwards": lambda: sequential(tp.layers.LSTM(7, return_sequences=True, go_backwards=True)),
    "lstm_backwards_last": lambda: sequential(tp.layers.LSTM(7, go_backwards=True), tp.layers.Dense(2)),
    "lstm_stacked": lambda: sequential(tp.layers.LSTM(7, return_sequences=True), tp.layers.LSTM(4)),
    "lstm_bidirectional": lambda: sequential(tp.layers.Bidirectional(tp.layers.LSTM(4, return_sequences=True))),
    "lstm_dropout": lambda: sequential(tp.layers.LSTM(7, dropout=0.3, recurrent_dropout=0.2)),
    "gru_last": lambda: sequential(tp.layers.GRU(7)),
    "gru_sequences": lambda: sequential(tp.layers.GRU(7, return_sequences=True)),
    "gru_reset_before": lambda: sequential(tp.layers.GRU(7, return_sequences=True, reset_after=False)),
    "gru_backwards": lambda: sequential(tp.layers.GRU(7, return_sequences=True, go_backwards=True)),
    "gru_stacked": lambda: sequential(tp.layers.GRU(7, return_sequences=True), tp.layers.GRU(3, reset_after=False)),
    "gru_bidirectional": lambda: sequential(tp.layers.Bidirectional(tp.layers.GRU(4), merge_mode="sum")),
    "gru_no_bias": lambda: sequential(tp.layers.GRU(7, use_bias=False, go_backwards=True)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_exports_as_onnx_recurrent_ops(name, tmp_path, monkeypatch):
    model = MODELS[name]()
    kind = "lstm" if name.startswith("lstm") else "gru"
    graph = model.freeze()
    ops = [n.op for n in graph.nodes]
    layers = sum(2 if isinstance(lay, tp.layers.Bidirectional) else lay.name.startswith(kind) for lay in model.layers)
    assert ops.count(f"{kind}_sequence") == layers
    assert "split" not in ops and len(ops) < 40  # not one group of nodes per step
    session, proto = session_for(graph, tmp_path)
    assert [n.op_type for n in proto.graph.node].count(kind.upper()) == layers
    for batch in (1, 4):
        x = inputs(batch, STEPS, FEATURES)
        want = step_by_step(monkeypatch, lambda a: model(a, training=False), x)
        np.testing.assert_allclose(model.predict(x, verbose=0), want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(graph(x), want[0], rtol=1e-5, atol=1e-6)
        (got,) = session.run(None, {session.get_inputs()[0].name: x})
        np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer", [tp.layers.LSTM, tp.layers.GRU])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_return_state_and_initial_state(layer, go_backwards, tmp_path, monkeypatch):
    x = tp.Input((STEPS, FEATURES))
    count = 2 if layer is tp.layers.LSTM else 1
    given = [tp.Input((3,)) for _ in range(count)]
    out, *states = layer(3, return_sequences=True, return_state=True, go_backwards=go_backwards)(x, initial_state=given)
    model = tp.Model([x, *given], [out, *states])
    graph = model.freeze()
    assert any(n.op.endswith("_sequence") for n in graph.nodes)
    session, _ = session_for(graph, tmp_path)
    arrays = [inputs(4, STEPS, FEATURES)] + [inputs(4, 3, seed=k + 1) for k in range(count)]
    want = step_by_step(monkeypatch, lambda *a: model(list(a), training=False), *arrays)
    for ours in (as_list(graph(*arrays)), as_list(model(arrays, training=False))):
        for o, w in zip(ours, want, strict=True):
            np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-6)
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays, strict=True)})
    assert len(got) == len(want) == 1 + count
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_masked_inference_runs_as_one_op_and_exports(tmp_path, monkeypatch):
    model = tp.Sequential([tp.Input((STEPS,), dtype="int64"), tp.layers.Embedding(20, 4, mask_zero=True)])
    model.add(tp.layers.LSTM(5, return_sequences=True, go_backwards=True))
    model.add(tp.layers.GRU(3))
    ids = np.random.default_rng(0).integers(0, 20, (4, STEPS)).astype(np.int64)
    ids[:, -2:] = 0
    ids[1, 1] = ids[2, 0] = 0
    graph = model.freeze()
    assert [n.op for n in graph.nodes if n.op.endswith("_sequence")] == ["lstm_sequence", "gru_sequence"]
    session, _ = session_for(graph, tmp_path)
    want = step_by_step(monkeypatch, lambda a: model(a, training=False), ids)[0]
    np.testing.assert_allclose(model.predict(ids, verbose=0), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: ids})[0], want, rtol=1e-5, atol=1e-5)


def test_zeroed_masked_outputs_keep_the_steps(tmp_path, monkeypatch):
    model = tp.Sequential([tp.Input((STEPS,), dtype="int64"), tp.layers.Embedding(20, 4, mask_zero=True)])
    model.add(tp.layers.LSTM(5, return_sequences=True, zero_output_for_mask=True))
    ids = np.random.default_rng(1).integers(0, 20, (4, STEPS)).astype(np.int64)
    ids[:, -2:] = 0
    graph = tp.freeze(lambda a: model(a, training=False), tp.TensorSpec((4, STEPS), "int64"))
    assert not any(n.op.endswith("_sequence") for n in graph.nodes)
    session, _ = session_for(graph, tmp_path)
    want = np.asarray(model(ids, training=False))
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: ids})[0], want, rtol=1e-5, atol=1e-5)


def test_training_call_is_unchanged():
    layer = tp.layers.LSTM(3, dropout=0.5)
    x = inputs(2, STEPS, FEATURES)
    assert np.allclose(layer(x, training=False).numpy(), layer(x).numpy())
    assert not np.allclose(layer(x, training=True).numpy(), layer(x, training=False).numpy())


@pytest.mark.parametrize(("op", "reset_after"), [("lstm", True), ("gru", True), ("gru", False)])
def test_masked_sequence_op_is_written_step_by_step(op, reset_after, tmp_path):
    width = 8 if op == "lstm" else 6
    kernel = np.random.default_rng(3).normal(size=(2, width)).astype(np.float32)
    bias = np.random.default_rng(4).normal(size=(width,)).astype(np.float32)

    def fn(xp, h, mask):
        if op == "lstm":
            return list(lstm_sequence(xp, h, h * 0.5, kernel, mask, go_backwards=True))
        return list(gru_sequence(xp, h, kernel, bias, mask, reset_after=reset_after, go_backwards=True))

    specs = [tp.TensorSpec((None, 5, width)), tp.TensorSpec((None, 2)), tp.TensorSpec((None, 5), "bool")]
    graph = tp.freeze(fn, *specs)
    session, proto = session_for(graph, tmp_path)
    assert op.upper() not in {n.op_type for n in proto.graph.node}
    mask = np.array([[True, False, True, True, False], [False, False, True, False, True], [False] * 5])
    arrays = [inputs(3, 5, width), inputs(3, 2, seed=1), mask]
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays, strict=True)})
    for g, w in zip(got, as_list(graph(*arrays)), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer", [tp.layers.LSTM, lambda *a, **k: tp.layers.GRU(*a, reset_after=False, **k)])
def test_float64_layer_is_written_step_by_step(layer, tmp_path):
    model = tp.Sequential([tp.Input((STEPS, FEATURES), dtype="float64"), layer(4, dtype="float64", go_backwards=True)])
    graph = model.freeze()
    assert any(n.op.endswith("_sequence") for n in graph.nodes)
    session, proto = session_for(graph, tmp_path)  # onnxruntime runs LSTM and GRU in float32 only
    assert not {"LSTM", "GRU"} & {n.op_type for n in proto.graph.node}
    x = inputs(3, STEPS, FEATURES).astype(np.float64)
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0], graph(x), rtol=1e-12)


def test_computed_recurrent_kernel(tmp_path):
    def fn(xp, kernel):
        h = tp.zeros_like(xp[:, 0, :3])
        ys, h, c = lstm_sequence(xp, h, h, kernel * 0.5, go_backwards=True)
        return ys, c

    graph = tp.freeze(fn, tp.TensorSpec((None, 4, 12)), tp.TensorSpec((3, 12)))
    session, _ = session_for(graph, tmp_path)
    arrays = [inputs(2, 4, 12), inputs(3, 12)]
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays, strict=True)})
    for g, w in zip(got, as_list(graph(*arrays)), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
