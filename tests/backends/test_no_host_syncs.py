"""A train step on a device reads nothing back to the host: training on the stand-in gpu:0
(which counts every device-to-host read in HOST_READS) reads a few values per epoch (the
deferred id and label checks, then the logged loss and metrics), whatever the number of
steps. A callback that looks at each batch's logs (or a progress bar, verbose=1) reads them
at every step; verbose=0 and verbose=2 do not."""

import numpy as np
import pytest
from device_training import cnn_layers, mlp_layers, random_data
from strict_arrays import HOST_READS, stand_in_gpu

import tapeflow as tp
from tapeflow import _compat
from tapeflow.backends.common import deferring_checks

MODELS = {"mlp": (mlp_layers, (8,)), "cnn": (cnn_layers, (8, 8, 1))}
counted = pytest.mark.skipif(_compat.has_gpu, reason="HOST_READS counts the stand-in's reads, not a real GPU's")


@pytest.fixture
def gpu(monkeypatch):
    return stand_in_gpu(monkeypatch)


def _compiled(device: str, layers, jit: bool):
    tp.random.seed(0)
    with tp.device(device):
        model = tp.Sequential(layers())
        model.compile(
            optimizer=tp.optimizers.Adam(1e-2),
            loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit=jit,
        )
    return model


def _reads(run) -> int:
    HOST_READS.clear()
    run()
    return sum(HOST_READS.values())


@counted
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("verbose", [0, 2])
def test_an_epoch_reads_the_same_few_values_whatever_its_number_of_steps(gpu, kind, jit, verbose, capsys):
    layers, shape = MODELS[kind]
    model = _compiled(gpu, layers, jit)
    short, long = random_data(shape, 3, n=64), random_data(shape, 3, n=128, seed=1)  # 4 and 8 steps of 16
    with tp.device(gpu):
        model.fit(*short, batch_size=16, epochs=1, verbose=0)  # traces and builds what the steps need
        reads = [
            _reads(lambda data=data: model.fit(*data, batch_size=16, epochs=1, shuffle=False, verbose=verbose))
            for data in (short, long, short)
        ]
    assert reads[0] == reads[1] == reads[2] <= 3  # the checks, the loss and the accuracy


@counted
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
def test_evaluate_and_validation_read_once_per_pass(gpu, jit):
    model = _compiled(gpu, mlp_layers, jit)
    short, long = random_data((8,), 3, n=64), random_data((8,), 3, n=128, seed=1)
    with tp.device(gpu):
        model.fit(*short, batch_size=16, epochs=1, verbose=0, validation_data=short)
        evaluations = [_reads(lambda d=d: model.evaluate(*d, batch_size=16, verbose=0)) for d in (short, long)]
        fits = [
            _reads(lambda d=d: model.fit(*d, batch_size=16, epochs=1, verbose=0, validation_data=d))
            for d in (short, long)
        ]
    assert evaluations[0] == evaluations[1] <= 3
    assert fits[0] == fits[1] <= 6


@counted
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
def test_train_on_batch_reads_only_what_it_returns_and_the_checks(gpu, jit):
    model = _compiled(gpu, cnn_layers, jit)
    x, y = random_data((8, 8, 1), 3, n=16)
    with tp.device(gpu):
        model.train_on_batch(x, y)
        reads = [_reads(lambda: model.train_on_batch(x, y)) for _ in range(3)]
    assert reads[0] == reads[1] == reads[2] <= 3  # the checks, then the loss and the accuracy returned


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
def test_device_metrics_log_what_the_cpu_logs(gpu, jit):
    data, val = random_data((8,), 3, n=64), random_data((8,), 3, n=32, seed=2)
    logs = {}
    for device in ("cpu", gpu):
        model = _compiled(device, mlp_layers, jit)
        with tp.device(device):
            history = model.fit(*data, batch_size=16, epochs=2, shuffle=False, verbose=0, validation_data=val)
            logs[device] = (history.history, model.evaluate(*val, batch_size=16, verbose=0, return_dict=True))
    (cpu_history, cpu_eval), (gpu_history, gpu_eval) = logs["cpu"], logs[gpu]
    assert sorted(gpu_history) == sorted(cpu_history)
    for key, values in cpu_history.items():
        assert all(isinstance(v, float) for v in gpu_history[key])
        np.testing.assert_allclose(gpu_history[key], values, rtol=1e-5)
    assert gpu_eval.keys() == cpu_eval.keys()
    np.testing.assert_allclose(list(gpu_eval.values()), list(cpu_eval.values()), rtol=1e-5)


def test_a_callback_reading_batch_logs_gets_floats_at_every_step(gpu):
    seen = []
    callback = tp.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: seen.append(logs))
    model = _compiled(gpu, mlp_layers, True)
    short, long = random_data((8,), 3, n=64), random_data((8,), 3, n=128, seed=1)
    with tp.device(gpu):
        model.fit(*short, batch_size=16, epochs=1, verbose=0)
        reads = [
            _reads(lambda d=d: model.fit(*d, batch_size=16, epochs=1, verbose=0, callbacks=[callback]))
            for d in (short, long)
        ]
    assert len(seen) == 12 and all(isinstance(v, float) for logs in seen for v in logs.values())
    assert _compat.has_gpu or reads[1] > reads[0]  # what the callback asks for is read at each step


def test_the_adam_reference_keeps_device_scalars_on_the_device(gpu):
    from tapeflow.backends import cupy_backend
    from tapeflow.ops.registry import get_op

    rng = np.random.default_rng(0)
    param, m, grad = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    v = np.square(rng.standard_normal(5)).astype(np.float32)
    lr, step = np.asarray(0.01, np.float32), np.asarray(3.0, np.float32)
    reference = get_op("adam_update").reference
    for on_sqrt_v in (False, True):
        attrs = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7, "epsilon_on_sqrt_v": on_sqrt_v}
        want = reference(param, m, v, grad, lr, step, **attrs)
        HOST_READS.clear()
        got = reference(*(cupy_backend.from_host(a) for a in (param, m, v, grad, lr, step)), **attrs)
        assert sum(HOST_READS.values()) == 0  # (none counted on a real GPU either)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(cupy_backend.to_host(g), w)


@counted
def test_a_frozen_mlp_training_step_reads_nothing_back(gpu):
    """bench/gpu.py's step (a tp.function: the forward pass and GradientTape, the fused softmax
    cross-entropy, Adam's update op per variable) reads nothing on the host while it runs: the
    label check waits on the device, and is read once, where the held checks are."""
    tp.random.seed(0)
    rng = np.random.default_rng(0)
    with tp.device(gpu):
        dense = [tp.layers.Dense(16, activation="relu"), tp.layers.Dense(16, activation="relu"), tp.layers.Dense(3)]
        model = tp.Sequential([tp.Input((8,)), *dense])
        variables = model.trainable_weights
        optimizer = tp.optimizers.Adam(1e-3)
        optimizer.build(variables)
        loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        x, y = tp.tensor(rng.random((16, 8), dtype=np.float32)), tp.tensor(rng.integers(0, 3, 16))

        @tp.function
        def step(x, y):
            with tp.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss

        with deferring_checks():
            step(x, y)  # traced here
            HOST_READS.clear()
            for _ in range(3):
                step(x, y)
            during = sum(HOST_READS.values())
        held = sum(HOST_READS.values()) - during
    ops = {node.op for graph in step.graphs.values() for node in graph.nodes}
    assert {"adam_update", "sparse_softmax_cross_entropy_with_logits"} <= ops
    assert during == 0, dict(HOST_READS)
    assert held == 1  # the three steps' label checks, in one read
