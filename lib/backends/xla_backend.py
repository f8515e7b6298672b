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

import builtins
import threading
import warnings

import numpy as np

from tapeflow import _compat
from tapeflow.backends.geometry import axis_geometry, conv_geometry, padded_extent

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
        "sparse_adam_update",  # its rows must be distinct, which only reading them can tell (gradients are dense here)
        "while_loop",
        "while_loop_grad",
        "word2vec_sgns_train",  # the fused CPU kernel, Hogwild threads over host memory
        "eigh",  # XLA's eigensolver picks other eigenvector signs than LAPACK's (NumPy's)
        "svd",  # XLA's SVD picks other singular vector signs than LAPACK's (NumPy's)
        "view",  # a bitcast: torch_xla runs aten::view.dtype on the CPU
        # the whole-sequence LSTM and GRU are compiled CPU kernels; on XLA the layers keep their steps
        "lstm_sequence",
        "lstm_sequence_grad",
        "gru_sequence",
        "gru_sequence_grad",
        # queues hold host arrays shared between threads and processes
        "queue_close",
        "queue_dequeue",
        "queue_dequeue_many",
        "queue_dequeue_up_to",
        "queue_enqueue",
        "queue_enqueue_many",
        "queue_size",
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


def relu_bias_grad(g, y):
    gz = relu_grad(g, y)
    return gz, gz if gz.ndim == 1 else torch.sum(gz, dim=tuple(range(gz.ndim - 1)))


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


def depthwise_conv2d(x, w, strides, padding, dilations):
    """A grouped convolution, one group per input channel; output channel c * M + j is
    filter j of channel c."""
    x, w = _t(x), _t(w)
    kh, kw, c, m = w.shape
    oh, ow, pads = _padding("depthwise_conv2d", x.shape, kh, kw, strides, padding, dilations)
    filters = w.reshape(kh, kw, c * m).permute(2, 0, 1)[:, None]
    y = F.conv2d(F.pad(_nchw(x), pads), filters, stride=tuple(strides), dilation=tuple(dilations), groups=c)
    return _nhwc(y)[:, :oh, :ow, :]


def depthwise_conv2d_input_grad(dy, w, input_size, strides, padding, dilations):
    dy, w = _t(dy), _t(w)
    zeros = torch.zeros((dy.shape[0], *input_size, w.shape[2]), dtype=dy.dtype, device=dy.device)
    return _vjp(lambda x: depthwise_conv2d(x, w, strides, padding, dilations), zeros, dy)


