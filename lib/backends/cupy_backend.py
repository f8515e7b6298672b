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
import functools

import numpy as np

from tapeflow import _compat
from tapeflow._kernels import cuda
from tapeflow._kernels.cuda import elementwise_source
from tapeflow.backends import cupy_recurrent, window_ops
from tapeflow.backends.common import (
    all_but_last,
    check_distinct,
    check_in_range,
    check_index_range,
    check_labels,
    checked_index_range,
    register_range_check,
    register_ufunc_at,
)
from tapeflow.backends.geometry import conv_geometry

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
    """A copy of a host array on GPU `index` (default: the GPU of the op or graph run now); an
    array already there as it is."""
    if ON_GPU and type(array) is xp.ndarray and (index is None or array.device.id == index):
        return array  # what xp.asarray gives, without entering the device
    with _on(index):
        return xp.asarray(array)


def to_host(array) -> np.ndarray:
    return xp.asnumpy(array) if ON_GPU else np.asarray(array)


def _device_index(part):
    """One part of an index, host arrays copied to the device (slices and numbers as they are)."""
    return from_host(part) if isinstance(part, np.ndarray) else part


def ufunc_at(name: str, out, index, values) -> None:
    """`ufunc.at` on a device array, in the array module's own ufunc (CuPy has add, subtract,
    maximum and minimum); NumPy's ufuncs do not dispatch `at` to device arrays."""
    index = tuple(_device_index(p) for p in index) if isinstance(index, tuple) else _device_index(index)
    getattr(xp, name).at(out, index, _device_index(values))


register_ufunc_at(ufunc_at)


def conform(array, npdtype, index: int | None = None):
    if type(array) is xp.ndarray and array.dtype == npdtype:  # the usual case, at every node of a run
        return array
    with _on(None if isinstance(array, xp.ndarray) else index):  # a host result goes to GPU `index`
        return xp.asarray(array, dtype=npdtype)


def dtype_of(array) -> np.dtype:
    return np.dtype(array.dtype)


def enter_numerics(index: int = 0):
    """Make GPU `index` current for the op or graph run (new arrays go there); returns the
    GPU that was current, or None where it was `index` already (nothing to restore)."""
    if not ON_GPU:
        return None
    previous = xp.cuda.runtime.getDevice()
    if previous == index:
        return None
    xp.cuda.runtime.setDevice(index)
    return previous


def leave_numerics(state) -> None:
    """Make the GPU current before the run current again (kernels are queued on the
    current stream as they are called, so nothing waits)."""
    if state is not None:
        xp.cuda.runtime.setDevice(state)


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


# Values a range check walks in its one block at most (beyond, the array operations' check).
RANGE_CHECK_LIMIT = 1 << 16
_RANGE_CHECK_TYPES = {np.dtype(np.int64): "range_check_i64", np.dtype(np.int32): "range_check_i32"}


def _range_check(values, low: int, high: int):
    """On a GPU, `common.check_in_range`'s device check as one launch of range_check.cu:
    (values clipped into range, the flag [any bad, first bad value], all in range); None
    elsewhere, and for values of another type or more than RANGE_CHECK_LIMIT of them."""
    if not ON_GPU or not isinstance(values, xp.ndarray):
        return None
    function = _RANGE_CHECK_TYPES.get(values.dtype)
    n = values.size
    if function is None or n > RANGE_CHECK_LIMIT or n == 0:
        return None
    flat = xp.ascontiguousarray(values).reshape(-1)
    clipped, flag, ok = xp.empty_like(flat), xp.empty(2, np.int64), xp.empty((), np.bool_)
    args = (flat, np.int64(n), np.int64(low), np.int64(high), clipped, flag, ok)
    cuda.kernel("range_check", function)((1,), (_THREADS,), args, shared_mem=_THREADS * 8)
    return clipped.reshape(values.shape), flag, ok


register_range_check(_range_check)


def sparse_softmax_cross_entropy_with_logits(logits, labels):
    """Loss and gradient in one pass: one block per row on a GPU. Labels are checked on the
    device (read at the end of the step) and clipped into range meanwhile."""
    if type(logits) is not xp.ndarray:
        logits = xp.asarray(logits)
    if type(labels) is not xp.ndarray or labels.dtype != np.int64:
        labels = xp.asarray(labels, dtype=np.int64)
    labels = check_labels("sparse_softmax_cross_entropy_with_logits", labels, logits.shape[1])
    kernel = _raw("softmax_xent", "sparse_softmax_xent", logits.dtype)
    if kernel is None:
        return _softmax_xent_xp(logits, labels)
    rows, classes = logits.shape
    if not logits.flags.c_contiguous:
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
    """Rows added into a copy of `x` at `indices` (repeats accumulate): atomic adds on a GPU.
    Indices are checked on the device (read at the end of the step) and clipped into range
    meanwhile, so that nothing is written outside `x`."""
    out = xp.array(x, copy=True)
    ids = check_index_range("scatter_add", xp.asarray(indices, dtype=np.int64), x.shape[axis], axis).reshape(-1)
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


