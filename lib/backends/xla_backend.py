"""The XLA backend: every op lowers to torch operations on a torch_xla device.

torch_xla records operations lazily and compiles what it has recorded when the work is
launched. An eager op is launched on its own (one small computation per op and shape,
compiled once and cached); a graph run records every node, including the state writes,
and launches once, so a frozen training step is one XLA computation that compiles on
the first call and replays afterwards (`stats()["compiles"]` counts compilations).

Ops in `UNSUPPORTED` have no lowering; running one on an XLA device raises
`UnsupportedOpError` rather than moving the work to the CPU. Random draws come from the
host generator and are copied in, so a seed gives the same numbers on every device.

>>> from tapeflow import _compat
>>> {"cond", "while_loop"} <= UNSUPPORTED if _compat.has_xla else True
True
"""

from __future__ import annotations

import threading

import numpy as np

from tapeflow import _compat
from tapeflow.backends.geometry import conv_geometry, padded_extent

_XLA = _compat.require_xla()
torch, F = _XLA.torch, _XLA.torch.nn.functional

FALLS_BACK_TO_REFERENCE = False  # an op without a lowering is an error, never a silent CPU run
HOLDS_NUMPY = False
RUNS_ON_HOST = frozenset(
    {
        "random_normal",
        "random_uniform",
        "truncated_normal",
        "random_permutation",
        "candidate_sampler",
        "random_integers",
        "random_gamma",
        "random_binomial",
        "random_beta",
    }
)
UNSUPPORTED = frozenset(
    {
        "categorical",
        "cond",
        "custom_gradient",
        "recv",  # a partition's ends of a transfer between workers, which run on the CPU
        "send",
        "unique_sum",  # its output's length depends on the values (distinct rows)
        "while_loop",
        "while_loop_grad",
        "word2vec_sgns_train",  # the fused CPU kernel, Hogwild threads over host memory
        # Keras's linear algebra, sorting, segment, spectral and 3-D window ops: no lowering yet
        "argsort",
        "avg_pool3d",
        "avg_pool3d_grad",
        "cholesky",
        "conv3d",
        "conv3d_filter_grad",
        "conv3d_input_grad",
        "cumprod",
        "det",
        "dft",
        "eigh",
        "einsum",
        "inv",
        "logdet",
        "logdet_grad",
        "lu_factor",
        "max_pool3d",
        "max_pool3d_grad",
        "max_pool3d_grad_grad",
        "put_along_axis_add",
        "qr",
        "quantile",
        "quantile_weights",
        "searchsorted",
        "segment_max",
        "segment_min",
        "segment_prod",
        "segment_sum",
        "slogdet",
        "solve",
        "solve_triangular",
        "sort",
        "svd",
        "take_along_axis",
        "top_k",
        "unravel_index",
        "view",
    }
)

_TORCH = {
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.bool_): torch.bool,
}
_NUMPY = {t: n for n, t in _TORCH.items()}
if _compat.ml_dtypes is not None:
    _TORCH[np.dtype(_compat.ml_dtypes.bfloat16)] = torch.bfloat16
    _NUMPY[torch.bfloat16] = np.dtype(_compat.ml_dtypes.bfloat16)


_CURRENT = threading.local()  # the index of the device the op or graph run now uses


def _device(index: int | None = None):
    return _XLA.device(getattr(_CURRENT, "index", 0) if index is None else index)


# ------------------------------------------------------------ the device boundary
def from_host(array, index: int | None = None):
    """A copy of a host array on XLA device `index` (default: the device of the op or graph
    run now); a device tensor is returned as is."""
    if isinstance(array, torch.Tensor):
        return array
    array = np.asarray(array)
    array = np.array(array, copy=True) if not array.flags.writeable else array
    if array.dtype.kind == "V":  # bfloat16 (ml_dtypes): torch reads its bits as int16
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to(_device(index))
    return torch.from_numpy(array).to(_device(index))


def to_host(array) -> np.ndarray:
    """The device tensor as a NumPy array (this waits for pending work)."""
    host = array.detach().cpu()
    if host.dtype is torch.bfloat16:
        return host.view(torch.int16).numpy().view(_NUMPY[torch.bfloat16])
    return host.numpy()


def conform(array, npdtype, index: int | None = None):
    if not isinstance(array, torch.Tensor):  # a host result goes to device `index`
        return from_host(np.asarray(array, dtype=npdtype), index)
    want = _TORCH[np.dtype(npdtype)]
    return array if array.dtype is want else array.to(want)


