"""Weights files and training checkpoints: HDF5, written atomically, read without running code.

Weights file (`tp.io.save_weights`), format "tapeflow-weights", version 1 (`Model.save_weights`
writes version 2, keyed by each weight's place in the model: see `tapeflow.saving`)::

    /                          attrs: format = "tapeflow-weights" (str), version = 1 (int)
    /<layer name>/<weight>     one dataset per Variable, at the Variable's name ("dense/kernel");
                               a nested layer's weights sit at their own Variable names

Weights are matched by that name, so a model rebuilt elsewhere must give its layers the same
names (automatic names such as "dense_1" depend on how many layers a process made before:
pass `name=` when files travel between programs). Values keep the dtype they were saved with;
loading casts them to each variable's dtype.

Checkpoint file (`save_checkpoint`), format "tapeflow-checkpoint", version 1::

    /                          attrs: format = "tapeflow-checkpoint", version = 1,
                               epoch (int: the last completed epoch, 0-based),
                               rng (JSON text: {"global": state, "layers": {"<layer>/<attr>": state}},
                                    each state a NumPy `bit_generator.state` dict),
                               shuffle_seed (int; absent when there is none),
                               extra (JSON text; absent when None)
    /weights/...               as in a weights file
    /optimizer                 absent when saved without one; attrs: class (str), iterations (int)
    /optimizer/slots/<variable name>/<slot>
                               one dataset per slot, keyed as `Optimizer.get_state()` keys them

A newer `version` or a different `format` is refused with a ValueError.

Reading runs no code from the file. Only the attributes named above and datasets of bool,
integer or float dtype are read; strings are parsed only as JSON. A file holding anything
else (object, string, opaque or compound datasets, soft or external links, named types,
virtual or externally stored datasets, filters other than HDF5's built-in ones and LZF) is
refused before any value is read. Nothing is unpickled, evaluated or imported.

Every write goes to `.<name>.<random>.tmp` beside the target, is flushed and fsync'ed,
and then `os.replace`s the target (the directory is fsync'ed too), so a reader, or a run
after a crash, sees either the previous complete file or the new one. A writer killed
mid-save can leave its temp file behind: it is never read, and `remove_temp_files(path)`
(which `tp.callbacks.BackupAndRestore` calls when training starts) deletes such strays.

>>> import os, tempfile
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.layers.Dense(2, name="head")])
>>> _ = model(tp.ones((1, 3)))
>>> path = os.path.join(tempfile.mkdtemp(), "w.h5")
>>> model.save_weights(path)
>>> model.load_weights(path)
LoadReport(matched=2)
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

import h5py
import numpy as np

from tapeflow._files import atomic_h5, hdf5_child, hdf5_datasets, temp_prefix
from tapeflow.ops.random import Generator, global_generator

__all__ = [
    "WEIGHTS_FORMAT",
    "CHECKPOINT_FORMAT",
    "FORMAT_VERSION",
    "CheckpointInfo",
    "LoadReport",
    "ShapeMismatch",
    "WeightsMismatchError",
    "load_checkpoint",
    "load_weights",
    "remove_temp_files",
    "save_checkpoint",
    "save_weights",
]

WEIGHTS_FORMAT = "tapeflow-weights"
CHECKPOINT_FORMAT = "tapeflow-checkpoint"
FORMAT_VERSION = 1


# ------------------------------------------------------------------ reports
class ShapeMismatch(NamedTuple):
    name: str
    file_shape: tuple
    model_shape: tuple


@dataclass(frozen=True)
class LoadReport:
    """How a file's weights lined up with a model's, name by name.

    >>> LoadReport(matched=("d/kernel",), missing=("d/bias",))
    LoadReport(matched=1, missing=['d/bias'])
    """

    matched: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # in the model, not in the file
    unexpected: tuple[str, ...] = ()  # in the file, not in the model
    mismatched: tuple[ShapeMismatch, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def problems(self) -> list[str]:
        """One line per kind of problem, naming every offending weight."""
        lines = []
        if self.missing:
            lines.append(f"missing from the file: {', '.join(self.missing)}")
        if self.unexpected:
            lines.append(f"not in the model: {', '.join(self.unexpected)}")
        if self.mismatched:
            shapes = (f"{m.name} (file {m.file_shape}, model {m.model_shape})" for m in self.mismatched)
            lines.append(f"shape mismatch: {', '.join(shapes)}")
        return lines

    def __repr__(self) -> str:
        parts = [f"matched={len(self.matched)}"]
        if self.missing:
            parts.append(f"missing={list(self.missing)}")
        if self.unexpected:
            parts.append(f"unexpected={list(self.unexpected)}")
        if self.mismatched:
            parts.append(
                f"mismatched={[f'{m.name}: file {m.file_shape}, model {m.model_shape}' for m in self.mismatched]}"
            )
        return f"LoadReport({', '.join(parts)})"


class WeightsMismatchError(ValueError):
    """A strict load found weights that do not line up; `report` says which."""

    def __init__(self, message: str, report: LoadReport):
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class CheckpointInfo:
    """What `load_checkpoint` restored besides the state it wrote into the objects."""

    epoch: int
    shuffle_seed: int | None
    extra: Any
    weights: LoadReport


# ----------------------------------------------------------- atomic writing
def remove_temp_files(path) -> list[str]:
    """Delete temp files that writers of `path` killed mid-save left behind; returns their paths.

    Only call it while nothing else is writing `path`.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.h5")
    >>> open(os.path.join(os.path.dirname(path), ".ckpt.h5.0a1b.tmp"), "w").close()
    >>> [os.path.basename(p) for p in remove_temp_files(path)]
    ['.ckpt.h5.0a1b.tmp']
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    prefix = temp_prefix(path)
    removed = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(prefix) and name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))
                removed.append(os.path.join(directory, name))
    return removed


