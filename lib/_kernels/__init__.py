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
import operator
import os
from pathlib import Path
from types import ModuleType

from tapeflow._kernels.source_hash import source_sha256

MODULES = (
    "conv",
    "gemm",
    "pool",
    "softmax_xent",
    "embedding",
    "fused",
    "fpenv",
    "elementwise",
    "word2vec",
    "conv3d",
    "pool3d",
    "depthwise",
    "recurrent",
    "allocator",
    "draws",
    "schedule",
    "channels",
)
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


# How long an idle OpenMP thread spins before it sleeps, in the runtime's pause loops (its
# default is 300,000). Long enough to catch the next parallel loop of a training step
# (waking a sleeping thread cost ~90 us here, more than a small gemm gains from a second
# thread), short enough that a competing process gets its core back.
IDLE_SPIN = "3000"


def _load_all() -> dict[str, ModuleType]:
    """Every kernel module, with OpenMP threads that spin briefly, then sleep, when idle.

    OpenMP threads spin for long while they wait for work by default, which collapses
    training when another process (a data loader, another Dask worker) wants a core; threads
    that sleep at once pay a wake-up on every parallel loop. The runtime reads
    GOMP_SPINCOUNT once, when the first kernel module loads it: IDLE_SPIN is set for that
    moment only, unless the user chose a wait policy or spin count, and the environment is
    then restored, so other libraries and subprocesses see it as it was.
    """
    chosen = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
    if not chosen:
        os.environ["GOMP_SPINCOUNT"] = IDLE_SPIN
    try:
        return {name: _load(name) for name in MODULES}
    finally:
        if not chosen:
            os.environ.pop("GOMP_SPINCOUNT", None)


_modules = _load_all()
# Beyond this many threads per process the runtime may fail to start them (each needs a
# stack): 100,000 threads crashed the process.
MAX_THREADS = max(64, 4 * (os.cpu_count() or 1))


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

    Large gemms are split over these same threads: while a kernel runs, OpenBLAS is
    single-threaded (where it can be controlled), so that only one pool of threads runs;
    between kernel calls OpenBLAS keeps the thread count SciPy and NumPy gave it.

    >>> old = get_num_threads(); set_num_threads(1); get_num_threads(); set_num_threads(old)
    1
    """
    count = _thread_count(n)
    for module in _modules.values():
        module._set_num_threads(count)


def _thread_count(n) -> int:
    """`n` as a thread count the runtime can start, or a TypeError / ValueError saying why not."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"set_num_threads: expected an integer thread count, got {n!r}")
    count = operator.index(n)
    if not 1 <= count <= MAX_THREADS:
        raise ValueError(
            f"set_num_threads: the thread count must be between 1 and {MAX_THREADS} "
            f"(at least 64, or 4 per core on this machine), got {count}"
        )
    return count


def get_num_threads() -> int:
    """The thread count the kernels' parallel loops use."""
    return _modules["conv"]._get_num_threads()


def cores_busy() -> bool:
    """Whether every core of the machine has a runnable thread now (read at most every 50 ms).

    While they do, kernels whose work is small keep to the calling thread: a helper thread
    would wait for a core, and the call for that thread, longer than the work takes alone.

    >>> cores_busy() in (True, False)
    True
    """
    return _modules["gemm"]._cores_busy()


def set_cores_busy(busy: bool | None) -> bool | None:
    """Fix what every kernel takes cores_busy() to be (True or False), or None to read the machine
    again; returns the previous setting.

    >>> old = set_cores_busy(True); cores_busy(); _ = set_cores_busy(old)
    True
    """
    setting = -1 if busy is None else int(bool(busy))
    olds = {module._set_busy_override(setting) for module in _modules.values()}
    old = olds.pop() if len(olds) == 1 else -1
    return None if old < 0 else bool(old)


(
    _conv,
    _gemm,
    _pool,
    _xent,
    _embedding,
    _fused,
    _fpenv,
    _elementwise,
    _word2vec,
    _conv3d,
    _pool3d,
    _depthwise,
    _recurrent,
    _allocator,
    _draws,
    _schedule,
    _channels,
) = (_modules[name] for name in MODULES)