def dtype_of(array) -> np.dtype:
    return _NUMPY[array.dtype]


def enter_numerics(index: int = 0):
    """Launch work recorded outside ops (a variable's assign_add), so that an op or a graph
    run starts from device data and records the same computation every time; host values
    the run copies in (constants, random draws) go to device `index`. Returns the index
    before."""
    _XLA.sync()
    previous = getattr(_CURRENT, "index", 0)
    _CURRENT.index = index
    return previous


def leave_numerics(state) -> None:
    """Launch what was recorded since the last launch: one computation per eager op or graph run."""
    _XLA.sync()
    _CURRENT.index = state


def stats(index: int = 0) -> dict:
    """Compilations and executions of XLA computations in this process so far."""
    return _XLA.counters()


def memory_stats(index: int = 0) -> dict:
    return {}  # torch_xla reports no pool on the CPU


def _t(a):
    """An op input as a device tensor (a host constant, such as a Python scalar, is copied in)."""
    return a if isinstance(a, torch.Tensor) else from_host(a)


# ------------------------------------------------------------ elementwise
def _unary(fn):
    return lambda x: fn(_t(x))


def _binary(fn):
    return lambda x, y: fn(_t(x), _t(y))


neg = _unary(torch.neg)
abs = _unary(torch.abs)  # noqa: A001 - op names
sign = _unary(torch.sign)
exp = _unary(torch.exp)
log = _unary(torch.log)
log1p = _unary(torch.log1p)
sqrt = _unary(torch.sqrt)
rsqrt = _unary(torch.rsqrt)
square = _unary(lambda x: x * x)
reciprocal = _unary(torch.reciprocal)
sin = _unary(torch.sin)
cos = _unary(torch.cos)
tanh = _unary(torch.tanh)
sigmoid = _unary(torch.sigmoid)
erf = _unary(torch.erf)
identity = _unary(lambda x: x)
stop_gradient = identity
relu = _unary(torch.relu)
softplus = _unary(lambda x: torch.logaddexp(x, torch.zeros_like(x)))
logical_not = _unary(torch.logical_not)
arccos = _unary(torch.arccos)
arccosh = _unary(torch.arccosh)
arcsin = _unary(torch.arcsin)
arcsinh = _unary(torch.arcsinh)
arctan = _unary(torch.arctan)
arctanh = _unary(torch.arctanh)
sinh = _unary(torch.sinh)
cosh = _unary(torch.cosh)
tan = _unary(torch.tan)
expm1 = _unary(torch.expm1)
cbrt = _unary(lambda x: torch.sign(x) * torch.abs(x) ** (1.0 / 3.0))
floor = _unary(torch.floor)
ceil = _unary(torch.ceil)
trunc = _unary(torch.trunc)
isnan = _unary(torch.isnan)
isinf = _unary(torch.isinf)
isfinite = _unary(torch.isfinite)
signbit = _unary(torch.signbit)
erfinv = _unary(torch.erfinv)
bessel_i0 = _unary(torch.special.i0)
bessel_i1 = _unary(torch.special.i1)
bitwise_invert = _unary(torch.bitwise_not)

add = _binary(torch.add)
subtract = _binary(torch.sub)
multiply = _binary(torch.mul)
divide = _binary(torch.true_divide)
pow = _binary(torch.pow)  # noqa: A001 - op names
maximum = _binary(torch.maximum)
minimum = _binary(torch.minimum)
equal = _binary(torch.eq)
not_equal = _binary(torch.ne)
less = _binary(torch.lt)
less_equal = _binary(torch.le)
greater = _binary(torch.gt)
greater_equal = _binary(torch.ge)
logical_and = _binary(torch.logical_and)
logical_or = _binary(torch.logical_or)
matmul = _binary(torch.matmul)
arctan2 = _binary(torch.arctan2)
fmod = _binary(torch.fmod)
mod = _binary(torch.remainder)
floor_divide = _binary(torch.floor_divide)
bitwise_and = _binary(torch.bitwise_and)
bitwise_or = _binary(torch.bitwise_or)
bitwise_xor = _binary(torch.bitwise_xor)
left_shift = _binary(torch.bitwise_left_shift)
right_shift = _binary(torch.bitwise_right_shift)
gcd = _binary(torch.gcd)
lcm = _binary(torch.lcm)
nextafter = _binary(torch.nextafter)


