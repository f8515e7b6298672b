"""Training checkpoints: everything `fit` needs to resume exactly where it stopped.

A checkpoint holds the weights (keyed by full name, as weights files of version 3), the
optimizer's slots and step count, the last completed epoch, every random stream (the
global one and those the layers own) and `fit`'s shuffle seed, so that a resumed run
ends with exactly the weights of an uninterrupted one. It is written atomically and
read without running code from it. Layout and versions: docs/file-formats.md.

>>> import os, tempfile
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.layers.Dense(2, name="d"), tp.layers.Dropout(0.5, seed=1, name="drop")])
>>> _ = model(tp.ones((1, 3)))
>>> opt = tp.optimizers.SGD(0.1, momentum=0.9)
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.h5")
>>> save_checkpoint(path, model, opt, epoch=4, extra={"note": "hi"})
>>> info = load_checkpoint(path, model, opt)
>>> info.epoch, info.extra, info.weights
(4, {'note': 'hi'}, LoadReport(matched=2))
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapeflow.files.atomic import atomic_h5
from tapeflow.files.safe_h5 import FileReadError, H5Reader, write_attrs, write_manifest, write_text
from tapeflow.ops.random import Generator, global_generator
from tapeflow.saving.formats import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, CHECKPOINT_VERSIONS
from tapeflow.saving.load_report import LoadReport
from tapeflow.saving.random_state import checked_state, generators_by_name
from tapeflow.saving.weight_keys import check_paths, weights_by_name
from tapeflow.saving.weights import match_weights, named_mismatch, weight_arrays, write_arrays

__all__ = ["CheckpointInfo", "load_checkpoint", "save_checkpoint"]

MAX_EPOCH = 2**62


@dataclass(frozen=True)
class CheckpointInfo:
    """What `load_checkpoint` restored besides the state it wrote into the objects."""

    epoch: int
    shuffle_seed: int | None
    extra: Any
    weights: LoadReport


def _int_value(attrs: dict, key: str, where: str, low: int, high: int, required: bool = True):
    value = attrs.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or not low <= value < high:
        raise FileReadError(f"{where}: attribute {key!r} must be an integer in [{low}, {high}), got {value!r:.40}")
    return value


# ------------------------------------------------------------------ writing
def save_checkpoint(path, model, optimizer, epoch: int, extra: Any = None, *, shuffle_seed: int | None = None) -> None:
    """Write everything needed to resume training to one HDF5 file, atomically.

    That is: the weights; the optimizer's state (`optimizer.get_state()`, or nothing if
    `optimizer` is None); `epoch`, the last completed epoch; the global random stream and
    every Generator the layers own (Dropout's, for one); the base seed `fit` shuffles with
    (`shuffle_seed`); and `extra`, any JSON-serializable value.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(2, name="d")])
    >>> _ = model(tp.ones((1, 3)))
    >>> save_checkpoint(os.path.join(tempfile.mkdtemp(), "ckpt.h5"), model, None, epoch=0)
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
    named = weights_by_name(model, where)
    check_paths(named, where)
    weights = weight_arrays(named)
    rng = {
        "global": global_generator().get_state(),
        "layers": {key: gen.get_state() for key, gen in generators_by_name(model).items()},
    }
    if optimizer is not None:
        state = optimizer.get_state()
        iterations = np.int64(state.pop("iterations"))
        check_paths(state, where)
    header = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "epoch": int(epoch)}
    if shuffle_seed is not None:
        header["shuffle_seed"] = int(shuffle_seed)
    with atomic_h5(path) as f:
        write_attrs(f, header)
        write_text(f, "rng", json.dumps(rng))
        if extra_text is not None:
            write_text(f, "extra", extra_text)
        write_arrays(f.create_group("weights"), weights)
        if optimizer is not None:
            group = f.create_group("optimizer")
            write_attrs(group, {"class": type(optimizer).__name__, "iterations": int(iterations)})
            write_arrays(group.create_group("slots"), state)
        write_manifest(f)


# ------------------------------------------------------------------ reading
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
    states = {key: checked_state(gen, saved[key], key, where) for key, gen in generators.items()}
    states[None] = checked_state(global_generator(), rng["global"], "global", where)
    return states


def load_checkpoint(path, model, optimizer) -> CheckpointInfo:
    """Restore what `save_checkpoint` wrote into `model`, `optimizer` and the random streams.

    Everything is read and checked first (strictly: every weight, optimizer slot and
    generator must match); on any mismatch a ValueError says what, and nothing changes,
    except that a fresh optimizer whose state did not match may have started tracking the
    model's variables (as its first update would). Pass `optimizer=None` to skip the
    optimizer state. Returns the epoch, shuffle seed and extra as a `CheckpointInfo`.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(2, name="d")])
    >>> _ = model(tp.ones((1, 3)))
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.h5")
    >>> save_checkpoint(path, model, None, epoch=2, shuffle_seed=7)
    >>> load_checkpoint(path, model, None).shuffle_seed
    7
    """
    where = f"load_checkpoint({os.fspath(path)!r})"
    named = weights_by_name(model, where)
    generators = generators_by_name(model)
    with H5Reader(path, where) as reader:
        _, _, checked = reader.header({CHECKPOINT_FORMAT: CHECKPOINT_VERSIONS})
        attrs = reader.attrs(reader.file, checked, legacy_text=not checked)
        epoch = _int_value(attrs, "epoch", where, 0, MAX_EPOCH)
        shuffle_seed = _int_value(attrs, "shuffle_seed", where, 0, 2**64, required=False)
        if checked:
            extra = reader.json(reader.file, "extra", checked, required=False)
        else:
            extra = reader.parse_json(attrs["extra"], "attribute 'extra'") if "extra" in attrs else None
        rng_states = _read_rng(reader, attrs, checked, generators, where)
        report, values = match_weights(reader, named, reader.datasets(reader.group(reader.file, "weights")), checked)
        if not report.ok:
            raise named_mismatch(where, report, "Resuming needs every weight.")
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
