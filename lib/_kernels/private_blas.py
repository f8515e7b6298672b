"""A private, single-threaded copy of the OpenBLAS that SciPy's cython_blas calls, for the
gemms of tapeflow's kernels.

OpenBLAS keeps one thread count per loaded library, shared by every caller in the process:
SciPy, NumPy and threadpoolctl limits set in any thread. Setting it for tapeflow's own calls
would race with them, and leaving it threaded would let OpenBLAS's spinning worker threads
fight tapeflow's OpenMP threads for the cores. So tapeflow loads a second copy of the same
library, which nothing else in the process can see or set, and keeps that copy
single-threaded: its OpenMP threads split the large gemms instead. Where no copy can be made
(no OpenBLAS, no writable temporary directory, no dynamic loader that isolates it), the
kernels call the shared library and never set its thread count.

>>> found = private_blas()
>>> found is None or sorted(found) == ["dgemm", "dgemv", "sgemm", "sgemv"]
True
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import tempfile

import scipy.linalg.cython_blas


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _shared_openblas() -> tuple[str, str] | None:
    """(file, symbol prefix) of the OpenBLAS that cython_blas calls, or None for another BLAS."""
    try:
        shared = ctypes.CDLL(scipy.linalg.cython_blas.__file__)
        dladdr = ctypes.CDLL(None).dladdr
    except (OSError, AttributeError):
        return None
    for prefix in ("scipy_", ""):
        getter = getattr(shared, prefix + "openblas_get_num_threads", None)
        if getter is None:
            continue
        info = _DlInfo()
        if not dladdr(ctypes.cast(getter, ctypes.c_void_p), ctypes.byref(info)) or not info.dli_fname:
            return None
        return os.fsdecode(info.dli_fname), prefix
    return None


@functools.cache
def private_blas() -> dict[str, int] | None:
    """Addresses of sgemm, dgemm, sgemv and dgemv in a private single-threaded copy of the
    shared OpenBLAS (loaded once per process), or None where none can be loaded."""
    found = _shared_openblas()
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)  # the copy's own symbols, not the shared library's
    if found is None or not deepbind:
        return None
    path, prefix = found
    folder = tempfile.mkdtemp(prefix="tapeflow-blas-")
    try:
        copy = os.path.join(folder, "tapeflow_private_blas.so")
        shutil.copyfile(path, copy)
        library = ctypes.CDLL(copy, mode=os.RTLD_LOCAL | os.RTLD_NOW | deepbind)
    except OSError:
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the loaded copy stays mapped
    try:
        getattr(library, prefix + "openblas_set_num_threads")(1)
        return {
            name: ctypes.cast(getattr(library, f"{prefix}{name}_"), ctypes.c_void_p).value
            for name in ("sgemm", "dgemm", "sgemv", "dgemv")
        }
    except AttributeError:
        return None