FUSED_WORD2VEC = ON_GPU  # Word2Vec(device=...) trains through word2vec.cu, not in batches of pairs


def bind_word2vec_sgns_train(reference, window, negative, threads):
    """On a GPU, word2vec.cu's fused kernel: a block per window at a time, Hogwild across
    blocks, on copies of the tables; the corpus goes to the device (where it is not already)
    and the learning rates and seed stay 0-d device arrays, never read on the host. `threads`
    counts CPU threads and has no say here: as many blocks run as fill the GPU at 128 threads
    each, but no more than one per WORD2VEC_ROWS_PER_BLOCK rows of the vocabulary, so that
    windows in flight at once seldom update the same rows of a small vocabulary. Without a GPU (or for a window whose
    block would not fit in shared memory): the reference, with the corpus walk's inputs copied
    to the host once per call."""

    def host_walk(syn0, syn1, *walk):
        new0, new1, counts = reference(syn0, syn1, *(to_host(a) for a in walk))
        return new0, new1, from_host(counts)

    def fused(syn0, syn1, ids, offsets, keep, cum, alpha_start, alpha_end, seed):
        function = _raw("word2vec", "word2vec_sgns", syn0.dtype)
        launch = word2vec_launch(dtype_of(syn0).itemsize, syn0.shape[1], window, negative)
        if function is None or launch is None:
            return host_walk(syn0, syn1, ids, offsets, keep, cum, alpha_start, alpha_end, seed)
        vocab, dim = syn0.shape
        new0, new1 = xp.array(syn0, order="C", copy=True), xp.array(syn1, order="C", copy=True)
        counts = xp.zeros(3, dtype=np.int64)
        total = ids.shape[0]
        if total == 0 or dim == 0:
            return new0, new1, counts
        ids, _ = check_in_range(xp.asarray(ids), 0, vocab, functools.partial(_word_id_error, "word id", vocab))
        bounds = functools.partial(_word_id_error, "sentence offset", total + 1)
        offsets, _ = check_in_range(xp.asarray(offsets, dtype=np.int64), 0, total + 1, bounds)
        block, lanes, shared = launch
        blocks = min(total, 16 * _multiprocessors(), max(1, vocab // WORD2VEC_ROWS_PER_BLOCK))
        args = (
            new0,
            new1,
            xp.ascontiguousarray(ids, dtype=np.int32),
            xp.ascontiguousarray(offsets, dtype=np.int64),
            np.int64(offsets.shape[0] - 1),
            xp.ascontiguousarray(xp.asarray(keep), dtype=np.float64),  # the tables may come from the host
            xp.ascontiguousarray(xp.asarray(cum), dtype=np.int64),
            _device_float64(alpha_start),
            _device_float64(alpha_end),
            seed.astype(np.int64) if isinstance(seed, xp.ndarray) else from_host(np.asarray(seed, np.int64)),
            np.int64(total),
            *(np.int32(v) for v in (vocab, dim, window, negative, lanes)),
            counts,
        )
        function((blocks,), (block,), args, shared_mem=shared)
        return new0, new1, counts

    return fused if ON_GPU else host_walk


# Vocabulary rows per block in flight: windows updating the same rows at once lose updates.
WORD2VEC_ROWS_PER_BLOCK = 64


def _word_id_error(what: str, size: int, bad) -> IndexError:
    return IndexError(f"word2vec_sgns_train: {what} {bad} is out of range [0, {size})")


_MULTIPROCESSORS: dict = {}


def _multiprocessors() -> int:
    """The current GPU's streaming multiprocessors (asked once per GPU)."""
    index = xp.cuda.Device().id
    if index not in _MULTIPROCESSORS:
        _MULTIPROCESSORS[index] = int(xp.cuda.Device(index).attributes["MultiProcessorCount"])
    return _MULTIPROCESSORS[index]


def word2vec_shared_bytes(itemsize: int, window: int, negative: int, threads: int, lanes: int) -> int:
    """Bytes of shared memory a block of word2vec.cu's kernel takes (the layout in its header)."""
    outs, span = negative + 1, 2 * window
    pairs = span * outs
    return 16 + itemsize * (pairs * (lanes + 1) + pairs + outs * threads) + 4 * (span + outs)


def word2vec_launch(itemsize: int, dim: int, window: int, negative: int) -> tuple | None:
    """(threads, lanes, shared bytes) of a block of word2vec.cu's kernel: 128 threads, and up
    to 32 lanes over the dimension per dot product, fewer where 48 KiB of shared memory is
    short; None where not even 32 threads with one lane fit.

    >>> word2vec_launch(4, 100, 5, 5)
    (128, 32, 11312)
    """
    widest = 1 << min(5, max(0, dim.bit_length() - 1))
    for threads in (128, 64, 32):
        for lanes in (32, 16, 8, 4, 2, 1):
            size = word2vec_shared_bytes(itemsize, window, negative, threads, lanes)
            if lanes <= widest and size <= 48 * 1024:
                return threads, lanes, size
    return None


# ------------------------------------------------------------ generated ElementwiseKernels
def bind_fused_elementwise(reference, program):
    """One generated ElementwiseKernel per program and float32/float64 dtype on a GPU, CuPy
    broadcasting the inputs; the reference for half floats and without a GPU."""
    if not ON_GPU:
        return reference
    kernels: dict = {}

    def run(*arrays):
        dtype = arrays[0].dtype
        name = _FLOAT_NAMES.get(dtype)
        if name is None or any(a.dtype != dtype for a in arrays):
            return reference(*arrays)
        key = (cuda.elementwise, name, len(arrays))
        kernel = kernels.get(key)
        if kernel is None:
            kernel = kernels[key] = cuda.elementwise(elementwise_source.fused_elementwise(program, len(arrays), name))
        return kernel(*arrays)

    return run


def _device_float64(value):
    """`value` (a 0-d device array or a number) as a float64 device array, read nowhere else."""
    if isinstance(value, xp.ndarray):
        return value.astype(np.float64, copy=False)
    return from_host(np.asarray(value, np.float64))


# The dtypes generated kernels take, by dtype (a dict lookup: a dtype's `name` is slow to ask).
_FLOAT_NAMES = {np.dtype(name): name for name in elementwise_source.CTYPES}
_SCALAR_NAMES = {np.dtype(name): name for name in elementwise_source.SCALAR_CTYPES}


def _kernel_scalar(value) -> tuple:
    """(`value` as a generated kernel reads it, the name of its type): a 0-d device array of a
    type in `elementwise_source.SCALAR_CTYPES` as it is (no conversion before the launch), any
    other value as a float64 device array."""
    if type(value) is xp.ndarray and value.ndim == 0:
        name = _SCALAR_NAMES.get(value.dtype)
        if name is not None:
            return value, name
    return _device_float64(value), "float64"


def _adam_kernel(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v):
    """(Adam's generated kernel for the arrays' one float32/float64 dtype, and lr and step as it
    takes them) on a GPU; else None."""
    name = _FLOAT_NAMES.get(param.dtype) if ON_GPU else None
    if name is None or not m.dtype == v.dtype == grad.dtype == param.dtype:
        return None
    (lr, lr_type), (step, step_type) = _kernel_scalar(lr), _kernel_scalar(step)
    settings = (name, beta1, beta2, epsilon, epsilon_on_sqrt_v, (lr_type, step_type))
    return _update_kernel(cuda.elementwise, elementwise_source.adam_update, *settings), lr, step


def adam_update(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """One generated kernel per variable on a GPU, reading `lr` and `step` on the device (never
    on the host), as they come; elsewhere the reference's arithmetic in array ops, as free of
    host reads."""
    found = _adam_kernel(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)
    if found is not None:
        kernel, lr, step = found
        return tuple(kernel(param, m, v, grad, lr, step))
    dtype = dtype_of(param)
    lr, step = _device_float64(lr), _device_float64(step)
    bias1 = (1.0 - xp.power(beta1, step)).astype(dtype)
    bias2 = (1.0 - xp.power(beta2, step)).astype(dtype)
    m_new = beta1 * m + (1.0 - beta1) * grad
    v_new = beta2 * v + (1.0 - beta2) * grad * grad
    # with epsilon_on_sqrt_v the reference's epsilon is a float64 scalar, and the step float64 too
    eps = epsilon / xp.sqrt(1.0 - xp.power(beta2, step)) if epsilon_on_sqrt_v else epsilon
    p_new = param - lr.astype(dtype) * (m_new / bias1) / (xp.sqrt(v_new / bias2) + eps)
    return p_new.astype(dtype), m_new.astype(dtype), v_new.astype(dtype)


def adam_update_in_place(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """`adam_update` writing param, m and v themselves (the executor's form for variables it
    owns): on a GPU the same generated kernel with them as its outputs (each element is read,
    then written, by one thread), so that a step allocates nothing; returns them."""
    found = _adam_kernel(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)
    if found is not None and param.shape == m.shape == v.shape == grad.shape:
        kernel, lr, step = found
        kernel(param, m, v, grad, lr, step, param, m, v)
        return param, m, v
    new = adam_update(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)
    for table, value in zip((param, m, v), new, strict=True):
        table[...] = value
    return param, m, v


def sparse_adam_update(param, m, v, indices, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """`sparse_adam_update_in_place` on copies of the tables."""
    tables = tuple(t.copy() for t in (param, m, v))
    return sparse_adam_update_in_place(*tables, indices, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)


def sparse_adam_update_in_place(param, m, v, indices, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """`adam_update` on the rows taken out of the tables, written back into them (the
    executor's form for variables it owns). The rows' range and distinctness are checked on the
    device (read at the end of the step); until then the tables are written whole or not at all."""
    rows, in_range = checked_index_range("sparse_adam_update", xp.asarray(indices), param.shape[0], 0)
    rows = rows.reshape(-1)
    rows = xp.where(rows < 0, rows + param.shape[0], rows)
    distinct = check_distinct("sparse_adam_update", rows)
    old = tuple(xp.take(t, rows, axis=0) for t in (param, m, v))
    parts = adam_update(*old, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)
    ok = _all_of(in_range, distinct)
    for table, before, part in zip((param, m, v), old, parts, strict=True):
        table[rows] = part if ok is None else xp.where(ok, part, before)
    return param, m, v


def _all_of(*flags):
    """The device flags that are not None, and-ed (None when there are none)."""
    present = [f for f in flags if f is not None]
    if not present:
        return None
    out = present[0]
    for flag in present[1:]:
        out = out & flag
    return out


@functools.cache
def _update_kernel(compile_source, make, *settings):
    """`compile_source(make(*settings))`, made once: a launch looks its kernel up rather than
    writing its source."""
    return compile_source(make(*settings))


def _one_kernel_per_step(reference, make, settings: tuple, split):
    """An optimizer step as one generated kernel per variable on a GPU, for float32 and float64
    parameters: `split(inputs)` gives (the arrays, in the kernel's order; the learning rate and
    step), the scalars going in as they are (or as float64 device arrays where the kernel cannot
    read their type), never read on the host; the source is written once per dtype and the
    scalars' types. Elsewhere (and for other dtypes) the reference, which keeps device scalars on
    the device as well."""
    if not ON_GPU:
        return reference

    def run(*inputs):
        arrays, scalars = split(inputs)
        dtype = arrays[0].dtype
        name = _FLOAT_NAMES.get(dtype)
        if name is None or any(a.dtype != dtype for a in arrays):
            return reference(*inputs)
        scalars = [_kernel_scalar(s) for s in scalars]
        types = tuple(t for _, t in scalars)
        kernel = _update_kernel(cuda.elementwise, make, name, *settings, *types)
        return tuple(kernel(*arrays, *(s for s, _ in scalars)))

    return run


def bind_sgd_momentum_update(reference, momentum, nesterov=False):
    make = elementwise_source.sgd_momentum_update
    return _one_kernel_per_step(reference, make, (momentum, nesterov), lambda ins: (ins[:3], ins[3:]))


def bind_rmsprop_update(reference, rho, momentum, epsilon, centered):
    make = elementwise_source.rmsprop_update
    return _one_kernel_per_step(
        reference, make, (rho, momentum, epsilon, centered), lambda ins: ((*ins[:3], *ins[4:]), ins[3:4])
    )


def bind_adagrad_update(reference, epsilon):
    make = elementwise_source.adagrad_update
    return _one_kernel_per_step(reference, make, (epsilon,), lambda ins: (ins[:3], ins[3:]))


def bind_adamw_update(reference, weight_decay, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    """The kernel of the learning rate's float type, which the weight decay is computed in."""
    if not ON_GPU:
        return reference
    make, settings = elementwise_source.adamw_update, (weight_decay, beta1, beta2, epsilon, epsilon_on_sqrt_v)
    by_rate = {
        rate: _one_kernel_per_step(reference, make, (*settings, rate), lambda ins: (ins[:4], ins[4:]))
        for rate in elementwise_source.CTYPES
    }

    def run(*inputs):
        rate = _FLOAT_NAMES.get(np.dtype(getattr(inputs[4], "dtype", np.float64)))
        return by_rate[rate](*inputs) if rate in by_rate else reference(*inputs)

    return run


def gather(x, indices, axis):
    """Indices are checked on the device (read at the end of the step) and clipped into
    range meanwhile."""
    return xp.take(x, check_index_range("gather", xp.asarray(indices), x.shape[axis], axis), axis=axis)


# ------------------------------------------------------------ dense math
def matmul(a, b):
    return xp.matmul(a, b)


def relu(x):
    return xp.maximum(x, 0)


def relu_grad(g, y):
    """One generated kernel on a GPU (no boolean mask in between)."""
    name = _FLOAT_NAMES.get(g.dtype) if ON_GPU else None
    if name is not None and y.dtype == g.dtype and y.shape == g.shape:
        return _update_kernel(cuda.elementwise, elementwise_source.relu_grad, name)(g, y)
    return xp.where(y > 0, g, 0).astype(g.dtype, copy=False)


def relu_bias_grad(g, y):
    """relu_grad's kernel, then the sum over every axis but the last."""
    gz = relu_grad(g, y)
    summed = _sum_leading(gz)
    if summed is None:
        summed = gz.sum(axis=tuple(range(gz.ndim - 1))).astype(gz.dtype, copy=False)
    return gz, summed


_ONES: dict = {}  # (dtype, GPU) -> a vector of ones, as long as the longest asked for yet


def _sum_leading(x):
    """On a GPU, the sum of a C-contiguous float32/float64 array over every axis but the last
    as one cuBLAS product (a row of ones times the rows): a reduction down the columns of a
    tall array is the slowest kind for CuPy's reduction kernels. None elsewhere."""
    if not ON_GPU or x.dtype not in _RAW_DTYPES or x.ndim < 2 or x.size == 0 or not x.flags.c_contiguous:
        return None
    rows = x.size // x.shape[-1]
    key = (x.dtype, x.device)
    ones = _ONES.get(key)
    if ones is None or ones.shape[0] < rows:
        ones = _ONES[key] = xp.ones(rows, x.dtype)
    return xp.matmul(ones[:rows], x.reshape(rows, x.shape[-1]))


def _bias_activation(y, b, activation):
    y = y + b
    return xp.maximum(y, 0) if activation == "relu" else y


_BIAS_PROGRAMS = {
    "linear": (("input", 0), ("input", 1), ("add", 0, 1)),
    "relu": (("input", 0), ("input", 1), ("add", 0, 1), ("relu", 2)),
}


def _bias_source(dtype: str, activation: str):
    return elementwise_source.fused_elementwise(_BIAS_PROGRAMS[activation], 2, dtype)


def fused_matmul(a, w, b, activation):
    """The product, then the bias and activation written into it (it is new, nothing else holds
    it): one generated kernel on a GPU, in-place array operations elsewhere."""
    return _add_bias(xp.matmul(a, w), b, activation)


def _add_bias(y, b, activation):
    """`y` (a new array: nothing else holds it) plus the bias `b` along its last axis, then the
    activation, written into `y`."""
    if y.dtype != b.dtype or y.ndim == 0:
        return _bias_activation(y, b, activation)
    name = _FLOAT_NAMES.get(y.dtype) if ON_GPU else None
    if name is not None:
        return _update_kernel(cuda.elementwise, _bias_source, name, activation)(y, b, y)
    xp.add(y, b, out=y)
    if activation == "relu":
        xp.maximum(y, 0, out=y)
    return y


def sum(x, axes, keepdims):  # noqa: A001 - the op's name
    """The reference's sum as the array's own method (no NumPy dispatch on the way); over every
    axis but the last (a bias's gradient), one product on a GPU."""
    if all_but_last(axes, x.ndim):
        summed = _sum_leading(x)
        if summed is not None:
            return summed.reshape((1,) * (x.ndim - 1) + summed.shape) if keepdims else summed
    return x.sum(axis=axes, dtype=x.dtype if x.dtype != np.bool_ else np.int64, keepdims=keepdims)


# ------------------------------------------------------------ 2-D window ops (window.cu around cuBLAS products)
# On a GPU, float32 and float64 2-D convolutions are an im2col (or a 1x1 filter's input as it
# is) and one cuBLAS product, their input gradients a product and a col2im, and max and average
# pooling one kernel each way. Elsewhere, and for other dtypes and ranks, window_ops' views and
# tensordots.
def _window_kernel(name: str, *arrays):
    """window.cu's `name` for the arrays' one float dtype on a GPU, else None."""
    dtype = arrays[0].dtype
    return _raw("window", name, dtype) if all(a.dtype == dtype for a in arrays[1:]) else None


def _launch_window(function, arrays, total: int, sizes) -> None:
    """One thread per element written (`total` of them); `sizes` go as 32-bit ints."""
    if total:
        blocks = (total + _THREADS - 1) // _THREADS
        function((blocks,), (_THREADS,), (*arrays, np.int64(total), *(np.int32(v) for v in sizes)))


def _plane(name, image_shape, ksize, strides, padding, dilations, out_shape=None):
    """(oh, ow, top, left) of a 2-D window op over an image of `image_shape` [n, h, w, c];
    `out_shape`, where given, must hold (oh, ow) at [1:3] (a GPU kernel would read past it)."""
    oh, ow, top, left = conv_geometry(name, *image_shape[1:3], *ksize, strides, padding, dilations)
    if out_shape is not None and tuple(out_shape[1:3]) != (oh, ow):
        raise ValueError(f"{name}: gradient {tuple(out_shape)} does not fit input {tuple(image_shape)} ({oh}x{ow})")
    return oh, ow, top, left


def _columns(function, x, ksize, strides, dilations, plane):
    """x's windows as rows [n * oh * ow, kh * kw * c]: x itself where every window is one pixel."""
    n, h, w, c = x.shape
    oh, ow, top, left = plane
    if ksize == (1, 1) and tuple(strides) == (1, 1) and (oh, ow, top, left) == (h, w, 0, 0):
        return x.reshape(-1, c)
    cols = xp.empty((n * oh * ow, ksize[0] * ksize[1] * c), x.dtype)
    _launch_window(function, (x, cols), cols.size, (h, w, c, oh, ow, *ksize, *strides, *dilations, top, left))
    return cols


def conv2d(x, w, strides, padding, dilations):
    function = _window_kernel("im2col", x, w)
    if function is None:
        return window_ops.conv(xp, x, w, strides, padding, dilations, "conv2d")
    x, kh, kw, o = xp.ascontiguousarray(x), *w.shape[:2], w.shape[3]
    plane = _plane("conv2d", x.shape, (kh, kw), strides, padding, dilations)
    cols = _columns(function, x, (kh, kw), strides, dilations, plane)
    y = xp.matmul(cols, xp.ascontiguousarray(w).reshape(-1, o))
    return y.reshape(x.shape[0], plane[0], plane[1], o)


def conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    function = _window_kernel("im2col", x, dy)
    if function is None:
        return window_ops.conv_filter_grad(xp, x, dy, filter_size, strides, padding, dilations, "conv2d_filter_grad")
    x, ksize, o = xp.ascontiguousarray(x), tuple(filter_size), dy.shape[3]
    plane = _plane("conv2d_filter_grad", x.shape, ksize, strides, padding, dilations, dy.shape)
    cols = _columns(function, x, ksize, strides, dilations, plane)
    return xp.matmul(cols.T, xp.ascontiguousarray(dy).reshape(-1, o)).reshape(*ksize, x.shape[3], o)


def conv2d_input_grad(dy, w, input_size, strides, padding, dilations):
    function = _window_kernel("col2im", dy, w)
    if function is None:
        return window_ops.conv_input_grad(xp, dy, w, input_size, strides, padding, dilations, "conv2d_transpose")
    kh, kw, c, o = w.shape
    (h, width), n = input_size, dy.shape[0]
    oh, ow, top, left = _plane("conv2d_transpose", (n, h, width, c), (kh, kw), strides, padding, dilations, dy.shape)
    dcols = xp.matmul(xp.ascontiguousarray(dy).reshape(-1, o), xp.ascontiguousarray(w).reshape(-1, o).T)
    if (kh, kw) == (1, 1) and tuple(strides) == (1, 1) and (oh, ow, top, left) == (h, width, 0, 0):
        return dcols.reshape(n, h, width, c)
    dx = xp.empty((n, h, width, c), dy.dtype)
    _launch_window(function, (dcols, dx), dx.size, (h, width, c, oh, ow, kh, kw, *strides, *dilations, top, left))
    return dx


def conv3d(x, w, strides, padding, dilations):
    return window_ops.conv(xp, x, w, strides, padding, dilations, "conv3d")


def conv3d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    return window_ops.conv_filter_grad(xp, x, dy, filter_size, strides, padding, dilations, "conv3d_filter_grad")


def conv3d_input_grad(dy, w, input_size, strides, padding, dilations):
    return window_ops.conv_input_grad(xp, dy, w, input_size, strides, padding, dilations, "conv3d_transpose")


def depthwise_conv2d(x, w, strides, padding, dilations):
    return window_ops.depthwise(xp, x, w, strides, padding, dilations)


def depthwise_conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    return window_ops.depthwise_filter_grad(xp, x, dy, filter_size, strides, padding, dilations)


def depthwise_conv2d_input_grad(dy, w, input_size, strides, padding, dilations):
    return window_ops.depthwise_input_grad(xp, dy, w, input_size, strides, padding, dilations)


def _pool2d(name: str, function, x, ksize, strides, padding):
    """One launch of window.cu's pooling `function` over x, one thread per output element."""
    x = xp.ascontiguousarray(x)
    n, h, w, c = x.shape
    oh, ow, top, left = _plane(name, x.shape, ksize, strides, padding, (1, 1))
    out = xp.empty((n, oh, ow, c), x.dtype)
    _launch_window(function, (x, out), out.size, (h, w, c, oh, ow, *ksize, *strides, top, left))
    return out


def max_pool2d(x, ksize, strides, padding):
    function = _window_kernel("max_pool", x)
    if function is None:
        return window_ops.max_pool(xp, x, ksize, strides, padding, "max_pool2d")
    return _pool2d("max_pool2d", function, x, ksize, strides, padding)


def max_pool2d_grad(x, dy, ksize, strides, padding):
    """Each input cell gathers the gradients of the windows whose first maximum it is."""
    function = _window_kernel("max_pool_grad", x, dy)
    if function is None:
        return window_ops.max_pool_grad(xp, x, dy, ksize, strides, padding, "max_pool2d")
    x, dy = xp.ascontiguousarray(x), xp.ascontiguousarray(dy)
    n, h, w, c = x.shape
    oh, ow, top, left = _plane("max_pool2d_grad", x.shape, ksize, strides, padding, (1, 1), dy.shape)
    dx = xp.empty_like(x)
    _launch_window(function, (x, dy, dx), dx.size, (h, w, c, oh, ow, *ksize, *strides, top, left))
    return dx


def max_pool2d_grad_grad(x, g, ksize, strides, padding):
    return window_ops.max_pool_grad_grad(xp, x, g, ksize, strides, padding, "max_pool2d")


def avg_pool2d(x, ksize, strides, padding):
    """The mean of each window's cells inside the input (padding not counted)."""
    function = _window_kernel("avg_pool", x)
    if function is None:
        return window_ops.avg_pool(xp, x, ksize, strides, padding, "avg_pool2d")
    return _pool2d("avg_pool2d", function, x, ksize, strides, padding)


def avg_pool2d_grad(dy, input_size, ksize, strides, padding):
    """Each input cell gathers its windows' gradients, each over its window's cells."""
    function = _window_kernel("avg_pool_grad", dy)
    if function is None:
        return window_ops.avg_pool_grad(xp, dy, input_size, ksize, strides, padding, "avg_pool2d")
    dy = xp.ascontiguousarray(dy)
    (h, w), n, c = input_size, dy.shape[0], dy.shape[3]
    oh, ow, top, left = _plane("avg_pool2d_grad", (n, h, w, c), ksize, strides, padding, (1, 1), dy.shape)
    dx = xp.empty((n, h, w, c), dy.dtype)
    _launch_window(function, (dy, dx), dx.size, (h, w, c, oh, ow, *ksize, *strides, top, left))
    return dx


def max_pool3d(x, ksize, strides, padding):
    return window_ops.max_pool(xp, x, ksize, strides, padding, "max_pool3d")


def max_pool3d_grad(x, dy, ksize, strides, padding):
    return window_ops.max_pool_grad(xp, x, dy, ksize, strides, padding, "max_pool3d")


def max_pool3d_grad_grad(x, g, ksize, strides, padding):
    return window_ops.max_pool_grad_grad(xp, x, g, ksize, strides, padding, "max_pool3d")


def avg_pool3d(x, ksize, strides, padding):
    return window_ops.avg_pool(xp, x, ksize, strides, padding, "avg_pool3d")


def avg_pool3d_grad(dy, input_size, ksize, strides, padding):
    return window_ops.avg_pool_grad(xp, dy, input_size, ksize, strides, padding, "avg_pool3d")


def fused_conv2d(x, w, b, activation, **conv):
    return _add_bias(conv2d(x, w, **conv), b, activation)


def segment_sum(data, ids, num_segments):
    """The reference with its accumulator on the device: rows added in float64 into
    num_segments + 1 slots, the last one taking (and dropping) ids out of range."""
    out = xp.zeros((num_segments + 1, *data.shape[1:]), dtype=np.float64)
    ids = xp.where((ids >= 0) & (ids < num_segments), ids, num_segments)
    xp.add.at(out, ids, data.astype(np.float64))
    return out[:-1].astype(data.dtype)


_SIGN = np.uint64(1 << 63)
_ONE, _SHIFT = np.uint64(1), np.uint64(63)


def _ordered_key(x64):
    """float64 values as uint64 keys in the same order (-inf lowest, +inf highest; -0.0 just
    below 0.0)."""
    bits = x64.view(np.uint64)
    return xp.where((bits >> _SHIFT) == _ONE, ~bits, bits | _SIGN)


def _from_key(key):
    bits = xp.where((key >> _SHIFT) == _ONE, key ^ _SIGN, ~key)
    return bits.view(np.float64)


def _host_key(value: float) -> np.uint64:
    """`_ordered_key` of one number, on the host."""
    bits = int(np.float64(value).view(np.uint64))
    return np.uint64(~bits & ((1 << 64) - 1) if bits >> 63 else bits | (1 << 63))


def _segment_extreme(ufunc: str, init: float):
    nan_key = np.uint64((1 << 64) - 1) if ufunc == "maximum" else np.uint64(0)  # wins every comparison
    init_key = _host_key(init)

    def kernel(data, ids, num_segments):
        """The reference's extremes, exactly: rows reduced into num_segments + 1 slots (the last
        one taking, and dropping, ids out of range) as order-preserving uint64 keys of their
        float64 values, NaN a key that wins, so that `ufunc.at` runs on integers. (CuPy 14's
        maximum.at and minimum.at on float64 compare through fmaxf and fminf: each slot they
        reach is rounded to float32, and the maxima no longer equal the rows they came from.)"""
        x = data.astype(np.float64)
        keys = xp.where(xp.isnan(x), nan_key, _ordered_key(x))
        out = xp.full((num_segments + 1, *data.shape[1:]), init_key, dtype=np.uint64)
        ids = xp.where((ids >= 0) & (ids < num_segments), ids, num_segments)
        getattr(xp, ufunc).at(out, ids, keys)
        out = out[:-1]
        return xp.where(out == nan_key, np.nan, _from_key(out)).astype(data.dtype)

    return kernel


segment_max = _segment_extreme("maximum", -np.inf)
segment_min = _segment_extreme("minimum", np.inf)


# ------------------------------------------------------------ recurrent sequences (a GEMM and a cell kernel a step)
def _cell_kernels():
    """How the recurrent cells are compiled: generated ElementwiseKernels on a GPU, else None
    (array operations)."""
    return cuda.elementwise if ON_GPU else None


def lstm_sequence(inputs, h0, c0, recurrent_kernel, *mask, go_backwards=False):
    return cupy_recurrent.lstm_sequence(
        xp, inputs, h0, c0, recurrent_kernel, *mask, go_backwards=go_backwards, elementwise=_cell_kernels()
    )


def lstm_sequence_grad(gys, gh, gc, h0, c0, recurrent_kernel, ys, cs, acts, *mask, go_backwards=False):
    args = (gys, gh, gc, h0, c0, recurrent_kernel, ys, cs, acts, *mask)
    return cupy_recurrent.lstm_sequence_grad(xp, *args, go_backwards=go_backwards, elementwise=_cell_kernels())


def gru_sequence(inputs, h0, recurrent_kernel, recurrent_bias, *mask, reset_after=True, go_backwards=False):
    args = (inputs, h0, recurrent_kernel, recurrent_bias, *mask)
    attrs = {"reset_after": reset_after, "go_backwards": go_backwards}
    return cupy_recurrent.gru_sequence(xp, *args, **attrs, elementwise=_cell_kernels())


def gru_sequence_grad(gys, gh, h0, recurrent_kernel, ys, acts, *mask, reset_after=True, go_backwards=False):
    attrs = {"reset_after": reset_after, "go_backwards": go_backwards}
    return cupy_recurrent.gru_sequence_grad(
        xp, gys, gh, h0, recurrent_kernel, ys, acts, *mask, **attrs, elementwise=_cell_kernels()
    )
