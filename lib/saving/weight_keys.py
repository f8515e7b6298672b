"""The key each weight is stored under in a file: its place in the model, or its full name.

A structural key ("layers/dense/kernel") stays the same when the same architecture is
built again in another process, whose automatic layer names ("dense_7") differ; a full
name ("dense_7/kernel") is what older files and training checkpoints are keyed by.

>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2, name="head")])
>>> list(weight_paths(model)), list(weights_by_name(model))
(['layers/dense/kernel', 'layers/dense/bias'], ['head/kernel', 'head/bias'])
"""

from __future__ import annotations

from tapeflow.layers.base import Layer, snake_case


def _child_layers(layer: Layer):
    """(relative path, layer) for the layers `layer` holds: public attributes first, then
    private ones; lists, tuples and dicts of layers are walked (Keras 3's naming)."""
    found = []
    items = sorted(vars(layer).items(), key=lambda kv: kv[0].startswith("_"))
    for attr, value in items:
        if isinstance(value, Layer):
            found.append((attr, value))
        elif isinstance(value, list | tuple | dict):
            stack, counts = [(attr, value)], {}
            while stack:
                prefix, container = stack.pop(0)
                entries = container.items() if isinstance(container, dict) else ((None, v) for v in container)
                for key, item in entries:
                    if isinstance(item, Layer):
                        if key is None:
                            base = snake_case(type(item).__name__)
                            n = counts.get(base, 0)
                            counts[base] = n + 1
                            key = base if n == 0 else f"{base}_{n}"
                        found.append((f"{prefix}/{key}", item))
                    elif isinstance(item, list | tuple | dict):
                        stack.append((prefix if key is None else f"{prefix}/{key}", item))
    return found


def layer_paths(model: Layer) -> dict[str, Layer]:
    """Every layer in `model` by structural path ("" for the model), each once (a shared
    layer at its first path), depth first.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(2), tp.layers.Dense(1)])
    >>> list(layer_paths(model))
    ['', 'layers/dense', 'layers/dense_1']
    """
    paths, seen, stack = {}, set(), [("", model)]
    while stack:
        path, layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        paths[path] = layer
        children = [(f"{path}/{rel}" if path else rel, child) for rel, child in _child_layers(layer)]
        stack.extend(reversed(children))
    return paths


def _require_built(model, where: str) -> None:
    if not getattr(model, "built", True):
        raise ValueError(f"{where}: {model.name} is not built yet; call it on a batch of inputs first")


def weight_paths(model: Layer, where: str = "weights") -> dict[str, object]:
    """Every weight of `model` by structural key ("<layer path>/<weight name>"), in
    `model.weights` order.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
    >>> list(weight_paths(model))
    ['layers/dense/kernel', 'layers/dense/bias']
    """
    _require_built(model, where)
    keys, taken = {}, set()
    for path, layer in layer_paths(model).items():
        if not isinstance(layer.name, str):
            raise TypeError(f"{where}: layer '{path}' is named {layer.name!r:.40}; a layer's name must be a string")
        for var in layer._trainable_variables + layer._non_trainable_variables:
            if id(var) in keys:
                continue
            short = var.name[len(layer.name) + 1 :] if var.name.startswith(layer.name + "/") else var.name
            key = f"{path}/{short}" if path else short
            n, unique = 0, key
            while unique in taken:
                n += 1
                unique = f"{key}_{n}"
            keys[id(var)] = unique
            taken.add(unique)
    missing = [v.name for v in model.weights if id(v) not in keys]
    if missing:
        raise ValueError(f"{where}: weights {missing} are not owned by any layer of {model.name}")
    by_key = {keys[id(v)]: v for v in model.weights}
    check_paths(by_key, where)
    return by_key


def weights_by_name(model, where: str = "weights") -> dict[str, object]:
    """Every weight of `model` by its full name ("<layer name>/<weight>"), which must be unique.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(2, name="a"), tp.layers.Dense(2, name="a")])
    >>> _ = model(tp.ones((1, 2)))
    >>> weights_by_name(model)
    Traceback (most recent call last):
    ValueError: weights: two weights of sequential... are both named 'a/kernel'; give the layers unique names
    """
    _require_built(model, where)
    named = {}
    for var in model.weights:
        if var.name in named:
            raise ValueError(
                f"{where}: two weights of {model.name} are both named '{var.name}'; give the layers unique names"
            )
        named[var.name] = var
    return named


def check_paths(names, where: str) -> None:
    """Each name must be a valid HDF5 path that is no other name's parent group.

    >>> check_paths(["a/kernel", "a"], "save")
    Traceback (most recent call last):
    ValueError: save: weight names ['a'] are also the group of other weights; rename the layers
    """
    prefixes = set()
    for name in names:
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"{where}: weight name '{name}' is not a valid '<layer>/<weight>' path")
        prefixes.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clashes = sorted(prefixes.intersection(names))
    if clashes:
        raise ValueError(f"{where}: weight names {clashes} are also the group of other weights; rename the layers")
