"""Data-dependent control flow: `tp.cond` and `tp.while_loop`.

Eagerly (and in a freeze whose predicate is already known) they are plain
Python branching and looping, so the tape records the path taken. When the
predicate is a traced tensor, the active tracer records a cond or while node
with its branches as subgraphs; both forms have gradients.

>>> import tapeflow as tp
>>> tp.cond(tp.tensor(True), lambda: tp.tensor(1.0), lambda: tp.tensor(2.0)).numpy().item()
1.0
>>> tp.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s * 2.0), (tp.tensor(0), tp.tensor(1.0)))[1].item()
16.0
"""

from __future__ import annotations

import numpy as np

from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import TRACING, FreezeError, Tensor, TracedTensor


def _tracer(name: str):
    """The tracer that records a traced `name` (the graph package's Tracer)."""
    if TRACING.tracer is None:
        raise FreezeError(f"{name}: a traced tensor is used outside the function being frozen")
    return TRACING.tracer


def _truth(name: str, pred) -> bool:
    if isinstance(pred, Tensor):
        if pred.shape != () and pred.size != 1:
            raise ValueError(f"{name}: the predicate must be a scalar, got shape {pred.shape}")
        return bool(pred)
    return bool(pred)


def cond(pred, true_fn, false_fn):
    """`true_fn()` if `pred` else `false_fn()`; both branches must return the same
    structure of tensors (same dtypes) when `pred` is traced."""
    if not callable(true_fn) or not callable(false_fn):
        raise TypeError("cond: true_fn and false_fn must be callables taking no arguments")
    if isinstance(pred, TracedTensor):
        if pred.dtype.kind != "b" or pred.shape not in ((), (1,)):
            raise TypeError(f"cond: the predicate must be a scalar bool tensor, got {pred.dtype} {pred.shape}")
        return _tracer("cond").cond(pred, true_fn, false_fn)
    return true_fn() if _truth("cond", pred) else false_fn()


def _iteration_limit(limit) -> int | None:
    """`maximum_iterations` as an int >= 0 or None (an integer scalar tensor is read once, as TF does)."""
    if isinstance(limit, Tensor) and not isinstance(limit, TracedTensor) and limit.shape in ((), (1,)):
        if limit.dtype.kind in "iu":
            limit = int(limit.numpy().reshape(()))
    elif isinstance(limit, np.integer):
        limit = int(limit)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"while_loop: maximum_iterations must be an int >= 0 or None, got {limit!r:.60}")
    return limit


def while_loop(cond_fn, body, loop_vars, maximum_iterations: int | None = None):
    """Repeat `loop_vars = body(*loop_vars)` while `cond_fn(*loop_vars)` holds, at most
    `maximum_iterations` times (as in TensorFlow: an int >= 0, or an integer scalar tensor,
    or None for no limit); returns the final loop_vars. Eager, frozen and under a
    GradientTape alike; a frozen loop keeps the limit in its graph (and its file).

    `loop_vars` is a tuple or list of tensors; `body` returns the same number
    of tensors with the same shapes and dtypes.

    >>> import tapeflow as tp
    >>> tp.while_loop(lambda i: i < 100, lambda i: i + 1, tp.tensor(0), maximum_iterations=5).item()
    5
    """
    if not callable(cond_fn) or not callable(body):
        raise TypeError("while_loop: cond and body must be callables")
    maximum_iterations = _iteration_limit(maximum_iterations)
    single = not isinstance(loop_vars, list | tuple)
    given = [loop_vars] if single else loop_vars
    values = [v if isinstance(v, Tensor) else as_tensor(v, name="while_loop") for v in given]
    if not values:
        raise ValueError("while_loop: loop_vars must not be empty")
    first = cond_fn(*values)
    if isinstance(first, TracedTensor) or any(isinstance(v, TracedTensor) for v in values):
        out = _tracer("while_loop").while_loop(cond_fn, body, values, maximum_iterations)
        return out[0] if single else type(loop_vars)(out) if isinstance(loop_vars, tuple) else list(out)
    i = 0
    keep_going = _truth("while_loop", first)
    while keep_going and (maximum_iterations is None or i < maximum_iterations):
        result = body(*values)
        result = [result] if not isinstance(result, list | tuple) else list(result)
        if len(result) != len(values):
            raise ValueError(f"while_loop: body returned {len(result)} values for {len(values)} loop variables")
        values = [r if isinstance(r, Tensor) else as_tensor(r, name="while_loop") for r in result]
        i += 1
        keep_going = _truth("while_loop", cond_fn(*values))
    return values[0] if single else type(loop_vars)(values)