# ----------------------------------------------------------- safe reading
def _open(path, where: str) -> h5py.File:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where}: no such file {path!r}")
    if not h5py.is_hdf5(path):
        raise ValueError(f"{where}: {path!r} is not an HDF5 file")
    return h5py.File(path, "r")


def _check_header(f: h5py.File, formats: tuple[str, ...], where: str) -> str:
    fmt, version = f.attrs.get("format"), f.attrs.get("version")
    if not isinstance(fmt, str) or fmt not in formats:
        raise ValueError(
            f"{where}: {f.filename!r} is not a {' or '.join(formats)} file (its 'format' attribute is {fmt!r})"
        )
    if isinstance(version, bool) or not isinstance(version, int | np.integer) or version < 1:
        raise ValueError(f"{where}: {f.filename!r} has an invalid format version {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: {f.filename!r} is {fmt} version {int(version)}, written by a newer tapeflow; "
            f"this one reads up to version {FORMAT_VERSION}"
        )
    return fmt


def _int_attr(attrs, key: str, where: str, default=None):
    value = attrs.get(key, default)
    if value is default:
        return default
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{where}: attribute {key!r} must be an integer, got {value!r}")
    return int(value)


def _json_attr(attrs, key: str, where: str, default=None):
    text = attrs.get(key)
    if text is None:
        return default
    if not isinstance(text, str):
        raise ValueError(f"{where}: attribute {key!r} must be JSON text, got {type(text).__name__}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{where}: attribute {key!r} is not valid JSON: {err}") from None


# ------------------------------------------------------------------ weights
def _named_weights(model, where: str) -> dict:
    if not getattr(model, "built", True):
        raise ValueError(f"{where}: {model.name} is not built yet; call it on a batch of inputs first")
    named = {}
    for var in model.weights:
        if var.name in named:
            raise ValueError(
                f"{where}: two weights of {model.name} are both named '{var.name}'; give the layers unique names"
            )
        named[var.name] = var
    return named


