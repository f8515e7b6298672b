"""The functional API's graph: the layer calls that lead from symbolic `tp.layers.Input`
tensors to symbolic outputs, in an order that runs them. `tp.Model(inputs, outputs)`
(a `tapeflow.models.Functional`) is built on it.

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

from tapeflow import tree
from tapeflow.layers.base import SymbolicTensor


def layer_calls(inputs: list[SymbolicTensor], outputs: list[SymbolicTensor]) -> list[tuple]:
    """Every layer call the outputs depend on, each after the calls it consumes (no recursion),
    as (layer, symbolic inputs, kwargs, the symbolic outputs used): plain tuples and lists,
    so that the layers in them are found like those in any attribute."""
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
        layer, args, kwargs = tensor.history
        call = calls.setdefault(id(tensor.history), (layer, args, kwargs, []))
        if expanded:
            done.add(id(tensor))
            used = call[3]
            if all(o is not tensor for o in used):
                used.append(tensor)
            if all(c is not call for c in order):
                order.append(call)
            continue
        stack.append((tensor, True))
        for parent in reversed(tree.flatten(args)):
            stack.append((parent, False))
    return order


def run_layer_calls(calls: list[tuple], inputs: list, outputs: list, values: list, training) -> list:
    """The values of `outputs` when `inputs` take `values`, running `calls` (from `layer_calls`)."""
    found = {id(sym): value for sym, value in zip(inputs, values, strict=True)}
    for layer, args, kwargs, used in calls:
        given = tree.map_structure(lambda t: found[id(t)], args)
        result = layer(given, **{"training": training, **kwargs})
        for out in used:
            found[id(out)] = result[out.index] if isinstance(result, list | tuple) else result
    return [found[id(t)] for t in outputs]