conv2d_forward = _conv.conv2d_forward
matmul = _gemm.matmul
descend_product = _gemm.descend_product
dense = _gemm.dense
DenseKernel = _gemm.DenseKernel
DenseChain = _gemm.DenseChain
Schedule = _schedule.Schedule
concat_last = _channels.concat_last
sum_leading = _channels.sum_leading
conv2d_backward_input = _conv.conv2d_backward_input
conv2d_backward_filter = _conv.conv2d_backward_filter
max_pool2d_forward = _pool.max_pool2d_forward
max_pool2d_backward = _pool.max_pool2d_backward
avg_pool2d_forward = _pool.avg_pool2d_forward
avg_pool2d_backward = _pool.avg_pool2d_backward
sparse_softmax_xent = _xent.sparse_softmax_xent
first_label_outside = _xent.first_label_outside
gather_rows = _embedding.gather_rows
scatter_add_rows = _embedding.scatter_add_rows
adam_update = _fused.adam_update
adam_update_rows = _fused.adam_update_rows
adam_update_in_place = _fused.adam_update_in_place
relu = _fused.relu
relu_grad = _fused.relu_grad
relu_bias_grad = _fused.relu_bias_grad
flush_denormals_enter = _fpenv.flush_denormals_enter
flush_denormals_leave = _fpenv.flush_denormals_leave
sgns_train = _word2vec.sgns_train
skipgram_pairs = _word2vec.skipgram_pairs
conv3d_forward = _conv3d.conv3d_forward
conv3d_backward_input = _conv3d.conv3d_backward_input
conv3d_backward_filter = _conv3d.conv3d_backward_filter
max_pool3d_forward = _pool3d.max_pool3d_forward
max_pool3d_backward = _pool3d.max_pool3d_backward
avg_pool3d_forward = _pool3d.avg_pool3d_forward
avg_pool3d_backward = _pool3d.avg_pool3d_backward
depthwise_conv2d_forward = _depthwise.depthwise_conv2d_forward
depthwise_conv2d_backward_input = _depthwise.depthwise_conv2d_backward_input
depthwise_conv2d_backward_filter = _depthwise.depthwise_conv2d_backward_filter
lstm_forward = _recurrent.lstm_forward
lstm_backward = _recurrent.lstm_backward
gru_forward = _recurrent.gru_forward
gru_backward = _recurrent.gru_backward
reusing_blocks = _allocator.reusing_blocks
release_cached_blocks = _allocator.release
uniform = _draws.uniform
swap_order = _draws.swap_order

__all__ = [
    "MODULES",
    "build_info",
    "check_fresh",
    "set_num_threads",
    "get_num_threads",
    "conv2d_forward",
    "uniform",
    "swap_order",
    "flush_denormals_enter",
    "flush_denormals_leave",
    "matmul",
    "dense",
    "DenseKernel",
    "DenseChain",
    "conv2d_backward_input",
    "conv2d_backward_filter",
    "max_pool2d_forward",
    "max_pool2d_backward",
    "avg_pool2d_forward",
    "avg_pool2d_backward",
    "sparse_softmax_xent",
    "first_label_outside",
    "gather_rows",
    "scatter_add_rows",
    "adam_update",
    "adam_update_rows",
    "adam_update_in_place",
    "relu",
    "relu_grad",
    "relu_bias_grad",
    "sgns_train",
    "skipgram_pairs",
    "conv3d_forward",
    "conv3d_backward_input",
    "conv3d_backward_filter",
    "max_pool3d_forward",
    "max_pool3d_backward",
    "avg_pool3d_forward",
    "avg_pool3d_backward",
    "depthwise_conv2d_forward",
    "depthwise_conv2d_backward_input",
    "depthwise_conv2d_backward_filter",
    "reusing_blocks",
    "release_cached_blocks",
    "cores_busy",
    "set_cores_busy",
    "lstm_forward",
    "lstm_backward",
    "gru_forward",
    "gru_backward",
]
