"""Ops against PyTorch: values and gradients on the same random inputs.

Every comparison pulls a random cotangent back through both libraries, so a
gradient that is right only for an all-ones upstream gradient still fails.
"""

import numpy as np
import pytest

import tapeflow as tp

torch = pytest.importorskip("torch")
F = torch.nn.functional

TOL = {np.float64: {"rtol": 1e-9, "atol": 1e-10}, np.float32: {"rtol": 2e-4, "atol": 2e-5}}


def _random(shape, dtype=np.float64, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def assert_matches_torch(tp_fn, torch_fn, *arrays, seed=1):
    """Check tp_fn(*arrays) against torch_fn(*arrays): value, then the VJP of every input."""
    dtype = arrays[0].dtype.type
    tol = TOL[dtype]
    xs = [tp.tensor(a) for a in arrays]
    with tp.GradientTape() as tape:
        tape.watch(xs)
        y = tp_fn(*xs)
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch_fn(*ts)
    assert y.dtype == tp.as_dtype(dtype)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **tol)

    cot = np.asarray(np.random.default_rng(seed).standard_normal(tuple(ty.shape)), dtype=dtype)
    grads = tape.gradient(y, xs, output_gradients=tp.tensor(cot))
    want = torch.autograd.grad(ty, ts, grad_outputs=torch.tensor(cot), allow_unused=True)
    for i, (g, w) in enumerate(zip(grads, want, strict=True)):
        w = np.zeros_like(arrays[i]) if w is None else w.numpy()
        assert g is not None, f"no gradient for input {i}"
        assert g.shape == arrays[i].shape and g.dtype == tp.as_dtype(dtype)
        np.testing.assert_allclose(g.numpy(), w, err_msg=f"gradient of input {i}", **tol)


# ------------------------------------------------------------------ matmul
@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (2, 4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),  # batch dims broadcast both ways
        ((3, 4), (6, 4, 2)),  # 2-D against a batch
        ((4,), (4, 3)),  # vector @ matrix
        ((2, 3, 4), (4,)),  # batch @ vector
        ((4,), (4,)),  # dot product
    ],
)
def test_matmul(a_shape, b_shape):
    assert_matches_torch(tp.matmul, torch.matmul, _random(a_shape, seed=2), _random(b_shape, seed=3))


def test_matmul_float32_and_operator():
    a, b = _random((2, 3, 8), np.float32, seed=4), _random((8, 5), np.float32, seed=5)
    assert_matches_torch(lambda x, y: x @ y, torch.matmul, a, b)


# ------------------------------------------------------------- convolution
def _same_pads(size, k, stride, dilation):
    eff = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def _torch_pads(hw, khw, strides, padding, dilations):
    """((top, bottom), (left, right)) for torch, with TensorFlow's SAME rule."""
    if padding == "VALID":
        return (0, 0), (0, 0)
    if padding == "SAME":
        return tuple(_same_pads(n, k, s, d) for n, k, s, d in zip(hw, khw, strides, dilations, strict=True))
    return padding


def _nchw(x):
    return x.permute(0, 3, 1, 2)


def _nhwc(x):
    return x.permute(0, 2, 3, 1)


def torch_conv2d(x, w, strides, padding, dilations, pad_value=0.0):
    (t, b), (le, r) = _torch_pads(x.shape[1:3], w.shape[:2], strides, padding, dilations)
    xp = F.pad(_nchw(x), (le, r, t, b), value=pad_value)
    return _nhwc(F.conv2d(xp, w.permute(3, 2, 0, 1), stride=strides, dilation=dilations))


CONV_PADDINGS = ["SAME", "VALID", ((1, 2), (0, 1))]