def round_half_even(x, decimals):
    x, decimals = _t(x), int(decimals)
    if x.is_floating_point():
        return torch.round(x, decimals=decimals)
    if decimals >= 0:  # integers are whole already
        return x
    factor = 10 ** (-decimals)
    return (torch.round(x.to(torch.float64) / factor) * factor).to(x.dtype)


def relu_grad(g, y):
    g, y = _t(g), _t(y)
    return torch.where(y > 0, g, torch.zeros_like(g))


def where(condition, x, y):
    return torch.where(_t(condition).to(torch.bool), _t(x), _t(y))


def clip(x, lo, hi):
    return torch.clamp(_t(x), lo, hi)


def cast(x, dtype):
    return _t(x).to(_TORCH[np.dtype(str(dtype))])


def full_like(x, value, dtype):
    x = _t(x)
    return torch.full(x.shape, value, dtype=x.dtype if dtype is None else _TORCH[np.dtype(dtype)], device=x.device)


def fused_elementwise(*inputs, program):
    """The program run instruction by instruction with this backend's lowerings."""
    inputs = [_t(a) for a in inputs]
    dtype = inputs[0].dtype
    registers = []
    for ins in program:
        if ins[0] == "input":
            registers.append(inputs[ins[1]])
        elif ins[0] == "const":
            registers.append(torch.tensor(ins[1], dtype=dtype, device=inputs[0].device))
        else:
            registers.append(globals()[ins[0]](*(registers[a] for a in ins[1:])).to(dtype))
    shape = torch.broadcast_shapes(*(a.shape for a in inputs))
    return registers[-1].expand(shape)


# ------------------------------------------------------------ reductions
def _reduce(fn, x, axes, keepdims):
    x = _t(x)
    if axes == ():
        return x
    return fn(x, dim=axes, keepdim=keepdims) if axes is not None else fn(x, dim=tuple(range(x.dim())), keepdim=keepdims)


def sum(x, axes, keepdims):  # noqa: A001 - op names
    x = _t(x)
    return _reduce(torch.sum, x.to(torch.int64) if x.dtype is torch.bool else x, axes, keepdims)


def max(x, axes, keepdims):  # noqa: A001 - op names
    return _reduce(torch.amax, x, axes, keepdims)


def min(x, axes, keepdims):  # noqa: A001 - op names
    return _reduce(torch.amin, x, axes, keepdims)


def logsumexp(x, axes, keepdims):
    return _reduce(torch.logsumexp, x, axes, keepdims)


def prod(x, axes, keepdims):
    x = _t(x)
    for axis in sorted(range(x.dim()) if axes is None else [a % x.dim() for a in axes], reverse=True):
        x = torch.prod(x, dim=axis, keepdim=keepdims)
    return x


def argmax(x, axis):
    return torch.argmax(_t(x), dim=axis)


def argmin(x, axis):
    return torch.argmin(_t(x), dim=axis)


def cumsum(x, axis, reverse):
    t = _t(x)
    if reverse:
        return torch.flip(torch.cumsum(torch.flip(t, dims=(axis,)), dim=axis, dtype=t.dtype), dims=(axis,))
    return torch.cumsum(t, dim=axis, dtype=t.dtype)


# ------------------------------------------------------------ shapes and indexing
def reshape(x, shape):
    x = _t(x)
    return x.reshape(tuple(x.shape[i] if d is None else d for i, d in enumerate(shape)))


def reshape_like(x, like):
    return _t(x).reshape(tuple(_t(like).shape))


def transpose(x, perm):
    x = _t(x)
    return x.permute(tuple(range(x.dim() - 1, -1, -1)) if perm is None else tuple(perm))


def broadcast_to(x, shape):
    return _t(x).expand(tuple(shape))


def concat(*xs, axis):
    return torch.cat([_t(x) for x in xs], dim=axis)


def split(x, sizes, axis):
    return tuple(torch.split(_t(x), [int(s) for s in sizes], dim=axis))


def tile(x, multiples):
    x = _t(x)
    if 0 in multiples:  # XLA cannot concatenate zero copies
        shape = np.tile(np.empty(tuple(x.shape), dtype=np.bool_), tuple(multiples)).shape
        return torch.zeros(shape, dtype=x.dtype, device=x.device)
    return torch.tile(x, tuple(multiples))


