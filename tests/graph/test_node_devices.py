"""Frozen graphs that run on two devices of one process: each node records its device,
transfers are `copy_to_device` nodes, and the executor runs every node on its device's
backend.

The second device is every accelerator this process has, and "gpu:0" always: where no
GPU exists, the GPU backend runs with NumPy standing in for CuPy (as in
tests/backends/test_cupy_backend.py), which checks the bookkeeping of devices, though
not a second memory space; the XLA test environment runs these tests on xla:0 as well.
"""

import io

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import devices
from tapeflow.devices import Device, DeviceMismatchError
from tapeflow.graph.ir import GraphError
from tapeflow.graph.placer import PlacementError, place

RNG = np.random.default_rng(11)
TOL = {"gpu": 1e-6, "xla": 2e-5}
SPECS = (tp.TensorSpec((None, 6)), tp.TensorSpec((None,), "int64"))  # a batch and its labels


@pytest.fixture
def other(accelerator):
    """The second device's name (see tests/conftest.py)."""
    return accelerator


def _weights(other):
    """A 6-8-3 MLP: the hidden layer on the CPU, the output layer on `other`."""
    w1 = tp.Variable(RNG.standard_normal((6, 8)).astype(np.float32) * 0.4, name="w1")
    b1 = tp.Variable(np.zeros(8, np.float32), name="b1")
    with tp.device(other):
        w2 = tp.Variable(RNG.standard_normal((8, 3)).astype(np.float32) * 0.4, name="w2")
        b2 = tp.Variable(np.full(3, 0.1, np.float32), name="b2")
    return [w1, b1, w2, b2]


def _on_cpu(variables):
    return [tp.Variable(v.to("cpu"), name=v.name) for v in variables]


