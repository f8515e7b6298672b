"""Whole-model files (`Model.save`, `load_model`), weights matched by structure
(`Model.save_weights` / `load_weights`), and the registry that lets configs name user
classes (`register_serializable`).

Weights by structure: each weight is keyed by its place in the model, not by its name:
the attribute path of the layer that owns it (a layer in a list or in `Sequential` /
functional `layers` is keyed by its class name, numbered per container as Keras 3 numbers
them: "layers/dense", "layers/dense_1"), then the weight's own name ("kernel"). The same
architecture built twice in one process (whose automatic layer names differ) has the same
keys; `by_name=True` matches by the weights' full names instead.

Weights file (`Model.save_weights`), format "tapeflow-weights", version 4::

    /                    attrs: format = "tapeflow-weights", version = 4, crc32
    /weights/<key>       one dataset per weight, at its structural key ("layers/dense/kernel")
    /names               JSON text {key: the weight's full name}, for `by_name=True`

Files keyed by name (versions 1 and 3, as `tp.io.save_weights` writes) load by name;
version 2 is version 4 without checksums.

Model file (`Model.save`, read by `load_model`), format "tapeflow-model", version 2 (version
1 is the same without checksums). Any file name works; ".keras" is the customary one::

    /                    attrs: format = "tapeflow-model", version = 2, crc32
    /config              JSON text: {"class_name", "config"[, "registered_name"]} of the model
    /build               JSON text: [{"shape", "dtype"}] of the inputs the model was built for
    /compile_config      JSON text (absent if the model was not compiled): the optimizer,
                         loss and metrics as configs, and compile's other arguments
    /weights/<key>       as in a weights file
    /optimizer           attrs: iterations (int), crc32; absent if not compiled
    /optimizer/slots/<n>/<slot>  the slots of the n-th variable the optimizer tracks
    /optimizer/variables JSON text: the structural key of each tracked variable, in order
    /random              JSON text: {"<layer path>/<attr>": state} of the random
                         generators the layers own (Dropout's)

Strings are stored as fixed-length byte strings (UTF-8), numbers as numeric datasets; each
dataset carries the CRC-32 of its bytes and each object's attributes one of their own. All
is read through `tapeflow._h5safe`, which checks every HDF5 type before reading and
refuses a damaged entry by name.
Loading runs no code from the file: classes are looked up by name among tapeflow's own,
those registered with `register_serializable`, and `custom_objects`; nothing is imported,
unpickled or evaluated. Writes are atomic (a temp file renamed over the target).

>>> import os, tempfile
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
>>> model.compile(optimizer="adam", loss="mse")
>>> path = os.path.join(tempfile.mkdtemp(), "model.keras")
>>> model.save(path)
>>> again = tp.models.load_model(path)
>>> bool((again.predict(tp.ones((1, 3))) == model.predict(tp.ones((1, 3)))).all())
True
"""

from __future__ import annotations

import contextlib
import json
import os

import numpy as np

from tapeflow import losses, metrics, optimizers, serialization
from tapeflow._files import atomic_h5
from tapeflow._h5safe import FileReadError, H5Reader, write_attrs, write_manifest, write_text
from tapeflow.io import checkpoint
from tapeflow.io.checkpoint import LoadReport, WeightsMismatchError, _check_paths, _match_weights, _write_arrays
from tapeflow.layers.base import Layer, deserialize, snake_case
from tapeflow.ops.creation import zeros
from tapeflow.ops.random import Generator
from tapeflow.serialization import custom_object_scope, register_serializable, registered_name

__all__ = [
    "MODEL_FORMAT",
    "custom_object_scope",
    "load_model",
    "load_weights",
    "register_keras_serializable",
    "register_serializable",
    "registered_name",
    "save_model",
    "save_weights",
    "weight_paths",
]

MODEL_FORMAT = "tapeflow-model"
MODEL_VERSION = 2
WEIGHTS_VERSION = 4
# {readable version: whether files of that version hold checksums}
MODEL_VERSIONS = {1: False, 2: True}
STRUCTURED_WEIGHTS_VERSIONS = {2: False, 4: True}
register_keras_serializable = register_serializable  # Keras' name for it


# ------------------------------------------------------------------ structure
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


