"""The GPU backend. Its array-module code runs here with NumPy standing in for CuPy and is
checked against the op references; the RawKernels and the device itself need a GPU, and
those tests skip without one."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from device_training import cnn_layers, embedding_layers, fit_on, mlp_layers, random_data
from strict_arrays import dispatch_on_host, stand_in_gpu, unwrap

import tapeflow as tp
from tapeflow import _compat
from tapeflow._kernels import cuda
from tapeflow.backends import cupy_backend
from tapeflow.ops.registry import get_op

needs_gpu = pytest.mark.skipif(not _compat.has_gpu, reason="needs CuPy and a CUDA GPU")
RNG = np.random.default_rng(3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_matches_the_reference(dtype):
    logits = RNG.standard_normal((5, 7)).astype(dtype)
    labels = RNG.integers(0, 7, 5)
    got = cupy_backend.sparse_softmax_cross_entropy_with_logits(cupy_backend.from_host(logits), labels)
    want = get_op("sparse_softmax_cross_entropy_with_logits").reference(logits, labels)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(cupy_backend.to_host(g), w, rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_add_accumulates_repeated_rows_like_the_reference(axis):
    x = RNG.standard_normal((4, 3))
    ids = np.array([2, 0, 2, -1])
    updates = RNG.standard_normal((4, 3) if axis == 0 else (4, 4))
    if axis == 1:
        ids = np.array([1, 0, 1, -1])
    got = cupy_backend.scatter_add(cupy_backend.from_host(x), ids, cupy_backend.from_host(updates), axis)
    want = get_op("scatter_add").reference(x, ids, updates, axis)
    np.testing.assert_allclose(cupy_backend.to_host(got), want, rtol=1e-12)


@pytest.mark.parametrize(
    ("strides", "padding", "dilations"),
    [((1, 1), "SAME", (1, 1)), ((2, 2), "VALID", (1, 1)), ((2, 1), "SAME", (2, 2)), ((1, 1), ((1, 0), (2, 1)), (1, 1))],
)
def test_im2col_convolution_matches_the_reference(strides, padding, dilations):
    x, w = RNG.standard_normal((2, 7, 6, 3)), RNG.standard_normal((3, 2, 3, 4))
    got = cupy_backend.conv2d(cupy_backend.from_host(x), cupy_backend.from_host(w), strides, padding, dilations)
    want = get_op("conv2d").reference(x, w, strides, padding, dilations)
    np.testing.assert_allclose(cupy_backend.to_host(got), want, rtol=1e-10, atol=1e-12)


def test_gather_and_dense_helpers_match_numpy():
    a, w, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2)), RNG.standard_normal(2)
    on, off = cupy_backend.from_host, cupy_backend.to_host
    np.testing.assert_allclose(off(cupy_backend.fused_matmul(on(a), on(w), on(b), "relu")), np.maximum(a @ w + b, 0))
    np.testing.assert_array_equal(off(cupy_backend.gather(on(a), on(np.array([2, 0])), 0)), a[[2, 0]])
    np.testing.assert_array_equal(off(cupy_backend.relu_grad(on(a), on(a))), np.where(a > 0, a, 0))


@pytest.mark.parametrize("name", ["segment_max", "segment_min"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_segment_extremes_are_exact_and_their_gradient_picks_the_rows(name, dtype, monkeypatch):
    """On the stand-in (whose float64 maximum.at rounds to float32, as CuPy's does) the
    extremes are the CPU's bit for bit, NaN and infinities and dropped ids included, so the
    gradient (which compares each row with its segment's extreme) reaches the rows it picked."""
    gpu = stand_in_gpu(monkeypatch)
    rng = np.random.default_rng(4)
    data = ((rng.permutation(16) - 8) * 0.1).reshape(8, 2).astype(dtype)
    data[5, 0], data[6, 1] = np.nan, -np.inf
    ids = np.array([0, 2, 0, 1, 2, 3, 1, 7])
    op = getattr(tp.ops, name)
    results = {}
    for device in ("cpu", gpu):
        x = tp.tensor(data, device=device)
        with tp.device(device), tp.GradientTape() as tape:
            tape.watch(x)
            y = op(x, tp.tensor(ids, device=device), num_segments=5)
            weights = tp.tensor(np.arange(10.0).reshape(5, 2), dtype=dtype, device=device)
            total = tp.sum(tp.ops.where(tp.ops.isfinite(y), y, 0.0) * weights)
        results[device] = y.numpy(), tape.gradient(total, x).numpy()
    np.testing.assert_array_equal(results[gpu][0], results["cpu"][0])
    np.testing.assert_array_equal(results[gpu][1], results["cpu"][1])
    assert np.count_nonzero(results["cpu"][1]) >= 5


def test_without_a_gpu_there_is_no_gpu_device_and_no_pool():
    if _compat.has_gpu:
        pytest.skip("a GPU is present")
    assert all(d.family != "gpu" for d in tp.list_devices())
    assert cupy_backend.memory_stats() == {}


@needs_gpu
def test_memory_stats_separate_arrays_in_use_from_the_cache():
    before = tp.memory_stats("gpu:0")
    t = tp.zeros((1024, 1024), device="gpu:0")
    during = tp.memory_stats("gpu:0")
    assert during["in_use"] >= before["in_use"] + 4 * 1024 * 1024
    del t
    after = tp.memory_stats("gpu:0")
    assert after["in_use"] < during["in_use"] and after["cached"] >= 4 * 1024 * 1024


@needs_gpu
def test_raw_kernels_match_their_array_module_versions():
    cupy = _compat.cupy
    logits = cupy.asarray(RNG.standard_normal((64, 1000)).astype(np.float32))
    labels = cupy.asarray(RNG.integers(0, 1000, 64))
    fast = cupy_backend.sparse_softmax_cross_entropy_with_logits(logits, labels)
    slow = cupy_backend._softmax_xent_xp(logits, labels)
    for f, s in zip(fast, slow, strict=True):
        np.testing.assert_allclose(cupy.asnumpy(f), cupy.asnumpy(s), rtol=1e-5, atol=1e-6)


@pytest.fixture
def gpu(monkeypatch):
    """gpu:0: a real GPU where there is one, else the backend holding StrictArrays."""
    return stand_in_gpu(monkeypatch)


@pytest.mark.parametrize("kind", ["mlp", "cnn", "lstm", "word2vec"])
def test_the_gpu_benchmark_steps_run_on_the_backend(kind, gpu, monkeypatch):
    """bench/gpu.py's tapeflow side, one step each, on gpu:0."""
    bench = Path(__file__).resolve().parents[2] / "bench"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location("gpu_benchmark", bench / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.run_tapeflow(kind, 1)
    assert 0.0 < result["seconds"] < 60.0
    assert result["peak_bytes"] is None or result["peak_bytes"] > 0


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize("model", ["mlp", "cnn", "embedding"])
def test_training_on_the_gpu_backend_equals_the_numpy_backend(gpu, model, jit):
    layers = {"mlp": mlp_layers, "cnn": cnn_layers, "embedding": embedding_layers}[model]
    rng = np.random.default_rng(4)
    data = {
        "mlp": random_data((8,), 3),
        "cnn": random_data((8, 8, 1), 3),
        "embedding": (rng.integers(0, 20, (48, 5)), rng.integers(0, 3, 48)),
    }[model]
    cpu_loss, cpu_weights = fit_on("cpu", layers, data, jit)
    gpu_loss, gpu_weights = fit_on(gpu, layers, data, jit)
    np.testing.assert_allclose(gpu_loss, cpu_loss, rtol=1e-5)
    for a, b in zip(gpu_weights, cpu_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_training_on_the_gpu_backend_follows_the_cpu(gpu, policy):
    data = random_data((8,), 3)
    tp.mixed_precision.set_global_policy(policy)
    try:
        cpu_loss, cpu_weights = fit_on("cpu", mlp_layers, data, jit=True)
        gpu_loss, gpu_weights = fit_on(gpu, mlp_layers, data, jit=True)
    finally:
        tp.mixed_precision.set_global_policy("float32")
    # bfloat16 keeps 8 bits of mantissa: the GPU's and the CPU's sums round apart by more
    half = policy == "mixed_float16"
    np.testing.assert_allclose(gpu_loss, cpu_loss, rtol=1e-4 if half else 1e-3)
    for a, b in zip(gpu_weights, cpu_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3 if half else 3e-2, atol=1e-4 if half else 1e-3)


def test_adam_in_place_runs_its_kernel_with_the_variables_as_outputs(monkeypatch, rng):
    """The executor's in-place Adam on a GPU: the generated kernel gets param, m and v as its
    outputs too, and nothing is allocated; other dtypes write the reference's step into them."""
    calls = []

    def fake_elementwise(source):
        reference = get_op("adam_update").reference

        def kernel(*arrays):
            calls.append(arrays)
            param, m, v, grad, lr, step, *outs = arrays
            for out, new in zip(outs, reference(param, m, v, grad, lr, step, 0.9, 0.999, 1e-7), strict=True):
                out[...] = new

        return kernel

    dispatch_on_host(cupy_backend, monkeypatch)
    monkeypatch.setattr(cuda, "elementwise", fake_elementwise)
    for dtype in (np.float32, np.float16):
        param, m, v, grad = (rng.standard_normal((4, 3)).astype(dtype) for _ in range(4))
        v = np.abs(v)
        want = get_op("adam_update").reference(param, m, v, grad, np.float32(0.01), 3, 0.9, 0.999, 1e-7)
        tables = (param, m, v)
        got = cupy_backend.adam_update_in_place(param, m, v, grad, np.float32(0.01), 3, 0.9, 0.999, 1e-7)
        assert all(a is b for a, b in zip(got, tables, strict=True))
        for table, new in zip(tables, want, strict=True):
            np.testing.assert_allclose(table, new, rtol=1e-3 if dtype == np.float16 else 1e-6)
    assert len(calls) == 1 and all(out is table for out, table in zip(calls[0][6:], calls[0][:3], strict=True))


def _device_address(variable) -> int:
    """Where the variable's array lives on the device (no reference to the array kept)."""
    value = variable._value
    return value.data.ptr if _compat.has_gpu else unwrap(value).__array_interface__["data"][0]


def test_a_frozen_adam_step_on_the_gpu_backend_writes_its_variables_in_place(gpu):
    """A frozen step's Adam nodes write the weights' and moments' own arrays on the device (no
    new ones a step), with the eager step's numbers."""
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((16, 6)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)
    models = []
    with tp.device(gpu):
        for jit in (False, True):
            model = tp.Sequential([tp.Input((6,)), tp.layers.Dense(5, activation="relu"), tp.layers.Dense(3)])
            model.compile(optimizer=tp.optimizers.Adam(0.01), loss="mse", jit=jit)
            models.append(model)
        eager, frozen = models
        frozen.set_weights(eager.get_weights())
        for model in models:
            model.train_on_batch(x, y)  # builds the slots and the frozen step
        kernel = frozen.layers[0].kernel
        held = [kernel, *frozen.optimizer.slots(kernel).values()]
        addresses = [_device_address(v) for v in held]
        for _ in range(3):
            for model in models:
                model.train_on_batch(x, y)
    assert [_device_address(v) for v in held] == addresses
    for ours, theirs in zip(frozen.get_weights(), eager.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
