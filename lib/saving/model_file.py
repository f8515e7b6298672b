"""Whole-model files (`Model.save`, `load_model`): config, weights and optimizer state in one file.

One file rebuilds the model without its code: the architecture as a config, the weights
keyed by structure (as in a weights file), and, for a compiled model, the compile
arguments and the optimizer's state, so that training continues where it stopped.
Loading runs no code from the file: classes are looked up by name among tapeflow's own,
those registered with `register_serializable`, and `custom_objects`. Layout and
versions: docs/file-formats.md.

>>> import os, tempfile
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
>>> model.compile(optimizer="adam", loss="mse")
>>> path = os.path.join(tempfile.mkdtemp(), "model.keras")
>>> save_model(model, path)
>>> again = load_model(path)
>>> bool((again.predict(tp.ones((1, 3))) == model.predict(tp.ones((1, 3)))).all())
True
"""

from __future__ import annotations

import contextlib
import json
import os

import numpy as np

from tapeflow import metrics, optimizers, serialization
from tapeflow.files.atomic import atomic_h5
from tapeflow.files.safe_h5 import FileReadError, H5Reader, write_attrs, write_manifest, write_text
from tapeflow.layers.base import Layer, deserialize, weight_budget
from tapeflow.losses import losses
from tapeflow.ops.creation import zeros
from tapeflow.saving.formats import MODEL_FORMAT, MODEL_VERSION, MODEL_VERSIONS
from tapeflow.saving.random_state import checked_state, generators_by_path
from tapeflow.saving.weight_keys import weight_paths
from tapeflow.saving.weights import (
    match_weights,
    read_structured_weights,
    structured_mismatch,
    weight_arrays,
    write_arrays,
)
from tapeflow.serialization import custom_object_scope

__all__ = ["compile_arguments", "load_model", "restore_compile_arguments", "save_model"]


# While a model is rebuilt from a file's config, the values its layers' weights may hold in
# all: those the file stores, plus this many (for variables a file need not store). A config
# edited to ask for more is refused before its weights are allocated.
_WEIGHT_SLACK = 1 << 20


@contextlib.contextmanager
def _weights_bounded_by(reader: H5Reader):
    """Within the block (in this thread), layers may create only as many weight values as
    the file's `weights` group stores (plus a small slack)."""
    group = reader.group(reader.file, "weights", required=False)
    stored = sum(ds.size for ds in reader.datasets(group, "weights/").values()) if group is not None else 0
    with weight_budget(stored + _WEIGHT_SLACK, f"the file holds ({stored} values in all)"):
        yield


def _write_json(group, name: str, value, where: str) -> None:
    def refuse(obj):
        raise TypeError(
            f"{where}: {obj!r} in the model's configuration cannot be saved: a config may hold names, numbers "
            "and configs only. Register the function or class with @tp.saving.register_serializable() (and give "
            "classes get_config/from_config)"
        )

    write_text(group, name, json.dumps(value, default=refuse))


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


def compile_arguments(model) -> dict:
    """A compiled model's `compile` arguments, except the optimizer, as JSON: losses and
    metrics as names or configs (what a model file keeps)."""
    arguments = dict(getattr(model, "_compile_arguments", {"loss": model.loss, "metrics": None}))
    return {k: _compile_entry(v) for k, v in arguments.items()}


def restore_compile_arguments(config: dict) -> dict:
    """`compile_arguments`' dict as `compile` arguments again, with new loss and metric objects."""
    arguments = dict(config)
    arguments["loss"] = _restore_entry(arguments.get("loss"), losses.get)
    for key in ("metrics", "weighted_metrics"):
        arguments[key] = _restore_entry(arguments.get(key), metrics.get)
    return arguments


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
    compile arguments and the optimizer's state (layout in docs/file-formats.md)."""
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
        compile_config = compile_arguments(model)
        compile_config["optimizer"] = optimizers.serialize(model.optimizer)
        tracked, slots = _optimizer_state(model, by_key, where)
    generators = {key: gen.get_state() for key, gen in generators_by_path(model).items()}
    with atomic_h5(path) as f:
        write_attrs(f, {"format": MODEL_FORMAT, "version": MODEL_VERSION})
        _write_json(f, "config", config, where)
        _write_json(f, "build", build, where)
        write_arrays(f.create_group("weights"), weight_arrays(by_key))
        _write_json(f, "random", generators, where)
        if compiled:
            _write_json(f, "compile_config", compile_config, where)
            group = f.create_group("optimizer")
            write_attrs(group, {"iterations": int(model.optimizer.iterations)})
            _write_json(group, "variables", tracked, where)
            write_arrays(group.create_group("slots"), slots)
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
    report, values = match_weights(reader, targets, reader.datasets(slots_group, "optimizer/slots/"), checked)
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
    except FileReadError as err:
        if err.path == reader.path:
            raise
        raise reader.fail(f"{what} cannot be rebuilt: {err}") from err  # an error about a part, not the file
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
        with _weights_bounded_by(reader):
            with _rebuilding(reader, "the model's config"):
                model = deserialize(config)
            if not hasattr(model, "compile"):
                raise ValueError(f"{where}: the file holds a {type(model).__name__}, not a model")
            if not model.built or not model.weights:
                build = reader.json(f, "build", checked)
                with _rebuilding(reader, "building the model"):
                    _build(model, build, where)
        by_key = weight_paths(model, where)
        report, values = read_structured_weights(reader, checked, by_key, where)
        if not report.ok:
            raise structured_mismatch(where, report)
        for key, value in values.items():
            by_key[key].assign(value)
        generators = generators_by_path(model)
        states = reader.json(f, "random", checked, required=False) or {}
        if not isinstance(states, dict) or set(states) != set(generators):
            raise ValueError(f"{where}: the random generators saved ({sorted(states)}) are not the model's")
        for key, gen in generators.items():
            gen.set_state(checked_state(gen, states[key], key, where))
        compile_config = reader.json(f, "compile_config", checked, required=False) if compile else None
        if compile_config is not None:
            if not isinstance(compile_config, dict):
                raise ValueError(f"{where}: 'compile_config' must be a dict")
            arguments = dict(compile_config)
            with _rebuilding(reader, "the compile config"):
                optimizer = optimizers.get(arguments.pop("optimizer", None))
                model.compile(optimizer=optimizer, **restore_compile_arguments(arguments))
            _restore_optimizer(model, reader, checked, by_key, where)
    return model
