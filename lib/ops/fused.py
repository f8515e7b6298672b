"""Fused ops that graph passes create: a layer's product with its bias and activation
(`fused_matmul`, `fused_conv2d`), a chain of elementwise ops run as one program
(`fused_elementwise`), and a gradient descent step on a weight whose gradient is a product
(`sgd_matmul_update`: `param - lr * (a @ b)`, which a CPU writes into the weight as one gemm).

Like every op, each is defined here once, with its shape rule, its VJP written with the
primitive ops and a NumPy reference; backends give them compiled kernels by name.

`fused_elementwise`'s `program` attr is a tuple of instructions; instruction k defines
register k:

- ``("input", i)``: the op's input i, broadcast to the output shape;
- ``("const", c)``: the float c;
- ``(name, a)`` or ``(name, a, b)``: a primitive of tapeflow._kernels.fusion_opcodes applied to
  earlier registers a, b.

The last register is the result. Programs hold only strings, ints, floats and tuples,
so graphs that contain them serialize as JSON. The op has no VJP: fusion runs on
inference graphs and on training graphs whose gradient nodes already exist.

>>> import numpy as np
>>> prog = (("input", 0), ("input", 1), ("add", 0, 1), ("relu", 2))
>>> FUSED_ELEMENTWISE.reference(np.array([[-2.0, 1.0]]), np.array([0.5, 0.5]), program=prog).tolist()
[[0.0, 1.5]]
>>> a, w, b = np.ones((2, 3)), np.ones((3, 4)), np.full(4, -5.0)
>>> FUSED_MATMUL.reference(a, w, b, activation="relu").tolist()
[[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import numpy as np

from tapeflow._kernels.fusion_opcodes import ARITY, PRIMITIVES
from tapeflow.ops import shapes
from tapeflow.ops.array import transpose
from tapeflow.ops.core import cast, zeros_like
from tapeflow.ops.math import matmul
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import apply, defop, get_op

ACTIVATIONS = ("linear", "relu")
_FLOAT_MAX = float(np.finfo(np.float64).max)


# ------------------------------------------------------------ bias and activation
def bias_activation(y: np.ndarray, bias: np.ndarray, activation: str) -> np.ndarray:
    """`activation(y + bias)`, NaN kept as NaN."""
    y = y + bias
    return np.maximum(y, 0) if activation == "relu" else y


def _check_bias(name, y_shape, b, dtype):
    if len(b.shape) != 1 or (y_shape[-1] is not None and b.shape[0] != y_shape[-1]):
        raise ValueError(f"{name}: bias of shape {b.shape} does not match output channels {y_shape[-1]}")
    if b.dtype is not dtype:
        raise TypeError(f"{name}: bias dtype {b.dtype} differs from {dtype}")


def _check_activation(name, activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"{name}: activation must be one of {ACTIVATIONS}, got {activation!r}")


def _pre_activation_grads(g, y, activation):
    """The gradient before the activation and the bias's gradient (its sum over every axis but
    the last): for relu one `relu_bias_grad` node, which sums as it masks."""
    if activation == "relu":
        return tuple(apply(get_op("relu_bias_grad"), (g, y), {}))
    return g, reduce_sum(g, tuple(range(g.ndim - 1)))


# ------------------------------------------------------------ relu and bias gradients
def _relu_bias_grad_infer(g, y):
    if (
        len(g.shape) < 1
        or len(g.shape) != len(y.shape)
        or any(a is not None and b is not None and a != b for a, b in zip(g.shape, y.shape, strict=True))
    ):
        raise ValueError(f"relu_bias_grad: g of shape {g.shape} and y of shape {y.shape} must share one shape")
    if g.dtype is not y.dtype or g.dtype.kind != "f":
        raise TypeError(f"relu_bias_grad: g ({g.dtype}) and y ({y.dtype}) must share one float dtype")
    return [(g.shape, g.dtype), ((g.shape[-1],), g.dtype)]


def _relu_bias_grad_vjp(gs, xs, ys):
    grad, bias_grad = gs
    _, y = xs
    if bias_grad is not None:  # the sum's gradient reaches every row of the last axis
        grad = (zeros_like(y) if grad is None else grad) + bias_grad
    return (None if grad is None else apply(get_op("relu_grad"), (grad, y), {})), None


@defop("relu_bias_grad", infer=_relu_bias_grad_infer, vjp=_relu_bias_grad_vjp, num_outputs=2)
def RELU_BIAS_GRAD(g, y):
    """relu's gradient given its output y (g where y > 0, else 0) and that gradient's sum over
    every axis but the last: the pre-activation and bias gradients of a layer with a relu."""
    gz = np.where(y > 0, g, 0).astype(g.dtype, copy=False)
    return gz, np.sum(gz, axis=tuple(range(gz.ndim - 1))).astype(g.dtype, copy=False)


# ------------------------------------------------------------ matmul
def _fused_matmul_infer(a, w, b, activation):
    _check_activation("fused_matmul", activation)
    if len(w.shape) != 2:
        raise ValueError(f"fused_matmul: the weight must be 2-D, got shape {w.shape}")
    ((shape, dtype),) = get_op("matmul").infer(a, w)
    _check_bias("fused_matmul", shape, b, dtype)
    return [(shape, dtype)]


def _fused_matmul_vjp(gs, xs, ys, activation):
    a, w, b = xs
    if a.ndim != 2 or w.ndim != 2:
        raise NotImplementedError("fused_matmul: gradients are defined for 2-D operands only")
    gz, gb = _pre_activation_grads(gs[0], ys[0], activation)
    return matmul(gz, transpose(w, (1, 0))), matmul(transpose(a, (1, 0)), gz), gb


@defop("fused_matmul", infer=_fused_matmul_infer, vjp=_fused_matmul_vjp)
def FUSED_MATMUL(a, w, b, activation):
    """`activation(a @ w + b)`: a Dense layer in one node."""
    return bias_activation(np.matmul(a, w), b, activation)


# ------------------------------------------------------------ descent on a product
def _sgd_matmul_infer(param, a, b, lr):
    if len(a.shape) != 2 or len(b.shape) != 2 or len(param.shape) != 2:
        raise ValueError(
            f"sgd_matmul_update: param, a and b must be 2-D, got shapes {param.shape}, {a.shape} and {b.shape}"
        )
    ((shape, dtype),) = get_op("matmul").infer(a, b)
    if param.dtype is not dtype or dtype.kind != "f":
        raise TypeError(f"sgd_matmul_update: param {param.dtype} and the product {dtype} must share one float dtype")
    if any(p is not None and s is not None and p != s for p, s in zip(param.shape, shape, strict=True)):
        raise ValueError(f"sgd_matmul_update: param of shape {param.shape} is not the product's shape {shape}")
    if tuple(lr.shape) != () or lr.dtype.kind != "f":
        raise ValueError(f"sgd_matmul_update: lr must be a float scalar, got shape {lr.shape} and dtype {lr.dtype}")
    return [(param.shape, dtype)]


def _sgd_matmul_vjp(gs, xs, ys, **_):
    (g,) = gs
    _, a, b, lr = xs
    rate = cast(lr, g.dtype)
    product = matmul(a, b)
    return (
        g,
        -rate * matmul(g, transpose(b, (1, 0))),
        -rate * matmul(transpose(a, (1, 0)), g),
        cast(-reduce_sum(g * product), lr.dtype),
    )


@defop("sgd_matmul_update", infer=_sgd_matmul_infer, vjp=_sgd_matmul_vjp)
def SGD_MATMUL_UPDATE(param, a, b, lr):
    """`param - lr * (a @ b)`: a gradient descent step whose gradient is the product a @ b."""
    return (param - np.matmul(a, b) * lr).astype(param.dtype, copy=False)


# ------------------------------------------------------------ conv2d
def _fused_conv_infer(x, w, b, activation, **conv):
    _check_activation("fused_conv2d", activation)
    ((shape, dtype),) = get_op("conv2d").infer(x, w, **conv)
    _check_bias("fused_conv2d", shape, b, dtype)
    return [(shape, dtype)]


def _fused_conv_vjp(gs, xs, ys, activation, **conv):
    x, w, b = xs
    gz, gb = _pre_activation_grads(gs[0], ys[0], activation)
    gx, gw = get_op("conv2d").vjp([gz], (x, w), (ys[0],), needs=(True, True), **conv)
    return gx, gw, gb


@defop("fused_conv2d", infer=_fused_conv_infer, vjp=_fused_conv_vjp)
def FUSED_CONV2D(x, w, b, activation, **conv):
    """`activation(conv2d(x, w) + b)`: a Conv2D layer in one node."""
    return bias_activation(get_op("conv2d").reference(x, w, **conv), b, activation)


# ------------------------------------------------------------ elementwise programs
def _is_index(value, stop: int) -> bool:
    """Whether `value` is an int (not a bool) in [0, stop)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < stop


