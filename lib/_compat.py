"""Optional dependencies, imported in this one place only.

Every other module asks these flags instead of importing an extra itself.

>>> from tapeflow import _compat
>>> isinstance(_compat.has_cupy, bool)
True
"""

from __future__ import annotations

import importlib
import importlib.util


def _try_import(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return None


cupy = _try_import("cupy")
has_cupy = cupy is not None


def _gpu_count() -> int:
    if not has_cupy:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - a driver without devices
        return 0


has_gpu = _gpu_count() > 0
has_xla = importlib.util.find_spec("torch_xla") is not None
has_dask = importlib.util.find_spec("dask") is not None and importlib.util.find_spec("distributed") is not None
has_onnx = importlib.util.find_spec("onnx") is not None


def require_onnx():
    """The onnx package, imported on first use (it is slow to import), or an
    ImportError that says how to install it.

    >>> require_onnx().__name__ if has_onnx else "onnx"
    'onnx'
    """
    module = _try_import("onnx") if has_onnx else None
    if module is None:
        raise ImportError(
            "ONNX export needs the onnx package, which is missing or fails to import: "
            "pip install 'tapeflow[onnx]' (or pip install onnx)"
        )
    return module


def require_distributed():
    """Dask's `distributed` package, imported on first use, or an ImportError that says
    how to install it.

    >>> require_distributed().__name__ if has_dask else "distributed"
    'distributed'
    """
    module = _try_import("distributed") if has_dask else None
    if module is None:
        raise ImportError(
            "tapeflow.distributed needs Dask's distributed package, which is missing or fails to import: "
            "pip install 'tapeflow[dist]' (or pip install 'dask[distributed]')"
        )
    return module
