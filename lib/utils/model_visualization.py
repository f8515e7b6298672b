"""Drawing a model's layer graph with pydot and Graphviz, as Keras 3's `plot_model`."""

from __future__ import annotations

import importlib
import os
import shutil

from tapeflow import tree
from tapeflow.layers.base import Layer, SymbolicTensor


def _pydot():
    """pydot, with Graphviz's `dot` on the PATH, or an ImportError saying what to install."""
    try:
        pydot = importlib.import_module("pydot")
    except ImportError as err:
        raise ImportError(
            "plot_model / model_to_dot need pydot and Graphviz: pip install pydot, and install "
            "Graphviz (apt-get install graphviz, or see graphviz.org)"
        ) from err
    if shutil.which("dot") is None:
        raise ImportError(
            "plot_model / model_to_dot need Graphviz's `dot` program on the PATH: install Graphviz "
            "(apt-get install graphviz, or see graphviz.org)"
        )
    return pydot


def _nodes_and_edges(model) -> tuple[list, list]:
    """[(key, thing, its output tensor or None)] in running order, and [(from key, to key)],
    where a thing is a Layer, an op node or a model input; found by following the outputs'
    call history back."""
    outputs = list(getattr(model, "outputs", None) or [])
    if not outputs:  # a model never called on symbolic inputs: its layers in order
        layers = list(model.layers)
        return [(id(layer), layer, None) for layer in layers], [
            (id(a), id(b)) for a, b in zip(layers[:-1], layers[1:], strict=True)
        ]
    order, edges, seen = [], [], set()
    stack = [(tensor, False) for tensor in reversed(outputs)]
    while stack:
        tensor, expanded = stack.pop()
        key = _key(tensor)
        if key in seen:
            continue
        history = tensor.history
        sources = (
            []
            if history is None
            else [t for t in tree.flatten((history[1], history[2])) if isinstance(t, SymbolicTensor)]
        )
        if expanded or not sources:
            seen.add(key)
            order.append((key, tensor.input_layer or tensor if history is None else history[0], tensor))
            edges += [(_key(s), key) for s in sources]
            continue
        stack.append((tensor, True))
        stack += [(s, False) for s in reversed(sources) if _key(s) not in seen]
    return order, list(dict.fromkeys(edges))


def _key(tensor) -> int:
    return id(tensor) if tensor.history is None else id(tensor.history)


def _label(thing, output, show_shapes, show_dtype, show_layer_names, show_layer_activations, show_trainable) -> str:
    if isinstance(thing, SymbolicTensor):
        name, kind = thing.name or "input", "InputLayer"
    else:
        name, kind = getattr(thing, "name", "op"), type(thing).__name__ if isinstance(thing, Layer) else "Operation"
    parts = [f"{name} ({kind})" if show_layer_names else kind]
    activation = getattr(thing, "activation", None)
    if show_layer_activations and activation is not None:
        parts.append(f"activation: {getattr(activation, '__name__', activation)}")
    if show_trainable and isinstance(thing, Layer):
        parts.append(f"trainable: {thing.trainable}")
    if show_shapes:
        parts.append(f"output shape: {output.shape if output is not None else '?'}")
    if show_dtype:
        parts.append(f"dtype: {getattr(thing, 'dtype', '?')}")
    return "\n".join(parts)


def model_to_dot(
    model,
    show_shapes=False,
    show_dtype=False,
    show_layer_names=True,
    rankdir="TB",
    expand_nested=False,
    dpi=200,
    subgraph=False,
    show_layer_activations=False,
    show_trainable=False,
    splines="ortho",
    **kwargs,
):
    """A `pydot.Dot` graph of the model: one box per layer (or op node, or input), an arrow
    for each tensor passed on. Needs pydot and Graphviz."""
    if kwargs:
        raise TypeError(f"model_to_dot: unexpected arguments {sorted(kwargs)}")
    if expand_nested:
        raise ValueError("model_to_dot: expand_nested=True is not supported; nested models are drawn as one box")
    if rankdir not in ("TB", "LR"):
        raise ValueError(f'model_to_dot: rankdir must be "TB" or "LR", got {rankdir!r}')
    pydot = _pydot()
    dot = pydot.Cluster(style="dashed", graph_name=model.name) if subgraph else pydot.Dot()
    dot.set("rankdir", rankdir)
    dot.set("concentrate", True)
    dot.set("dpi", dpi)
    dot.set("splines", splines)
    dot.set_node_defaults(shape="record")
    nodes, edges = _nodes_and_edges(model)
    for key, thing, output in nodes:
        label = _label(thing, output, show_shapes, show_dtype, show_layer_names, show_layer_activations, show_trainable)
        dot.add_node(pydot.Node(str(key), label=label.replace("\n", "\\n")))
    for source, target in edges:
        dot.add_edge(pydot.Edge(str(source), str(target)))
    return dot


def plot_model(
    model,
    to_file="model.png",
    show_shapes=False,
    show_dtype=False,
    show_layer_names=False,
    rankdir="TB",
    expand_nested=False,
    dpi=200,
    show_layer_activations=False,
    show_trainable=False,
    splines="ortho",
    **kwargs,
):
    """Draw the model to `to_file` (its extension picks the format: png, svg, pdf, dot ...).
    Needs pydot and Graphviz; the error says what to install when they are missing."""
    if not model.built:
        raise ValueError(f"plot_model: model {model.name!r} is not built yet; call it on data or build it first")
    dot = model_to_dot(
        model,
        show_shapes=show_shapes,
        show_dtype=show_dtype,
        show_layer_names=show_layer_names,
        rankdir=rankdir,
        expand_nested=expand_nested,
        dpi=dpi,
        show_layer_activations=show_layer_activations,
        show_trainable=show_trainable,
        splines=splines,
        **kwargs,
    )
    extension = os.path.splitext(os.fspath(to_file))[1][1:] or "png"
    dot.write(os.fspath(to_file), format=extension)