@pytest.mark.parametrize("padding", CONV_PADDINGS, ids=["same", "valid", "explicit"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dilation", [1, 2])
def test_conv2d(padding, stride, dilation):
    # H=8 even with stride 2 makes SAME pad asymmetrically; W=7 odd.
    x, w = _random((2, 8, 7, 3), seed=6), _random((3, 2, 3, 4), seed=7)
    s, d = (stride, stride), (dilation, dilation)
    assert_matches_torch(
        lambda a, b: tp.nn.conv2d(a, b, strides=stride, padding=padding, dilations=dilation),
        lambda a, b: torch_conv2d(a, b, s, padding, d),
        x,
        w,
    )


def test_conv2d_same_stride2_is_asymmetric():
    """SAME, stride 2, even size: TensorFlow pads one more row at the bottom than the top."""
    assert _same_pads(6, 3, 2, 1) == (0, 1)
    x, w = _random((1, 6, 6, 2), seed=8), _random((3, 3, 2, 3), seed=9)
    assert_matches_torch(
        lambda a, b: tp.nn.conv2d(a, b, strides=2, padding="SAME"),
        lambda a, b: torch_conv2d(a, b, (2, 2), "SAME", (1, 1)),
        x,
        w,
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv2d_pointwise(dtype):
    """A 1x1, stride-1, unpadded conv (a plain matmul over pixels)."""
    x, w = _random((9, 4, 5, 6), dtype, seed=40), _random((1, 1, 6, 3), dtype, seed=41)
    assert_matches_torch(
        lambda a, b: tp.nn.conv2d(a, b),
        lambda a, b: torch_conv2d(a, b, (1, 1), "VALID", (1, 1)),
        x,
        w,
    )


def test_conv2d_float32_mixed_strides():
    x, w = _random((2, 9, 10, 4), np.float32, seed=10), _random((3, 3, 4, 5), np.float32, seed=11)
    assert_matches_torch(
        lambda a, b: tp.nn.conv2d(a, b, strides=(1, 2), padding="SAME", dilations=(2, 1)),
        lambda a, b: torch_conv2d(a, b, (1, 2), "SAME", (2, 1)),
        x,
        w,
    )


def torch_conv2d_transpose(dy, w, size, strides, padding, dilations):
    """The input-gradient of torch's conv2d, kept differentiable in dy and w."""
    x = torch.zeros((dy.shape[0], *size, w.shape[2]), dtype=dy.dtype, requires_grad=True)
    y = torch_conv2d(x, w, strides, padding, dilations)
    (dx,) = torch.autograd.grad(y, x, grad_outputs=dy, create_graph=True)
    return dx


@pytest.mark.parametrize("padding", CONV_PADDINGS, ids=["same", "valid", "explicit"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dilation", [1, 2])
def test_conv2d_transpose(padding, stride, dilation):
    size, k = (8, 7), (3, 2)
    s, d = (stride, stride), (dilation, dilation)
    out_shape = torch_conv2d(
        torch.zeros((2, *size, 4), dtype=torch.float64),
        torch.zeros((*k, 4, 3), dtype=torch.float64),
        s,
        padding,
        d,
    ).shape
    dy, w = _random(tuple(out_shape), seed=12), _random((*k, 4, 3), seed=13)
    assert_matches_torch(
        lambda a, b: tp.nn.conv2d_transpose(a, b, (2, *size, 4), strides=stride, padding=padding, dilations=dilation),
        lambda a, b: torch_conv2d_transpose(a, b, size, s, padding, d),
        dy,
        w,
    )


def test_conv2d_transpose_valid_matches_torch_conv_transpose2d():
    dy, w = _random((2, 3, 4, 5), seed=14), _random((3, 3, 2, 5), seed=15)
    size = (8, 9)  # stride 2, kernel 3: (3-1)*2+3 = 7 rows, so one row of output padding
    assert_matches_torch(
        lambda a, b: tp.nn.conv2d_transpose(a, b, size, strides=2, padding="VALID"),
        lambda a, b: _nhwc(F.conv_transpose2d(_nchw(a), b.permute(3, 2, 0, 1), stride=2, output_padding=(1, 0))),
        dy,
        w,
    )


# ----------------------------------------------------------------- pooling
POOL_CASES = [(2, 2, "VALID"), (3, 2, "VALID"), (3, 1, "SAME"), (3, 2, "SAME"), (2, 2, "SAME")]


@pytest.mark.parametrize("ksize, stride, padding", POOL_CASES)
def test_max_pool2d(ksize, stride, padding):
    k, s = (ksize, ksize), (stride, stride)

    def ref(x):
        (t, b), (le, r) = _torch_pads(x.shape[1:3], k, s, padding, (1, 1))
        xp = F.pad(_nchw(x), (le, r, t, b), value=-np.inf)
        return _nhwc(F.max_pool2d(xp, k, s))

    assert_matches_torch(lambda x: tp.nn.max_pool2d(x, ksize, stride, padding), ref, _random((2, 7, 8, 3), seed=16))


@pytest.mark.parametrize("ksize, stride, padding", POOL_CASES)
def test_avg_pool2d(ksize, stride, padding):
    """SAME average pooling divides by the number of real (unpadded) cells."""
    k, s = (ksize, ksize), (stride, stride)

    def ref(x):
        (t, b), (le, r) = _torch_pads(x.shape[1:3], k, s, padding, (1, 1))
        pad = (le, r, t, b)
        total = F.avg_pool2d(F.pad(_nchw(x), pad), k, s, divisor_override=1)
        count = F.avg_pool2d(F.pad(torch.ones_like(_nchw(x)), pad), k, s, divisor_override=1)
        return _nhwc(total / count)

    assert_matches_torch(lambda x: tp.nn.avg_pool2d(x, ksize, stride, padding), ref, _random((2, 7, 8, 3), seed=17))


def test_avg_pool2d_valid_matches_torch_directly():
    assert_matches_torch(
        lambda x: tp.nn.avg_pool2d(x, 2, 2, "VALID"),
        lambda x: _nhwc(F.avg_pool2d(_nchw(x), 2, 2)),
        _random((2, 6, 6, 2), seed=18),
    )


def test_max_pool2d_float32():
    assert_matches_torch(
        lambda x: tp.nn.max_pool2d(x, 3, 2, "SAME"),
        lambda x: _nhwc(F.max_pool2d(F.pad(_nchw(x), (0, 1, 0, 1), value=-np.inf), 3, 2)),
        _random((2, 6, 6, 4), np.float32, seed=19),
    )


# ------------------------------------------------------------------ losses
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 4)])
def test_sparse_softmax_cross_entropy(shape, dtype):
    labels = np.random.default_rng(20).integers(0, shape[-1], shape[:-1])

    def ref(logits):
        flat = F.cross_entropy(logits.reshape(-1, shape[-1]), torch.tensor(labels.reshape(-1)), reduction="none")
        return flat.reshape(labels.shape)

    assert_matches_torch(
        lambda logits: tp.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
        ref,
        _random(shape, dtype, seed=21, scale=3.0),
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sparse_softmax_cross_entropy_large_logits(dtype):
    logits = np.array([[1000.0, 0.0, -1000.0], [-1e4, 1e4, 0.0], [50.0, 50.0, 49.0]], dtype)
    labels = np.array([2, 1, 0])
    assert_matches_torch(
        lambda x: tp.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x),
        lambda x: F.cross_entropy(x, torch.tensor(labels), reduction="none"),
        logits,
    )


def test_sparse_softmax_cross_entropy_second_order():
    """Hessian-vector product through the fused loss's VJP, against torch double backward."""
    logits, v = _random((4, 5), seed=22), _random((4, 5), seed=23)
    labels = np.array([0, 4, 2, 2])
    x = tp.tensor(logits)
    with tp.GradientTape() as outer:
        outer.watch(x)
        with tp.GradientTape() as inner:
            inner.watch(x)
            loss = tp.sum(tp.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x))
        g = inner.gradient(loss, x)
        gv = tp.sum(g * tp.tensor(v))
    hvp = outer.gradient(gv, x)

    t = torch.tensor(logits, requires_grad=True)
    (tg,) = torch.autograd.grad(F.cross_entropy(t, torch.tensor(labels), reduction="sum"), t, create_graph=True)
    (want,) = torch.autograd.grad((tg * torch.tensor(v)).sum(), t)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hvp.numpy(), want.numpy(), rtol=1e-9, atol=1e-12)


