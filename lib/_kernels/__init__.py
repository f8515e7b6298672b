"""Compiled CPU kernels (Cython, OpenMP). Import fails loudly if a build is missing or stale.

A stale build, one compiled from an older version of its ``.pyx``, would silently run old
code, so every module carries the sha256 of the source it was built from, and importing
this package compares it with the ``.pyx`` beside it.

>>> from tapeflow import _kernels
>>> sorted(_kernels.build_info()) == sorted(_kernels.MODULES)
True
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from tapeflow._kernels.source_hash import source_sha256

MODULES = ("conv", "gemm", "pool", "softmax_xent", "embedding", "fused", "fpenv", "elementwise")
REBUILD = "run `make build` (or `python setup.py build_ext --inplace`) to rebuild the kernels"


def check_fresh(name: str, built_sha256: str, pyx: Path) -> None:
    """Raise ImportError if the module `name` was built from a different `pyx` than the one on disk.

    >>> check_fresh("conv", "0" * 64, Path("missing/conv.pyx"))  # no source: nothing to check
    """
    if not pyx.exists():
        return
    on_disk = source_sha256(pyx)
    if built_sha256 != on_disk:
        raise ImportError(
            f"tapeflow._kernels.{name} is stale: it was built from a different {pyx.name} "
            f"(built sha256 {built_sha256[:12]}, source {on_disk[:12]}); {REBUILD}"
        )


def _load(name: str) -> ModuleType:
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ImportError as exc:
        raise ImportError(f"tapeflow._kernels.{name} is not built ({exc}); {REBUILD}") from exc
    check_fresh(name, module.SOURCE_SHA256, Path(module.__file__).with_name(f"{name}.pyx"))
    return module


_modules = {name: _load(name) for name in MODULES}


def build_info() -> dict[str, dict]:
    """Where each kernel module was loaded from, whether it has OpenMP, and its source hash.

    >>> build_info()["conv"]["openmp"] in (True, False)
    True
    """
    return {
        name: {
            "path": module.__file__,
            "openmp": module.OPENMP,
            "source_sha256": module.SOURCE_SHA256,
        }
        for name, module in _modules.items()
    }


def set_num_threads(n: int) -> None:
    """Set the thread count of every kernel's parallel loops (1 without OpenMP).

    Large gemms are split over these same threads: OpenBLAS itself stays single-threaded
    (where it can be controlled), so that only one pool of threads ever runs.

    >>> old = get_num_threads(); set_num_threads(1); get_num_threads(); set_num_threads(old)
    1
    """
    for module in _modules.values():
        module._set_num_threads(n)


def get_num_threads() -> int:
    """The thread count the kernels' parallel loops use."""
    return _modules["conv"]._get_num_threads()


_conv, _gemm, _pool, _xent, _embedding, _fused, _fpenv, _elementwise = (_modules[name] for name in MODULES)
_gemm._pin_blas()

conv2d_forward = _conv.conv2d_forward
matmul = _gemm.matmul
dense = _gemm.dense
DenseKernel = _gemm.DenseKernel
conv2d_backward_input = _conv.conv2d_backward_input
conv2d_backward_filter = _conv.conv2d_backward_filter
max_pool2d_forward = _pool.max_pool2d_forward
max_pool2d_backward = _pool.max_pool2d_backward
avg_pool2d_forward = _pool.avg_pool2d_forward
avg_pool2d_backward = _pool.avg_pool2d_backward
sparse_softmax_xent = _xent.sparse_softmax_xent
gather_rows = _embedding.gather_rows
scatter_add_rows = _embedding.scatter_add_rows
adam_update = _fused.adam_update
relu = _fused.relu
relu_grad = _fused.relu_grad
flush_denormals_enter = _fpenv.flush_denormals_enter
flush_denormals_leave = _fpenv.flush_denormals_leave

__all__ = [
    "MODULES",
    "build_info",
    "check_fresh",
    "set_num_threads",
    "get_num_threads",
    "conv2d_forward",
    "flush_denormals_enter",
    "flush_denormals_leave",
    "matmul",
    "dense",
    "DenseKernel",
    "conv2d_backward_input",
    "conv2d_backward_filter",
    "max_pool2d_forward",
    "max_pool2d_backward",
    "avg_pool2d_forward",
    "avg_pool2d_backward",
    "sparse_softmax_xent",
    "gather_rows",
    "scatter_add_rows",
    "adam_update",
    "relu",
    "relu_grad",
]