def _check_paths(names, where: str) -> None:
    """Each name must be a valid HDF5 path that is no other name's parent group."""
    prefixes = set()
    for name in names:
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"{where}: weight name '{name}' is not a valid '<layer>/<weight>' path")
        prefixes.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clashes = sorted(prefixes.intersection(names))
    if clashes:
        raise ValueError(f"{where}: weight names {clashes} are also the group of other weights; rename the layers")


def _write_arrays(group: h5py.Group, arrays: dict) -> None:
    for name, value in arrays.items():
        group.create_dataset(name, data=value)


def _weight_arrays(model, where: str) -> dict[str, np.ndarray]:
    named = _named_weights(model, where)
    _check_paths(named, where)
    return {name: np.asarray(var.numpy()) for name, var in named.items()}


def _match_weights(named: dict, group: h5py.Group, where: str, datasets=None) -> tuple[LoadReport, dict]:
    """The report, and the matched values cast to each variable's dtype (read only when they fit);
    `datasets` (the group's, by default) are keyed like `named`."""
    datasets = hdf5_datasets(group, where) if datasets is None else datasets
    matched, mismatched, values = [], [], {}
    for name, var in named.items():
        dataset = datasets.get(name)
        if dataset is None:
            continue
        if tuple(dataset.shape) != tuple(var.shape):
            mismatched.append(ShapeMismatch(name, tuple(dataset.shape), tuple(var.shape)))
            continue
        matched.append(name)
        values[name] = np.asarray(dataset[()]).astype(var.dtype.np)
    report = LoadReport(
        matched=tuple(matched),
        missing=tuple(name for name in named if name not in datasets),
        unexpected=tuple(sorted(name for name in datasets if name not in named)),
        mismatched=tuple(mismatched),
    )
    return report, values


def _mismatch_error(where: str, path, report: LoadReport, hint: str) -> WeightsMismatchError:
    lines = "\n  ".join(report.problems())
    return WeightsMismatchError(
        f"{where}: {os.fspath(path)!r} does not match the model, so no weight was changed:\n  {lines}\n"
        f"Weights are matched by their names '<layer name>/<weight name>'; layers named automatically "
        f"(dense, dense_1, ...) are named in creation order, so pass name= to layers whose files travel. {hint}",
        report,
    )


def save_weights(model, path) -> None:
    """Write every weight of `model` to an HDF5 weights file, atomically (layout above).

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(3, name="d")])
    >>> _ = model(tp.ones((1, 2)))
    >>> save_weights(model, os.path.join(tempfile.mkdtemp(), "w.h5"))
    """
    arrays = _weight_arrays(model, "save_weights")
    with atomic_h5(path) as f:
        f.attrs["format"] = WEIGHTS_FORMAT
        f.attrs["version"] = np.int64(FORMAT_VERSION)
        _write_arrays(f, arrays)


def load_weights(model, path, strict: bool = True) -> LoadReport:
    """Load weights by name from a weights file (or the weights of a checkpoint file).

    With `strict`, any missing, unexpected or wrongly shaped weight raises a
    `WeightsMismatchError` (a ValueError) naming them all, and nothing changes; otherwise
    the weights that match are loaded. Returns the `LoadReport` either way.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> small = tp.Sequential([tp.layers.Dense(3, name="a")])
    >>> _ = small(tp.ones((1, 2)))
    >>> path = os.path.join(tempfile.mkdtemp(), "w.h5")
    >>> save_weights(small, path)
    >>> big = tp.Sequential([tp.layers.Dense(3, name="a"), tp.layers.Dense(1, name="b")])
    >>> _ = big(tp.ones((1, 2)))
    >>> load_weights(big, path, strict=False)
    LoadReport(matched=2, missing=['b/kernel', 'b/bias'])
    """
    where = "load_weights"
    named = _named_weights(model, where)
    with _open(path, where) as f:
        fmt = _check_header(f, (WEIGHTS_FORMAT, CHECKPOINT_FORMAT), where)
        group = f if fmt == WEIGHTS_FORMAT else hdf5_child(f, "weights", where)
        if not isinstance(group, h5py.Group):
            raise ValueError(f"{where}: {f.filename!r} has no 'weights' group")
        report, values = _match_weights(named, group, where)
    if strict and not report.ok:
        raise _mismatch_error(where, path, report, "Pass strict=False to load the weights that match.")
    for name, value in values.items():
        named[name].assign(value)
    return report