def pad(x, paddings, constant_value):
    flat = [int(p) for pair in reversed(paddings) for p in pair]
    return F.pad(_t(x), flat, value=constant_value)


def _is_basic(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return all(
        p is None or p is Ellipsis or isinstance(p, int | np.integer) or (isinstance(p, slice) and (p.step or 1) > 0)
        for p in parts
    )


def _cells(shape, index) -> np.ndarray:
    """The flat positions an index reads, worked out on the host by NumPy's own rules
    (the index is an attribute, known before the op runs)."""
    return np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[index]


def getitem(x, index):
    x = _t(x)
    if _is_basic(index):
        return x[index]
    cells = _cells(tuple(x.shape), index)
    return x.reshape(-1)[_t(cells.reshape(-1))].reshape(cells.shape)


def getitem_grad(g, *like, shape, index):
    """`g` added into zeros at the indexed cells (repeated cells accumulate)."""
    g = _t(g)
    shape = tuple(like[0].shape) if like else tuple(shape)
    cells = _cells(shape, index)
    flat = torch.zeros(int(np.prod(shape, dtype=np.int64)), dtype=g.dtype, device=g.device)
    return flat.index_add(0, _t(cells.reshape(-1)), g.expand(cells.shape).reshape(-1)).reshape(shape)


def _flat_ids(indices, size):
    ids = _t(indices).reshape(-1)
    return torch.where(ids < 0, ids + size, ids)


def gather(x, indices, axis):
    x = _t(x)
    rows = torch.index_select(x, axis, _flat_ids(indices, x.shape[axis]))
    return rows.reshape(tuple(x.shape[:axis]) + tuple(indices.shape) + tuple(x.shape[axis + 1 :]))


def scatter_add(x, indices, updates, axis):
    x = _t(x)
    ids = _flat_ids(indices, x.shape[axis])
    updates = _t(updates).reshape(tuple(x.shape[:axis]) + (ids.shape[0],) + tuple(x.shape[axis + 1 :]))
    return x.index_add(axis, ids, updates.to(x.dtype))


def scatter_update(x, indices, updates):
    return _t(x).index_copy(0, _flat_ids(indices, x.shape[0]), _t(updates).to(_t(x).dtype))


def _nd(indices):
    indices = _t(indices)
    return tuple(indices[..., k] for k in range(indices.shape[-1]))


def gather_nd(x, indices):
    return _t(x)[_nd(indices)]


def scatter_nd_add(x, indices, updates):
    return _t(x).index_put(_nd(indices), _t(updates), accumulate=True)


def one_hot(indices, depth, on_value, off_value, dtype):
    indices = _t(indices)
    hot = indices[..., None] == torch.arange(depth, device=indices.device)
    want = _TORCH[np.dtype(dtype)]
    on = torch.tensor(on_value, dtype=want, device=indices.device)
    return torch.where(hot, on, torch.tensor(off_value, dtype=want, device=indices.device))


# ------------------------------------------------------------ images (NHWC, filters HWIO)
def _padding(name, x_shape, kh, kw, strides, padding, dilations):
    """Output size and F.pad's (left, right, top, bottom) for a 2-D window op."""
    h, w = x_shape[1], x_shape[2]
    oh, ow, top, left = conv_geometry(name, h, w, kh, kw, strides, padding, dilations)
    bottom = padded_extent(h, oh, kh, strides[0], dilations[0], top) - h - top
    right = padded_extent(w, ow, kw, strides[1], dilations[1], left) - w - left
    return oh, ow, (left, right, top, bottom)


def _nchw(x):
    return x.permute(0, 3, 1, 2)


def _nhwc(x):
    return x.permute(0, 2, 3, 1)


def conv2d(x, w, strides, padding, dilations):
    x, w = _t(x), _t(w)
    oh, ow, pads = _padding("conv2d", x.shape, w.shape[0], w.shape[1], strides, padding, dilations)
    y = F.conv2d(F.pad(_nchw(x), pads), w.permute(3, 2, 0, 1), stride=tuple(strides), dilation=tuple(dilations))
    return _nhwc(y)[:, :oh, :ow, :]


def _vjp(forward, primal, cotangent):
    """The VJP of a torch function at `primal` (how the *_grad ops lower)."""
    primal = primal.detach().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(forward(primal), primal, cotangent)
    return grad.detach()


def conv2d_input_grad(dy, w, input_size, strides, padding, dilations):
    dy, w = _t(dy), _t(w)
    zeros = torch.zeros((dy.shape[0], *input_size, w.shape[2]), dtype=dy.dtype, device=dy.device)
    return _vjp(lambda x: conv2d(x, w, strides, padding, dilations), zeros, dy)


def conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    x, dy = _t(x), _t(dy)
    zeros = torch.zeros((*filter_size, x.shape[3], dy.shape[3]), dtype=x.dtype, device=x.device)
    return _vjp(lambda w: conv2d(x, w, strides, padding, dilations), zeros, dy)


def _bias_activation(y, b, activation):
    y = y + _t(b)
    return torch.relu(y) if activation == "relu" else y


def fused_matmul(a, w, b, activation):
    return _bias_activation(torch.matmul(_t(a), _t(w)), b, activation)


def fused_conv2d(x, w, b, activation, **conv):
    return _bias_activation(conv2d(x, w, **conv), b, activation)


def _max_pool(x, ksize, strides, padding, return_indices=False):
    oh, ow, pads = _padding("max_pool2d", x.shape, *ksize, strides, padding, (1, 1))
    padded = F.pad(_nchw(x), pads, value=float("-inf"))
    out = F.max_pool2d(padded, tuple(ksize), tuple(strides), return_indices=return_indices)
    return (out, padded, pads, oh, ow) if return_indices else _nhwc(out)[:, :oh, :ow, :]


def max_pool2d(x, ksize, strides, padding):
    return _max_pool(_t(x), ksize, strides, padding)


def max_pool2d_grad(x, dy, ksize, strides, padding):
    return _vjp(lambda z: _max_pool(z, ksize, strides, padding), _t(x), _t(dy))


def max_pool2d_grad_grad(x, g, ksize, strides, padding):
    """`g` read at each window's maximum: the pooling gradient's own (linear) VJP."""
    (_, indices), padded, pads, oh, ow = _max_pool(_t(x), ksize, strides, padding, return_indices=True)
    gp = F.pad(_nchw(_t(g)), pads)
    picked = torch.gather(gp.flatten(2), 2, indices.flatten(2)).reshape(indices.shape)
    return _nhwc(picked)[:, :oh, :ow, :]


def _window_sums(x, ksize, strides, padding):
    oh, ow, pads = _padding("avg_pool2d", x.shape, *ksize, strides, padding, (1, 1))
    k = ksize[0] * ksize[1]
    sums = F.avg_pool2d(F.pad(_nchw(x), pads), tuple(ksize), tuple(strides)) * k
    return _nhwc(sums)[:, :oh, :ow, :]


def avg_pool2d(x, ksize, strides, padding):
    """The mean over each window's cells inside the image (padding is not counted)."""
    x = _t(x)
    counts = _window_sums(
        torch.ones((1, x.shape[1], x.shape[2], 1), dtype=x.dtype, device=x.device), ksize, strides, padding
    )
    return _window_sums(x, ksize, strides, padding) / counts


def avg_pool2d_grad(dy, input_size, ksize, strides, padding):
    dy = _t(dy)
    zeros = torch.zeros((dy.shape[0], *input_size, dy.shape[3]), dtype=dy.dtype, device=dy.device)
    return _vjp(lambda z: avg_pool2d(z, ksize, strides, padding), zeros, dy)


def sparse_softmax_cross_entropy_with_logits(logits, labels):
    logits, labels = _t(logits), _t(labels)
    logp = torch.log_softmax(logits, dim=1)
    loss = -torch.gather(logp, 1, labels[:, None].to(torch.int64))[:, 0]
    hot = (labels[:, None] == torch.arange(logits.shape[1], device=logits.device)).to(logits.dtype)
    return loss, torch.exp(logp) - hot


# ------------------------------------------------------------ optimizer updates
def adam_update(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    param, m, v, grad = _t(param), _t(m), _t(v), _t(grad)
    lr, step = _t(lr).to(torch.float64), _t(step).to(torch.float64)
    bias1, bias2 = 1.0 - beta1**step, 1.0 - beta2**step
    if epsilon_on_sqrt_v:
        epsilon = epsilon / torch.sqrt(bias2)
    m_new = beta1 * m + (1.0 - beta1) * grad
    v_new = beta2 * v + (1.0 - beta2) * grad * grad
    p_new = param - (lr * (m_new / bias1) / (torch.sqrt(v_new / bias2) + epsilon)).to(param.dtype)
    return p_new, m_new, v_new
