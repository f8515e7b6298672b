"""CUDA sources for the GPU backend, compiled on first use through CuPy's RawModule.

Each ``<name>.cu`` file holds ``extern "C"`` kernels named ``<kernel>_f32`` and
``<kernel>_f64``. `kernel(name, function)` compiles a file the first time one of its
kernels is asked for (NVRTC, cached by CuPy on disk) and keeps the module.

>>> sorted(SOURCES)
['scatter_add_rows', 'softmax_xent']
"""

from __future__ import annotations

import functools
from pathlib import Path

from tapeflow import _compat

_HERE = Path(__file__).resolve().parent
SOURCES = {path.stem: path for path in _HERE.glob("*.cu")}


@functools.cache
def _module(name: str):
    cupy = _compat.require_cupy()
    return cupy.RawModule(code=SOURCES[name].read_text(), options=("--std=c++14",))


def kernel(name: str, function: str):
    """The compiled kernel `function` of source file `name` (compiled on the first call)."""
    return _module(name).get_function(function)