def weight_paths(model: Layer, where: str = "weights") -> dict[str, object]:
    """Every weight of `model` by structural key ("<layer path>/<weight name>"), in
    `model.weights` order.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
    >>> list(weight_paths(model))
    ['layers/dense/kernel', 'layers/dense/bias']
    """
    if not getattr(model, "built", True):
        raise ValueError(f"{where}: {model.name} is not built yet; call it on a batch of inputs first")
    keys = {}
    for path, layer in layer_paths(model).items():
        for var in layer._trainable_variables + layer._non_trainable_variables:
            if id(var) in keys:
                continue
            short = var.name[len(layer.name) + 1 :] if var.name.startswith(layer.name + "/") else var.name
            key = f"{path}/{short}" if path else short
            taken = set(keys.values())
            n, unique = 0, key
            while unique in taken:
                n += 1
                unique = f"{key}_{n}"
            keys[id(var)] = unique
    missing = [v.name for v in model.weights if id(v) not in keys]
    if missing:
        raise ValueError(f"{where}: weights {missing} are not owned by any layer of {model.name}")
    by_key = {keys[id(v)]: v for v in model.weights}
    _check_paths(by_key, where)
    return by_key


# ---------------------------------------------------------- text in HDF5
def _write_json(group, name: str, value, where: str) -> None:
    def refuse(obj):
        raise TypeError(
            f"{where}: {obj!r} in the model's configuration cannot be saved: a config may hold names, numbers "
            "and configs only. Register the function or class with @tp.saving.register_serializable() (and give "
            "classes get_config/from_config)"
        )

    write_text(group, name, json.dumps(value, default=refuse))


# ------------------------------------------------------------------ weights
def _weight_arrays(model, where: str) -> tuple[dict, dict]:
    by_key = weight_paths(model, where)
    return {k: np.asarray(v.numpy()) for k, v in by_key.items()}, {k: v.name for k, v in by_key.items()}


def save_weights(model, path) -> None:
    """Write `model`'s weights keyed by structure (the layout above), atomically."""
    where = "save_weights"
    arrays, names = _weight_arrays(model, where)
    with atomic_h5(path) as f:
        write_attrs(f, {"format": checkpoint.WEIGHTS_FORMAT, "version": WEIGHTS_VERSION})
        _write_arrays(f.create_group("weights"), arrays)
        _write_json(f, "names", names, where)
        write_manifest(f)


def _read_weights(reader: H5Reader, checked: bool, by_key: dict, where: str, by_name: bool):
    """(report, values by key) for the weights group of an open file."""
    datasets = reader.datasets(reader.group(reader.file, "weights"), "weights/")
    if not by_name:
        return _match_weights(reader, by_key, datasets, checked)
    names = reader.json(reader.file, "names", checked)
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise reader.fail("'names' must map keys to weight names")
    datasets = {names.get(key, key): d for key, d in datasets.items()}
    named = {var.name: var for var in by_key.values()}
    if len(named) != len(by_key):
        raise ValueError(f"{where}: weights of the model share names; match them by structure instead")
    report, values = _match_weights(reader, named, datasets, checked)
    key_of = {var.name: key for key, var in by_key.items()}
    return report, {key_of[name]: value for name, value in values.items()}


def _mismatch(where: str, path, report: LoadReport, by_name: bool) -> WeightsMismatchError:
    lines = "\n  ".join(report.problems())
    how = "full names" if by_name else "place in the model ('<layer path>/<weight>')"
    other = "" if by_name else ", or by_name=True to match them by their full names"
    return WeightsMismatchError(
        f"{where}: the file does not match the model, so no weight was changed:\n  {lines}\n"
        f"Weights are matched by their {how}. Pass strict=False to load those that match{other}.",
        report,
    )


def load_weights(model, path, strict: bool = True, by_name: bool = False) -> LoadReport:
    """Load weights into `model`, matched by structure (or by full name with `by_name`).

    With `strict`, a missing, unexpected or wrongly shaped weight raises a
    `WeightsMismatchError` naming every one, and no weight changes; otherwise the weights
    that match are loaded. A file keyed by name (`tp.io.save_weights`, or a checkpoint)
    loads by name; a model file (`Model.save`) gives its weights.
    """
    where = f"load_weights({os.fspath(path)!r})"
    versions = {
        checkpoint.WEIGHTS_FORMAT: {**checkpoint.NAMED_WEIGHTS_VERSIONS, **STRUCTURED_WEIGHTS_VERSIONS},
        MODEL_FORMAT: MODEL_VERSIONS,
        checkpoint.CHECKPOINT_FORMAT: checkpoint.CHECKPOINT_VERSIONS,
    }
    with H5Reader(path, where) as reader:
        fmt, version, checked = reader.header(versions)
        keyed_by_name = fmt == checkpoint.CHECKPOINT_FORMAT or (
            fmt == checkpoint.WEIGHTS_FORMAT and version in checkpoint.NAMED_WEIGHTS_VERSIONS
        )
        if keyed_by_name:
            by_key = checkpoint._named_weights(model, where)
            report, values = checkpoint.read_named_weights(reader, fmt, checked, by_key)
        else:
            by_key = weight_paths(model, where)
            report, values = _read_weights(reader, checked, by_key, where, by_name)
    if strict and not report.ok:
        if keyed_by_name:
            raise checkpoint._mismatch_error(where, path, report, "Pass strict=False to load the weights that match.")
        raise _mismatch(where, path, report, by_name)
    for key, value in values.items():
        by_key[key].assign(value)
    return report


