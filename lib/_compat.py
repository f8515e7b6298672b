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
ml_dtypes = _try_import("ml_dtypes")  # bfloat16 for NumPy


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


def require_cupy():
    """CuPy, or an ImportError that says how to install it.

    >>> require_cupy().__name__ if has_cupy else "cupy"
    'cupy'
    """
    return _require("cupy", has_cupy, "the GPU backend", "pip install 'tapeflow[gpu]' (CuPy for CUDA 12)")


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


_XLA_INSTALL = (
    "pip install torch==2.9.0 torch-xla==2.9.0 (each torch_xla release pins the torch release of its own "
    "version; `make test` builds such an environment in .venv-xla)"
)


class XlaRuntime:
    """What the xla backend uses of torch and torch_xla: the modules, the device, launching
    the recorded work, and the compile and execute counters."""

    def __init__(self, torch, torch_xla):
        self.torch = torch
        self._torch_xla = torch_xla
        self._metrics = importlib.import_module("torch_xla.debug.metrics")

    def device(self, index: int = 0):
        return self._torch_xla.device(index)

    def device_count(self) -> int:
        """The XLA devices this process addresses (TPU cores, or CPU_NUM_DEVICES on the CPU)."""
        return importlib.import_module("torch_xla.runtime").addressable_runtime_device_count()

    def sync(self) -> None:
        self._torch_xla.sync()

    def counters(self) -> dict:
        """Compilations and executions so far, with the seconds spent compiling."""
        compiles = self._metrics.metric_data("CompileTime")
        executes = self._metrics.metric_data("ExecuteTime")
        return {
            "compiles": compiles[0] if compiles else 0,
            "compile_seconds": compiles[1] / 1e9 if compiles else 0.0,
            "executions": executes[0] if executes else 0,
            "cached_compiles": self._metrics.counter_value("CachedCompile") or 0,
        }


_xla_runtime = None


def xla_version_problem(torch_version: str | None, xla_version: str | None) -> str | None:
    """What is wrong with this pair of torch and torch_xla versions, with the fix; None if
    they match (each torch_xla release works only with the torch release of its version).

    >>> xla_version_problem("2.9.0+cpu", "2.9.0") is None
    True
    >>> print(xla_version_problem("2.13.0", "2.9.0"))  # doctest: +ELLIPSIS
    the xla backend found torch_xla 2.9.0 with torch 2.13.0, but torch_xla 2.9.0 works only with torch 2.9.x: ...
    """
    release = {}
    for name, version in (("torch", torch_version), ("torch_xla", xla_version)):
        release[name] = ".".join((version or "").split("+")[0].split(".")[:2])
    if torch_version is not None and release["torch"] == release["torch_xla"]:
        return None
    return (
        f"the xla backend found torch_xla {xla_version} with torch {torch_version}, but torch_xla {xla_version} "
        f"works only with torch {release['torch_xla']}.x: {_XLA_INSTALL}"
    )


_xla_devices = None


def xla_device_count() -> int:
    """How many XLA devices this process has (the runtime starts on the first call); 1 when
    torch_xla cannot be imported or its runtime does not start, so that using xla:0 reports
    why."""
    global _xla_devices
    if _xla_devices is None:
        try:
            _xla_devices = require_xla().device_count()
        except (ImportError, RuntimeError):
            _xla_devices = 1
    return _xla_devices


def require_xla() -> XlaRuntime:
    """torch and torch_xla, imported on first use, or an ImportError that says how to fix them.

    torch_xla is built against one torch release; a different torch fails at import with a
    linker error, so the versions are compared first and a mismatch is named instead.

    >>> runtime = require_xla() if has_xla else None
    """
    global _xla_runtime
    if _xla_runtime is not None:
        return _xla_runtime
    if not has_xla:
        raise ImportError(f"the xla backend needs the torch_xla package, which is missing: {_XLA_INSTALL}")
    from importlib import metadata

    versions = []
    for dist in ("torch", "torch_xla"):
        try:
            versions.append(metadata.version(dist))
        except metadata.PackageNotFoundError:
            versions.append(None)
    problem = xla_version_problem(*versions)
    if problem:
        raise ImportError(problem)
    try:
        _xla_runtime = XlaRuntime(importlib.import_module("torch"), importlib.import_module("torch_xla"))
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported with the fix
        raise ImportError(f"the xla backend could not import torch_xla ({exc}): {_XLA_INSTALL}") from exc
    return _xla_runtime
