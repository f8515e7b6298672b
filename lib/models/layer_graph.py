"""The functional API's graph: the layer calls and op nodes that lead from symbolic
`tp.layers.Input` tensors to symbolic outputs, in an order that runs them, and their
config. `tp.Model(inputs, outputs)` (a `tapeflow.models.Functional`) is built on it.

Every tensor argument of a call is an edge of the graph, whether positional or keyword,
alone or nested in lists and dicts; the other arguments are kept as they were given. When
the graph runs, masks travel as in Keras: a layer whose `call` takes `mask` receives the
mask of its first argument, and a layer that supports masking gives its outputs the masks
its `compute_mask` returns.

>>> import tapeflow as tp
>>> x = tp.layers.Input(shape=(3,))
>>> hidden, head = tp.layers.Dense(4), tp.layers.Dense(1)
>>> y = head(hidden(x))
>>> calls = layer_calls([x], [y])
>>> [layer for layer, *_ in calls] == [hidden, head]
True
>>> run_layer_calls(calls, [x], [y], [tp.ones((2, 3))], training=False)[0].shape
(2, 1)
"""

from __future__ import annotations

import inspect

import numpy as np

from tapeflow import tree
from tapeflow.graph.file_format.codec import AttrCodec
from tapeflow.layers.base import Layer, call_argument_names
from tapeflow.layers.symbolic import Operation, SymbolicTensor, symbolic_leaves
from tapeflow.ops.registry import get_op, wrap_host
from tapeflow.tensor import Tensor, Variable


def layer_calls(inputs: list[SymbolicTensor], outputs: list[SymbolicTensor]) -> list[tuple]:
    """Every layer call and op node the outputs depend on, each after the calls it consumes
    (no recursion), as (layer or `Operation`, positional arguments, keyword arguments, the
    symbolic outputs used): plain tuples and lists, so that the layers in them are found
    like those in any attribute."""
    known = {id(t) for t in inputs}
    calls: dict[int, tuple] = {}
    order: list[tuple] = []
    stack = [(t, False) for t in reversed(outputs)]
    done: set[int] = set()
    while stack:
        tensor, expanded = stack.pop()
        if id(tensor) in known or id(tensor) in done:
            continue
        if tensor.history is None:
            raise ValueError(f"Model: output depends on {tensor.name}, which is not among the model's inputs")
        operation, args, kwargs = tensor.history
        call = calls.setdefault(id(tensor.history), (operation, args, kwargs, []))
        if expanded:
            done.add(id(tensor))
            used = call[3]
            if all(o is not tensor for o in used):
                used.append(tensor)
            if all(c is not call for c in order):
                order.append(call)
            continue
        stack.append((tensor, True))
        for parent in reversed(symbolic_leaves((args, kwargs))):
            stack.append((parent, False))
    return order


def run_layer_calls(calls: list[tuple], inputs: list, outputs: list, values: list, training) -> list:
    """The values of `outputs` when `inputs` take `values`, running `calls` (from `layer_calls`)."""
    found = {id(sym): value for sym, value in zip(inputs, values, strict=True)}
    masks: dict[int, object] = {}

    def value_of(leaf):
        return found[id(leaf)] if isinstance(leaf, SymbolicTensor) else leaf

    def mask_of(leaf):
        return masks.get(id(leaf)) if isinstance(leaf, SymbolicTensor) else None

    for operation, args, kwargs, used in calls:
        given_args = tree.map_structure(value_of, tuple(args))
        given_kwargs = tree.map_structure(value_of, dict(kwargs))
        if isinstance(operation, Layer):
            result, out_masks = _call_layer(operation, args, kwargs, given_args, given_kwargs, mask_of, training)
        else:
            result, out_masks = operation(*given_args), None
        flat = tree.flatten(result)
        flat_masks = tree.flatten(out_masks) if out_masks is not None else []
        for out in used:
            found[id(out)] = flat[out.index]
            if len(flat_masks) == len(flat) and flat_masks[out.index] is not None:
                masks[id(out)] = flat_masks[out.index]
    return [found[id(t)] for t in outputs]


def _call_layer(layer: Layer, args, kwargs, given_args, given_kwargs, mask_of, training):
    """Call `layer` as the graph records it, with the masks its `call` takes and were not
    given: `mask` from the first argument, `<name>_mask` from the argument `name`; returns
    (outputs, their masks or None)."""
    names = call_argument_names(type(layer))
    call_kwargs = {"training": training, **given_kwargs}
    previous = tree.map_structure(mask_of, args[0])
    if not any(m is not None for m in tree.flatten(previous)):
        previous = None
    if "mask" in names and call_kwargs.get("mask") is None and previous is not None:
        call_kwargs["mask"] = previous
    for name, arg in {**dict(zip(names, args, strict=False)), **kwargs}.items():
        key = f"{name}_mask"
        if key in names and call_kwargs.get(key) is None:
            mask = tree.map_structure(mask_of, arg)
            if any(m is not None for m in tree.flatten(mask)):
                call_kwargs[key] = mask
    result = layer(*given_args, **call_kwargs)
    if not layer.supports_masking:
        return result, None
    mask = call_kwargs.get("mask") if call_kwargs.get("mask") is not None else previous
    return result, layer.compute_mask(given_args[0], mask)