# -------------------------------------------------------------- checkpoints
def _layer_generators(model) -> dict[str, Generator]:
    """Every tp.random.Generator held as an attribute of the model or its layers, as '<layer>/<attr>'."""
    found = {}
    for layer in model._flatten_layers():
        for attr, value in vars(layer).items():
            if isinstance(value, Generator):
                key = f"{layer.name}/{attr}"
                if key in found and found[key] is not value:
                    raise ValueError(f"checkpoint: two layers named '{layer.name}' both own a random generator")
                found[key] = value
    return found


def _checked_rng_state(generator: Generator, state, key: str, where: str) -> dict:
    """`state` once a scratch bit generator of the same kind has accepted it."""
    scratch = type(generator.numpy.bit_generator)()
    try:
        scratch.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as err:
        raise ValueError(
            f"{where}: random state '{key}' is not a valid {type(scratch).__name__} state: {err}"
        ) from None
    return scratch.state


def save_checkpoint(path, model, optimizer, epoch: int, extra: Any = None, *, shuffle_seed: int | None = None) -> None:
    """Write everything needed to resume training to one HDF5 file, atomically (layout above).

    That is: the weights; the optimizer's state (`optimizer.get_state()`, or nothing if
    `optimizer` is None); `epoch`, the last completed epoch; the global random stream and
    every Generator the layers own (Dropout's, for one); the base seed `fit` shuffles with
    (`shuffle_seed`); and `extra`, any JSON-serializable value.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(2, name="d"), tp.layers.Dropout(0.5, seed=1, name="drop")])
    >>> _ = model(tp.ones((1, 3)))
    >>> opt = tp.optimizers.SGD(0.1, momentum=0.9)
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.h5")
    >>> save_checkpoint(path, model, opt, epoch=4, extra={"note": "hi"})
    >>> info = load_checkpoint(path, model, opt)
    >>> info.epoch, info.extra
    (4, {'note': 'hi'})
    """
    where = "save_checkpoint"
    if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
        raise ValueError(f"{where}: epoch must be an integer >= 0, got {epoch!r}")
    if shuffle_seed is not None and (
        isinstance(shuffle_seed, bool)
        or not isinstance(shuffle_seed, int | np.integer)
        or not 0 <= shuffle_seed < 2**64
    ):
        raise ValueError(f"{where}: shuffle_seed must be None or an integer in [0, 2**64), got {shuffle_seed!r}")
    try:
        extra_text = None if extra is None else json.dumps(extra)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{where}: extra must be JSON-serializable: {err}") from None
    weights = _weight_arrays(model, where)
    rng = {
        "global": global_generator().get_state(),
        "layers": {key: gen.get_state() for key, gen in _layer_generators(model).items()},
    }
    if optimizer is not None:
        state = optimizer.get_state()
        iterations = np.int64(state.pop("iterations"))
        _check_paths(state, where)
    with atomic_h5(path) as f:
        f.attrs["format"] = CHECKPOINT_FORMAT
        f.attrs["version"] = np.int64(FORMAT_VERSION)
        f.attrs["epoch"] = np.int64(epoch)
        f.attrs["rng"] = json.dumps(rng)
        if shuffle_seed is not None:
            f.attrs["shuffle_seed"] = np.uint64(shuffle_seed)
        if extra_text is not None:
            f.attrs["extra"] = extra_text
        _write_arrays(f.create_group("weights"), weights)
        if optimizer is not None:
            group = f.create_group("optimizer")
            group.attrs["class"] = type(optimizer).__name__
            group.attrs["iterations"] = iterations
            _write_arrays(group.create_group("slots"), state)


