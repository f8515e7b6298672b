"""Keras 3's `keras.ops.nn` names and arguments, written from tapeflow ops: the extra
activations, `conv` / `max_pool` / `average_pool` over 1, 2 or 3 spatial axes in either
data format, normalizations, cross-entropies, attention, CTC, and reshuffles such as
`depth_to_space` and `unfold`.

Images are "channels_last" unless `data_format="channels_first"`; kernels are Keras's
(spatial..., in, out).

>>> import tapeflow as tp
>>> tp.nn.conv(tp.ones((1, 5, 2)), tp.ones((3, 2, 4))).shape
(1, 3, 4)
"""

from __future__ import annotations

import numpy as np

from tapeflow.ops import math
from tapeflow.ops.array import concat, gather, pad, split, stack
from tapeflow.ops.array import one_hot as tf_one_hot
from tapeflow.ops.core import cast, expand_dims, reshape, transpose
from tapeflow.ops.creation import constant
from tapeflow.ops.half import in_float32
from tapeflow.ops.nn import conv3d as conv3d_ops
from tapeflow.ops.nn import depthwise as depthwise_ops
from tapeflow.ops.nn import functions
from tapeflow.ops.reduce import argmax, logsumexp, mean
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.ops.shapes import normalize_axis
from tapeflow.tensor import Tensor

__all__ = [
    "adaptive_average_pool",
    "adaptive_max_pool",
    "average_pool",
    "batch_normalization",
    "binary_crossentropy",
    "categorical_crossentropy",
    "celu",
    "conv",
    "conv_transpose",
    "ctc_decode",
    "ctc_loss",
    "depth_to_space",
    "depthwise_conv",
    "dot_product_attention",
    "fold",
    "gelu",
    "glu",
    "hard_shrink",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "layer_normalization",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "max_pool",
    "moments",
    "multi_hot",
    "normalize",
    "one_hot",
    "polar",
    "psnr",
    "relu6",
    "rms_normalization",
    "selu",
    "separable_conv",
    "silu",
    "soft_shrink",
    "softmax",
    "softsign",
    "space_to_depth",
    "sparse_categorical_crossentropy",
    "sparse_plus",
    "sparse_sigmoid",
    "sparsemax",
    "squareplus",
    "swish",
    "tanh_shrink",
    "threshold",
    "unfold",
]

_EPSILON = 1e-7  # Keras's backend.epsilon() default
_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805
_UNSET = object()


def _x(op: str, x) -> Tensor:
    x = as_tensor(x, name=op)
    return x if x.dtype.kind == "f" else cast(x, "float32")


# ------------------------------------------------------------- activations
def leaky_relu(x, negative_slope=0.2, *, alpha=_UNSET) -> Tensor:
    """x for x > 0, negative_slope * x otherwise (`alpha=` is tapeflow's older name).

    >>> import tapeflow as tp
    >>> tp.nn.leaky_relu(tp.tensor([-1.0, 2.0]), negative_slope=0.5).numpy().tolist()
    [-0.5, 2.0]
    """
    return functions.leaky_relu(x, negative_slope if alpha is _UNSET else alpha)


def gelu(x, approximate=False) -> Tensor:
    """Gaussian error linear unit: exact (erf) by default, or the tanh approximation.

    >>> import tapeflow as tp
    >>> round(tp.nn.gelu(tp.tensor([1.0]), approximate=True).numpy().item(), 4)
    0.8412
    """
    return functions.gelu(x, approximate)


def keras_gelu(x, approximate=True) -> Tensor:
    """`gelu` with Keras's default, the tanh approximation: `tp.ops.gelu`, as `keras.ops.gelu`
    (`tp.nn.gelu` keeps TensorFlow's exact default).

    >>> import tapeflow as tp
    >>> round(tp.ops.gelu(tp.tensor([1.0])).numpy().item(), 4)
    0.8412
    """
    return functions.gelu(x, approximate)


def _axes(op: str, axis, ndim: int) -> tuple:
    axis = axis if isinstance(axis, tuple | list) else (axis,)
    return tuple(normalize_axis(op, a, ndim) for a in axis)


@in_float32
def log_softmax(x=_UNSET, axis=-1, *, logits=_UNSET) -> Tensor:
    """x - logsumexp(x) along `axis` (an int or a tuple of ints).

    >>> import tapeflow as tp
    >>> round(float(tp.nn.log_softmax(tp.tensor([0.0, 0.0]))[0]), 4)
    -0.6931
    """
    x = as_tensor(logits if x is _UNSET else x, name="log_softmax")
    return x - logsumexp(x, _axes("log_softmax", axis, x.ndim), keepdims=True)


@in_float32
def softmax(x=_UNSET, axis=-1, *, logits=_UNSET) -> Tensor:
    """exp(x) normalized to sum to one along `axis` (an int or a tuple of ints).

    >>> import tapeflow as tp
    >>> tp.nn.softmax(tp.tensor([1.0, 1.0])).numpy().tolist()
    [0.5, 0.5]
    """
    return math.exp(log_softmax(logits if x is _UNSET else x, axis))


def relu6(x) -> Tensor:
    """min(max(x, 0), 6).

    >>> import tapeflow as tp
    >>> tp.nn.relu6(tp.tensor([-1.0, 9.0])).numpy().tolist()
    [0.0, 6.0]
    """
    return math.clip(_x("relu6", x), 0.0, 6.0)


def sparse_sigmoid(x) -> Tensor:
    """0 below -1, 1 above 1, (x + 1) / 2 between.

    >>> import tapeflow as tp
    >>> tp.nn.sparse_sigmoid(tp.tensor([-2.0, 0.0, 2.0])).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    return math.clip(0.5 * (_x("sparse_sigmoid", x) + 1.0), 0.0, 1.0)


def softsign(x) -> Tensor:
    """x / (1 + |x|).

    >>> import tapeflow as tp
    >>> tp.nn.softsign(tp.tensor([-1.0, 3.0])).numpy().tolist()
    [-0.5, 0.75]
    """
    x = _x("softsign", x)
    return x / (math.abs(x) + 1.0)


def soft_shrink(x, threshold=0.5) -> Tensor:
    """x - threshold above it, x + threshold below -threshold, 0 between.

    >>> import tapeflow as tp
    >>> tp.nn.soft_shrink(tp.tensor([-1.0, 0.2, 1.0])).numpy().tolist()
    [-0.5, 0.0, 0.5]
    """
    x = _x("soft_shrink", x)
    t = float(threshold)
    return math.where(math.greater(x, t), x - t, math.where(math.less(x, -t), x + t, 0.0))


def sparse_plus(x) -> Tensor:
    """0 below -1, x above 1, (x + 1)^2 / 4 between.

    >>> import tapeflow as tp
    >>> tp.nn.sparse_plus(tp.tensor([-2.0, 0.0, 2.0])).numpy().tolist()
    [0.0, 0.25, 2.0]
    """
    x = _x("sparse_plus", x)
    middle = math.square(x + 1.0) * 0.25
    return math.where(math.less_equal(x, -1.0), 0.0, math.where(math.greater_equal(x, 1.0), x, middle))


def silu(x) -> Tensor:
    """x * sigmoid(x).

    >>> import tapeflow as tp
    >>> round(tp.nn.silu(tp.tensor([1.0])).numpy().item(), 4)
    0.7311
    """
    x = _x("silu", x)
    return x * math.sigmoid(x)


swish = silu


def squareplus(x, b=4) -> Tensor:
    """(x + sqrt(x^2 + b)) / 2.

    >>> import tapeflow as tp
    >>> tp.nn.squareplus(tp.tensor([0.0])).numpy().tolist()
    [1.0]
    """
    x = _x("squareplus", x)
    return (x + math.sqrt(math.square(x) + float(b))) * 0.5


def log_sigmoid(x) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x).

    >>> import tapeflow as tp
    >>> round(tp.nn.log_sigmoid(tp.tensor([0.0])).numpy().item(), 4)
    -0.6931
    """
    return -functions.softplus(-_x("log_sigmoid", x))