# ------------------------------------------------------------------ config
class _ArgumentCodec(AttrCodec):
    """Typed JSON for the arguments of a layer call or op node (the graph file format's),
    plus {"tensor": reference} for a symbolic tensor and {"constant": array} for a concrete one."""

    def __init__(self, refs: dict | None = None, resolve=None):
        super().__init__()
        self.refs = refs
        self.resolve = resolve

    def encode(self, value, where: str):
        if isinstance(value, SymbolicTensor):
            return {"tensor": self.refs[id(value)]}
        if isinstance(value, Variable):
            raise ValueError(
                f"{where}: the Variable '{value.name}' is an argument; a model config cannot hold it "
                "(make it a weight of a layer)"
            )
        if isinstance(value, Tensor):
            return {"constant": self.encode(np.asarray(value.numpy()), where)}
        encoded = super().encode(value, where)
        if self.arrays or self.generators:
            raise ValueError(
                f"{where}: {value!r:.60} cannot be stored in a model config (only arrays of at most "
                "256 values and the global random generator can)"
            )
        return encoded

    def decode(self, data, where: str, datasets=None):
        if isinstance(data, dict) and len(data) == 1:
            ((tag, body),) = data.items()
            if tag == "tensor":
                return self.resolve(body)
            if tag == "constant":
                return wrap_host(np.asarray(super().decode(body, where, datasets)))
        return super().decode(data, where, datasets)


def describe_calls(calls: list[tuple], inputs: list, layers: list) -> tuple[list[dict], dict]:
    """The config of each call, its layer by its index in `layers` (an op node by its op's
    name and attributes) and its arguments in typed JSON, the symbolic tensors among them
    as references ({"input": i} or {"call": c, "output": j}); and the reference of each
    tensor, by id."""
    refs = {id(t): {"input": i} for i, t in enumerate(inputs)}
    described = []
    for c, (operation, args, kwargs, used) in enumerate(calls):
        where = f"Functional.get_config: call {c} ({operation.name})"
        codec = _ArgumentCodec(refs)
        if isinstance(operation, Operation):
            entry = {"op": operation.name, "attrs": {k: codec.encode(v, where) for k, v in operation.attrs.items()}}
        else:
            entry = {"layer": next(i for i, known in enumerate(layers) if known is operation)}
        entry["call_args"] = [codec.encode(a, where) for a in args]
        entry["call_kwargs"] = {k: codec.encode(v, where) for k, v in kwargs.items()}
        described.append(entry)
        for out in used:
            refs[id(out)] = {"call": c, "output": out.index}
    return described, refs


def replay_calls(described: list, inputs: list, layers: list, where: str):
    """Call the layers and ops of `describe_calls`' config on `inputs` again; returns
    resolve(reference) -> the symbolic tensor it names."""
    values: dict = {}

    def resolve(ref):
        if not isinstance(ref, dict):
            raise ValueError(f"{where}: a tensor reference must be a dict, got {ref!r}")
        if "input" in ref:
            return inputs[ref["input"]]
        return values[(ref["call"], ref["output"])]

    codec = _ArgumentCodec(resolve=resolve)
    for c, call in enumerate(described):
        here = f"{where}: call {c}"
        if "call_args" in call:
            args = [codec.decode(a, here) for a in call["call_args"]]
            kwargs = {k: codec.decode(v, here) for k, v in call.get("call_kwargs", {}).items()}
        else:  # written before every argument was recorded: the first one's tensors, plain keywords
            args, kwargs = [map_refs(resolve, call["args"])], dict(call.get("kwargs", {}))
        if "op" in call:
            attrs = {k: codec.decode(v, here) for k, v in call["attrs"].items()}
            result = Operation(get_op(call["op"]), attrs)(*args)
        else:
            layer = layers[call["layer"]]
            _check_call_arguments(layer, args, kwargs, here)
            result = layer(*args, **kwargs)
        for j, out in enumerate(tree.flatten(result)):
            values[(c, j)] = out
    return resolve


def _check_call_arguments(layer: Layer, args: list, kwargs: dict, where: str) -> None:
    """Refuse arguments that the layer's `call` does not take (`training` and `mask` are
    the layer's to drop), before a symbolic call that a shape rule answers lets them by."""
    signature = inspect.signature(type(layer).call)
    params = signature.parameters
    given = {k: v for k, v in kwargs.items() if k in params or k not in ("training", "mask")}
    try:
        signature.bind(layer, *args, **given)
    except TypeError as err:
        raise ValueError(
            f"{where}: layer '{layer.name}' ({type(layer).__name__}) cannot take the arguments the config gives "
            f"it: {err}"
        ) from None


def map_tensors(fn, structure):
    """fn(tensor) for one symbolic tensor or each in a list, tuple or dict of them."""
    if isinstance(structure, dict):
        return {k: fn(v) for k, v in structure.items()}
    if isinstance(structure, list | tuple):
        return [fn(v) for v in structure]
    return fn(structure)


def map_refs(fn, structure):
    """The inverse of `map_tensors` over references: a ref is a dict with "input" or "call"."""
    if isinstance(structure, dict) and ("input" in structure or "call" in structure):
        return fn(structure)
    if isinstance(structure, dict):
        return {k: fn(v) for k, v in structure.items()}
    if isinstance(structure, list):
        return [fn(v) for v in structure]
    raise ValueError(
        f"Functional.from_config: expected a tensor reference or a list or dict of them, got {structure!r}"
    )