def _read_optimizer_state(f: h5py.File, optimizer, where: str) -> dict | None:
    if optimizer is None:
        return None
    group = hdf5_child(f, "optimizer", where)
    if not isinstance(group, h5py.Group):
        raise ValueError(f"{where}: {f.filename!r} holds no optimizer state")
    saved_class = group.attrs.get("class")
    if not isinstance(saved_class, str) or saved_class != type(optimizer).__name__:
        raise ValueError(f"{where}: the checkpoint holds {saved_class!r} state, not {type(optimizer).__name__} state")
    iterations = _int_attr(group.attrs, "iterations", where)
    if iterations is None:
        raise ValueError(f"{where}: the optimizer group has no 'iterations' attribute")
    slots = hdf5_child(group, "slots", where, "optimizer/slots")
    if slots is not None and not isinstance(slots, h5py.Group):
        raise ValueError(f"{where}: 'optimizer/slots' must be a group")
    arrays = {} if slots is None else {k: d[()] for k, d in hdf5_datasets(slots, where).items()}
    return {"iterations": np.int64(iterations), **arrays}


def _read_rng(f: h5py.File, generators: dict[str, Generator], where: str) -> dict:
    rng = _json_attr(f.attrs, "rng", where)
    if not isinstance(rng, dict) or not isinstance(rng.get("layers"), dict) or "global" not in rng:
        raise ValueError(f"{where}: {f.filename!r} has no valid 'rng' attribute")
    saved = rng["layers"]
    missing = sorted(set(generators) - set(saved))
    unexpected = sorted(set(saved) - set(generators))
    if missing or unexpected:
        raise ValueError(
            f"{where}: the model's random generators do not match the checkpoint's: "
            f"missing {missing}, unexpected {unexpected}"
        )
    states = {key: _checked_rng_state(gen, saved[key], key, where) for key, gen in generators.items()}
    states[None] = _checked_rng_state(global_generator(), rng["global"], "global", where)
    return states


def load_checkpoint(path, model, optimizer) -> CheckpointInfo:
    """Restore what `save_checkpoint` wrote into `model`, `optimizer` and the random streams.

    Everything is read and checked first (strictly: every weight, optimizer slot and
    generator must match); on any mismatch a ValueError says what, and nothing changes,
    except that a fresh optimizer whose state did not match may have started tracking the
    model's variables (as its first update would). Pass `optimizer=None` to skip the
    optimizer state. Returns the epoch, shuffle seed and extra as a `CheckpointInfo`.
    """
    where = "load_checkpoint"
    named = _named_weights(model, where)
    generators = _layer_generators(model)
    with _open(path, where) as f:
        _check_header(f, (CHECKPOINT_FORMAT,), where)
        epoch = _int_attr(f.attrs, "epoch", where)
        if epoch is None:
            raise ValueError(f"{where}: {f.filename!r} has no 'epoch' attribute")
        shuffle_seed = _int_attr(f.attrs, "shuffle_seed", where)
        extra = _json_attr(f.attrs, "extra", where)
        rng_states = _read_rng(f, generators, where)
        group = hdf5_child(f, "weights", where)
        if not isinstance(group, h5py.Group):
            raise ValueError(f"{where}: {f.filename!r} has no 'weights' group")
        report, values = _match_weights(named, group, where)
        if not report.ok:
            raise _mismatch_error(where, path, report, "Resuming needs every weight.")
        opt_state = _read_optimizer_state(f, optimizer, where)
    if opt_state is not None:  # validates everything before it assigns; a fresh optimizer first tracks the variables
        saved_vars = {key.rsplit("/", 1)[0] for key in opt_state if key != "iterations"}
        var_list = [v for v in model.trainable_weights if v.name in saved_vars]
        optimizer.set_state(opt_state, var_list=var_list or None)
    for name, value in values.items():
        named[name].assign(value)
    for key, state in rng_states.items():
        (global_generator() if key is None else generators[key]).set_state(state)
    return CheckpointInfo(epoch=epoch, shuffle_seed=shuffle_seed, extra=extra, weights=report)
