"""The `fused_elementwise` op: a chain of elementwise float ops run as one kernel.

The `program` attr is a tuple of instructions; instruction k defines register k:

- ``("input", i)``: the op's input i, broadcast to the output shape;
- ``("const", c)``: the float c;
- ``(name, a)`` or ``(name, a, b)``: a unary or binary op (by its registry name)
  applied to earlier registers a, b.

The last register is the result. Programs hold only strings, ints, floats and
tuples, so graphs that contain them serialize as JSON.

The op has no VJP: fusion runs on inference graphs and on training graphs whose
gradient nodes already exist, so nothing differentiates through a fused node.

The CPU kernel (tapeflow._kernels.elementwise) makes one pass over memory when
every input is full-size, a scalar, or a row broadcast over the last axis; other
broadcasts run the program with the ops' NumPy references.

>>> import numpy as np
>>> prog = (("input", 0), ("input", 1), ("add", 0, 1), ("relu", 2))
>>> x, b = np.array([[-2.0, 1.0]]), np.array([0.5, 0.5])
>>> fused_elementwise(x, b, program=prog).tolist()
[[0.0, 1.5]]
"""

from __future__ import annotations

import functools
import math

import numpy as np

from tapeflow import _kernels  # noqa: F401 - checks that the compiled kernels are fresh
from tapeflow._kernels import elementwise as _kernel
from tapeflow.ops import shapes
from tapeflow.ops.registry import defop, get_op

UNARY = ("neg", "exp", "log", "tanh", "sigmoid", "relu", "sqrt", "square", "abs", "reciprocal", "rsqrt")
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
FUSIBLE = frozenset(UNARY + BINARY)
_FLOATS = (np.float32, np.float64)


def check_program(program, n_inputs: int) -> None:
    """Raise ValueError naming the first malformed instruction of `program`."""
    if not isinstance(program, tuple) or not program:
        raise ValueError(f"fused_elementwise: program must be a non-empty tuple, got {program!r}")
    for k, ins in enumerate(program):
        ok = isinstance(ins, tuple) and ins and isinstance(ins[0], str)
        if ok and ins[0] == "input":
            ok = len(ins) == 2 and isinstance(ins[1], int) and 0 <= ins[1] < n_inputs
        elif ok and ins[0] == "const":
            ok = len(ins) == 2 and isinstance(ins[1], int | float)
        elif ok:
            arity = 1 if ins[0] in UNARY else 2 if ins[0] in BINARY else 0
            ok = arity > 0 and len(ins) == arity + 1 and all(isinstance(a, int) and 0 <= a < k for a in ins[1:])
        if not ok:
            raise ValueError(
                f"fused_elementwise: instruction {k} {ins!r} is invalid (with {n_inputs} inputs; ops: "
                f"{', '.join(sorted(FUSIBLE))})"
            )


def _infer(*inputs, program):
    if not inputs:
        raise ValueError("fused_elementwise: needs at least one input")
    dtype = inputs[0].dtype
    if dtype.kind != "f" or any(x.dtype is not dtype for x in inputs):
        raise TypeError(f"fused_elementwise: inputs must share one float dtype, got {[x.dtype.name for x in inputs]}")
    check_program(program, len(inputs))
    return [(shapes.broadcast("fused_elementwise", *(tuple(x.shape) for x in inputs)), dtype)]


@functools.lru_cache(maxsize=512)
def _encode(program: tuple):
    """The program as the kernel's int32 opcode/argument arrays and float64 constants."""
    ops, args_a, args_b, consts = [], [], [], []
    for ins in program:
        ops.append(_kernel.OPCODES[ins[0]])
        if ins[0] == "const":
            consts.append(float(ins[1]))
            args_a.append(len(consts) - 1)
        else:
            args_a.append(ins[1])
        args_b.append(ins[2] if len(ins) > 2 else 0)
    as32 = functools.partial(np.asarray, dtype=np.int32)
    return as32(ops), as32(args_a), as32(args_b), np.asarray(consts or [0.0])


def _layouts(arrays, shape):
    """Per input: ("full" | "scalar" | "row", flat contiguous array), or None if the kernel cannot take it."""
    size = math.prod(shape)
    inner = shape[-1] if shape else 1
    out = []
    for a in arrays:
        if a.size == size and a.shape == shape:
            out.append((_kernel.LAYOUTS["full"], np.ascontiguousarray(a).reshape(-1)))
        elif a.size == 1:
            out.append((_kernel.LAYOUTS["scalar"], a.reshape(-1)))
        elif a.shape and a.shape[-1] == inner and a.size == inner:
            out.append((_kernel.LAYOUTS["row"], np.ascontiguousarray(a).reshape(-1)))
        else:
            return None
    return out


@functools.lru_cache(maxsize=512)
def bound_program(program: tuple):
    """The compiled kernel of `program`, called with the input arrays (what a graph runs)."""
    return _kernel.Program(*_encode(program), functools.partial(_run_general, program=program))


def run_program(arrays, program: tuple, out: np.ndarray | None = None) -> np.ndarray:
    """Evaluate `program` on `arrays`, into `out` when given (C-contiguous, the result's shape and dtype)."""
    if out is None:
        return bound_program(program)(*arrays)
    return _run_general(*arrays, program=program, out=out)


def _run_general(*arrays, program: tuple, out: np.ndarray | None = None) -> np.ndarray:
    dtype = arrays[0].dtype
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    plan = _layouts(arrays, shape) if dtype in _FLOATS and all(a.dtype == dtype for a in arrays) else None
    if plan is None:
        result = _numpy_program(arrays, program, dtype)
        if out is None:
            return np.ascontiguousarray(np.broadcast_to(result, shape))
        np.copyto(out, result)
        return out
    if out is None:
        out = np.empty(shape, dtype)
    layouts = np.asarray([p[0] for p in plan], dtype=np.int32)
    inner = shape[-1] if shape else 1
    _kernel.evaluate(out.reshape(-1), [p[1] for p in plan], layouts, inner, *_encode(program))
    return out


def _numpy_program(arrays, program, dtype):
    """The program run op by op with each op's NumPy reference."""
    regs = []
    for ins in program:
        if ins[0] == "input":
            regs.append(arrays[ins[1]])
        elif ins[0] == "const":
            regs.append(np.asarray(ins[1], dtype=dtype))
        else:
            regs.append(np.asarray(get_op(ins[0]).reference(*(regs[a] for a in ins[1:])), dtype=dtype))
    return regs[-1]


def fused_elementwise(*inputs, program):
    """Run an elementwise program (see the module docstring) over broadcast inputs."""
    return run_program(inputs, program)


FUSED_ELEMENTWISE = defop("fused_elementwise", infer=_infer, bind=bound_program)(fused_elementwise)