def test_softmax_cross_entropy_dense_labels():
    probs = np.random.default_rng(24).dirichlet(np.ones(5), size=6)
    assert_matches_torch(
        lambda lab, logits: tp.nn.softmax_cross_entropy_with_logits(labels=lab, logits=logits),
        lambda lab, logits: F.cross_entropy(logits, lab, reduction="none"),
        probs,
        _random((6, 5), seed=25, scale=3.0),
    )


def test_sigmoid_cross_entropy():
    labels = np.random.default_rng(26).uniform(size=(4, 6))
    logits = _random((4, 6), seed=27, scale=4.0)
    logits[0, :2] = [60.0, -60.0]  # large logits stay finite
    assert_matches_torch(
        lambda lab, x: tp.nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=x),
        lambda lab, x: F.binary_cross_entropy_with_logits(x, lab, reduction="none"),
        labels,
        logits,
    )


# ---------------------------------------------------------- gather/scatter
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "shape, indices, axis",
    [
        ((5, 3), [4, 0, 0, -1, 2], 0),  # repeats and a negative index
        ((5, 3), [[0, 2], [1, 1]], 1),
        ((4, 3, 2), [3, 3, 1], 0),
        ((4, 3, 2), [[1], [0]], 2),
    ],
)
def test_gather(shape, indices, axis, dtype):
    idx = np.array(indices)

    def ref(x):
        flat = torch.tensor(idx.reshape(-1) % shape[axis])
        out_shape = shape[:axis] + idx.shape + shape[axis + 1 :]
        return torch.index_select(x, axis, flat).reshape(out_shape)

    assert_matches_torch(lambda x: tp.gather(x, idx, axis=axis), ref, _random(shape, dtype, seed=28))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "shape, indices, axis",
    [
        ((5, 3), [0, 0, 3, 4], 0),
        ((5, 3), [-1, 0, 4, -5, -1], 0),  # negative indices count from the end
        ((3, 5), [4, 1, 1, 0], 1),
        ((4, 2, 3), [1, 1], 0),
    ],
)
def test_scatter_add(shape, indices, axis, dtype):
    idx = np.array(indices)
    upd_shape = shape[:axis] + idx.shape + shape[axis + 1 :]
    assert_matches_torch(
        lambda x, u: tp.scatter_add(x, idx, u, axis=axis),
        lambda x, u: torch.index_add(x, axis, torch.tensor(idx % shape[axis]), u),
        _random(shape, dtype, seed=29),
        _random(upd_shape, dtype, seed=30),
    )


