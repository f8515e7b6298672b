"""Compile, once, the GPU kernels the device tests use, so that NVRTC's time is not spent inside
a test's time limit: every RawKernel of lib/_kernels/cuda/*.cu, then tiny runs on gpu:0 that
reach the generated ElementwiseKernels (optimizer steps, fused bias and activation, fused
elementwise programs, recurrent cells) and CuPy's own kernels in both float types. CuPy keeps
what it compiles on disk (CUPY_CACHE_DIR), so the test processes that follow load it.

    python3 bench/gpu_warmup.py        # prints one line per step, "skipped" without a GPU

A step that fails prints FAIL and the rest go on: the tests report the failure itself.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _step(name: str, run) -> None:
    start = time.perf_counter()
    try:
        run()
        print(f"ok    {name:40s} {time.perf_counter() - start:6.1f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - reported, and the next step runs
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        print(f"FAIL  {name:40s} {type(exc).__name__}: {first}", flush=True)


def _raw_kernels() -> None:
    # lazily, as this script imports nothing GPU-related before it knows a GPU is there
    from tapeflow._kernels import cuda

    for name, path in sorted(cuda.SOURCES.items()):
        for function in kernel_names(path.read_text()):
            cuda.kernel(name, function)


def kernel_names(source: str) -> list[str]:
    """The kernels a .cu file defines; one written once for both dtypes in a macro
    (`name_##SUFFIX`) is two, name_f32 and name_f64.

    >>> kernel_names('extern "C" __global__ void a_f32(float* x) {}\\n extern "C" __global__ void b_##S(T* x) {}')
    ['a_f32', 'b_f32', 'b_f64']
    """
    names = []
    for base, macro in re.findall(r'extern "C" __global__ void (\w+?)(##\w+)?\(', source):
        names += [base + suffix for suffix in ("f32", "f64")] if macro else [base]
    return names


def _model_steps() -> None:
    import numpy as np

    import tapeflow as tp

    rng = np.random.default_rng(0)
    optimizers = [
        lambda: tp.optimizers.Adam(1e-3),
        lambda: tp.optimizers.AdamW(1e-3, weight_decay=0.1),
        lambda: tp.optimizers.SGD(0.05, momentum=0.9),
        lambda: tp.optimizers.SGD(0.05, momentum=0.8, nesterov=True),
        lambda: tp.optimizers.RMSprop(0.01),
        lambda: tp.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
        lambda: tp.optimizers.Adagrad(0.05),
    ]
    models = [
        ((8,), lambda: [tp.Input((8,)), tp.layers.Dense(16, activation="relu"), tp.layers.Dense(3)]),
        (
            (8, 8, 1),
            lambda: [
                tp.Input((8, 8, 1)),
                tp.layers.Conv2D(4, 3, padding="same", activation="relu"),
                tp.layers.MaxPooling2D(2),
                tp.layers.Flatten(),
                tp.layers.Dense(3),
            ],
        ),
        ((5, 4), lambda: [tp.Input((5, 4)), tp.layers.LSTM(6, return_sequences=True), tp.layers.GRU(6)]),
    ]
    with tp.device("gpu:0"):
        for k, (shape, make_layers) in enumerate(models):
            x = rng.standard_normal((16, *shape)).astype(np.float32)
            y = rng.integers(0, 3, 16)
            for jit in (True, False):
                for make_optimizer in optimizers if k == 0 else optimizers[:1]:
                    model = tp.Sequential(make_layers())
                    model.compile(
                        optimizer=make_optimizer(),
                        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
                        metrics=["accuracy"],
                        jit=jit,
                    )
                    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
                    model.evaluate(x, y, batch_size=8, verbose=0)


def _update_ops(dtype: str) -> None:
    import numpy as np

    import tapeflow as tp
    from tapeflow.ops import optim

    with tp.device("gpu:0"):
        p, g = tp.tensor(np.ones((4, 3), dtype)), tp.tensor(np.full((4, 3), 0.5, dtype))
        z = tp.zeros_like(p)
        for eps_on_sqrt_v in (False, True):
            optim.adam_update(p, z, z, g, 0.01, 2, epsilon_on_sqrt_v=eps_on_sqrt_v)[0].numpy()
            optim.adamw_update(p, z, z, g, 0.01, 2, epsilon_on_sqrt_v=eps_on_sqrt_v)[0].numpy()
        optim.sgd_momentum_update(p, z, g, 0.01)[0].numpy()
        optim.rmsprop_update(p, z, g, 0.01)[0].numpy()
        optim.adagrad_update(p, z, g, 0.01)[0].numpy()


def _test_kernel_sources() -> list:
    """The generated kernels tests/kernels/test_cuda_*.py compile on a GPU: the fused programs
    and every optimizer setting they check (the same list in every process)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "kernels")]
    # lazily: the test modules are importable once the tests' folders are on the path
    import test_cuda_optimizers as optimizers
    import test_cuda_sources as sources

    from tapeflow._kernels.cuda import elementwise_source

    kernels = []
    for dtype in ("float32", "float64"):
        for program, inputs in sources.fused_cases(dtype):
            kernels.append(sources.with_registers(elementwise_source.fused_elementwise(program, len(inputs), dtype)))
        kernels += [optimizers._source(name, dtype, s, rate) for name, s, rate in optimizers._cases()]
        kernels += [elementwise_source.adam_update(dtype, 0.9, 0.999, 1e-7, on_sqrt_v) for on_sqrt_v in (False, True)]
    return kernels


def _compile_share(first: int, every: int) -> int:
    """Compile kernels first, first + every, ... of `_test_kernel_sources()`, each called once
    on one element; returns how many."""
    import cupy

    from tapeflow._kernels import cuda

    share = _test_kernel_sources()[first::every]
    for source in share:
        args = [cupy.zeros(() if raw else (1,), dtype) for dtype, _, raw in source.inputs]
        cuda.elementwise(source)(*args)
    return len(share)


def _test_kernels() -> None:
    """NVRTC's compilations in processes side by side (CuPy's disk cache is shared)."""
    import concurrent.futures
    import multiprocessing
    import os

    workers = max(1, min(8, (os.cpu_count() or 2) - 1))
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        done = sum(pool.map(_compile_share, range(workers), [workers] * workers))
    print(f"      {done} generated kernels in {workers} processes", flush=True)


def main() -> None:
    from tapeflow import _compat

    if not _compat.has_gpu:
        print("skipped: no GPU")
        return
    start = time.perf_counter()
    _step("RawKernels (lib/_kernels/cuda/*.cu)", _raw_kernels)
    _step("the CUDA tests' generated kernels", _test_kernels)
    _step("models and optimizers, eager and frozen", _model_steps)
    for dtype in ("float32", "float64"):
        _step(f"optimizer update ops, {dtype}", lambda dtype=dtype: _update_ops(dtype))
    print(f"warm-up {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
