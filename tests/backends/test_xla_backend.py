"""Training on an XLA device (torch_xla on the CPU here) against the NumPy backend.

These run in the XLA test environment (`make test` builds .venv-xla); elsewhere they skip.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_training import cnn_layers, embedding_layers, fit_on, mlp_layers, random_data

import tapeflow as tp
from tapeflow import _compat

pytestmark = pytest.mark.skipif(not _compat.has_xla, reason="needs torch_xla (the .venv-xla test environment)")
XLA = "xla:0"


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize(("make_layers", "shape"), [(mlp_layers, (8,)), (cnn_layers, (8, 8, 1))], ids=["mlp", "cnn"])
def test_training_on_xla_equals_the_numpy_backend(make_layers, shape, jit):
    data = random_data(shape, 3)
    cpu_loss, cpu_weights = fit_on("cpu", make_layers, data, jit)
    xla_loss, xla_weights = fit_on(XLA, make_layers, data, jit)
    np.testing.assert_allclose(xla_loss, cpu_loss, rtol=1e-5)
    for a, b in zip(xla_weights, cpu_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
def test_sparse_training_on_xla_equals_the_numpy_backend(jit):
    """An embedding's sparse gradient: coalesced on the CPU, a dense gradient with the
    touched rows masked on XLA (fixed shapes); the same rows move, by the same amounts."""
    rng = np.random.default_rng(1)
    data = rng.integers(0, 20, (48, 5)), rng.integers(0, 3, 48)  # rows 20-29 are never looked up
    cpu_loss, cpu_weights = fit_on("cpu", embedding_layers, data, jit)
    xla_loss, xla_weights = fit_on(XLA, embedding_layers, data, jit)
    np.testing.assert_allclose(xla_loss, cpu_loss, rtol=1e-5)
    for a, b in zip(xla_weights, cpu_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(xla_weights[0][20:], cpu_weights[0][20:])


@pytest.mark.parametrize("sparse", [False, True], ids=["mlp", "embedding"])
def test_a_frozen_train_step_compiles_once_in_ten_steps(sparse):
    x, y = random_data((8,), 3, n=16)
    if sparse:
        x = np.random.default_rng(2).integers(0, 30, (16, 5))
    with tp.device(XLA):
        model = tp.Sequential(embedding_layers() if sparse else mlp_layers())
        optimizer = tp.optimizers.Adam(0.01)
        optimizer.build(model.trainable_weights)
        loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tp.function
        def step(x, y):
            with tp.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))
            return loss

        xs, ys = tp.tensor(x), tp.tensor(y)
        before = tp.device_stats(XLA)
        losses = [float(step(xs, ys))]
        after_first = tp.device_stats(XLA)
        losses += [float(step(xs, ys)) for _ in range(9)]
        after_ten = tp.device_stats(XLA)
    assert after_first["compiles"] - before["compiles"] >= 1
    assert after_ten["compiles"] == after_first["compiles"], "a later step compiled again"
    assert after_ten["executions"] - after_first["executions"] == 9  # one computation per step
    assert losses[-1] < losses[0]


def test_frozen_graph_runs_on_its_device():
    with tp.device(XLA):
        graph = tp.freeze(lambda x: tp.nn.relu(x) * 2.0, tp.TensorSpec((3,), "float32"))
    assert graph.device == tp.Device("xla", 0)
    out = graph(tp.tensor([-1.0, 0.5, 2.0], device=XLA))
    assert out.device == tp.Device("xla", 0)
    np.testing.assert_allclose(out.numpy(), [0.0, 1.0, 4.0])
    np.testing.assert_allclose(graph.run({graph.inputs[0].name: np.array([1.0, -1.0, 0.0], np.float32)})[0], [2, 0, 0])


def test_moves_are_explicit_and_mixing_devices_is_an_error():
    here = tp.tensor([1.0, 2.0])
    there = here.to(XLA)
    assert there.device == tp.Device("xla", 0) and there.to("cpu").device == tp.Device("cpu", 0)
    np.testing.assert_array_equal(there.to("cpu").numpy(), [1.0, 2.0])
    with pytest.raises(tp.DeviceMismatchError, match="cpu:0 and xla:0"):
        here + there
    with tp.device(XLA):
        v = tp.Variable(tp.zeros((2,)), name="v")
    with pytest.raises(ValueError, match="'v' lives on xla:0, the value on cpu:0"):
        v.assign(here)
    v.assign(there)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_stats_count_compilations():
    stats = tp.device_stats(XLA)
    assert set(stats) == {"compiles", "compile_seconds", "executions", "cached_compiles"}
    tp.exp(tp.tensor(np.arange(7, dtype=np.float32), device=XLA))  # a shape nothing else used
    assert tp.device_stats(XLA)["compiles"] == stats["compiles"] + 1


@pytest.mark.slow
def test_mixed_bfloat16_training_on_xla_follows_the_cpu():
    data = random_data((8,), 3)
    tp.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        cpu_loss, cpu_weights = fit_on("cpu", mlp_layers, data, jit=True)
        xla_loss, xla_weights = fit_on(XLA, mlp_layers, data, jit=True)
    finally:
        tp.mixed_precision.set_global_policy("float32")
    assert all(w.dtype == np.float32 for w in xla_weights)
    np.testing.assert_allclose(xla_loss, cpu_loss, rtol=2e-2)
    for a, b in zip(xla_weights, cpu_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=5e-2, atol=5e-2)


def _nce_training(device: str, loss_name: str):
    """Five steps of skip-gram-like training with a sampled loss (candidates drawn on the
    host, as every random draw is, then copied in)."""
    tp.random.seed(0)
    rng = np.random.default_rng(1)
    with tp.device(device):
        embeddings = tp.Variable(rng.standard_normal((100, 8)).astype(np.float32) * 0.1)
        weights, biases = tp.Variable(np.zeros((100, 8), np.float32)), tp.Variable(np.zeros(100, np.float32))
        trained = [embeddings, weights, biases]
        optimizer, losses = tp.optimizers.SGD(0.5), []
        loss_fn = getattr(tp.nn, loss_name)
        for step in range(5):
            centers, contexts = tp.tensor(rng.integers(0, 100, 32)), tp.tensor(rng.integers(0, 100, (32, 1)))
            with tp.GradientTape() as tape:
                inputs = tp.gather(embeddings, centers)
                loss = tp.mean(loss_fn(weights, biases, contexts, inputs, num_sampled=5, num_classes=100, seed=step))
            optimizer.apply_gradients(zip(tape.gradient(loss, trained), trained, strict=True))
            losses.append(float(loss.to("cpu").numpy()))
    return losses, [v.to("cpu").numpy() for v in trained]


@pytest.mark.parametrize("loss_name", ["nce_loss", "sampled_softmax_loss"])
def test_sampled_losses_train_on_xla_as_on_the_cpu(loss_name):
    cpu_losses, cpu_vars = _nce_training("cpu", loss_name)
    xla_losses, xla_vars = _nce_training(XLA, loss_name)
    np.testing.assert_allclose(xla_losses, cpu_losses, rtol=1e-5)
    for a, b in zip(xla_vars, cpu_vars, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


second_device = pytest.mark.skipif(
    not _compat.has_xla or tp.Device("xla", 1) not in tp.list_devices(),
    reason="needs two XLA devices (make test-xla runs with CPU_NUM_DEVICES=2)",
)


def _torch_device(t) -> str:
    return str(t._value.device)


@second_device
def test_work_on_the_second_device_stays_there():
    with tp.device("xla:1"):
        x = tp.ones((2, 3)) * 2.0 + tp.random.normal((2, 3))  # a creation, a scalar, a host draw
        y = tp.tensor([1.0, 2.0, 3.0])
        v = tp.Variable(tp.zeros((3,)))
        v.assign_add(y)
    for t in (x, y, v, x + y, tp.sum(x * y, axis=1)):
        assert t.device == tp.Device("xla", 1) and _torch_device(t) == "xla:1"
    moved = x.to("xla:0")
    assert moved.device == tp.Device("xla", 0) and _torch_device(moved) == "xla:0"
    np.testing.assert_array_equal(moved.numpy(), x.numpy())


@second_device
def test_a_graph_across_two_xla_devices_runs_each_node_on_its_own():
    with tp.device("xla:1"):
        w = tp.Variable(np.full((3, 2), 0.5, np.float32))
    with tp.device("xla:0"):
        graph = tp.freeze(lambda x: ((x * 2.0).to("xla:1") @ w).to("xla:0") + 1.0, tp.TensorSpec((4, 3)))
        x = tp.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
        got = graph(x)
    assert "@ xla:1" in str(graph) and got.device == tp.Device("xla", 0)
    np.testing.assert_allclose(got.numpy(), (np.arange(12).reshape(4, 3) * 2.0) @ np.full((3, 2), 0.5) + 1.0)


@second_device
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
def test_training_on_the_second_xla_device_equals_the_numpy_backend(jit):
    data = random_data((8,), 3)
    cpu_loss, cpu_weights = fit_on("cpu", mlp_layers, data, jit)
    xla_loss, xla_weights = fit_on("xla:1", mlp_layers, data, jit)
    np.testing.assert_allclose(xla_loss, cpu_loss, rtol=1e-5)
    for a, b in zip(xla_weights, cpu_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