# ------------------------------------------------------------- whole models
def _compile_entry(value):
    """A loss or metric argument of compile (a name, an object, a function, or a list or
    dict of them) as JSON: objects as configs, registered functions by registered name."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {k: _compile_entry(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_compile_entry(v) for v in value]
    if hasattr(value, "get_config"):
        return serialization.serialize(value)
    return losses.function_name(value)  # a name for tapeflow's and registered functions


def _restore_entry(value, get):
    if isinstance(value, dict) and "class_name" in value:
        return get(value)
    if isinstance(value, dict):
        return {k: _restore_entry(v, get) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_entry(v, get) for v in value]
    return value


def _generators(model) -> dict[str, Generator]:
    """The random generators the layers hold as attributes, by "<layer path>/<attr>"."""
    return {
        f"{path}/{attr}" if path else attr: value
        for path, layer in layer_paths(model).items()
        for attr, value in vars(layer).items()
        if isinstance(value, Generator)
    }


def _optimizer_state(model, by_key: dict, where: str):
    """(the tracked variables' keys in tracking order, slot arrays keyed "<n>/<slot>")."""
    optimizer = model.optimizer
    key_of = {id(var): key for key, var in by_key.items()}
    keys, arrays = [], {}
    for n, var in enumerate(optimizer._variables):
        if id(var) not in key_of:
            raise ValueError(f"{where}: the optimizer updates {var.name!r}, which is not a weight of {model.name}")
        keys.append(key_of[id(var)])
        for slot, value in optimizer.slots(var).items():
            arrays[f"{n}/{slot}"] = np.asarray(value.numpy())
    return keys, arrays


def save_model(model, path) -> None:
    """Write `model` to one file, atomically: its config, its weights and, if compiled, the
    compile arguments and the optimizer's state (layout in the module docstring)."""
    where = f"{model.name}.save"
    if not isinstance(model, Layer) or not hasattr(model, "compile"):
        raise TypeError(f"save: expected a tp.Model, got {type(model).__name__}")
    if not model.built:
        raise ValueError(f"{where}: the model is not built yet; call it on a batch or give it an input first")
    config = serialization.serialize(model)
    by_key = weight_paths(model, where)
    build = [{"shape": list(s.shape), "dtype": s.dtype.name} for s in model._input_signature or []]
    compiled = getattr(model, "_compiled", False)
    if compiled:
        arguments = dict(getattr(model, "_compile_arguments", {"loss": model.loss, "metrics": None}))
        compile_config = {k: _compile_entry(v) for k, v in arguments.items()}
        compile_config["optimizer"] = optimizers.serialize(model.optimizer)
        tracked, slots = _optimizer_state(model, by_key, where)
    generators = {key: gen.get_state() for key, gen in _generators(model).items()}
    with atomic_h5(path) as f:
        write_attrs(f, {"format": MODEL_FORMAT, "version": MODEL_VERSION})
        _write_json(f, "config", config, where)
        _write_json(f, "build", build, where)
        _write_arrays(f.create_group("weights"), {k: np.asarray(v.numpy()) for k, v in by_key.items()})
        _write_json(f, "random", generators, where)
        if compiled:
            _write_json(f, "compile_config", compile_config, where)
            group = f.create_group("optimizer")
            write_attrs(group, {"iterations": int(model.optimizer.iterations)})
            _write_json(group, "variables", tracked, where)
            _write_arrays(group.create_group("slots"), slots)
        write_manifest(f)


def _build(model, build, where: str) -> None:
    """Create a subclassed model's weights by calling it once on zeros of its saved input specs."""
    try:
        specs = [(tuple(1 if d is None else int(d) for d in s["shape"][1:]), str(s["dtype"])) for s in build]
    except (TypeError, KeyError, ValueError):
        raise ValueError(f"{where}: 'build' must list the inputs' shapes and dtypes, got {build!r}") from None
    if not specs:
        raise ValueError(f"{where}: the file does not say which inputs build {model.name}")
    inputs = [zeros((1, *shape), dtype) for shape, dtype in specs]
    model(inputs[0] if len(inputs) == 1 else inputs, training=False)


def _restore_optimizer(model, reader: H5Reader, checked: bool, by_key: dict, where: str) -> None:
    optimizer = model.optimizer
    group = reader.group(reader.file, "optimizer", required=False)
    if group is None:
        raise reader.fail("has a compile config but no optimizer state")
    keys = reader.json(group, "variables", checked)
    if not isinstance(keys, list) or any(not isinstance(k, str) or k not in by_key for k in keys):
        raise reader.fail(f"'optimizer/variables' must list weights of the model, got {keys!r:.200}")
    iterations = reader.attrs(group, checked).get("iterations")
    if not isinstance(iterations, int) or not 0 <= iterations < 2**63:
        raise reader.fail("optimizer 'iterations' must be an integer >= 0")
    slots_group = reader.group(group, "slots", "optimizer/slots")
    optimizer.build([by_key[k] for k in keys])
    targets = {f"{n}/{slot}": var for n, k in enumerate(keys) for slot, var in optimizer.slots(by_key[k]).items()}
    report, values = _match_weights(reader, targets, reader.datasets(slots_group, "optimizer/slots/"), checked)
    if not report.ok:
        raise reader.fail(f"the optimizer state does not fit {type(optimizer).__name__}: {report.problems()}")
    for key, value in values.items():
        targets[key].assign(value)
    optimizer.iterations = iterations


@contextlib.contextmanager
def _rebuilding(reader: H5Reader, what: str):
    """Any failure to rebuild objects from the file's configs becomes a FileReadError naming
    the file (the original error is chained)."""
    try:
        yield
    except FileReadError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever a config from a file makes a constructor raise
        raise reader.fail(f"{what} cannot be rebuilt: {type(err).__name__}: {err}") from err


def load_model(path, custom_objects: dict | None = None, compile: bool = True):
    """The model `Model.save` wrote: rebuilt from its config, with its weights and, if it
    was compiled (and `compile` is true), compiled again with its optimizer's state, so
    training continues where it stopped. Classes are looked up by name only (tapeflow's,
    registered ones, and `custom_objects`); nothing in the file is executed."""
    where = f"load_model({os.fspath(path)!r})"
    with H5Reader(path, where) as reader, custom_object_scope(custom_objects):
        _, _, checked = reader.header({MODEL_FORMAT: MODEL_VERSIONS})
        f = reader.file
        config = reader.json(f, "config", checked)
        with _rebuilding(reader, "the model's config"):
            model = deserialize(config)
        if not hasattr(model, "compile"):
            raise ValueError(f"{where}: the file holds a {type(model).__name__}, not a model")
        if not model.built or not model.weights:
            build = reader.json(f, "build", checked)
            with _rebuilding(reader, "building the model"):
                _build(model, build, where)
        by_key = weight_paths(model, where)
        report, values = _read_weights(reader, checked, by_key, where, by_name=False)
        if not report.ok:
            raise _mismatch(where, path, report, False)
        for key, value in values.items():
            by_key[key].assign(value)
        generators = _generators(model)
        states = reader.json(f, "random", checked, required=False) or {}
        if not isinstance(states, dict) or set(states) != set(generators):
            raise ValueError(f"{where}: the random generators saved ({sorted(states)}) are not the model's")
        for key, gen in generators.items():
            gen.set_state(checkpoint._checked_rng_state(gen, states[key], key, where))
        compile_config = reader.json(f, "compile_config", checked, required=False) if compile else None
        if compile_config is not None:
            if not isinstance(compile_config, dict):
                raise ValueError(f"{where}: 'compile_config' must be a dict")
            arguments = dict(compile_config)
            with _rebuilding(reader, "the compile config"):
                optimizer = optimizers.get(arguments.pop("optimizer", None))
                arguments["loss"] = _restore_entry(arguments.get("loss"), losses.get)
                for key in ("metrics", "weighted_metrics"):
                    arguments[key] = _restore_entry(arguments.get(key), metrics.get)
                model.compile(optimizer=optimizer, **arguments)
            _restore_optimizer(model, reader, checked, by_key, where)
    return model
