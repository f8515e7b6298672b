"""`clone_model` and `model_from_json`: the same architecture again, with new weights.

>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
>>> clone = clone_model(model)
>>> clone.layers[0] is model.layers[0], [w.shape for w in clone.weights] == [w.shape for w in model.weights]
(False, True)
"""

from __future__ import annotations

import json

from tapeflow import optimizers, tree
from tapeflow.layers.base import Input, Layer, deserialize
from tapeflow.layers.symbolic import SymbolicTensor
from tapeflow.models.model import Functional, Model
from tapeflow.models.sequential import Sequential
from tapeflow.saving.model_file import compile_arguments, restore_compile_arguments
from tapeflow.serialization import custom_object_scope

__all__ = ["clone_model", "model_from_json"]


def _clone_layer(layer: Layer) -> Layer:
    return type(layer).from_config(layer.get_config())


def clone_model(model, input_tensors=None, clone_function=None, **kwargs):
    """A new model of the same architecture as `model`, with newly initialized weights, as
    Keras 3's `keras.models.clone_model`.

    Sequential and functional models are rebuilt layer by layer: each layer is replaced by
    `clone_function(layer)` (by default `type(layer).from_config(layer.get_config())`;
    a layer shared in `model` is cloned once), on new inputs or on `input_tensors` (symbolic
    tensors in the structure of `model.input`; for a Sequential, one `tp.Input` tensor).
    Any other model is rebuilt from its config, and takes neither argument. A compiled
    model's clone is compiled with the same arguments and a fresh optimizer.

    Args:
        model: a `tp.Model`.
        input_tensors: the symbolic inputs to build the clone on (Sequential and functional only).
        clone_function: layer -> new layer (Sequential and functional only).

    >>> import tapeflow as tp
    >>> x = tp.Input((4,), name="x")
    >>> model = tp.Model(x, tp.layers.Dense(1)(tp.layers.Dense(3)(x)))
    >>> clone = clone_model(model)
    >>> [type(layer).__name__ for layer in clone.layers], clone.count_params() == model.count_params()
    (['InputLayer', 'Dense', 'Dense'], True)
    """
    if kwargs:
        raise ValueError(f"clone_model: unexpected keyword arguments {sorted(kwargs)}")
    if not isinstance(model, Model):
        raise TypeError(f"clone_model: expected a tp.Model, got {type(model).__name__}")
    if clone_function is not None and not callable(clone_function):
        raise ValueError(f"clone_model: clone_function must be callable, got {clone_function!r}")
    cache: dict[int, Layer] = {}

    def cloned(layer):
        if id(layer) not in cache:
            cache[id(layer)] = (clone_function or _clone_layer)(layer)
        return cache[id(layer)]

    if isinstance(model, Sequential):
        clone = _clone_sequential(model, cloned, input_tensors)
    elif isinstance(model, Functional):
        clone = _clone_functional(model, cloned, input_tensors)
    else:
        if clone_function is not None or input_tensors is not None:
            raise ValueError(
                "clone_model: clone_function and input_tensors are only supported for Sequential and "
                f"functional models; {model.name} is a {type(model).__name__}"
            )
        with custom_object_scope({type(model).__name__: type(model)}):
            clone = type(model).from_config(model.get_config())
    if getattr(model, "_compiled", False):
        arguments = restore_compile_arguments(compile_arguments(model))
        clone.compile(optimizer=optimizers.get(optimizers.serialize(model.optimizer)), **arguments)
    return clone


def _clone_sequential(model: Sequential, cloned, input_tensors) -> Sequential:
    layers = [cloned(layer) for layer in model.layers]
    declared = model._input_layer
    if input_tensors is not None:
        if isinstance(input_tensors, list | tuple):
            if len(input_tensors) != 1:
                raise ValueError(f"clone_model: input_tensors must hold a single tensor, got {len(input_tensors)}")
            input_tensors = input_tensors[0]
        if not isinstance(input_tensors, SymbolicTensor) or input_tensors.input_layer is None:
            raise ValueError(
                f"clone_model: input_tensors of a Sequential must be a tp.Input tensor, got {input_tensors!r}"
            )
        layers = [input_tensors, *layers]
    elif declared is not None:
        layers = [Input(batch_shape=declared.batch_shape, dtype=declared.dtype, name=declared.name), *layers]
    return Sequential(layers, name=model.name, trainable=model.trainable)


def _clone_functional(model: Functional, cloned, input_tensors) -> Functional:
    if input_tensors is None:
        input_tensors = tree.map_structure(
            lambda t: Input(batch_shape=t.shape, dtype=t.dtype, name=t.name), model._input_structure
        )
    else:
        given = tree.flatten(input_tensors)
        if len(given) != len(model._model_inputs) or not all(isinstance(t, SymbolicTensor) for t in given):
            raise ValueError(
                f"clone_model: input_tensors must be symbolic tensors in the structure of {model.name}.input "
                f"({len(model._model_inputs)} tensors), got {input_tensors!r}"
            )
    found = {id(old): new for old, new in zip(model._model_inputs, tree.flatten(input_tensors), strict=True)}

    def new(leaf):
        return found[id(leaf)] if isinstance(leaf, SymbolicTensor) else leaf

    for operation, args, kwargs, used in model._calls:
        target = cloned(operation) if isinstance(operation, Layer) else operation
        result = target(*tree.map_structure(new, tuple(args)), **tree.map_structure(new, dict(kwargs)))
        flat = tree.flatten(result)
        for out in used:
            found[id(out)] = flat[out.index]
    outputs = tree.map_structure(lambda t: found[id(t)], model._output_structure)
    return Functional(input_tensors, outputs, name=model.name, trainable=model.trainable)


def model_from_json(json_string: str, custom_objects: dict | None = None):
    """The model a `model.to_json()` string describes, with new weights.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
    >>> type(model_from_json(model.to_json())).__name__
    'Sequential'
    """
    try:
        config = json.loads(json_string)
    except (TypeError, ValueError) as err:
        raise ValueError(f"model_from_json: not a JSON model description ({err})") from None
    return deserialize(config, custom_objects)
