"""Optional dependencies, imported in this one place only.

Every other module asks these flags instead of importing an extra itself.

>>> from tapeflow import _compat
>>> isinstance(_compat.has_cupy, bool)
True
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path


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
has_gensim = importlib.util.find_spec("gensim") is not None


def _require(name: str, available: bool, needed_by: str, install: str):
    """The module `name`, imported on first use, or an ImportError that says how to install it."""
    module = _try_import(name) if available else None
    if module is None:
        raise ImportError(f"{needed_by} needs the {name} package, which is missing or fails to import: {install}")
    return module


def require_onnx():
    """The onnx package, imported on first use (it is slow to import).

    >>> require_onnx().__name__ if has_onnx else "onnx"
    'onnx'
    """
    return _require("onnx", has_onnx, "ONNX export", "pip install 'tapeflow[onnx]' (or pip install onnx)")


def require_distributed():
    """Dask's `distributed` package, imported on first use.

    >>> require_distributed().__name__ if has_dask else "distributed"
    'distributed'
    """
    return _require("distributed", has_dask, "tapeflow.distributed", _DASK_INSTALL)


def require_dask_config():
    """Dask's configuration module (`dask.config`), imported on first use.

    >>> require_dask_config().__name__ if has_dask else "dask.config"
    'dask.config'
    """
    return _require("dask.config", has_dask, "tapeflow.distributed", _DASK_INSTALL)


_DASK_INSTALL = "pip install 'tapeflow[dist]' (or pip install 'dask[distributed]')"


def gensim_test_data() -> Path:
    """The folder `gensim/test/test_data/` of the installed gensim wheel, found without importing gensim.

    It holds the word-similarity and analogy sets (wordsim353.tsv, simlex999.txt,
    questions-words.txt) and a shortened English Wikipedia dump.

    >>> folder = gensim_test_data() if has_gensim else None
    >>> folder is None or (folder / "wordsim353.tsv").is_file()
    True
    """
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the gensim test data needs the gensim package: pip install 'tapeflow[test]' (or gensim)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"
    if not folder.is_dir():
        raise FileNotFoundError(f"gensim is installed but its test data folder {folder} is missing")
    return folder
