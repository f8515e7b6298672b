"""Weights files and training checkpoints: HDF5, written atomically, read without running code.

Weights file (`tp.io.save_weights`), format "tapeflow-weights", version 3 (`Model.save_weights`
writes version 4, keyed by each weight's place in the model: see `tapeflow.saving`)::

    /                          attrs: format = "tapeflow-weights", version = 3, crc32
    /<layer name>/<weight>     one dataset per Variable, at the Variable's name ("dense/kernel");
                               a nested layer's weights sit at their own Variable names

Weights are matched by that name, so a model rebuilt elsewhere must give its layers the same
names (automatic names such as "dense_1" depend on how many layers a process made before:
pass `name=` when files travel between programs). Values keep the dtype they were saved with;
loading casts them to each variable's dtype.

Checkpoint file (`save_checkpoint`), format "tapeflow-checkpoint", version 2::

    /                          attrs: format = "tapeflow-checkpoint", version = 2,
                               epoch (int: the last completed epoch, 0-based),
                               shuffle_seed (int; absent when there is none), crc32
    /rng                       JSON text: {"global": state, "layers": {"<layer>/<attr>": state}},
                               each state a NumPy `bit_generator.state` dict
    /extra                     JSON text; absent when None
    /weights/...               as in a weights file
    /optimizer                 absent when saved without one; attrs: class (str), iterations (int), crc32
    /optimizer/slots/<variable name>/<slot>
                               one dataset per slot, keyed as `Optimizer.get_state()` keys them

Strings are fixed-length UTF-8; every dataset carries a `crc32` attribute (the CRC-32 of its
bytes) and each object's `crc32` attribute covers its other attributes, so a damaged entry
is refused by name. Version 1 files (weights and checkpoints, without checksums, with
variable-length strings and `rng` / `extra` as root attributes) still load. A newer
`version` or a different `format` is refused with a `tapeflow.io.FileReadError` (a ValueError).

Reading runs no code from the file and goes through `tapeflow._h5safe`: each attribute's and
dataset's HDF5 type is checked before it is read; only strings, integers and datasets of
bool, integer or float dtype are read, strings parsed only as JSON. A file holding anything
else (object, string, opaque or compound datasets, soft or external links, named types,
virtual or externally stored datasets, filters other than HDF5's built-in ones and LZF) is
refused. Values are cast to each variable's dtype only when they fit it (a float64 1e300 is
refused for a float32 weight). Nothing is unpickled, evaluated or imported.

Every write goes to `.<name>.<random>.tmp` beside the target, is flushed and fsync'ed,
and then `os.replace`s the target (the directory is fsync'ed too), so a reader, or a run
after a crash, sees either the previous complete file or the new one. A writer killed
mid-save can leave its temp file behind: it is never read, and the next save of the same
target deletes it (`remove_temp_files(path)`, which skips temp files a live writer holds).

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

import json
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

import h5py
import numpy as np

from tapeflow._files import atomic_h5, remove_temp_files
from tapeflow._h5safe import FileReadError, H5Reader, write_array, write_attrs, write_manifest, write_text
from tapeflow.ops.random import Generator, global_generator

__all__ = [
    "WEIGHTS_FORMAT",
    "CHECKPOINT_FORMAT",
    "FORMAT_VERSION",
    "CheckpointInfo",
    "FileReadError",
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
FORMAT_VERSION = 3  # of name-keyed weights files
CHECKPOINT_VERSION = 2
# format -> {readable version: whether files of that version hold checksums}
NAMED_WEIGHTS_VERSIONS = {1: False, 3: True}
CHECKPOINT_VERSIONS = {1: False, 2: True}
MAX_EPOCH = 2**62


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


# ----------------------------------------------------------- safe reading
def _int_value(attrs: dict, key: str, where: str, low: int, high: int, required: bool = True):
    value = attrs.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or not low <= value < high:
        raise FileReadError(f"{where}: attribute {key!r} must be an integer in [{low}, {high}), got {value!r:.40}")
    return value


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
        write_array(group, name, value)


def _weight_arrays(model, where: str) -> dict[str, np.ndarray]:
    named = _named_weights(model, where)
    _check_paths(named, where)
    return {name: np.asarray(var.numpy()) for name, var in named.items()}


def _match_weights(reader: H5Reader, named: dict, datasets: dict, checked: bool) -> tuple[LoadReport, dict]:
    """The report, and the matched values cast to each variable's dtype (read only when the
    shapes fit; a value the cast would change is refused); `datasets` are keyed like `named`."""
    matched, mismatched, values = [], [], {}
    for name, var in named.items():
        dataset = datasets.get(name)
        if dataset is None:
            continue
        if tuple(dataset.shape) != tuple(var.shape):
            mismatched.append(ShapeMismatch(name, tuple(dataset.shape), tuple(var.shape)))
            continue
        matched.append(name)
        values[name] = reader.array(dataset, checked, dtype=var.dtype.np)
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
        f"{where}: the file does not match the model, so no weight was changed:\n  {lines}\n"
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
        write_attrs(f, {"format": WEIGHTS_FORMAT, "version": FORMAT_VERSION})
        _write_arrays(f, arrays)
        write_manifest(f)


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
    where = f"load_weights({os.fspath(path)!r})"
    named = _named_weights(model, where)
    with H5Reader(path, where) as reader:
        fmt, _, checked = reader.header(
            {WEIGHTS_FORMAT: NAMED_WEIGHTS_VERSIONS, CHECKPOINT_FORMAT: CHECKPOINT_VERSIONS}
        )
        report, values = read_named_weights(reader, fmt, checked, named)
    if strict and not report.ok:
        raise _mismatch_error(where, path, report, "Pass strict=False to load the weights that match.")
    for name, value in values.items():
        named[name].assign(value)
    return report


def read_named_weights(reader: H5Reader, fmt: str, checked: bool, named: dict) -> tuple[LoadReport, dict]:
    """(report, values) of the name-keyed weights of an open weights or checkpoint file."""
    group = reader.file if fmt == WEIGHTS_FORMAT else reader.group(reader.file, "weights")
    return _match_weights(reader, named, reader.datasets(group), checked)


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
    header = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "epoch": int(epoch)}
    if shuffle_seed is not None:
        header["shuffle_seed"] = int(shuffle_seed)
    with atomic_h5(path) as f:
        write_attrs(f, header)
        write_text(f, "rng", json.dumps(rng))
        if extra_text is not None:
            write_text(f, "extra", extra_text)
        _write_arrays(f.create_group("weights"), weights)
        if optimizer is not None:
            group = f.create_group("optimizer")
            write_attrs(group, {"class": type(optimizer).__name__, "iterations": int(iterations)})
            _write_arrays(group.create_group("slots"), state)
        write_manifest(f)


def _read_optimizer_state(reader: H5Reader, optimizer, checked: bool, where: str) -> dict | None:
    if optimizer is None:
        return None
    group = reader.group(reader.file, "optimizer", required=False)
    if group is None:
        raise reader.fail("holds no optimizer state")
    attrs = reader.attrs(group, checked, legacy_text=not checked)
    saved_class = attrs.get("class")
    if saved_class != type(optimizer).__name__:
        raise ValueError(
            f"{where}: the checkpoint holds {saved_class!r:.60} state, not {type(optimizer).__name__} state"
        )
    iterations = _int_value(attrs, "iterations", f"{where}: optimizer", 0, 2**63)
    slots = reader.group(group, "slots", "optimizer/slots", required=False)
    datasets = {} if slots is None else reader.datasets(slots, "optimizer/slots/")
    arrays = {k: reader.array(d, checked) for k, d in datasets.items()}
    return {"iterations": np.int64(iterations), **arrays}


def _read_rng(reader: H5Reader, attrs: dict, checked: bool, generators: dict[str, Generator], where: str) -> dict:
    if checked:
        rng = reader.json(reader.file, "rng", checked)
    else:
        rng = reader.parse_json(attrs["rng"], "attribute 'rng'") if isinstance(attrs.get("rng"), str) else None
    if not isinstance(rng, dict) or not isinstance(rng.get("layers"), dict) or "global" not in rng:
        raise reader.fail("has no valid 'rng' entry")
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
    where = f"load_checkpoint({os.fspath(path)!r})"
    named = _named_weights(model, where)
    generators = _layer_generators(model)
    with H5Reader(path, where) as reader:
        fmt, _, checked = reader.header({CHECKPOINT_FORMAT: CHECKPOINT_VERSIONS})
        attrs = reader.attrs(reader.file, checked, legacy_text=not checked)
        here = where
        epoch = _int_value(attrs, "epoch", here, 0, MAX_EPOCH)
        shuffle_seed = _int_value(attrs, "shuffle_seed", here, 0, 2**64, required=False)
        if checked:
            extra = reader.json(reader.file, "extra", checked, required=False)
        else:
            extra = reader.parse_json(attrs["extra"], "attribute 'extra'") if "extra" in attrs else None
        rng_states = _read_rng(reader, attrs, checked, generators, where)
        report, values = read_named_weights(reader, fmt, checked, named)
        if not report.ok:
            raise _mismatch_error(where, path, report, "Resuming needs every weight.")
        opt_state = _read_optimizer_state(reader, optimizer, checked, where)
    if opt_state is not None:  # validates everything before it assigns; a fresh optimizer first tracks the variables
        saved_vars = {key.rsplit("/", 1)[0] for key in opt_state if key != "iterations"}
        var_list = [v for v in model.trainable_weights if v.name in saved_vars]
        try:
            optimizer.set_state(opt_state, var_list=var_list or None)
        except (ValueError, TypeError, KeyError) as err:
            raise FileReadError(f"{where}: the optimizer state does not fit the optimizer: {err}", path) from err
    for name, value in values.items():
        named[name].assign(value)
    for key, state in rng_states.items():
        (global_generator() if key is None else generators[key]).set_state(state)
    return CheckpointInfo(epoch=epoch, shuffle_seed=shuffle_seed, extra=extra, weights=report)