# ---------------------------------------------------------------- getitem
def _steps(s, n):
    """A slice as explicit torch indices (torch has no negative steps)."""
    return torch.tensor(list(range(*s.indices(n))))


_MASK2 = np.random.default_rng(31).uniform(size=(4, 5)) > 0.5
_MASK1 = np.array([True, False, True, True, False])

GETITEM_CASES = [
    ((slice(1, 3), slice(None), slice(None, None, 2)), lambda x: x[1:3, :, ::2]),
    ((slice(None, None, -1),), lambda x: x.flip(0)),
    ((slice(None), slice(4, 0, -2)), lambda x: x[:, _steps(slice(4, 0, -2), 5)]),
    ((-1, slice(None, None, -3), 2), lambda x: x[-1, _steps(slice(None, None, -3), 5), 2]),
    ((Ellipsis, slice(-2, None), None, 1), lambda x: x[..., -2:, None, 1]),
    (np.array([3, 0, 3]), lambda x: x[torch.tensor([3, 0, 3])]),  # repeats accumulate
    ((slice(None), np.array([[1, 1], [4, 0]])), lambda x: x[:, torch.tensor([[1, 1], [4, 0]])]),
    (
        (np.array([0, 2]), slice(None), np.array([5, 1])),
        lambda x: x[torch.tensor([0, 2]), :, torch.tensor([5, 1])],
    ),
    (_MASK2, lambda x: x[torch.tensor(_MASK2)]),
    (
        (slice(None), _MASK1, slice(None, None, -2)),
        lambda x: x[:, torch.tensor(_MASK1)][:, :, _steps(slice(None, None, -2), 6)],
    ),
]