def hard_sigmoid(x) -> Tensor:
    """relu6(x + 3) / 6.

    >>> import tapeflow as tp
    >>> tp.nn.hard_sigmoid(tp.tensor([-4.0, 0.0, 4.0])).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    return relu6(_x("hard_sigmoid", x) + 3.0) / 6.0


def hard_silu(x) -> Tensor:
    """x * hard_sigmoid(x).

    >>> import tapeflow as tp
    >>> tp.nn.hard_silu(tp.tensor([-4.0, 1.0, 4.0])).numpy().tolist()
    [-0.0, 0.6666666865348816, 4.0]
    """
    x = _x("hard_silu", x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def selu(x) -> Tensor:
    """scale * elu(x, alpha) with Klambauer et al.'s constants.

    >>> import tapeflow as tp
    >>> round(tp.nn.selu(tp.tensor([1.0])).numpy().item(), 4)
    1.0507
    """
    return _SELU_SCALE * functions.elu(_x("selu", x), _SELU_ALPHA)


def celu(x, alpha=1.0) -> Tensor:
    """max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0).

    >>> import tapeflow as tp
    >>> round(tp.nn.celu(tp.tensor([-1.0])).numpy().item(), 4)
    -0.6321
    """
    x = _x("celu", x)
    a = float(alpha)
    negative = a * (math.exp(math.minimum(x, 0.0) / a) - 1.0)
    return math.where(math.greater(x, 0.0), x, negative)


def glu(x, axis=-1) -> Tensor:
    """Gated linear unit: the first half of `axis` times the sigmoid of the second.

    >>> import tapeflow as tp
    >>> tp.nn.glu(tp.tensor([2.0, 0.0])).numpy().tolist()
    [1.0]
    """
    x = _x("glu", x)
    axis = normalize_axis("glu", axis, x.ndim)
    if x.shape[axis] is not None and x.shape[axis] % 2:
        raise ValueError(f"glu: axis {axis} must have an even size, got shape {x.shape}")
    a, b = split(x, 2, axis)
    return a * math.sigmoid(b)


def tanh_shrink(x) -> Tensor:
    """x - tanh(x).

    >>> import tapeflow as tp
    >>> tp.nn.tanh_shrink(tp.tensor([0.0])).numpy().tolist()
    [0.0]
    """
    x = _x("tanh_shrink", x)
    return x - math.tanh(x)


def hard_tanh(x) -> Tensor:
    """clip(x, -1, 1).

    >>> import tapeflow as tp
    >>> tp.nn.hard_tanh(tp.tensor([-2.0, 0.5])).numpy().tolist()
    [-1.0, 0.5]
    """
    return math.clip(_x("hard_tanh", x), -1.0, 1.0)


def hard_shrink(x, threshold=0.5) -> Tensor:
    """x where |x| > threshold, else 0.

    >>> import tapeflow as tp
    >>> tp.nn.hard_shrink(tp.tensor([-1.0, 0.2])).numpy().tolist()
    [-1.0, 0.0]
    """
    x = _x("hard_shrink", x)
    return math.where(math.greater(math.abs(x), float(threshold)), x, 0.0)


def threshold(x, threshold, default_value) -> Tensor:
    """x where x > threshold, else `default_value`.

    >>> import tapeflow as tp
    >>> tp.nn.threshold(tp.tensor([-1.0, 2.0]), 0.0, 5.0).numpy().tolist()
    [5.0, 2.0]
    """
    x = _x("threshold", x)
    return math.where(math.greater(x, float(threshold)), x, float(default_value))


@in_float32
def sparsemax(x, axis=-1) -> Tensor:
    """Sparsemax along `axis` as Keras 3 computes it: max(x - tau, 0), with the support
    {x_i : 1 + k_i x_i > s_i} (k_i, s_i the count and sum of the entries >= x_i) and
    tau = (sum of s_i over the support - 1) / |support|. This is the Euclidean projection
    onto the simplex when the support has one entry; Keras's threshold differs from it
    otherwise, and tapeflow follows Keras.

    >>> import tapeflow as tp
    >>> tp.nn.sparsemax(tp.tensor([1.0, 0.0, -3.0])).numpy().tolist()
    [1.0, 0.0, 0.0]
    """
    x = _x("sparsemax", x)
    axis = normalize_axis("sparsemax", axis, x.ndim)
    z = transpose(x, (*[i for i in range(x.ndim) if i != axis], axis)) if axis != x.ndim - 1 else x
    # For every z_i: how many z_j >= z_i and their sum, pairwise, without a sort.
    above = cast(math.greater_equal(expand_dims(z, -2), expand_dims(z, -1)), z.dtype)
    k = reduce_sum(above, -1)
    s = reduce_sum(above * expand_dims(z, -2), -1)
    support = cast(math.greater(1.0 + k * z, s), z.dtype)
    size = reduce_sum(support, -1, keepdims=True)
    tau = (reduce_sum(support * s, -1, keepdims=True) - 1.0) / size
    out = math.maximum(z - tau, 0.0)
    if axis != x.ndim - 1:
        order = list(range(x.ndim - 1))
        order.insert(axis, x.ndim - 1)
        out = transpose(out, tuple(order))
    return out


# ---------------------------------------------------------- spatial helpers
def _data_format(op: str, data_format) -> str:
    fmt = "channels_last" if data_format is None else str(data_format).lower()
    if fmt not in ("channels_last", "channels_first"):
        raise ValueError(f"{op}: data_format must be 'channels_last', 'channels_first' or None, got {data_format!r}")
    return fmt


def _tuple(op: str, label: str, value, n: int) -> tuple:
    if isinstance(value, int | np.integer):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ValueError(f"{op}: {label} must be an int or {n} ints, got {value}")
    return value


def _padding(op: str, padding) -> str:
    p = str(padding).lower()
    if p not in ("valid", "same"):
        raise ValueError(f"{op}: padding must be 'valid' or 'same', got {padding!r}")
    return p


def _spatial_rank(op: str, x: Tensor) -> int:
    n = x.ndim - 2
    if n not in (1, 2, 3):
        raise ValueError(f"{op}: expected inputs of rank 3, 4 or 5 (batch, spatial..., channels), got shape {x.shape}")
    return n


def _to_last(x: Tensor, fmt: str) -> Tensor:
    if fmt == "channels_first":
        return transpose(x, (0, *range(2, x.ndim), 1))
    return x


def _from_last(x: Tensor, fmt: str) -> Tensor:
    if fmt == "channels_first":
        return transpose(x, (0, x.ndim - 1, *range(1, x.ndim - 1)))
    return x


def _same_pads(n: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    k = (k - 1) * d + 1
    total = max((-(-n // s) - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def _grouped_kernel(kernel: Tensor, groups: int) -> Tensor:
    """A dense (spatial..., in, out) kernel equal to a grouped one: block diagonal."""
    cg, cout = kernel.shape[-2], kernel.shape[-1]
    og = cout // groups
    cin = cg * groups
    tiled = concat([kernel] * groups, axis=kernel.ndim - 2)
    mask = (np.arange(cin)[:, None] // cg) == (np.arange(cout)[None, :] // og)
    return tiled * constant(mask.astype(kernel.dtype.np))


def _conv_last(x: Tensor, kernel: Tensor, strides, padding: str, dilation) -> Tensor:
    """Convolution of channels_last `x` of 1, 2 or 3 spatial axes with a dense kernel."""
    n = x.ndim - 2
    if n == 1:
        y = functions.conv2d(
            expand_dims(x, 1), expand_dims(kernel, 0), (1, strides[0]), padding.upper(), (1, dilation[0])
        )
        return reshape(y, (-1, *y.shape[2:]))
    if n == 2:
        if padding == "same" and any(d > 1 for d in dilation):
            pads = [_same_pads(x.shape[1 + i], kernel.shape[i], strides[i], dilation[i]) for i in range(2)]
            return functions.conv2d(x, kernel, strides, tuple(pads), dilation)
        return functions.conv2d(x, kernel, strides, padding.upper(), dilation)
    return conv3d_ops.conv3d(x, kernel, strides, padding.upper(), dilation)


def conv(inputs, kernel, strides=1, padding="valid", data_format=None, dilation_rate=1) -> Tensor:
    """N-D convolution (1, 2 or 3 spatial axes) with a (spatial..., in / groups, out)
    kernel; a kernel with fewer input channels than `inputs` gives a grouped convolution.

    >>> import tapeflow as tp
    >>> tp.nn.conv(tp.ones((1, 4, 4, 2)), tp.ones((3, 3, 2, 5)), padding="same").shape
    (1, 4, 4, 5)
    """
    op = "conv"
    fmt = _data_format(op, data_format)
    x = as_tensor(inputs, name=op)
    kernel = as_tensor(kernel, name=op)
    n = _spatial_rank(op, x)
    if kernel.ndim != n + 2:
        raise ValueError(f"{op}: a kernel of rank {n + 2} is needed for inputs of shape {x.shape}, got {kernel.shape}")
    strides = _tuple(op, "strides", strides, n)
    dilation = _tuple(op, "dilation_rate", dilation_rate, n)
    padding = _padding(op, padding)
    x = _to_last(x, fmt)
    channels, k_in = x.shape[-1], kernel.shape[-2]
    if channels % k_in:
        raise ValueError(
            f"{op}: the input channels ({channels}) must be a multiple of the kernel's ({k_in}), "
            f"got inputs {x.shape} and kernel {kernel.shape}"
        )
    if channels != k_in:
        kernel = _grouped_kernel(kernel, channels // k_in)
    return _from_last(_conv_last(x, kernel, strides, padding, dilation), fmt)


def depthwise_conv(inputs, kernel, strides=1, padding="valid", data_format=None, dilation_rate=1) -> Tensor:
    """Convolve each input channel with its own filters: kernel (spatial..., in, multiplier),
    output channel c * multiplier + m.

    >>> import tapeflow as tp
    >>> tp.nn.depthwise_conv(tp.ones((1, 5, 5, 2)), tp.ones((3, 3, 2, 2))).shape
    (1, 3, 3, 4)
    """
    op = "depthwise_conv"
    x = as_tensor(inputs, name=op)
    kernel = as_tensor(kernel, name=op)
    n = _spatial_rank(op, x)
    if n == 3:
        *spatial, cin, mult = kernel.shape
        return conv(x, reshape(kernel, (*spatial, 1, cin * mult)), strides, padding, data_format, dilation_rate)
    if kernel.ndim != n + 2:
        raise ValueError(f"{op}: a kernel of rank {n + 2} is needed for inputs of shape {x.shape}, got {kernel.shape}")
    fmt = _data_format(op, data_format)
    strides = _tuple(op, "strides", strides, n)
    dilation = _tuple(op, "dilation_rate", dilation_rate, n)
    padding = _padding(op, padding)
    x = _to_last(x, fmt)
    if x.shape[-1] != kernel.shape[-2]:
        raise ValueError(
            f"{op}: the input channels ({x.shape[-1]}) must equal the kernel's ({kernel.shape[-2]}), "
            f"got inputs {x.shape} and kernel {kernel.shape}"
        )
    if n == 1:
        x, kernel, strides, dilation = expand_dims(x, 1), expand_dims(kernel, 0), (1, *strides), (1, *dilation)
    pads = padding.upper()
    if padding == "same" and any(d > 1 for d in dilation):
        pads = tuple(_same_pads(x.shape[1 + i], kernel.shape[i], strides[i], dilation[i]) for i in range(2))
    y = depthwise_ops.depthwise_conv2d(x, kernel, strides, pads, dilation)
    if n == 1:
        y = reshape(y, (-1, *y.shape[2:]))
    return _from_last(y, fmt)


def separable_conv(
    inputs, depthwise_kernel, pointwise_kernel, strides=1, padding="valid", data_format=None, dilation_rate=1
) -> Tensor:
    """A depthwise convolution followed by a pointwise (1 x 1) one.

    >>> import tapeflow as tp
    >>> tp.nn.separable_conv(tp.ones((1, 5, 5, 2)), tp.ones((3, 3, 2, 1)), tp.ones((1, 1, 2, 3))).shape
    (1, 3, 3, 3)
    """
    y = depthwise_conv(inputs, depthwise_kernel, strides, padding, data_format, dilation_rate)
    return conv(y, pointwise_kernel, 1, "valid", data_format, dilation_rate)


def _transpose_length(n: int, k: int, s: int, padding: str, output_padding, d: int) -> int:
    k = (k - 1) * d + 1
    if padding == "valid":
        extra = max(k, s) - k if output_padding is None else output_padding
        return (n - 1) * s + k + extra
    if output_padding is None:
        return n * s
    return (n - 1) * s + k - 2 * (k // 2) + output_padding


def _transpose_pads(n: int, k: int, s: int, output_padding: int, d: int, size: int) -> tuple[int, int]:
    """The (before, after) padding of the forward convolution that `conv_transpose` with
    padding "same" and an explicit `output_padding` inverts."""
    k = (k - 1) * d + 1
    pad_len = k + k % 2 - 2 + output_padding
    before = k - 1 - min(pad_len // 2 + pad_len % 2, k - 1)
    return before, (n - 1) * s + k - size - before


def conv_transpose(
    inputs, kernel, strides=1, padding="valid", output_padding=None, data_format=None, dilation_rate=1
) -> Tensor:
    """The transpose (gradient) of `conv`: kernel (spatial..., out, in).

    >>> import tapeflow as tp
    >>> tp.nn.conv_transpose(tp.ones((1, 3, 3, 2)), tp.ones((2, 2, 4, 2)), strides=2).shape
    (1, 6, 6, 4)
    """
    op = "conv_transpose"
    fmt = _data_format(op, data_format)
    x = as_tensor(inputs, name=op)
    kernel = as_tensor(kernel, name=op)
    n = _spatial_rank(op, x)
    strides = _tuple(op, "strides", strides, n)
    dilation = _tuple(op, "dilation_rate", dilation_rate, n)
    padding = _padding(op, padding)
    out_pad = [None] * n if output_padding is None else _tuple(op, "output_padding", output_padding, n)
    x = _to_last(x, fmt)
    sizes = [
        _transpose_length(x.shape[1 + i], kernel.shape[i], strides[i], padding, out_pad[i], dilation[i])
        for i in range(n)
    ]
    pads = padding.upper()
    if padding == "same" and output_padding is not None:
        pads = tuple(
            _transpose_pads(x.shape[1 + i], kernel.shape[i], strides[i], out_pad[i], dilation[i], sizes[i])
            for i in range(n)
        )
    if n == 3:
        if not isinstance(pads, str):
            raise NotImplementedError(f"{op}: output_padding with padding='same' is not supported for 3D inputs")
        return _from_last(conv3d_ops.conv3d_transpose(x, kernel, sizes, strides, pads, dilation), fmt)
    if n == 1:
        x, kernel = expand_dims(x, 1), expand_dims(kernel, 0)
        sizes, strides, dilation = [1, *sizes], (1, *strides), (1, *dilation)
        pads = pads if isinstance(pads, str) else ((0, 0), *pads)
    y = functions.conv2d_transpose(x, kernel, sizes, strides, pads, dilation)
    if n == 1:
        y = reshape(y, (-1, *y.shape[2:]))
    return _from_last(y, fmt)


def _pool(op: str, inputs, pool_size, strides, padding, data_format, kind: str) -> Tensor:
    fmt = _data_format(op, data_format)
    x = as_tensor(inputs, name=op)
    n = _spatial_rank(op, x)
    size = _tuple(op, "pool_size", pool_size, n)
    strides = size if strides is None else _tuple(op, "strides", strides, n)
    padding = _padding(op, padding)
    x = _to_last(x, fmt)
    if n == 1:
        x, size, strides = expand_dims(x, 1), (1, *size), (1, *strides)
    mode = padding.upper()
    if padding == "same":
        pads = [_same_pads(x.shape[1 + i], size[i], strides[i]) for i in range(x.ndim - 2)]
        if any(a != b for a, b in pads):
            x = _replicate_pad(x, pads)
            mode = "VALID"
    if x.ndim == 4:
        pool = functions.max_pool2d if kind == "max" else functions.avg_pool2d
    else:
        pool = conv3d_ops.max_pool3d if kind == "max" else conv3d_ops.avg_pool3d
    y = pool(x, size, strides, mode)
    if n == 1:
        y = reshape(y, (-1, *y.shape[2:]))
    return _from_last(y, fmt)


def _replicate_pad(x: Tensor, pads) -> Tensor:
    """Pad the spatial axes of channels_last `x` by repeating the edge values."""
    for i, (before, after) in enumerate(pads):
        axis = 1 + i
        n = x.shape[axis]
        index = np.clip(np.arange(-before, n + after), 0, n - 1)
        x = gather(x, constant(index.astype(np.int64)), axis=axis)
    return x


def max_pool(inputs, pool_size, strides=None, padding="valid", data_format=None) -> Tensor:
    """Max over `pool_size` windows of 1, 2 or 3 spatial axes (strides default to pool_size).

    >>> import tapeflow as tp
    >>> tp.nn.max_pool(tp.ones((1, 6, 3)), 2).shape
    (1, 3, 3)
    """
    return _pool("max_pool", inputs, pool_size, strides, padding, data_format, "max")


def average_pool(inputs, pool_size, strides=None, padding="valid", data_format=None) -> Tensor:
    """Mean over `pool_size` windows of 1, 2 or 3 spatial axes (strides default to pool_size).

    >>> import tapeflow as tp
    >>> tp.nn.average_pool(tp.ones((1, 4, 4, 1)), 2).shape
    (1, 2, 2, 1)
    """
    return _pool("average_pool", inputs, pool_size, strides, padding, data_format, "avg")


def _adaptive_bins(n: int, out: int) -> list[tuple[int, int]]:
    return [((i * n) // out, -(-((i + 1) * n) // out)) for i in range(out)]


def _adaptive(op: str, inputs, output_size, data_format, kind: str) -> Tensor:
    fmt = _data_format(op, data_format)
    x = as_tensor(inputs, name=op)
    n = _spatial_rank(op, x)
    sizes = _tuple(op, "output_size", output_size, n)
    x = _to_last(x, fmt)
    for i, out in enumerate(sizes):
        axis = 1 + i
        bins = _adaptive_bins(x.shape[axis], out)
        if kind == "avg":
            m = np.zeros((out, x.shape[axis]))
            for j, (a, b) in enumerate(bins):
                m[j, a:b] = 1.0 / (b - a)
            moved = transpose(x, (*[d for d in range(x.ndim) if d != axis], axis))
            y = math.matmul(moved, constant(m.T.astype(x.dtype.np)))
            order = list(range(x.ndim - 1))
            order.insert(axis, x.ndim - 1)
            x = transpose(y, tuple(order))
        else:
            width = max(b - a for a, b in bins)
            index = np.array([[min(a + k, b - 1) for k in range(width)] for a, b in bins], dtype=np.int64)
            g = gather(x, constant(index.reshape(-1)), axis=axis)
            g = reshape(g, (*(-1 if d is None else d for d in x.shape[:axis]), out, width, *x.shape[axis + 1 :]))
            x = reduce_max(g, axis + 1)
    return _from_last(x, fmt)


def adaptive_max_pool(inputs, output_size, data_format=None) -> Tensor:
    """Max pooling into exactly `output_size` bins per spatial axis (PyTorch's bins).

    >>> import tapeflow as tp
    >>> tp.nn.adaptive_max_pool(tp.ones((1, 7, 5, 2)), (3, 2)).shape
    (1, 3, 2, 2)
    """
    return _adaptive("adaptive_max_pool", inputs, output_size, data_format, "max")


@in_float32
def adaptive_average_pool(inputs, output_size, data_format=None) -> Tensor:
    """Average pooling into exactly `output_size` bins per spatial axis (PyTorch's bins).

    >>> import tapeflow as tp
    >>> tp.nn.adaptive_average_pool(tp.ones((1, 7, 5, 2)), (3, 2)).shape
    (1, 3, 2, 2)
    """
    return _adaptive("adaptive_average_pool", inputs, output_size, data_format, "avg")


# ------------------------------------------------------------ categorical
def one_hot(x, num_classes, axis=-1, dtype=None, sparse=False) -> Tensor:
    """One-hot vectors of `num_classes` along a new `axis`; out-of-range indices give zeros.

    >>> import tapeflow as tp
    >>> tp.nn.one_hot(tp.tensor([0, 2]), 3).numpy().tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    if sparse:
        raise NotImplementedError("one_hot: sparse=True is not supported")
    x = as_tensor(x, name="one_hot")
    if x.dtype.kind != "i":
        x = cast(x, "int64")
    y = tf_one_hot(x, int(num_classes), dtype=dtype or "float32")
    axis = normalize_axis("one_hot", axis, y.ndim)
    if axis != y.ndim - 1:
        order = list(range(y.ndim - 1))
        order.insert(axis, y.ndim - 1)
        y = transpose(y, tuple(order))
    return y


def multi_hot(inputs, num_classes=None, axis=-1, dtype=None, sparse=False, **kwargs) -> Tensor:
    """Multi-hot vectors: 1 for every class an example's indices name.

    >>> import tapeflow as tp
    >>> tp.nn.multi_hot(tp.tensor([[0, 2], [1, 1]]), 3).numpy().tolist()
    [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    if num_classes is None:
        num_classes = kwargs.pop("num_tokens", None)
    if kwargs:
        raise TypeError(f"multi_hot: unexpected arguments {sorted(kwargs)}")
    if num_classes is None:
        raise ValueError("multi_hot: num_classes is required")
    x = as_tensor(inputs, name="multi_hot")
    hot = one_hot(x, num_classes, axis=axis, dtype=dtype, sparse=sparse)
    return reduce_max(hot, 1 if x.ndim > 1 else 0)


def _clip_probabilities(p: Tensor) -> Tensor:
    return math.clip(p, _EPSILON, 1.0 - _EPSILON)


def binary_crossentropy(target, output, from_logits=False) -> Tensor:
    """Elementwise binary cross-entropy of probabilities (or logits) `output`.

    >>> import tapeflow as tp
    >>> round(float(tp.nn.binary_crossentropy(tp.tensor([1.0]), tp.tensor([0.5]))[0]), 4)
    0.6931
    """
    target = _x("binary_crossentropy", target)
    output = _x("binary_crossentropy", output)
    if tuple(target.shape) != tuple(output.shape):
        raise ValueError(
            f"binary_crossentropy: target and output must have the same shape, got {target.shape} and {output.shape}"
        )
    if from_logits:
        return functions.sigmoid_cross_entropy_with_logits(labels=target, logits=output)
    p = _clip_probabilities(output)
    return -(target * math.log(p) + (1.0 - target) * math.log(1.0 - p))


def categorical_crossentropy(target, output, from_logits=False, axis=-1) -> Tensor:
    """Cross-entropy of probability (or logit) rows `output` against distributions `target`.

    >>> import tapeflow as tp
    >>> round(float(tp.nn.categorical_crossentropy(tp.tensor([[0.0, 1.0]]), tp.tensor([[0.5, 0.5]]))[0]), 4)
    0.6931
    """
    target = _x("categorical_crossentropy", target)
    output = _x("categorical_crossentropy", output)
    if tuple(target.shape) != tuple(output.shape):
        raise ValueError(
            f"categorical_crossentropy: target and output must have the same shape, got {target.shape} and "
            f"{output.shape}"
        )
    if output.ndim < 1:
        raise ValueError("categorical_crossentropy: target and output must be at least rank 1")
    if from_logits:
        log_p = log_softmax(output, axis)
    else:
        log_p = math.log(_clip_probabilities(output / reduce_sum(output, axis, keepdims=True)))
    return -reduce_sum(target * log_p, axis)


def sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1) -> Tensor:
    """Cross-entropy of probability (or logit) rows `output` against integer classes `target`.

    >>> import tapeflow as tp
    >>> round(float(tp.nn.sparse_categorical_crossentropy(tp.tensor([1]), tp.tensor([[0.5, 0.5]]))[0]), 4)
    0.6931
    """
    op = "sparse_categorical_crossentropy"
    target = as_tensor(target, name=op)
    output = _x(op, output)
    if output.ndim < 1:
        raise ValueError(f"{op}: output must be at least rank 1, got shape {output.shape}")
    axis = normalize_axis(op, axis, output.ndim)
    if target.ndim == output.ndim and target.shape[axis] == 1:
        target = reshape(target, tuple(d for i, d in enumerate(target.shape) if i != axis))
    expected = tuple(d for i, d in enumerate(output.shape) if i != axis)
    if tuple(target.shape) != expected:
        raise ValueError(
            f"{op}: target and output must have the same shape up to the class axis, got {target.shape} and "
            f"{output.shape}"
        )
    hot = one_hot(cast(target, "int64"), output.shape[axis], axis=axis, dtype=output.dtype)
    return categorical_crossentropy(hot, output, from_logits, axis)


# ---------------------------------------------------------- normalization
@in_float32
def normalize(x, axis=-1, order=2, epsilon=None) -> Tensor:
    """x divided by its `order`-norm along `axis` (at least `epsilon`).

    >>> import tapeflow as tp
    >>> tp.nn.normalize(tp.tensor([3.0, 4.0])).numpy().tolist()
    [0.6000000238418579, 0.800000011920929]
    """
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"normalize: order must be an int >= 1, got order={order!r}")
    x = _x("normalize", x)
    if x.ndim == 0:
        x = reshape(x, (1,))
    eps = _EPSILON if epsilon is None else float(epsilon)
    if order == 2:
        inv = math.rsqrt(reduce_sum(math.square(x), axis, keepdims=True))
        return x * math.minimum(inv, 1.0 / eps)
    if order == 1:
        norm = reduce_sum(math.abs(x), axis, keepdims=True)
    else:
        norm = math.pow(reduce_sum(math.pow(math.abs(x), float(order)), axis, keepdims=True), 1.0 / order)
    return x / math.maximum(norm, eps)


def _broadcast_param(p, x: Tensor, axis: int) -> Tensor:
    p = as_tensor(p, name="batch_normalization")
    shape = [1] * x.ndim
    shape[axis] = p.shape[0]
    return reshape(cast(p, x.dtype), tuple(shape))


@in_float32
def batch_normalization(x, mean, variance, axis, offset=None, scale=None, epsilon=1e-3) -> Tensor:
    """(x - mean) / sqrt(variance + epsilon) * scale + offset, the statistics given along `axis`.

    >>> import tapeflow as tp
    >>> one = tp.tensor([1.0])
    >>> tp.nn.batch_normalization(tp.tensor([[2.0]]), one, one, axis=-1, epsilon=0.0).numpy().tolist()
    [[1.0]]
    """
    x = _x("batch_normalization", x)
    axis = normalize_axis("batch_normalization", axis, x.ndim)
    inv = math.rsqrt(_broadcast_param(variance, x, axis) + float(epsilon))
    if scale is not None:
        inv = inv * _broadcast_param(scale, x, axis)
    y = (x - _broadcast_param(mean, x, axis)) * inv
    return y if offset is None else y + _broadcast_param(offset, x, axis)


@in_float32
def layer_normalization(x, gamma=None, beta=None, axis=-1, epsilon=None, **kwargs) -> Tensor:
    """Normalize over `axis` to zero mean and unit variance, then scale by `gamma` and shift by
    `beta`; with `rms_scaling=True`, Keras's variant x / sqrt(var(x) + epsilon) * gamma (not
    centred, and `beta` is not used, as in Keras).

    >>> import tapeflow as tp
    >>> tp.nn.layer_normalization(tp.tensor([[1.0, 3.0]])).numpy().round(3).tolist()
    [[-1.0, 1.0]]
    """
    rms_scaling = kwargs.pop("rms_scaling", False)
    if kwargs:
        raise TypeError(f"layer_normalization: unexpected arguments {sorted(kwargs)}")
    x = _x("layer_normalization", x)
    dtype = x.dtype
    if dtype.bits < 32:
        x = cast(x, "float32")
    eps = _EPSILON if epsilon is None else float(epsilon)
    axes = tuple(sorted(_axes("layer_normalization", axis, x.ndim)))
    shape = tuple(x.shape[d] if d in axes else 1 for d in range(x.ndim))

    def param(p):
        p = cast(as_tensor(p, name="layer_normalization"), x.dtype)
        return reshape(p, shape) if p.ndim != x.ndim and axes != (x.ndim - 1,) else p

    mu = mean(x, axes, keepdims=True)
    inv = math.rsqrt(mean(math.square(x - mu), axes, keepdims=True) + eps)
    y = x * inv if rms_scaling else (x - mu) * inv
    if gamma is not None:
        y = y * param(gamma)
    if beta is not None and not rms_scaling:
        y = y + param(beta)
    return y if y.dtype is dtype else cast(y, dtype)


@in_float32
def rms_normalization(x, scale=None, axis=-1, epsilon=None) -> Tensor:
    """x / sqrt(mean(x^2) + epsilon) over `axis`, times `scale`.

    >>> import tapeflow as tp
    >>> tp.nn.rms_normalization(tp.tensor([[2.0, -2.0]]), epsilon=0.0).numpy().tolist()
    [[1.0, -1.0]]
    """
    x = _x("rms_normalization", x)
    eps = _EPSILON if epsilon is None else float(epsilon)
    axes = _axes("rms_normalization", axis, x.ndim)
    y = x * math.rsqrt(mean(math.square(x), axes, keepdims=True) + eps)
    if scale is not None:
        y = y * cast(as_tensor(scale, name="rms_normalization"), x.dtype)
    return y


def moments(x, axes, keepdims=False, synchronized=False) -> tuple[Tensor, Tensor]:
    """Mean and (population) variance over `axes`; `synchronized` (across replicas) is
    the same computation on one device.

    >>> import tapeflow as tp
    >>> m, v = tp.nn.moments(tp.tensor([1.0, 3.0]), axes=[0])
    >>> m.numpy().item(), v.numpy().item()
    (2.0, 1.0)
    """
    return functions.moments(x, axes, keepdims)


def psnr(x1, x2, max_val) -> Tensor:
    """Peak signal-to-noise ratio in dB: 20 log10(max_val) - 10 log10(mse).

    >>> import tapeflow as tp
    >>> round(float(tp.nn.psnr(tp.zeros((4,)), tp.full((4,), 0.1), 1.0)), 3)
    20.0
    """
    x1, x2 = _x("psnr", x1), _x("psnr", x2)
    if tuple(x1.shape) != tuple(x2.shape):
        raise ValueError(f"psnr: input shapes {x1.shape} and {x2.shape} must match")
    mse = mean(math.square(x1 - x2))
    return 20.0 * float(np.log10(max_val)) - 10.0 * math.log(mse) / float(np.log(10.0))


# --------------------------------------------------------------- attention
def dot_product_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    scale=None,
    is_causal=False,
    flash_attention=None,
    attn_logits_soft_cap=None,
) -> Tensor:
    """softmax(q k^T * scale + bias, masked) v for (batch, length, heads, head_dim) inputs;
    fewer key/value heads than query heads are shared by groups of query heads.

    >>> import tapeflow as tp
    >>> tp.nn.dot_product_attention(tp.ones((1, 3, 2, 4)), tp.ones((1, 5, 2, 4)), tp.ones((1, 5, 2, 4))).shape
    (1, 3, 2, 4)
    """
    op = "dot_product_attention"
    q, k, v = _x(op, query), _x(op, key), _x(op, value)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"{op}: only 4D inputs are supported, got {q.shape}, {k.shape} and {v.shape}")
    if bias is not None and mask is not None:
        raise ValueError(f"{op}: only one of bias and mask can be given")
    if flash_attention:
        raise NotImplementedError(f"{op}: flash_attention=True is not supported")
    if attn_logits_soft_cap is not None:
        raise NotImplementedError(f"{op}: attn_logits_soft_cap is not supported")
    heads, kv_heads = q.shape[2], k.shape[2]
    if heads != kv_heads:
        if heads % kv_heads:
            raise ValueError(f"{op}: query heads ({heads}) must be a multiple of key heads ({kv_heads})")
        index = constant(np.repeat(np.arange(kv_heads), heads // kv_heads).astype(np.int64))
        k, v = gather(k, index, axis=2), gather(v, index, axis=2)
    scale = 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
    qt = transpose(q, (0, 2, 1, 3))
    kt = transpose(k, (0, 2, 3, 1))
    logits = math.matmul(qt, kt) * scale
    if bias is not None:
        logits = logits + cast(as_tensor(bias, name=op), logits.dtype)
    keep = None
    if mask is not None:
        keep = cast(as_tensor(mask, name=op), "bool")
    if is_causal:
        causal = constant(np.tril(np.ones((q.shape[1], k.shape[1]), dtype=bool)))
        keep = causal if keep is None else math.logical_and(keep, causal)
    if keep is not None:
        big = -0.7 * (65500.0 if logits.dtype.name == "float16" else 3.38953e38)
        logits = math.where(keep, logits, big)
    weights = softmax(logits, -1)
    out = math.matmul(weights, transpose(v, (0, 2, 1, 3)))
    return transpose(out, (0, 2, 1, 3))


# -------------------------------------------------------------- reshuffles
def _block_size(op: str, block_size) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer) or block_size < 2:
        raise ValueError(f"{op}: block_size must be an int >= 2, got {block_size!r}")
    return int(block_size)


def depth_to_space(x, block_size, data_format="channels_last") -> Tensor:
    """Move blocks of channels into block_size x block_size spatial tiles.

    >>> import tapeflow as tp
    >>> tp.nn.depth_to_space(tp.ones((1, 2, 2, 8)), 2).shape
    (1, 4, 4, 2)
    """
    op = "depth_to_space"
    b = _block_size(op, block_size)
    fmt = _data_format(op, data_format)
    x = as_tensor(x, name=op)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected a rank-4 tensor, got shape {x.shape}")
    x = _to_last(x, fmt)
    _, h, w, c = x.shape
    if c % (b * b):
        raise ValueError(f"{op}: channels ({c}) must be divisible by block_size**2 ({b * b})")
    if fmt == "channels_last":
        y = reshape(x, (-1, h, w, b, b, c // (b * b)))
    else:
        y = transpose(reshape(x, (-1, h, w, c // (b * b), b, b)), (0, 1, 2, 4, 5, 3))
    y = reshape(transpose(y, (0, 1, 3, 2, 4, 5)), (-1, h * b, w * b, c // (b * b)))
    return _from_last(y, fmt)


def space_to_depth(x, block_size, data_format="channels_last") -> Tensor:
    """Move block_size x block_size spatial tiles into the channel axis.

    >>> import tapeflow as tp
    >>> tp.nn.space_to_depth(tp.ones((1, 4, 4, 2)), 2).shape
    (1, 2, 2, 8)
    """
    op = "space_to_depth"
    b = _block_size(op, block_size)
    fmt = _data_format(op, data_format)
    x = as_tensor(x, name=op)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected a rank-4 tensor, got shape {x.shape}")
    x = _to_last(x, fmt)
    _, h, w, c = x.shape
    if h % b or w % b:
        raise ValueError(f"{op}: height and width ({h}, {w}) must be divisible by block_size ({b})")
    y = transpose(reshape(x, (-1, h // b, b, w // b, b, c)), (0, 1, 3, 2, 4, 5))
    if fmt == "channels_first":
        y = transpose(y, (0, 1, 2, 5, 3, 4))
    y = reshape(y, (-1, h // b, w // b, c * b * b))
    return _from_last(y, fmt)


def _unfold_geometry(op: str, kernel_size, dilation, padding, stride):
    return (
        _tuple(op, "kernel_size", kernel_size, 2),
        _tuple(op, "dilation", dilation, 2),
        _tuple(op, "padding", padding, 2),
        _tuple(op, "stride", stride, 2),
    )


def _unfold_index(h: int, w: int, k, d, p, s) -> tuple[np.ndarray, int]:
    """Flat indices into the padded (h + 2p, w + 2p) plane, shape (k0*k1, L), and L."""
    hp, wp = h + 2 * p[0], w + 2 * p[1]
    oh = (hp - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (wp - d[1] * (k[1] - 1) - 1) // s[1] + 1
    ki, kj = np.meshgrid(np.arange(k[0]) * d[0], np.arange(k[1]) * d[1], indexing="ij")
    oi, oj = np.meshgrid(np.arange(oh) * s[0], np.arange(ow) * s[1], indexing="ij")
    rows = ki.reshape(-1, 1) + oi.reshape(1, -1)
    cols = kj.reshape(-1, 1) + oj.reshape(1, -1)
    return rows * wp + cols, oh * ow


def unfold(x, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding blocks of a (N, C, H, W) tensor as columns: (N, C * k0 * k1, L), as torch's unfold.

    >>> import tapeflow as tp
    >>> tp.nn.unfold(tp.ones((1, 2, 4, 4)), 2, stride=2).shape
    (1, 8, 4)
    """
    op = "unfold"
    k, d, p, s = _unfold_geometry(op, kernel_size, dilation, padding, stride)
    x = as_tensor(x, name=op)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected a (N, C, H, W) tensor, got shape {x.shape}")
    _, c, h, w = x.shape
    xp = pad(x, [[0, 0], [0, 0], [p[0], p[0]], [p[1], p[1]]])
    index, length = _unfold_index(h, w, k, d, p, s)
    flat = reshape(xp, (-1, c, (h + 2 * p[0]) * (w + 2 * p[1])))
    cols = gather(flat, constant(index.reshape(-1).astype(np.int64)), axis=2)
    return reshape(cols, (-1, c * k[0] * k[1], length))


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The adjoint of `unfold`: sum columns (N, C * k0 * k1, L) back into (N, C, H, W).

    >>> import tapeflow as tp
    >>> tp.nn.fold(tp.ones((1, 8, 4)), (4, 4), 2, stride=2).shape
    (1, 2, 4, 4)
    """
    op = "fold"
    k, d, p, s = _unfold_geometry(op, kernel_size, dilation, padding, stride)
    h, w = _tuple(op, "output_size", output_size, 2)
    x = _x(op, x)
    if x.ndim != 3:
        raise ValueError(f"{op}: expected a (N, C * k0 * k1, L) tensor, got shape {x.shape}")
    index, length = _unfold_index(h, w, k, d, p, s)
    if x.shape[1] % (k[0] * k[1]) or x.shape[2] != length:
        raise ValueError(f"{op}: input shape {x.shape} does not match kernel_size {k} and {length} blocks")
    c = x.shape[1] // (k[0] * k[1])
    hp, wp = h + 2 * p[0], w + 2 * p[1]
    scatter = np.zeros((index.size, hp * wp))
    scatter[np.arange(index.size), index.reshape(-1)] = 1.0
    cols = reshape(x, (-1, c, index.size))
    plane = reshape(math.matmul(cols, constant(scatter.astype(x.dtype.np))), (-1, c, hp, wp))
    return plane[:, :, p[0] : p[0] + h, p[1] : p[1] + w]


def polar(abs_, angle) -> tuple[Tensor, Tensor]:
    """The complex number of magnitude `abs_` and phase `angle`, as the (real, imag) pair
    that stands for complex tensors in tapeflow (which has no complex dtype; see
    `tp.ops.math.fft`).

    >>> import tapeflow as tp
    >>> real, imag = tp.nn.polar(tp.tensor([2.0]), tp.tensor([0.0]))
    >>> real.numpy().tolist(), imag.numpy().tolist()
    ([2.0], [0.0])
    """
    magnitude, angle = _x("polar", abs_), _x("polar", angle)
    return magnitude * math.cos(angle), magnitude * math.sin(angle)


# --------------------------------------------------------------------- CTC
def ctc_loss(target, output, target_length, output_length, mask_index=0) -> Tensor:
    """Connectionist temporal classification loss per example: `target` (batch, max_label)
    integer labels, `output` (batch, time, classes) logits, `mask_index` the blank class.

    >>> import tapeflow as tp
    >>> loss = tp.nn.ctc_loss(tp.tensor([[1]]), tp.zeros((1, 2, 2)), tp.tensor([1]), tp.tensor([2]))
    >>> round(float(loss[0]), 4)
    0.2877
    """
    op = "ctc_loss"
    logits = _x(op, output)
    if logits.dtype.bits < 32:
        logits = cast(logits, "float32")
    labels = as_tensor(target, name=op)
    if logits.ndim != 3 or labels.ndim != 2:
        raise ValueError(
            f"{op}: expected output (batch, time, classes) and target (batch, labels), got "
            f"{logits.shape} and {labels.shape}"
        )
    time, classes = logits.shape[1], logits.shape[2]
    max_label = labels.shape[1]
    log_p = log_softmax(logits, -1)
    labels = cast(labels, "int64")
    target_length = cast(as_tensor(target_length, name=op), "int64")
    output_length = cast(as_tensor(output_length, name=op), "int64")
    # The extended label sequence: blank, l1, blank, l2, ..., blank (length 2L + 1).
    states = 2 * max_label + 1
    blanks = labels * 0 + int(mask_index)
    ext = concat([reshape(stack([blanks, labels], axis=2), (-1, 2 * max_label)), blanks[:, :1]], axis=1)
    hot = one_hot(ext, classes, dtype=logits.dtype)  # (B, S, K)
    emit = math.matmul(log_p, transpose(hot, (0, 2, 1)))  # (B, T, S)
    # Transitions: from s, s - 1, and s - 2 when ext[s] is a label differing from ext[s - 2].
    prev2 = concat([ext[:, :2] * 0 - 1, ext[:, :-2]], axis=1)
    skip_ok = math.logical_and(math.not_equal(ext, int(mask_index)), math.not_equal(ext, prev2))
    neg_inf = -1e30
    positions = constant(np.arange(states, dtype=np.int64))
    valid_state = math.less(positions, reshape(2 * target_length + 1, (-1, 1)))
    init = np.full(states, neg_inf)
    init[:2] = 0.0
    alpha = emit[:, 0] + constant(init.astype(logits.dtype.np))
    alpha = math.where(valid_state, alpha, neg_inf)
    for t in range(1, time):
        shift1 = concat([alpha[:, :1] * 0.0 + neg_inf, alpha[:, :-1]], axis=1)
        shift2 = concat([alpha[:, :2] * 0 + neg_inf, alpha[:, :-2]], axis=1)
        shift2 = math.where(skip_ok, shift2, neg_inf)
        step = logsumexp(stack([alpha, shift1, shift2], axis=0), 0) + emit[:, t]
        step = math.where(valid_state, step, neg_inf)
        running = math.less(t, reshape(output_length, (-1, 1)))
        alpha = math.where(running, step, alpha)
    last = 2 * target_length
    ends = math.logical_or(
        math.equal(positions, reshape(last, (-1, 1))), math.equal(positions, reshape(last - 1, (-1, 1)))
    )
    return -logsumexp(math.where(ends, alpha, neg_inf), -1)


def ctc_decode(
    inputs, sequence_lengths, strategy="greedy", beam_width=100, top_paths=1, merge_repeated=True, mask_index=0
):
    """CTC decoding of (batch, time, classes) scores. "greedy": the best class per step, with
    repeats merged and blanks (`mask_index`) removed; returns (decoded of shape
    (1, batch, time) padded with -1, scores of shape (batch, 1)). "beam_search": prefix
    beam search over the log-softmax of `inputs` keeping `beam_width` prefixes; returns the
    `top_paths` best (decoded (top_paths, batch, time), their log-probabilities (batch,
    top_paths)); it runs on the host, eagerly.

    >>> import tapeflow as tp
    >>> x = tp.log(tp.tensor([[[0.1, 0.9], [0.1, 0.9], [0.9, 0.1]]]))
    >>> tp.nn.ctc_decode(x, tp.tensor([3]))[0].numpy().tolist()
    [[[1, -1, -1]]]
    """
    op = "ctc_decode"
    if strategy not in ("greedy", "beam_search"):
        raise ValueError(f"{op}: strategy must be 'greedy' or 'beam_search', got {strategy!r}")
    x = _x(op, inputs)
    if x.ndim != 3:
        raise ValueError(f"{op}: expected inputs (batch, time, classes), got shape {x.shape}")
    time, classes = x.shape[1], x.shape[2]
    blank = classes - 1 if mask_index is None else int(mask_index)
    if strategy == "beam_search":
        return _beam_search(x, sequence_lengths, int(beam_width), int(top_paths), blank)
    lengths = cast(as_tensor(sequence_lengths, name=op), "int64")
    best = cast(argmax(x, -1), "int64")
    scores = reduce_max(x, -1)
    steps = constant(np.arange(time, dtype=np.int64))
    past_end = math.greater_equal(steps, reshape(lengths, (-1, 1)))
    best = math.where(past_end, blank, best)
    scores = math.where(past_end, 0.0, scores)
    if merge_repeated:
        repeat = concat([math.equal(best[:, :1], -1), math.equal(best[:, 1:], best[:, :-1])], axis=1)
        best = math.where(repeat, blank, best)
    keep = math.not_equal(best, blank)
    position = cast(_cumsum_last(cast(keep, "int64")), "int64") - 1
    # decoded[b, j] = the kept label whose position is j, else -1
    slot = math.logical_and(
        expand_dims(keep, 2), math.equal(expand_dims(position, 2), constant(np.arange(time, dtype=np.int64)))
    )
    label = reduce_sum(cast(slot, "int64") * expand_dims(best + 1, 2), 1) - 1
    return expand_dims(cast(label, "int32"), 0), -reduce_sum(scores, 1, keepdims=True)


def _beam_search(x: Tensor, sequence_lengths, beam_width: int, top_paths: int, blank: int):
    """CTC prefix beam search, one example at a time on the host (eager only)."""
    log_p = log_softmax(x, -1).numpy().astype(np.float64)
    lengths = np.asarray(as_tensor(sequence_lengths, name="ctc_decode").numpy()).reshape(-1)
    batch, time, classes = log_p.shape
    paths = np.full((top_paths, batch, time), -1, dtype=np.int32)
    scores = np.full((batch, top_paths), -np.inf)
    for b in range(batch):
        scores[b], found = _beam_search_one(log_p[b, : max(int(lengths[b]), 1)], beam_width, top_paths, blank)
        for k, prefix in enumerate(found):
            paths[k, b, : len(prefix)] = prefix
    return constant(paths), constant(scores.astype(x.dtype.np))


def _add(scores: dict, prefix: tuple, track: int, value: float) -> None:
    pair = scores.setdefault(prefix, np.array([-np.inf, -np.inf]))
    pair[track] = np.logaddexp(pair[track], value)


def _beam_search_one(log_p: np.ndarray, beam_width: int, top_paths: int, blank: int):
    """The `top_paths` best label sequences of one example and their log-probabilities.

    Every prefix keeps two scores: of the alignments that end in a label, and of those
    that end in a blank; a repeated label extends a prefix only after a blank.
    """
    time, classes = log_p.shape
    first = np.argsort(-log_p[0], kind="stable")[: min(classes, beam_width)]
    beams = {
        (() if c == blank else (int(c),)): np.array([-np.inf, log_p[0, c]] if c == blank else [log_p[0, c], -np.inf])
        for c in first
    }
    labels = [c for c in range(classes) if c != blank]
    for t in range(1, time):
        grown: dict = {}
        for prefix, (emit, gap) in beams.items():
            total = np.logaddexp(emit, gap)
            _add(grown, prefix, 1, total + log_p[t, blank])
            tail = prefix[-1] if prefix else None
            for c in labels:
                if c == tail:
                    _add(grown, prefix, 0, emit + log_p[t, c])
                    _add(grown, (*prefix, c), 0, gap + log_p[t, c])
                else:
                    _add(grown, (*prefix, c), 0, total + log_p[t, c])
        ranked = sorted(grown.items(), key=lambda item: -np.logaddexp(*item[1]))
        beams = dict(ranked[:beam_width])
    ranked = sorted(beams.items(), key=lambda item: -np.logaddexp(*item[1]))[:top_paths]
    best = np.full(top_paths, -np.inf)
    best[: len(ranked)] = [np.logaddexp(*scores) for _, scores in ranked]
    return best, [prefix for prefix, _ in ranked]


def _cumsum_last(x: Tensor) -> Tensor:
    n = x.shape[-1]
    upper = constant(np.triu(np.ones((n, n))).astype(np.float64))
    return cast(math.matmul(cast(x, "float64"), upper), x.dtype)
