"""Host-side cost per call of the GPU backend's ops, measured without a GPU.

    .venv/bin/python bench/gpu_host_overhead.py [--calls 2000]

The GPU backend runs on the test suite's stand-in (tests/strict_arrays.py: NumPy arrays behind
CuPy's rules), so what is timed is the Python each call does around its array operations:
kernel and source lookups, scalar conversions, label checks, wrapping. Two views:

- "stand-in": the backend as it runs without a GPU (its array-module code on StrictArrays);
- "dispatch": the backend as it runs on a GPU (`ON_GPU` set), every compiled kernel replaced
  by a stub that allocates its outputs, so that only the host work of the GPU path is left.

Also timed: one frozen training step of an MLP with bench/gpu.py's layers and Adam, shrunk to
32-16-16-10 and a batch of 8 so that the host work, not NumPy's arithmetic, is what counts.
Prints microseconds per call; host reads (HOST_READS) per call are printed beside.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from strict_arrays import HOST_READS, StrictArray, stand_in_gpu  # noqa: E402

import tapeflow as tp  # noqa: E402
from tapeflow._kernels import cuda  # noqa: E402
from tapeflow.backends import cupy_backend  # noqa: E402
from tapeflow.ops.registry import get_op  # noqa: E402


def _per_call(fn, calls: int) -> tuple[float, float]:
    """(microseconds per call, host reads per call), after a few warm-up calls."""
    for _ in range(5):
        fn()
    HOST_READS.clear()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = time.perf_counter() - start
    return seconds / calls * 1e6, sum(HOST_READS.values()) / calls


def _stub_elementwise(source):
    def kernel(*arrays):
        return tuple(StrictArray(np.empty_like(arrays[0].array)) for _ in source.outputs)

    return kernel


def _stub_raw(name, function):
    """A RawKernel that writes nothing, except range_check's outputs (all values in range)."""

    def launch(grid, block, args, shared_mem=0):
        if name == "range_check":
            values, _, _, _, clipped, flag, ok = args
            clipped.array[...], flag.array[...], ok.array[...] = values.array, 0, True

    return launch


def _ops(rng):
    """(name, bound GPU kernel, inputs as device arrays) of the step's hot ops, on tiny arrays
    (so that NumPy's arithmetic under the stand-in costs little beside the host work)."""
    dev = lambda a: StrictArray(np.asarray(a))  # noqa: E731
    p = dev(rng.standard_normal((16, 16)).astype(np.float32))
    m, v, g = (dev(np.zeros((16, 16), np.float32)) for _ in range(3))
    lr, step = dev(np.asarray(1e-3, np.float32)), dev(np.asarray(3.0, np.float32))
    logits = dev(rng.standard_normal((8, 10)).astype(np.float32))
    labels = dev(rng.integers(0, 10, 8))
    a = dev(rng.standard_normal((8, 16)).astype(np.float32))
    b = dev(np.zeros(16, np.float32))
    adam = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7, "epsilon_on_sqrt_v": True}
    return [
        ("adam_update", get_op("adam_update").bound_kernel("gpu", adam), (p, m, v, g, lr, step)),
        (
            "sparse_softmax_xent",
            get_op("sparse_softmax_cross_entropy_with_logits").bound_kernel("gpu", {}),
            (logits, labels),
        ),
        ("fused_matmul", get_op("fused_matmul").bound_kernel("gpu", {"activation": "relu"}), (a, p, b)),
        ("matmul", get_op("matmul").bound_kernel("gpu", {}), (a, p)),
        ("relu_grad", get_op("relu_grad").bound_kernel("gpu", {}), (a, a)),
        ("sum", get_op("sum").bound_kernel("gpu", {"axes": (0,), "keepdims": False}), (a,)),
    ]


def _frozen_mlp_step(calls: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    with tp.device("gpu:0"):
        model = tp.Sequential(
            [
                tp.Input((32,)),
                tp.layers.Dense(16, activation="relu"),
                tp.layers.Dense(16, activation="relu"),
                tp.layers.Dense(10),
            ]
        )
        variables = model.trainable_weights
        optimizer = tp.optimizers.Adam(1e-3)
        optimizer.build(variables)
        loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        x = tp.tensor(rng.random((8, 32), dtype=np.float32))
        y = tp.tensor(rng.integers(0, 10, 8))

        @tp.function
        def step(x, y):
            with tp.GradientTape() as tape:
                value = loss_fn(y, model(x, training=True))
            gradients = tape.gradient(value, variables)
            optimizer.apply_gradients(zip(gradients, variables, strict=True))
            return value

        with tp.backends.common.deferring_checks():
            return _per_call(lambda: step(x, y), calls)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    with pytest.MonkeyPatch.context() as patch:
        stand_in_gpu(patch)
        for name, fn, ins in _ops(rng):
            us, reads = _per_call(lambda fn=fn, ins=ins: fn(*ins), args.calls)
            print(f"stand-in  {name:22s} {us:8.1f} us/call  host reads/call {reads:.2f}")
        us, reads = _frozen_mlp_step(max(20, args.calls // 10))
        print(f"stand-in  {'frozen MLP step':22s} {us:8.1f} us/call  host reads/call {reads:.2f}")
        patch.setattr(cupy_backend, "ON_GPU", True)
        patch.setattr(cuda, "elementwise", _stub_elementwise)
        patch.setattr(cuda, "kernel", _stub_raw)
        for name, fn, ins in _ops(rng):
            if name in ("adam_update", "sparse_softmax_xent", "fused_matmul", "relu_grad"):  # compiled kernels
                us, reads = _per_call(lambda fn=fn, ins=ins: fn(*ins), args.calls)
                print(f"dispatch  {name:22s} {us:8.1f} us/call  host reads/call {reads:.2f}")


if __name__ == "__main__":
    main()