@pytest.mark.parametrize("index, ref", GETITEM_CASES, ids=[str(i) for i in range(len(GETITEM_CASES))])
def test_getitem(index, ref):
    assert_matches_torch(lambda x: x[index], ref, _random((4, 5, 6), seed=32))


def test_getitem_with_a_tensor_index():
    idx = tp.tensor([2, 0, 2])
    assert_matches_torch(lambda x: x[idx, 1:], lambda x: x[torch.tensor([2, 0, 2]), 1:], _random((3, 4), seed=33))


# ------------------------------------------------------------- activations
ACTIVATIONS = {
    "log_softmax": (lambda x: tp.nn.log_softmax(x), lambda x: F.log_softmax(x, -1)),
    "log_softmax_axis0": (lambda x: tp.nn.log_softmax(x, axis=0), lambda x: F.log_softmax(x, 0)),
    "softmax": (lambda x: tp.nn.softmax(x), lambda x: F.softmax(x, -1)),
    "softmax_axis0": (lambda x: tp.nn.softmax(x, axis=0), lambda x: F.softmax(x, 0)),
    "gelu": (lambda x: tp.nn.gelu(x), F.gelu),
    "gelu_tanh": (
        lambda x: tp.nn.gelu(x, approximate=True),
        lambda x: F.gelu(x, approximate="tanh"),
    ),
    "elu": (lambda x: tp.nn.elu(x), F.elu),
    "elu_alpha": (lambda x: tp.nn.elu(x, alpha=0.5), lambda x: F.elu(x, alpha=0.5)),
    "softplus": (lambda x: tp.nn.softplus(x), F.softplus),
    "leaky_relu": (lambda x: tp.nn.leaky_relu(x), lambda x: F.leaky_relu(x, 0.2)),
    "leaky_relu_alpha": (lambda x: tp.nn.leaky_relu(x, 0.05), lambda x: F.leaky_relu(x, 0.05)),
    "relu": (tp.nn.relu, F.relu),
    "sigmoid": (tp.nn.sigmoid, torch.sigmoid),
    "tanh": (tp.nn.tanh, torch.tanh),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(name):
    tp_fn, torch_fn = ACTIVATIONS[name]
    assert_matches_torch(tp_fn, torch_fn, _random((3, 7), seed=34, scale=2.5))


def test_softplus_extreme_values():
    x = np.array([-800.0, -30.0, -1e-3, 15.0, 40.0, 800.0])
    assert_matches_torch(lambda t: tp.nn.softplus(t), F.softplus, x)  # torch is linear above x = 20


def test_softplus_gradient_at_zero():
    assert_matches_torch(lambda t: tp.nn.softplus(t), F.softplus, np.array([0.0, 1.0]))


def test_sigmoid_cross_entropy_gradient_at_zero_logits():
    assert_matches_torch(
        lambda lab, x: tp.nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=x),
        lambda lab, x: F.binary_cross_entropy_with_logits(x, lab, reduction="none"),
        np.array([0.0, 1.0, 0.3]),
        np.zeros(3),
    )


def test_activations_float32():
    x = _random((4, 9), np.float32, seed=35, scale=3.0)
    assert_matches_torch(lambda t: tp.nn.log_softmax(t), lambda t: F.log_softmax(t, -1), x)
    assert_matches_torch(lambda t: tp.nn.gelu(t), F.gelu, x)


