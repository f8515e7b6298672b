"""The GPU backend: CuPy arrays, with RawKernels where CuPy has nothing fast.

The module is written against an array module `xp`: CuPy when a GPU is present, else
NumPy, so everything but the RawKernels (`lib/_kernels/cuda/`, compiled on first use)
also runs, and is tested, without a GPU. An op without a function here runs its NumPy
reference on CuPy arrays: NumPy hands ufuncs and array functions to CuPy (NEP 13 and
18), so the work stays on the GPU, and a reference that needs host memory fails with
CuPy's error rather than copying. Random draws come from the host generator, copied in.

This backend has not yet run on a GPU: what needs one is unverified.

>>> import numpy as np
>>> sparse_softmax_cross_entropy_with_logits(np.zeros((1, 2)), np.array([1]))[0].round(4).tolist()
[0.6931]
"""

from __future__ import annotations

import contextlib

import numpy as np

from tapeflow import _compat
from tapeflow._kernels import cuda
from tapeflow.backends.common import check_labels
from tapeflow.backends.geometry import conv_geometry, padded_extent

xp = _compat.cupy if _compat.has_gpu else np
ON_GPU = xp is not np

FALLS_BACK_TO_REFERENCE = True  # references dispatch to CuPy through NumPy's protocols
HOLDS_NUMPY = False
RUNS_ON_HOST = frozenset(
    {
        *("random_normal", "random_uniform", "truncated_normal", "random_permutation", "candidate_sampler"),
        # queues hold host arrays: an element is copied out on enqueue and in on dequeue
        *("queue_enqueue", "queue_enqueue_many", "queue_dequeue", "queue_dequeue_many", "queue_dequeue_up_to"),
        *("queue_close", "queue_size"),
        "send",  # a rendezvous holds host arrays, as a transfer between workers carries them
        "recv",
    }
)
# Ops this backend cannot run as they are: on a GPU they are an UnsupportedOpError naming the
# op, never a silent copy to the host and back. (The linear algebra references reach
# cupy.linalg through NumPy's protocols.)
UNSUPPORTED: frozenset = frozenset(
    {
        "lu_factor",  # the reference keeps its pivots in a host array; CuPy has no batched getrf
        "segment_prod",  # CuPy's ufunc.at has no multiply
    }
)
_RAW_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_THREADS = 256


def _on(index: int | None):
    """GPU `index` made current for the block; None (or no GPU) keeps the current one."""
    return xp.cuda.Device(index) if ON_GPU and index is not None else contextlib.nullcontext()


# ------------------------------------------------------------ the device boundary
def from_host(array, index: int | None = None):
    """A copy of a host array on GPU `index` (default: the GPU of the op or graph run now)."""
    with _on(index):
        return xp.asarray(array)


def to_host(array) -> np.ndarray:
    return xp.asnumpy(array) if ON_GPU else np.asarray(array)


def conform(array, npdtype, index: int | None = None):
    with _on(None if isinstance(array, xp.ndarray) else index):  # a host result goes to GPU `index`
        return xp.asarray(array, dtype=npdtype)


def dtype_of(array) -> np.dtype:
    return np.dtype(array.dtype)


def enter_numerics(index: int = 0):
    """Make GPU `index` current for the op or graph run (new arrays go there); returns the
    GPU that was current."""
    if not ON_GPU:
        return None
    previous = xp.cuda.Device().id
    xp.cuda.Device(index).use()
    return previous


def leave_numerics(state) -> None:
    """Make the GPU current before the run current again (kernels are queued on the
    current stream as they are called, so nothing waits)."""
    if state is not None:
        xp.cuda.Device(state).use()


def stats(index: int = 0) -> dict:
    return {}


def memory_stats(index: int = 0) -> dict:
    """Bytes of CuPy's memory pool on the device: `in_use` by arrays and `cached` (held by
    the pool for reuse, free to arrays)."""
    if not ON_GPU:
        return {}
    with _on(index):
        pool = xp.get_default_memory_pool()
        used, total = int(pool.used_bytes()), int(pool.total_bytes())
    return {"in_use": used, "cached": total - used}


# ------------------------------------------------------------ RawKernels
def _raw(source: str, name: str, dtype):
    """The RawKernel `name` for `dtype` on a GPU, else None (the xp code runs instead)."""
    suffix = _RAW_DTYPES.get(np.dtype(dtype))
    if not ON_GPU or suffix is None:
        return None
    return cuda.kernel(source, f"{name}_{suffix}")


