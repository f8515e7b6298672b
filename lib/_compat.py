"""Optional dependencies, imported in this one place only.

Every other module asks these flags instead of importing an extra itself. `has_gpu` is
found on first use, since it compiles a kernel (see `gpu_check`).

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


try:
    import cupy

    _cupy_import_error = None
except Exception as exc:  # noqa: BLE001 - any failure means "not available"; gpu_check says why
    cupy, _cupy_import_error = None, exc
has_cupy = cupy is not None
ml_dtypes = _try_import("ml_dtypes")  # bfloat16 for NumPy

_CUPY_INSTALL = (
    "pip install 'tapeflow[gpu-cuda12]' for a CUDA 12 driver or 'tapeflow[gpu-cuda13]' for a CUDA 13 one "
    "(nvidia-smi shows the driver's CUDA version)"
)
_gpu_check: tuple[int, str | None] | None = None  # found on first use, then kept for the process


def gpu_check() -> tuple[int, str | None]:
    """How many GPUs CuPy can use here, and why none when that is 0 (None when there are some).

    A GPU counts only once CuPy has compiled and run a small kernel on it: CuPy wheels carry
    no CUDA headers, so without them every kernel fails to compile. The check runs on the
    first call (it compiles, too slow for import time) and its answer is kept.

    >>> count, reason = gpu_check()
    >>> (count > 0) == (reason is None)
    True
    """
    global _gpu_check
    if _gpu_check is None:
        _gpu_check = _check_gpus()
    return _gpu_check


def __getattr__(name: str):
    """`has_gpu`: whether a GPU CuPy can use is here, found on first use (see gpu_check)."""
    if name == "has_gpu":
        return gpu_check()[0] > 0
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_gpus() -> tuple[int, str | None]:
    if cupy is None:
        error = _cupy_import_error
        if error is None or (isinstance(error, ModuleNotFoundError) and error.name == "cupy"):
            return 0, f"CuPy is not installed: {_CUPY_INSTALL}"
        return 0, f"CuPy is installed but fails to import ({_first_line(error)}): {_CUPY_INSTALL}"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - CuPy raises its own runtime errors
        return 0, f"CuPy cannot reach a CUDA driver ({_first_line(exc)}); is the NVIDIA driver installed?"
    if count == 0:
        return 0, "CuPy sees no CUDA GPU (is CUDA_VISIBLE_DEVICES hiding them?)"
    try:
        _run_probe_kernel()
    except Exception as exc:  # noqa: BLE001 - any failure to compile or run is the reason
        return 0, _kernel_problem(exc)
    return count, None


def _run_probe_kernel() -> None:
    """Compile and run one elementwise kernel (it includes CuPy's headers, which need CUDA's)."""
    add_one = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x + 1.0f", "tapeflow_gpu_check")
    got = cupy.asnumpy(add_one(cupy.arange(4, dtype="float32"))).tolist()
    if got != [1.0, 2.0, 3.0, 4.0]:
        raise RuntimeError(f"a kernel adding 1 to [0, 1, 2, 3] returned {got}")


def _kernel_problem(exc: Exception) -> str:
    """The reason a GPU is not used when the probe kernel failed with `exc`."""
    line, text = _first_line(exc), str(exc)
    if "cannot open source file" in text:
        return (
            f"CuPy cannot compile kernels: the CUDA headers are missing; install {_cupy_with_ctk()} "
            f"or the CUDA toolkit ({line})"
        )
    if isinstance(exc, OSError) or "shared object" in text:
        return (
            f"CuPy cannot load the CUDA libraries it compiles kernels with; install {_cupy_with_ctk()} "
            f"or the CUDA toolkit ({line})"
        )
    if type(exc).__name__ == "CompileException":
        return f"CuPy cannot compile kernels ({line})"
    return (
        f"CuPy compiled a kernel but cannot run it ({line}); if the driver is older than CuPy's CUDA, "
        f"install the CuPy that matches it: {_CUPY_INSTALL}"
    )


def _cupy_with_ctk() -> str:
    """The CuPy wheel installed here with its `ctk` extra (the CUDA headers and libraries it needs)."""
    # lazily: importlib.metadata is needed only to word this message
    from importlib import metadata

    for wheel in ("cupy-cuda13x", "cupy-cuda12x"):
        try:
            metadata.distribution(wheel)
        except metadata.PackageNotFoundError:
            continue
        return f"{wheel}[ctk] (pip install '{wheel}[ctk]')"
    return "your CuPy wheel's ctk extra (pip install 'cupy-cuda13x[ctk]' or 'cupy-cuda12x[ctk]')"


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type's name."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


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
    return _require("cupy", has_cupy, "the GPU backend", _CUPY_INSTALL)


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