# -------------------------------------------------------------- reductions
@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, False), (-1, True), ((0, 2), False), ((0, 2), True)])
def test_logsumexp_var_std(axis, keepdims):
    x = _random((3, 4, 5), seed=36, scale=3.0)
    dim = tuple(range(3)) if axis is None else axis
    assert_matches_torch(lambda t: tp.logsumexp(t, axis, keepdims), lambda t: torch.logsumexp(t, dim, keepdims), x)
    assert_matches_torch(
        lambda t: tp.var(t, axis, keepdims),
        lambda t: torch.var(t, dim, correction=0, keepdim=keepdims),
        x,
    )
    assert_matches_torch(
        lambda t: tp.std(t, axis, keepdims),
        lambda t: torch.std(t, dim, correction=0, keepdim=keepdims),
        x,
    )


def test_logsumexp_large_values():
    x = np.array([[1000.0, 1000.0, -1000.0], [-1e4, -1e4 + 1, -1e4 + 2]])
    assert_matches_torch(lambda t: tp.logsumexp(t, axis=1), lambda t: torch.logsumexp(t, 1), x)


@pytest.mark.parametrize("axis", [None, 1, (0, 1)])
def test_max_min_share_the_gradient_between_ties(axis):
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [-1.0, 0.5, -1.0]])
    dim = (0, 1) if axis is None else axis
    assert_matches_torch(lambda t: tp.max(t, axis), lambda t: torch.amax(t, dim), x)
    assert_matches_torch(lambda t: tp.min(t, axis), lambda t: torch.amin(t, dim), x)


def _with_zeros():
    x = _random((4, 5), seed=37) + 0.5
    x[0, 2] = 0.0  # one zero in row 0
    x[1, 1] = x[1, 3] = 0.0  # two zeros in row 1
    x[3, 0] = 0.0  # column 0 then holds one zero, column 1/3 one each
    return x


@pytest.mark.parametrize("axis", [1, 0, -1])
def test_prod_with_zeros(axis):
    assert_matches_torch(lambda t: tp.prod(t, axis=axis), lambda t: torch.prod(t, axis), _with_zeros())


@pytest.mark.parametrize("zeros", [0, 1, 2])
def test_prod_all_axes(zeros):
    x = _random((3, 4), seed=38) * 0.5 + 1.0
    x.flat[[5, 9][:zeros]] = 0.0
    assert_matches_torch(lambda t: tp.prod(t), torch.prod, x)


def test_prod_keepdims_tuple_axes():
    x = _with_zeros()[None]  # (1, 4, 5)
    assert_matches_torch(
        lambda t: tp.prod(t, axis=(0, 2), keepdims=True),
        lambda t: torch.prod(torch.prod(t, 2, keepdim=True), 0, keepdim=True),
        x,
    )


# --------------------------------------------------------------------- MLP
def test_mlp_loss_gradients_match_torch():
    rng = np.random.default_rng(39)
    sizes = [6, 16, 12, 4]
    weights = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        weights += [
            rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in),
            rng.standard_normal(fan_out) * 0.1,
        ]
    x = rng.standard_normal((10, sizes[0]))
    labels = rng.integers(0, sizes[-1], 10)

    params = [tp.Variable(w, name=f"p{i}") for i, w in enumerate(weights)]
    assert all(p.dtype == tp.float64 for p in params)
    with tp.GradientTape() as tape:
        w1, b1, w2, b2, w3, b3 = params
        h = tp.tanh(tp.tensor(x) @ w1 + b1)
        h = tp.nn.relu(h @ w2 + b2)
        logits = h @ w3 + b3
        loss = tp.mean(tp.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    grads = tape.gradient(loss, params)

    tparams = [torch.tensor(w, requires_grad=True) for w in weights]
    w1, b1, w2, b2, w3, b3 = tparams
    h = torch.tanh(torch.tensor(x) @ w1 + b1)
    h = torch.relu(h @ w2 + b2)
    tloss = F.cross_entropy(h @ w3 + b3, torch.tensor(labels))
    tloss.backward()

    np.testing.assert_allclose(loss.numpy(), tloss.item(), rtol=1e-12)
    for i, (g, p) in enumerate(zip(grads, tparams, strict=True)):
        assert g.shape == tuple(p.shape)
        np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=f"param {i}")