def check_program(program, n_inputs: int) -> None:
    """Raise ValueError naming the first malformed instruction of `program`."""
    if not isinstance(program, tuple) or not program:
        raise ValueError(f"fused_elementwise: program must be a non-empty tuple, got {program!r}")
    for k, ins in enumerate(program):
        ok = isinstance(ins, tuple) and ins and isinstance(ins[0], str)
        if ok and ins[0] == "input":
            ok = len(ins) == 2 and _is_index(ins[1], n_inputs)
        elif ok and ins[0] == "const":
            c = ins[1] if len(ins) == 2 else None
            # an int like 10**400 fits no float; non-finite floats are kept as they are
            ok = isinstance(c, float) or isinstance(c, int) and not isinstance(c, bool) and abs(c) <= _FLOAT_MAX
        elif ok:
            arity = ARITY.get(ins[0], 0)
            ok = arity > 0 and len(ins) == arity + 1 and all(_is_index(a, k) for a in ins[1:])
        if not ok:
            raise ValueError(
                f"fused_elementwise: instruction {k} {ins!r} is invalid (with {n_inputs} inputs; ops: "
                f"{', '.join(sorted(PRIMITIVES))})"
            )


def _fused_elementwise_infer(*inputs, program):
    if not inputs:
        raise ValueError("fused_elementwise: needs at least one input")
    dtype = inputs[0].dtype
    if dtype.kind != "f" or any(x.dtype is not dtype for x in inputs):
        raise TypeError(f"fused_elementwise: inputs must share one float dtype, got {[x.dtype.name for x in inputs]}")
    check_program(program, len(inputs))
    return [(shapes.broadcast("fused_elementwise", *(tuple(x.shape) for x in inputs)), dtype)]


