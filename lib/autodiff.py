"""Reverse-mode autodiff: GradientTape, grad, value_and_grad, custom_gradient.

A tape records the ops that touch watched tensors. `gradient` walks that
record backwards with `backprop`, in execution order reversed (an explicit
topological order, no recursion), calling each op's VJP. Graph gradients
(tapeflow.graph.gradients) run the same walk over a graph's nodes. VJPs are
tapeflow ops, so an outer tape records them and nested tapes give higher-order
gradients.

>>> import tapeflow as tp
>>> w = tp.Variable([2.0, 3.0])
>>> with tp.GradientTape() as tape:
...     loss = tp.sum(w * w)
>>> tape.gradient(loss, w).numpy().tolist()
[4.0, 6.0]
"""

from __future__ import annotations

import functools
import inspect

from tapeflow import tree
from tapeflow.devices import colocate_with
from tapeflow.ops import registry, sparse
from tapeflow.ops.creation import ones_like, zeros_like
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import OpDef, apply, as_tensor, defop
from tapeflow.tensor import TRACING, IndexedSlices, Tensor, Variable


class TapeError(ValueError):
    """A misuse of a GradientTape (such as a second `gradient` on a used tape)."""


class _Record:
    __slots__ = ("op", "inputs", "values", "attrs", "outputs")

    def __init__(self, op, inputs, values, attrs, outputs):
        self.op = op
        self.inputs = inputs
        self.values = values  # arrays of Variable inputs at the time of the op
        self.attrs = attrs
        self.outputs = outputs


