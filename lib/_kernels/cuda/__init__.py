"""CUDA sources for the GPU backend, compiled on first use through CuPy.

Each ``<name>.cu`` file holds ``extern "C"`` kernels named ``<kernel>_f32`` and
``<kernel>_f64`` (``_i32`` and ``_i64`` for integer data). `kernel(name, function)`
compiles a file the first time one of its kernels is asked for (NVRTC, in CuPy's default
C++ dialect, cached by CuPy on disk) and keeps the module, and each kernel once per GPU
(a launch looks it up in a dict).
`elementwise(source)` makes the ElementwiseKernel of a generated
`elementwise_source.KernelSource` (compiled by CuPy on its first call for each device).

>>> sorted(SOURCES)
['range_check', 'scatter_add_rows', 'softmax_xent', 'window', 'word2vec']
"""

from __future__ import annotations

import functools
from pathlib import Path

from tapeflow import _compat
from tapeflow._kernels.cuda.elementwise_source import OPTIONS, KernelSource

_HERE = Path(__file__).resolve().parent
SOURCES = {path.stem: path for path in _HERE.glob("*.cu")}


@functools.cache
def _module(name: str):
    cupy = _compat.require_cupy()
    return cupy.RawModule(code=SOURCES[name].read_text())


_FUNCTIONS: dict = {}  # (file, kernel, GPU) -> the loaded kernel


def kernel(name: str, function: str):
    """The compiled kernel `function` of source file `name` on the current GPU (compiled on
    the first call; later calls find it in a dict, without asking the driver again)."""
    cupy = _compat.require_cupy()
    key = (name, function, cupy.cuda.runtime.getDevice())
    found = _FUNCTIONS.get(key)
    if found is None:
        found = _FUNCTIONS[key] = _module(name).get_function(function)
    return found


@functools.lru_cache(maxsize=1024)
def elementwise(source: KernelSource):
    """The ElementwiseKernel of a generated source, one per distinct text."""
    cupy = _compat.require_cupy()
    return cupy.ElementwiseKernel(
        source.in_params,
        source.out_params,
        source.operation,
        name=source.name,
        preamble=source.preamble,
        loop_prep=source.loop_prep,
        options=OPTIONS,
    )