def _loss(variables, x, labels, other):
    """Mean cross-entropy, computed on `other` from a hidden layer computed on the CPU."""
    w1, b1, w2, b2 = variables
    hidden = tp.nn.relu(x @ w1 + b1)
    if other is not None:
        hidden, labels = hidden.to(other), labels.to(other)
    logits = hidden @ w2 + b2
    return tp.mean(tp.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


def _batch():
    return RNG.standard_normal((5, 6)).astype(np.float32), RNG.integers(0, 3, 5)


def _close(a, b, other):
    tol = TOL[Device.named(other).family]
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def test_each_node_records_its_device_and_transfers_are_nodes(other):
    variables = _weights(other)
    graph = tp.freeze(lambda x, y: _loss(variables, x, y, other), *SPECS)
    text = str(graph)
    assert f"copy_to_device[source='cpu:0', device='{other}'](y)" in text
    runs_on = {n.name: str(graph.node_device(n)) for n in graph.nodes}
    assert set(runs_on.values()) == {"cpu:0", other}
    elsewhere = [n.name for n in graph.nodes if runs_on[n.name] == other]
    assert [n.name for n in graph.nodes if n.device == other] == elsewhere  # the rest name no device
    assert sum(line.endswith(f"  @ {other}") for line in text.splitlines()) == len(elsewhere)
    layers = [n for n in graph.nodes if "matmul" in n.op]  # the first on the CPU, the second beside its weights
    assert [runs_on[n.name] for n in layers] == ["cpu:0", other]
    assert f'label="{other}"' in graph.to_dot()


def test_a_graph_on_two_devices_computes_what_eager_does(other):
    variables = _weights(other)
    x, y = _batch()
    graph = tp.freeze(lambda x, y: _loss(variables, x, y, other), *SPECS)
    got = graph(x, y)
    assert got.device == Device.named(other)
    _close(got.numpy(), _loss(variables, tp.tensor(x), tp.tensor(y), other).numpy(), other)
    _close(got.numpy(), _loss(_on_cpu(variables), tp.tensor(x), tp.tensor(y), None).numpy(), other)


def test_gradients_flow_back_across_the_transfer(other):
    variables = _weights(other)
    x, y = _batch()
    with tp.GradientTape() as tape:
        loss = _loss(variables, tp.tensor(x), tp.tensor(y), other)
    grads = tape.gradient(loss, variables)
    cpu_vars = _on_cpu(variables)
    with tp.GradientTape() as tape:
        loss = _loss(cpu_vars, tp.tensor(x), tp.tensor(y), None)
    for g, v, want in zip(grads, variables, tape.gradient(loss, cpu_vars), strict=True):
        assert g.device == v.device
        _close(g.numpy(), want.numpy(), other)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_frozen_train_step_on_two_devices_matches_one_device(other, optimizer):
    variables = _weights(other)
    cpu_vars = _on_cpu(variables)

    def make_step(trained, where):
        opt = tp.optimizers.get(optimizer)

        def step(x, y):
            with tp.GradientTape() as tape:
                loss = _loss(trained, x, y, where)
            opt.apply_gradients(zip(tape.gradient(loss, trained), trained, strict=True))
            return loss

        return tp.freeze(step, *SPECS)

    mixed, single = make_step(variables, other), make_step(cpu_vars, None)
    for _ in range(3):
        x, y = _batch()
        _close(mixed(x, y).numpy(), single(x, y).numpy(), other)
    for v, want in zip(variables, cpu_vars, strict=True):
        assert v.device in (Device("cpu"), Device.named(other))
        _close(v.numpy(), want.numpy(), other)
    slots = [n for n in mixed.nodes if n.op == "read_variable" and "/" in n.attrs["variable"]]
    assert all(mixed.node_device(n) == mixed.state[n.attrs["variable"]].device for n in slots)


def test_mixing_devices_without_a_transfer_fails_at_freeze_naming_both(other):
    variables = _weights(other)
    with pytest.raises(DeviceMismatchError, match=f"matmul: inputs live on different devices, cpu:0 and {other}"):
        tp.freeze(lambda x, y: _loss(variables, x, y, None), *SPECS)


def test_a_constant_runs_on_the_device_that_reads_it(other):
    scale = tp.tensor([1.0, 2.0, 3.0], device=other)

    def f(x):
        return (x.to(other) * scale).to("cpu") + 1.0

    graph = tp.freeze(f, tp.TensorSpec((2, 3)))
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    got = graph(x)
    assert got.device == Device("cpu")
    _close(got.numpy(), x * [1.0, 2.0, 3.0] + 1.0, other)
    assert graph.op_counts()["copy_to_device"] == 2  # never folded away


def test_a_saved_graph_keeps_its_devices(other):
    variables = _weights(other)
    x, y = _batch()
    graph = tp.freeze(lambda x, y: _loss(variables, x, y, other), *SPECS)
    buffer = io.BytesIO()
    graph.save(buffer)
    loaded = tp.load_graph(io.BytesIO(buffer.getvalue()))
    assert str(loaded) == str(graph)
    for name, var in loaded.state.items():
        assert var.device == graph.state[name].device
    _close(loaded(x, y).numpy(), graph(x, y).numpy(), other)


def test_a_graph_whose_device_is_missing_names_the_node(monkeypatch):
    with monkeypatch.context() as patch:
        listed = devices.list_devices
        patch.setattr(devices, "list_devices", lambda: [*listed(), Device("gpu", 5)])
        graph = tp.freeze(lambda x: (x.to("gpu:5") * 2.0).to("cpu"), tp.TensorSpec((2,)))
        buffer = io.BytesIO()
        graph.save(buffer)
    loaded = tp.load_graph(io.BytesIO(buffer.getvalue()))
    with pytest.raises(GraphError, match=r"node 'copy_to_device_0' \(copy_to_device\) cannot run: .*gpu:5 is not"):
        loaded(np.ones(2, np.float32))


def test_a_transfer_to_a_missing_device_names_the_node():
    graph = tp.freeze(lambda x: tp.copy_to_device(x, "cpu") * 2.0, tp.TensorSpec((2,)))
    (copy,) = [n for n in graph.nodes if n.op == "copy_to_device"]
    copy.attrs["device"] = "gpu:7"  # as a hostile graph file could say
    graph.changed()
    with pytest.raises(GraphError, match=r"node 'copy_to_device_0' \(copy_to_device\) cannot run: .*gpu:7"):
        graph(np.ones(2, np.float32))


def test_placing_a_graph_with_local_devices_on_workers_is_refused(other):
    graph = tp.freeze(lambda x: (x.to(other) * 2.0).to("cpu"), tp.TensorSpec((2,)))
    with pytest.raises(PlacementError, match=f"runs on this process's {other}"):
        place(graph)


def test_transfers_in_eager_mode_are_recorded_and_copy(other):
    x = tp.tensor([1.0, 2.0])
    moved = x.to(other)
    assert moved.device == Device.named(other) and x.to("cpu") is x
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.sum(x.to(other) * 3.0)
    grad = tape.gradient(y, x)
    assert grad.device == Device("cpu")
    np.testing.assert_array_equal(grad.numpy(), [3.0, 3.0])