def sparse_softmax_cross_entropy_with_logits(logits, labels):
    """Loss and gradient in one pass: one block per row on a GPU."""
    logits, labels = xp.asarray(logits), xp.asarray(labels, dtype=np.int64)
    if not ON_GPU:
        check_labels("sparse_softmax_cross_entropy_with_logits", labels, logits.shape[1])
    kernel = _raw("softmax_xent", "sparse_softmax_xent", logits.dtype)
    if kernel is None:
        return _softmax_xent_xp(logits, labels)
    rows, classes = logits.shape
    logits = xp.ascontiguousarray(logits)
    loss, backprop = xp.empty(rows, logits.dtype), xp.empty_like(logits)
    shared = _THREADS * logits.dtype.itemsize
    kernel((rows,), (_THREADS,), (logits, labels, loss, backprop, np.int32(rows), np.int32(classes)), shared_mem=shared)
    return loss, backprop


def _softmax_xent_xp(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    lse = xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    rows = xp.arange(logits.shape[0])
    backprop = xp.exp(shifted - lse)
    backprop[rows, labels] -= 1
    return lse[:, 0] - shifted[rows, labels], backprop


def scatter_add(x, indices, updates, axis):
    """Rows added into a copy of `x` at `indices` (repeats accumulate): atomic adds on a GPU."""
    out = xp.array(x, copy=True)
    ids = xp.asarray(indices, dtype=np.int64).reshape(-1)
    ids = xp.where(ids < 0, ids + x.shape[axis], ids)
    kernel = _raw("scatter_add_rows", "scatter_add_rows", out.dtype) if axis == 0 and out.ndim == 2 else None
    if kernel is None:
        rows = xp.asarray(updates, dtype=out.dtype).reshape(x.shape[:axis] + ids.shape + x.shape[axis + 1 :])
        xp.add.at(out, (slice(None),) * axis + (ids,), rows)
        return out
    values = xp.ascontiguousarray(xp.asarray(updates, dtype=out.dtype).reshape(ids.shape[0], out.shape[1]))
    n, width = ids.shape[0], out.shape[1]
    blocks = (n * width + _THREADS - 1) // _THREADS
    if blocks:
        kernel((blocks,), (_THREADS,), (out, ids, values, np.int64(n), np.int32(width)))
    return out


def bind_word2vec_sgns_train(reference, **attrs):
    """The reference with the tables on the device and the corpus walk's inputs (ids, offsets,
    keep, cum and the scalars) copied to the host once per call."""

    def kernel(syn0, syn1, *walk):
        new0, new1, counts = reference(syn0, syn1, *(to_host(a) for a in walk))
        return new0, new1, from_host(counts)

    return kernel


def gather(x, indices, axis):
    return xp.take(x, xp.asarray(indices), axis=axis)


# ------------------------------------------------------------ dense math
def matmul(a, b):
    return xp.matmul(a, b)


def relu(x):
    return xp.maximum(x, 0)


def relu_grad(g, y):
    return xp.where(y > 0, g, 0).astype(g.dtype, copy=False)


def _bias_activation(y, b, activation):
    y = y + b
    return xp.maximum(y, 0) if activation == "relu" else y


def fused_matmul(a, w, b, activation):
    return _bias_activation(xp.matmul(a, w), b, activation)


def conv2d(x, w, strides, padding, dilations):
    """im2col as a strided view of the padded input, contracted with the filter in one
    tensordot (one GEMM)."""
    kh, kw = w.shape[0], w.shape[1]
    h, wd = x.shape[1], x.shape[2]
    oh, ow, top, left = conv_geometry("conv2d", h, wd, kh, kw, strides, padding, dilations)
    bottom = padded_extent(h, oh, kh, strides[0], dilations[0], top) - h - top
    right = padded_extent(wd, ow, kw, strides[1], dilations[1], left) - wd - left
    padded = xp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    span_h, span_w = (kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1
    windows = xp.lib.stride_tricks.sliding_window_view(padded, (span_h, span_w), axis=(1, 2))
    windows = windows[:, : (oh - 1) * strides[0] + 1 : strides[0], : (ow - 1) * strides[1] + 1 : strides[1]]
    windows = windows[..., :: dilations[0], :: dilations[1]]  # [n, oh, ow, c, kh, kw]
    return xp.tensordot(windows, w, axes=((3, 4, 5), (2, 0, 1))).astype(x.dtype, copy=False)


def fused_conv2d(x, w, b, activation, **conv):
    return _bias_activation(conv2d(x, w, **conv), b, activation)


def _segment(ufunc: str, init: float):
    def kernel(data, ids, num_segments):
        """The reference with its accumulator on the device: rows reduced in float64 into
        num_segments + 1 slots, the last one taking (and dropping) ids out of range."""
        out = xp.full((num_segments + 1, *data.shape[1:]), init, dtype=np.float64)
        ids = xp.where((ids >= 0) & (ids < num_segments), ids, num_segments)
        getattr(xp, ufunc).at(out, ids, data.astype(np.float64))
        return out[:-1].astype(data.dtype)

    return kernel


segment_sum = _segment("add", 0.0)
segment_max = _segment("maximum", -np.inf)
segment_min = _segment("minimum", np.inf)