def depthwise_conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    x, dy = _t(x), _t(dy)
    c = x.shape[3]
    zeros = torch.zeros((*filter_size, c, dy.shape[3] // c), dtype=x.dtype, device=x.device)
    return _vjp(lambda w: depthwise_conv2d(x, w, strides, padding, dilations), zeros, dy)


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


def sgd_matmul_update(param, a, b, lr):
    param = _t(param)
    return param - torch.matmul(_t(a), _t(b)) * _t(lr).to(param.dtype)


def sgd_momentum_update(param, m, grad, lr, momentum, nesterov=False):
    param, m, grad = _t(param), _t(m), _t(grad)
    lr = _t(lr).to(param.dtype)
    m_new = m * momentum - grad * lr
    p_new = param + (m_new * momentum - grad * lr) if nesterov else param + m_new
    return p_new, m_new


def rmsprop_update(param, velocity, grad, lr, *slots, rho, momentum, epsilon, centered):
    param, velocity, grad = _t(param), _t(velocity), _t(grad)
    lr = _t(lr).to(param.dtype)
    v_new = velocity * rho + grad * grad * (1.0 - rho)
    outs = [v_new]
    if centered:
        a_new = _t(slots[-1]) * rho + grad * (1.0 - rho)
        denominator = v_new - a_new * a_new + epsilon
    else:
        denominator = v_new + epsilon
    increment = grad * lr / torch.sqrt(denominator)
    if momentum > 0:
        increment = _t(slots[0]) * momentum + increment
        outs.append(increment)
    if centered:
        outs.append(a_new)
    return (param - increment, *outs)


def adagrad_update(param, accumulator, grad, lr, epsilon):
    param, accumulator, grad = _t(param), _t(accumulator), _t(grad)
    a_new = accumulator + grad * grad
    return param - grad * _t(lr).to(param.dtype) / torch.sqrt(a_new + epsilon), a_new


def adamw_update(param, m, v, grad, lr, step, weight_decay, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    param, lr = _t(param), _t(lr)
    decay = (lr * weight_decay).to(param.dtype)  # in the float type of lr
    rate = lr.to(param.dtype)  # as adam_update gets it
    return adam_update(param - param * decay, m, v, grad, rate, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)


# ------------------------------------------------------------ volumes (NDHWC, filters DHWIO)
def _volume_padding(name, sizes, ksize, strides, padding, dilations):
    """Output sizes and F.pad's flat padding (last spatial axis first) for a 3-D window op."""
    outs, flat = [], []
    for size, k, s, d in zip(sizes, ksize, strides, dilations, strict=True):
        out, before = axis_geometry(name, size, k, s, d, padding, (0, 0))
        outs.append(out)
        flat = [before, padded_extent(size, out, k, s, d, before) - size - before, *flat]
    return tuple(outs), flat


def _ncdhw(x):
    return x.permute(0, 4, 1, 2, 3)


def _ndhwc(x, outs):
    return x.permute(0, 2, 3, 4, 1)[:, : outs[0], : outs[1], : outs[2], :]


def conv3d(x, w, strides, padding, dilations):
    x, w = _t(x), _t(w)
    outs, pads = _volume_padding("conv3d", x.shape[1:4], w.shape[:3], strides, padding, dilations)
    y = F.conv3d(F.pad(_ncdhw(x), pads), w.permute(4, 3, 0, 1, 2), stride=tuple(strides), dilation=tuple(dilations))
    return _ndhwc(y, outs)


def conv3d_input_grad(dy, w, input_size, strides, padding, dilations):
    dy, w = _t(dy), _t(w)
    zeros = torch.zeros((dy.shape[0], *input_size, w.shape[3]), dtype=dy.dtype, device=dy.device)
    return _vjp(lambda x: conv3d(x, w, strides, padding, dilations), zeros, dy)


def conv3d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    x, dy = _t(x), _t(dy)
    zeros = torch.zeros((*filter_size, x.shape[4], dy.shape[4]), dtype=x.dtype, device=x.device)
    return _vjp(lambda w: conv3d(x, w, strides, padding, dilations), zeros, dy)


def _max_pool3d(x, ksize, strides, padding, return_indices=False):
    outs, pads = _volume_padding("max_pool3d", x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    padded = F.pad(_ncdhw(x), pads, value=float("-inf"))
    out = F.max_pool3d(padded, tuple(ksize), tuple(strides), return_indices=return_indices)
    return (out, pads, outs) if return_indices else _ndhwc(out, outs)


def max_pool3d(x, ksize, strides, padding):
    return _max_pool3d(_t(x), ksize, strides, padding)


def max_pool3d_grad(x, dy, ksize, strides, padding):
    """`dy` routed to each window's first maximum (XLA's select-and-scatter keeps the first)."""
    return _vjp(lambda z: _max_pool3d(z, ksize, strides, padding), _t(x), _t(dy))


def max_pool3d_grad_grad(x, g, ksize, strides, padding):
    """`g` read at each window's first maximum."""
    (_, indices), pads, outs = _max_pool3d(_t(x), ksize, strides, padding, return_indices=True)
    gp = F.pad(_ncdhw(_t(g)), pads)
    picked = torch.gather(gp.flatten(2), 2, indices.flatten(2)).reshape(indices.shape)
    return _ndhwc(picked, outs)


def _volume_sums(x, ksize, strides, padding):
    outs, pads = _volume_padding("avg_pool3d", x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    k = ksize[0] * ksize[1] * ksize[2]
    return _ndhwc(F.avg_pool3d(F.pad(_ncdhw(x), pads), tuple(ksize), tuple(strides)) * k, outs)


def avg_pool3d(x, ksize, strides, padding):
    """The mean over each window's cells inside the volume (padding is not counted)."""
    x = _t(x)
    ones = torch.ones((1, *x.shape[1:4], 1), dtype=x.dtype, device=x.device)
    return _volume_sums(x, ksize, strides, padding) / _volume_sums(ones, ksize, strides, padding)


def avg_pool3d_grad(dy, input_size, ksize, strides, padding):
    dy = _t(dy)
    zeros = torch.zeros((dy.shape[0], *input_size, dy.shape[4]), dtype=dy.dtype, device=dy.device)
    return _vjp(lambda z: avg_pool3d(z, ksize, strides, padding), zeros, dy)


# ------------------------------------------------------------ sorting and searching
def _order(x, axis):
    """The stable ascending order as NumPy sorts: XLA's sort compares floats in total order,
    so -0.0 is made 0.0 (equal values keep their order) and every NaN a positive one (last)."""
    if x.is_floating_point():
        nan = torch.full((), float("nan"), dtype=x.dtype, device=x.device)
        x = torch.where(torch.isnan(x), nan, torch.where(x == 0, torch.zeros_like(nan), x))
    return torch.sort(x, dim=axis, stable=True).indices


def sort(x, axis):
    x = _t(x)
    return torch.gather(x, axis, _order(x, axis))


def argsort(x, axis):
    return _order(_t(x), axis).to(torch.int32)


def top_k(x, k, sorted):  # noqa: A002 - the op's attribute
    """The first k of the stable order of -x, as the reference: ties keep their order, NaNs go last."""
    x = _t(x)
    order = _order(-x, x.dim() - 1)[..., :k]
    return torch.gather(x, -1, order), order.to(torch.int32)


def searchsorted(sorted_sequence, values, side):
    """How many entries go before each value, NaN ordered after every number (as NumPy sorts)."""
    seq, values = _t(sorted_sequence), _t(values)
    s, v = seq.reshape((1,) * values.dim() + (-1,)), values[..., None]
    before = s < v if side == "left" else s <= v
    if seq.is_floating_point():
        nan_v = torch.isnan(v)
        before = before | (nan_v & ~torch.isnan(s)) if side == "left" else before | nan_v
    return before.sum(-1).to(torch.int32)


def _along(indices, size):
    indices = _t(indices)
    return torch.where(indices < 0, indices + size, indices).to(torch.int64)


def take_along_axis(x, indices, axis):
    x = _t(x)
    return torch.gather(x, axis, _along(indices, x.shape[axis]))


def put_along_axis_add(x, indices, updates, axis):
    x = _t(x)
    return x.scatter_add(axis, _along(indices, x.shape[axis]), _t(updates).to(x.dtype))


def unravel_index(indices, shape):
    indices = _t(indices).to(torch.int64)
    total = int(np.prod(shape, dtype=np.int64))
    if total == 0:  # no index is in range: only an empty `indices` gets here
        return tuple(torch.zeros(indices.shape, dtype=torch.int32, device=indices.device) for _ in shape)
    out, stride = [], total
    for size in shape:
        stride //= size
        out.append(torch.remainder(torch.div(indices, stride, rounding_mode="floor"), size).to(torch.int32))
    return tuple(out)


# ------------------------------------------------------------ scans, contractions, segments
def cumprod(x, axis):
    x = _t(x)
    if x.is_floating_point():
        return torch.cumprod(x, dim=axis)
    # integers: a doubling scan (torch_xla has no integer cumprod); products are exact modulo 2**bits
    n, shift = x.shape[axis], 1
    while shift < n:
        x = x * torch.cat([torch.ones_like(x.narrow(axis, 0, shift)), x.narrow(axis, 0, n - shift)], dim=axis)
        shift *= 2
    return x


def einsum(*xs, terms, output):
    return torch.einsum(",".join(terms) + "->" + output, *(_t(x) for x in xs))


def _segment(reduce, init):
    def kernel(data, ids, num_segments):
        """Rows reduced into num_segments + 1 slots, the last one taking the ids out of range
        (dropped), integers computed in float64 as the reference does."""
        data, ids = _t(data), _t(ids).to(torch.int64)
        work = data.dtype if data.dtype in (torch.float32, torch.float64) else torch.float64
        ids = torch.where((ids >= 0) & (ids < num_segments), ids, num_segments)
        out = torch.full((num_segments + 1, *data.shape[1:]), init, dtype=work, device=data.device)
        index = ids.reshape((-1,) + (1,) * (data.dim() - 1)).expand(data.shape)
        return out.scatter_reduce(0, index, data.to(work), reduce, include_self=True)[:-1].to(data.dtype)

    return kernel


segment_sum = _segment("sum", 0.0)
segment_max = _segment("amax", float("-inf"))
segment_min = _segment("amin", float("inf"))
segment_prod = _segment("prod", 1.0)


def _dft_matrix(n, inverse, like):
    """exp(-+2 pi i jk / n) (over n for the inverse) as real and imaginary parts."""
    k = np.arange(n)
    angle = 2.0 * np.pi * (np.outer(k, k) % builtins.max(n, 1)) / builtins.max(n, 1)
    real, imag = np.cos(angle), (1.0 if inverse else -1.0) * np.sin(angle)
    if inverse:
        real, imag = real / n, imag / n
    npdtype = _NUMPY[like.dtype]
    return from_host(real.astype(npdtype)), from_host(imag.astype(npdtype))


def dft(real, imag, axes, inverse):
    """The DFT as a complex matrix product along each axis (torch_xla has no complex FFT)."""
    real, imag = _t(real), _t(imag)
    dtype = real.dtype
    if dtype not in (torch.float32, torch.float64):
        real, imag = real.to(torch.float32), imag.to(torch.float32)
    for axis in axes:
        wr, wi = _dft_matrix(real.shape[axis], inverse, real)
        r, i = torch.movedim(real, axis, -1), torch.movedim(imag, axis, -1)  # the matrices are symmetric
        real, imag = torch.movedim(r @ wr - i @ wi, -1, axis), torch.movedim(r @ wi + i @ wr, -1, axis)
    return real.to(dtype), imag.to(dtype)


# ------------------------------------------------------------ quantiles
def _rows(x, axes):
    """x with the kept axes first and the reduced ones flattened into the last."""
    kept = tuple(a for a in range(x.dim()) if a not in axes)
    moved = x.permute(*kept, *axes)
    return kept, moved, moved.reshape(*moved.shape[: len(kept)], -1)


def quantile(x, qs, scalar_q, axes, keepdims, method, ignore_nan):
    x = _t(x)
    kept, _, rows = _rows(x, axes)
    shape = (len(qs), *(1 if a in axes else n for a, n in enumerate(x.shape))) if keepdims else None
    if x.numel() == 0:
        full = (len(qs), *(x.shape[a] for a in kept)) if shape is None else shape
        out = torch.full(full, float("nan"), dtype=x.dtype, device=x.device)
    else:
        work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        q = torch.tensor(qs, dtype=work, device=x.device)
        out = (torch.nanquantile if ignore_nan else torch.quantile)(rows.to(work), q, dim=-1, interpolation=method)
        out = (out if shape is None else out.reshape(shape)).to(x.dtype)
    return out[0] if scalar_q else out


def quantile_weights(x, qs, scalar_q, axes, keepdims, method, ignore_nan):
    """d quantile / d x: the reference's weights on the one or two order statistics of each row."""
    x = _t(x)
    kept, moved, rows = _rows(x, axes)
    rows = rows.reshape(-1, rows.shape[-1])
    m, n = rows.shape
    if n == 0 or m == 0:
        out = torch.zeros((len(qs), *moved.shape), dtype=x.dtype, device=x.device)
    else:
        order = _order(rows, 1)  # NaNs sort last
        valid = (~torch.isnan(rows)).sum(1) if ignore_nan else torch.full((m,), n, device=x.device)
        live = (valid > 0).to(torch.float64)
        parts = []
        for q in qs:
            pos = q * torch.clamp(valid - 1, min=0).to(torch.float64)
            lo, hi = torch.floor(pos), torch.ceil(pos)
            ones, zeros = torch.ones_like(pos), torch.zeros_like(pos)
            w_lo, w_hi = {
                "linear": (1.0 - (pos - lo), pos - lo),
                "lower": (ones, zeros),
                "higher": (zeros, ones),
                "midpoint": (ones * 0.5, ones * 0.5),
                "nearest": (ones, zeros),
            }[method]
            if method == "nearest":  # halves to the even index, as NumPy rounds
                lo = hi = torch.round(pos)
            out = torch.zeros((m, n), dtype=torch.float64, device=x.device)
            for at, w in ((lo, w_lo), (hi, w_hi)):
                cols = torch.gather(order, 1, torch.clamp(at.to(torch.int64), max=n - 1)[:, None])
                out = out.scatter_add(1, cols, (w * live)[:, None])
            parts.append(out.to(x.dtype))
        out = torch.stack(parts).reshape(len(qs), *moved.shape)
    out = out.permute(0, *(int(i) + 1 for i in np.argsort(kept + tuple(axes))))
    return out[0] if scalar_q else out


# ------------------------------------------------------------ linear algebra
def _lu(x):
    """LU with partial pivoting as LAPACK's getrf (the reference's column steps, one matrix
    product each): the packed factors (b, n, n), the pivot of each step, and the row
    permutation they make."""
    n = x.shape[-1]
    lu = x.reshape(-1, n, n)
    at = torch.arange(n, device=lu.device)
    perm = at.expand(lu.shape[0], n)
    pivots = []
    for k in range(n):
        p = k + torch.argmax(torch.abs(lu[:, k:, k]), dim=1)
        pivots.append(p)
        swap = torch.where(at == k, p[:, None], torch.where(at == p[:, None], k, at))
        lu = torch.gather(lu, 1, swap[:, :, None].expand(-1, -1, n))
        perm = torch.gather(perm, 1, swap)
        pivot = lu[:, k, k]
        column = lu[:, :, k] / torch.where(pivot == 0, torch.ones_like(pivot), pivot)[:, None]
        below = (at > k)[None, :, None]
        trailing = below & (at > k)[None, None, :]
        lu = torch.where(trailing, lu - column[:, :, None] * lu[:, k, None, :], lu)
        lu = torch.where(below & (at == k)[None, None, :], column[:, :, None], lu)
    return lu, pivots, perm


def lu_factor(x):
    x = _t(x)
    lu, pivots, _ = _lu(x)
    piv = torch.stack(pivots, -1) if pivots else torch.zeros(lu.shape[:2], dtype=torch.int64, device=x.device)
    return lu.reshape(x.shape), piv.to(torch.int32).reshape(x.shape[:-1])


def _triangular_solve(a, b, upper, unit=False):
    with warnings.catch_warnings():  # torch_xla lowers the older spelling, not linalg.solve_triangular
        warnings.simplefilter("ignore")
        return torch.triangular_solve(b, a, upper=upper, unitriangular=unit).solution


def solve_triangular(a, b, lower):
    return _triangular_solve(_t(a), _t(b), upper=not lower)


def solve(a, b):
    """getrf then getrs, as LAPACK's gesv that NumPy calls."""
    a, b = _t(a), _t(b)
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    n, k = b.shape[-2:]
    lu, _, perm = _lu(a.expand(*batch, n, n))
    rows = torch.gather(b.expand(*batch, n, k).reshape(-1, n, k), 1, perm[:, :, None].expand(-1, -1, k))
    lower = _triangular_solve(lu, rows, upper=False, unit=True)
    return _triangular_solve(lu, lower, upper=True).reshape(*batch, n, k)


def inv(x):
    return torch.linalg.inv_ex(_t(x))[0]


def slogdet(x):
    x = _t(x)
    sign, logabs = torch.linalg.slogdet(x)
    return sign.to(x.dtype), logabs


def det(x):
    """sign * exp(log|det|), as NumPy computes it."""
    sign, logabs = slogdet(x)
    return sign * torch.exp(logabs)


def logdet(x):
    sign, logabs = slogdet(x)
    nan = torch.full_like(logabs, float("nan"))
    return torch.where(sign > 0, logabs, torch.where(sign == 0, torch.full_like(logabs, float("-inf")), nan))


def logdet_grad(x):
    return inv(x).mT


def cholesky(x):
    with warnings.catch_warnings():  # torch_xla lowers the older spelling, not linalg.cholesky
        warnings.simplefilter("ignore")
        return torch.cholesky(_t(x))


def qr(x, mode):
    """Householder QR as LAPACK's geqrf and orgqr (dlarfg's reflector signs, so R's diagonal
    has the signs NumPy gives)."""
    x = _t(x)
    *batch, m, n = x.shape
    r = x.reshape(-1, m, n)
    q = torch.eye(m, dtype=x.dtype, device=x.device).expand(r.shape[0], m, m)
    rows, cols = torch.arange(m, device=x.device), torch.arange(n, device=x.device)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    for j in range(builtins.min(m, n)):
        col = r[:, :, j]
        alpha = col[:, j]
        tail = torch.where(rows > j, col, zero)
        tail_norm = torch.sqrt(torch.sum(tail * tail, dim=1))
        norm = torch.sqrt(alpha * alpha + tail_norm * tail_norm)
        reflect = tail_norm != 0
        beta = torch.where(reflect, torch.where(alpha >= 0, -norm, norm), alpha)
        safe_beta = torch.where(reflect, beta, torch.ones_like(beta))
        tau = torch.where(reflect, (beta - alpha) / safe_beta, zero)
        scale = 1.0 / torch.where(reflect, alpha - beta, torch.ones_like(alpha))
        v = torch.where(rows == j, torch.ones_like(col), tail * scale[:, None])
        r = r - tau[:, None, None] * v[:, :, None] * (v[:, None, :] @ r)
        q = q - tau[:, None, None] * (q @ v[:, :, None]) * v[:, None, :]
        fixed = torch.where(rows == j, beta[:, None], torch.where(rows > j, zero, col))
        r = torch.where(cols[None, None, :] == j, fixed[:, :, None], r)
    r = torch.triu(r)
    k = m if mode == "complete" else builtins.min(m, n)
    return q[:, :, :k].reshape(*batch, m, k), r[:, :k, :].reshape(*batch, k, n)