def _as_dtype(value, dtype):
    """`value` (an array of any array module, or a scalar) in `dtype`."""
    return value.astype(dtype, copy=False) if hasattr(value, "astype") else np.asarray(value, dtype=dtype)


@defop("fused_elementwise", infer=_fused_elementwise_infer)
def FUSED_ELEMENTWISE(*inputs, program):
    """Run an elementwise program, instruction by instruction, with each op's reference."""
    dtype = inputs[0].dtype
    registers = []
    for ins in program:
        if ins[0] == "input":
            registers.append(inputs[ins[1]])
        elif ins[0] == "const":
            registers.append(dtype.type(ins[1]))  # a scalar, which CuPy arrays take as NumPy arrays do
        else:
            args = (registers[a] for a in ins[1:])
            registers.append(_as_dtype(get_op(ins[0]).reference(*args), dtype))
    shape = np.broadcast_shapes(*(a.shape for a in inputs))
    out = registers[-1]
    if isinstance(out, np.generic):  # a program that ends in a constant: made where the inputs live
        out = np.full_like(inputs[0], out)
    if tuple(out.shape) != shape or not out.flags.c_contiguous:
        out = np.copy(np.broadcast_to(out, shape), order="C")  # ascontiguousarray would make 0-d 1-d
    return out