class GradientTape:
    """Records operations on watched tensors so that gradients can be taken.

    Trainable Variables are watched as soon as an op reads them (unless
    `watch_accessed_variables=False`); other tensors need `tape.watch(t)`.
    A non-persistent tape frees its record after one `gradient` call.
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self.persistent = persistent
        self._watch_variables = watch_accessed_variables
        self._records: list[_Record] = []
        self._watched: dict[int, Tensor] = {}
        self._used = False

    def __enter__(self) -> GradientTape:
        if self._used:
            raise TapeError("GradientTape: this non-persistent tape was already used; create a new one")
        registry.push_recorder(self)
        return self

    def __exit__(self, *exc) -> None:
        registry.pop_recorder(self)

    def watch(self, tensor) -> None:
        """Record operations on `tensor` (or on each tensor in a list/tuple/dict)."""
        for t in tree.flatten(tensor):
            if not isinstance(t, Tensor):
                raise TypeError(f"GradientTape.watch: expected tensors, got {type(t).__name__}")
            if t.dtype.kind == "f":
                self._watched[id(t)] = t

    def watched_variables(self) -> list[Variable]:
        return [t for t in self._watched.values() if isinstance(t, Variable)]

    def record(self, op: OpDef, inputs: tuple, attrs: dict, outputs: tuple) -> None:
        """Called by every op while this tape is active."""
        watched = self._watched
        hit = False
        values = None
        for t in inputs:
            if id(t) in watched:
                hit = True
            elif type(t) is Tensor:  # the common input, which only a watch makes followed
                continue
            elif self._watch_variables and isinstance(t, Variable) and t.trainable and t.dtype.kind == "f":
                watched[id(t)] = t
                hit = True
            if isinstance(t, Variable):
                values = values or {}
                values[id(t)] = t._value if TRACING.tracer is None else TRACING.tracer.read(t)
        if not hit:
            return
        for o in outputs:
            if o.dtype.kind == "f":
                watched[id(o)] = o
        self._records.append(_Record(op, inputs, values, attrs, outputs))

    def stop_recording(self):
        """Context in which this tape records nothing."""
        return registry.paused_recording(self)

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self._records.clear()
        self._watched.clear()

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients: str = "none"):
        """d(sum of target) / d(sources), shaped like `sources` (tensor, list or dict).

        A source that the target does not depend on gets None (or zeros with
        unconnected_gradients="zero"). Integer and bool sources get None.
        """
        if self._used:
            raise TapeError(
                "GradientTape.gradient: a non-persistent tape can compute gradients only once; "
                "use GradientTape(persistent=True)"
            )
        if unconnected_gradients not in ("none", "zero"):
            raise ValueError(
                f"GradientTape.gradient: unconnected_gradients must be 'none' or 'zero', got {unconnected_gradients!r}"
            )
        flat_sources = tree.flatten(sources)
        targets = tree.flatten(target)
        seeds = _seeds(targets, output_gradients)
        watched = [s for s in flat_sources if isinstance(s, Tensor) and id(s) in self._watched]
        with registry.paused_recording(self):
            grads = backprop(self._records, targets, seeds, watched, _tensors_at_record_time)
        results = []
        for s in flat_sources:
            g = grads.get(id(s))
            if g is None and unconnected_gradients == "zero" and isinstance(s, Tensor):
                g = zeros_like(s)
            if g is not None and s.dtype.kind != "f":
                g = None
            results.append(g)
        if not self.persistent:
            self._used = True
            self.reset()
        return tree.pack_sequence_as(sources, results)


def backprop(records, targets, seeds, sources, vjp_tensors) -> dict[int, Tensor]:
    """The reverse-mode walk: gradients of `targets` (weighted by `seeds`: one tensor per
    target, or a function giving a target's seed) with respect to `sources`, keyed by
    id() of each source.

    `records` are in execution order, each with `op`, `attrs`, `inputs` and `outputs`;
    those are tensors for a tape and graph values for a graph. `vjp_tensors(record)` gives
    the (inputs, outputs) tensors its VJP sees. Only records on a path from a source to
    a target are visited.
    """
    reachable = {id(s) for s in sources}
    relevant = []
    for rec in records:  # forward: which records depend on a source
        for t in rec.inputs:
            if id(t) in reachable:
                relevant.append(rec)
                reachable.update([id(o) for o in rec.outputs])
                break
    grads: dict[int, Tensor] = {}
    for i, t in enumerate(targets):
        if id(t) in reachable:
            _accumulate(grads, id(t), seeds(t) if callable(seeds) else seeds[i])
    for rec in reversed(relevant):  # reverse execution order is a topological order
        op, connected = rec.op, False
        out_grads = [grads.get(id(o)) for o in rec.outputs]
        for i, g in enumerate(out_grads):
            if g is not None:
                connected = True
                if isinstance(g, IndexedSlices):
                    out_grads[i] = _dense(g)
        if op.vjp is None or not connected:
            continue
        needs = tuple([id(t) in reachable and t.dtype.kind == "f" for t in rec.inputs])
        inputs, outputs = vjp_tensors(rec)
        if TRACING.tracer is None:
            in_grads = call_vjp(op, out_grads, inputs, outputs, rec.attrs, needs)
        else:  # traced gradient nodes go to the device of the op they differentiate
            with colocate_with(outputs):
                in_grads = call_vjp(op, out_grads, inputs, outputs, rec.attrs, needs)
        for t, g, wanted in zip(rec.inputs, in_grads, needs, strict=True):
            if wanted and g is not None:
                if g.dtype is not t.dtype:
                    g = sparse.cast_gradient(g, t.dtype)
                prev = grads.get(id(t))
                grads[id(t)] = g if prev is None else sparse.add_gradients(prev, g)
    return grads


def _dense(g):
    """An op's VJP takes dense gradients: an IndexedSlices reaching one is densified."""
    return sparse.indexed_slices_to_dense(g) if isinstance(g, IndexedSlices) else g


def call_vjp(op: OpDef, out_grads, inputs, outputs, attrs: dict, needs: tuple) -> tuple:
    """The op's VJP: one gradient (or None) per input; `needs` says which are wanted."""
    if op.partial_vjp:
        return op.vjp(out_grads, inputs, outputs, needs=needs, **attrs)
    return op.vjp(out_grads, inputs, outputs, **attrs)


def _tensors_at_record_time(rec: _Record) -> tuple:
    """The record's (inputs, outputs), with Variables changed since the op ran replaced by
    their old values."""
    if rec.values is None:
        return rec.inputs, rec.outputs
    out = []
    for t in rec.inputs:
        old = rec.values.get(id(t)) if type(t) is Variable else None
        if isinstance(old, Tensor):  # the traced value the variable had inside a freeze
            out.append(old)
        else:
            out.append(t if old is None or old is t._value else Tensor._wrap(old, t.device))
    return tuple(out), rec.outputs


def _accumulate(grads: dict, key: int, g) -> None:
    prev = grads.get(key)
    grads[key] = g if prev is None else sparse.add_gradients(prev, g)


def _seeds(targets, output_gradients):
    if output_gradients is None:
        return [ones_like(t) for t in targets]
    # one gradient per target, in the targets' order: a nested Python list is one gradient
    given = tree.flatten(output_gradients, is_leaf=lambda g: g is not output_gradients)
    if len(given) != len(targets):
        raise ValueError(f"GradientTape.gradient: {len(given)} output_gradients for {len(targets)} targets")
    seeds = []
    for t, g in zip(targets, given, strict=True):
        g = as_tensor(g, dtype=t.dtype, name="gradient") if not isinstance(g, Tensor) else g
        if g.shape != t.shape:
            raise ValueError(
                f"GradientTape.gradient: output_gradients shape {g.shape} differs from target shape {t.shape}"
            )
        seeds.append(g)
    return seeds


# ------------------------------------------------------------ functional API
def value_and_grad(f, argnums=0):
    """A function returning (f(*args), gradient of f with respect to args[argnums]).

    >>> import tapeflow as tp
    >>> tp.value_and_grad(lambda x: tp.sum(x * x))(tp.tensor([3.0]))[1].numpy().tolist()
    [6.0]
    """
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        args = list(args)
        for i in nums:
            if i >= len(args):
                raise ValueError(f"grad: argnums {i} but only {len(args)} positional arguments given")
            args[i] = as_tensor(args[i], name="grad")
        with GradientTape() as tape:
            tape.watch([args[i] for i in nums])
            value = f(*args, **kwargs)
        grads = tape.gradient(value, [args[i] for i in nums], unconnected_gradients="zero")
        return value, grads[0] if single else tuple(grads)

    return wrapped


def grad(f, argnums=0):
    """A function returning the gradient of scalar-valued `f` with respect to args[argnums].

    >>> import tapeflow as tp
    >>> tp.grad(lambda x: tp.sum(tp.sin(x)))(tp.tensor([0.0])).numpy().tolist()
    [1.0]
    """
    vg = value_and_grad(f, argnums)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        return vg(*args, **kwargs)[1]

    return wrapped


# ------------------------------------------------------------ custom gradients
class _VariableProbe:
    """Notes every Variable an op reads while it is active."""

    def __init__(self):
        self.variables: dict[int, Variable] = {}

    def record(self, op, inputs, attrs, outputs):
        for t in inputs:
            if type(t) is Variable and t.trainable:
                self.variables.setdefault(id(t), t)


def _custom_infer(*inputs, outputs, grad_fn, variables):
    return [(o.shape, o.dtype) for o in outputs]


def _custom_vjp(gs, xs, ys, outputs, grad_fn, variables):
    gs = [g if g is not None else zeros_like(y) for g, y in zip(gs, ys, strict=True)]
    n_in = len(xs) - len(variables)
    if variables:
        input_grads, var_grads = grad_fn(*gs, variables=list(variables))
    else:
        input_grads, var_grads = grad_fn(*gs), []
    input_grads = list(input_grads) if isinstance(input_grads, list | tuple) else [input_grads]
    if len(input_grads) != n_in or len(var_grads) != len(variables):
        raise ValueError(
            f"custom_gradient: grad_fn returned {len(input_grads)} input and {len(var_grads)} variable "
            f"gradients for {n_in} inputs and {len(variables)} variables"
        )
    return [None if g is None else as_tensor(g) for g in input_grads + list(var_grads)]


@defop("custom_gradient", infer=_custom_infer, vjp=_custom_vjp, num_outputs=None)
def _CUSTOM(*inputs, outputs, grad_fn, variables):
    return tuple(o._value for o in outputs)


def custom_gradient(f):
    """Give `f` a hand-written gradient: `f` returns (outputs, grad_fn).

    `grad_fn(*output_grads)` returns one gradient per tensor argument. If `f`
    reads trainable Variables, `grad_fn` must accept `variables=` and return
    (input_grads, variable_grads).

    >>> import tapeflow as tp
    >>> @tp.custom_gradient
    ... def clipped_identity(x):
    ...     return tp.identity(x), lambda g: tp.clip(g, -1, 1)
    >>> tp.grad(lambda x: tp.sum(clipped_identity(x) * 5))(tp.tensor([1.0])).numpy().tolist()
    [1.0]
    """

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        probe = _VariableProbe()
        with registry.paused_recording():
            registry.push_recorder(probe)
            try:
                result, grad_fn = f(*args, **kwargs)
            finally:
                registry.pop_recorder(probe)
        tensors = tuple(a for a in args if isinstance(a, Tensor))
        variables = tuple(probe.variables.values())
        if variables and "variables" not in inspect.signature(grad_fn).parameters:
            raise TypeError(
                f"custom_gradient: {f.__name__} reads variables {[v.name for v in variables]}, "
                "so its grad_fn must accept a `variables` keyword argument"
            )
        attrs = {"outputs": tuple(tree.flatten(result)), "grad_fn": grad_fn, "variables": variables}
        wrapped_outs = apply(_CUSTOM, tensors + variables, attrs)
        return tree.pack_sequence_as(result, list(wrapped_outs))

    return wrapped


def jvp(fun, primals, tangents, has_aux: bool = False):
    """Forward-mode derivative, as `keras.ops.linalg.jvp`: (fun(*primals), J @ tangents).

    tapeflow differentiates in reverse; the Jacobian-vector product is the gradient, with
    respect to a cotangent `u`, of the vector-Jacobian product u·J taken along `tangents`
    (the two recorded VJPs are themselves differentiable). With `has_aux`, `fun` returns
    (outputs, aux) and so does this function, as (outputs, tangents_out, aux).

    >>> import tapeflow as tp
    >>> y, dy = jvp(lambda x: x * x, (tp.tensor([1.0, 3.0]),), (tp.tensor([1.0, 1.0]),))
    >>> y.numpy().tolist(), dy.numpy().tolist()
    ([1.0, 9.0], [2.0, 6.0])
    """
    primals, tangents = tuple(map(as_tensor, primals)), tuple(map(as_tensor, tangents))
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    for p, t in zip(primals, tangents, strict=True):
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"jvp: a tangent of shape {t.shape} for a primal of shape {p.shape}")
    with GradientTape() as outer:
        with GradientTape() as inner:
            for p in primals:
                inner.watch(p)
            result = fun(*primals)
            outputs, aux = result if has_aux else (result, None)
        flat = tree.flatten(outputs)
        cotangents = [zeros_like(y) for y in flat]
        for u in cotangents:
            outer.watch(u)
        pulled = inner.gradient(flat, list(primals), output_gradients=cotangents)
        along = None
        for g, t in zip(pulled, tangents, strict=True):
            if g is not None:
                term = reduce_sum(g * t)
                along = term if along is None else along + term
    if along is None:
        pushed = [zeros_like(y) for y in flat]
    else:
        pushed = [
            g if g is not None else zeros_like(y) for g, y in zip(outer.gradient(along, cotangents), flat, strict=True)
        ]
    tangents_out = tree.pack_sequence_as(outputs, pushed)
    return (outputs, tangents_out, aux) if has_aux else (outputs, tangents_out)
