"""The cost model (FLOPs, bytes, transfers), the simulated step, and the cost-model placer."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.cli import main
from tapeflow.graph.cost_model import CostModel, calibrate, node_flops, simulate
from tapeflow.graph.placer import PlacementError, place

W0, W1 = "/worker:0/cpu:0", "/worker:1/cpu:0"
MODEL = CostModel(flops_per_s=1e9, bytes_per_s=1e9, overhead_s=1e-5, link_bytes_per_s=1e8, link_latency_s=1e-3)


def _node(graph, op):
    return next(n for n in graph.nodes if n.op == op)


def test_flops_of_products_convolutions_and_elementwise_ops():
    g = tp.freeze(lambda a, b: tp.matmul(a, b), tp.TensorSpec((8, 5)), tp.TensorSpec((5, 3)), optimize=False)
    assert node_flops(_node(g, "matmul")) == 2 * 8 * 3 * 5
    g = tp.freeze(lambda x: tp.exp(x), tp.TensorSpec((4, 6)), optimize=False)
    assert node_flops(_node(g, "exp")) == 24

    def conv(x, w):
        return tp.nn.conv2d(x, w, 1, "VALID")

    x_spec, w_spec = tp.TensorSpec((2, 6, 6, 3)), tp.TensorSpec((3, 3, 3, 4))
    forward = 2 * (2 * 4 * 4 * 4) * (3 * 3 * 3)
    assert node_flops(_node(tp.freeze(conv, x_spec, w_spec, optimize=False), "conv2d")) == forward

    def grads(x, w):
        with tp.GradientTape() as tape:
            tape.watch(x)
            tape.watch(w)
            y = tp.sum(conv(x, w))
        return tape.gradient(y, [x, w])

    g = tp.freeze(grads, x_spec, w_spec, optimize=False)
    assert node_flops(_node(g, "conv2d_input_grad")) == forward
    assert node_flops(_node(g, "conv2d_filter_grad")) == forward


def test_node_and_transfer_seconds():
    g = tp.freeze(lambda a, b: tp.matmul(a, b), tp.TensorSpec((100, 100)), tp.TensorSpec((100, 100)), optimize=False)
    node = _node(g, "matmul")
    assert MODEL.node_seconds(node) == pytest.approx(1e-5 + 2e6 / 1e9)
    faster = CostModel(**{**MODEL.to_dict(), "device_speed": {W1: 2.0}})
    assert faster.node_seconds(node, W1) == pytest.approx(1e-5 + 1e6 / 1e9)
    assert MODEL.transfer_seconds(4000, W0, W0) == 0.0
    assert MODEL.transfer_seconds(4000, W0, W1) == pytest.approx(1e-3 + 4000 / 1e8)
    assert MODEL.transfer_seconds(4000, W0, "/worker:0/gpu:0") == pytest.approx(4000 / MODEL.local_bytes_per_s)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"flops_per_s": 0}, "flops_per_s must be a finite number > 0"),
        ({"overhead_s": -1.0}, "overhead_s must be a finite number >= 0"),
        ({"bytes_per_s": float("inf")}, "bytes_per_s must be a finite number > 0"),
        ({"op_scale": {"matmul": -2.0}}, r"op_scale\['matmul'\] must be"),
        ({"link_latency_s": True}, "link_latency_s must be"),
    ],
)
def test_bad_constants_are_refused(change, match):
    with pytest.raises(ValueError, match=match):
        CostModel(**{**MODEL.to_dict(), **change})


def test_a_cost_model_file_round_trips_and_bad_files_are_refused(tmp_path):
    path = tmp_path / "cost.json"
    model = CostModel(**{**MODEL.to_dict(), "op_scale": {"exp": 1.5}})
    model.save(path)
    assert CostModel.load(path) == model
    for text, match in [
        ("[1, 2]", "expected a JSON object"),
        ("{", "invalid JSON"),
        (json.dumps({**model.to_dict(), "code": "import os"}), r"unknown cost model keys \['code'\]"),
        (json.dumps({**model.to_dict(), "flops_per_s": "fast"}), "flops_per_s must be"),
    ]:
        path.write_text(text)
        with pytest.raises(ValueError, match=match):
            CostModel.load(path)
    path.write_text(" " * (2 << 20))
    with pytest.raises(ValueError, match="larger than 1 MiB"):
        CostModel.load(path)


def _towers(x):
    """Two independent towers of products that meet at the end."""
    w = tp.ones((256, 256)) * 0.01
    a, b = x, x
    for _ in range(3):
        a = tp.tanh(tp.matmul(a, w))
        b = tp.tanh(tp.matmul(b, w))
    return a + b


def _chain(x):
    w = tp.ones((256, 256)) * 0.01
    for _ in range(4):
        x = tp.tanh(tp.matmul(x, w))
    return x


def test_a_chain_on_one_device_takes_the_sum_of_its_nodes():
    g = tp.freeze(_chain, tp.TensorSpec((64, 256)), optimize=False)
    place(g, [W0])
    step = simulate(g, MODEL)
    assert step.step_seconds == pytest.approx(sum(MODEL.node_seconds(n) for n in g.nodes))
    assert step.transfers == 0 and step.busy[W0] == pytest.approx(step.step_seconds)


def test_the_cost_model_splits_independent_towers_and_keeps_a_chain_together():
    g = tp.freeze(_towers, tp.TensorSpec((64, 256)), optimize=False)
    greedy = tp.freeze(_towers, tp.TensorSpec((64, 256)), optimize=False)
    place(greedy, [W0, W1])
    assert {n.device for n in greedy.nodes} == {W0}
    assert place(g, [W0, W1], cost_model=MODEL) == len(g.nodes)
    assert {n.device for n in g.nodes} == {W0, W1}
    split, together = simulate(g, MODEL), simulate(greedy, MODEL)
    assert split.transfers >= 1 and split.step_seconds < 0.75 * together.step_seconds
    assert "@ /worker:1/cpu:0" in str(g) and "worker:1" in g.to_dot()

    chain = tp.freeze(_chain, tp.TensorSpec((64, 256)), optimize=False)
    place(chain, [W0, W1], cost_model=MODEL)
    assert {n.device for n in chain.nodes} == {W0}


def test_explicit_devices_variables_and_constraints_are_honoured():
    v = tp.Variable(np.ones((256, 256), np.float32) * 0.01)

    def f(x):
        with tp.device("/worker:1"):
            x = tp.tanh(x)
        y = tp.matmul(x, v)
        v.assign(v * 0.5)
        return y

    g = tp.freeze(f, tp.TensorSpec((64, 256)), optimize=False)
    tanh = _node(g, "tanh")
    place(g, [W0, W1], cost_model=MODEL)
    assert tanh.device == W1
    state = [n.device for n in g.nodes if n.op in ("read_variable", "assign_variable")]
    assert len(set(state)) == 1

    g = tp.freeze(_chain, tp.TensorSpec((64, 256)), optimize=False)
    last = [n for n in g.nodes if n.op == "tanh"][-1]
    place(g, [W0, W1], cost_model=MODEL, constraints={last.name: "/worker:1"})
    assert last.device == W1 and simulate(g, MODEL).transfers == 1

    g = tp.freeze(_chain, tp.TensorSpec((64, 256)), optimize=False)
    with pytest.raises(PlacementError, match="does not have"):
        place(g, [W0, W1], cost_model=MODEL, constraints={"nope": "/worker:1"})
    with pytest.raises(PlacementError, match="which none of"):
        place(g, [W0, W1], cost_model=MODEL, constraints={g.nodes[0].name: "/worker:5"})
    with pytest.raises(PlacementError, match="pass cost_model="):
        place(g, [W0, W1], constraints={g.nodes[0].name: "/worker:1"})


def test_refine_makes_each_op_cost_its_profiled_mean():
    g = tp.freeze(_chain, tp.TensorSpec((64, 256)))
    x = np.ones((64, 256), np.float32)
    g(x)
    with tp.profiler.trace() as profile:
        for _ in range(3):
            g(x)
    refined = MODEL.refine(profile, g)
    measured = sum(e.duration_ns for e in profile.events if e.kind == "node") / 1e9 / 3
    assert simulate(g, refined).step_seconds == pytest.approx(measured, rel=1e-6)
    assert set(refined.op_scale) >= {n.op for n in g.nodes if MODEL.node_seconds(n) > 0}


def test_calibration_measures_positive_rates():
    model = calibrate(repeats=2, size=128)
    assert model.flops_per_s > 0 and model.bytes_per_s > 0 and model.overhead_s > 0


def test_the_calibrate_command_writes_a_model_that_loads(tmp_path, capsys):
    path = tmp_path / "cost.json"
    assert main(["calibrate", "--output", str(path)]) == 0
    assert "GFLOP/s" in capsys.readouterr().out
    assert CostModel.load(path).flops_per_s > 0
