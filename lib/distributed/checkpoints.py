"""When distributed training writes checkpoints, and the files it writes.

A checkpoint is the state of one step: every parameter, every optimizer slot and the
step counter, after exactly that many steps (see `ParameterShard`'s snapshots). It is
written with `tapeflow.io.save_checkpoint`, so atomically (a temp file renamed over
the target): an interrupted write leaves the earlier files as they were. The file of
step s is `<directory>/ckpt-<s>.h5`; its `extra` attribute holds {"step": s, "epoch": e,
"batch": b}, meaning b batches of epoch e are done (b is the epoch's batch count at its
end), and its `epoch` attribute is e. `tp.io.load_checkpoint(path, model, optimizer)`
restores it into a model built like the trained one.

>>> policy = CheckpointPolicy(every_steps=4)
>>> sorted(policy.steps_between(2, 13))
[4, 8, 12]
"""

from __future__ import annotations

import contextlib
import os
import re
import time

from tapeflow.files.atomic import remove_temp_files
from tapeflow.saving.checkpoint import save_checkpoint

_NAME = re.compile(r"ckpt-(\d+)\.h5")
_TEMP = re.compile(r"\.(ckpt-\d+\.h5)\..*\.tmp")


class CheckpointPolicy:
    """Checkpoints every `every_steps` steps (at steps that are multiples of it) and/or
    once `every_seconds` seconds have passed since the last one; None turns a rule off."""

    def __init__(self, every_steps: int | None = None, every_seconds: float | None = None):
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.last = time.monotonic()

    def steps_between(self, start: int, end: int) -> set[int]:
        """The steps strictly between `start` and `end` that the step rule checkpoints."""
        if not self.every_steps:
            return set()
        first = (start // self.every_steps + 1) * self.every_steps
        return set(range(first, end, self.every_steps))

    def due(self) -> bool:
        """Whether the time rule asks for a checkpoint now."""
        return self.every_seconds is not None and time.monotonic() - self.last >= self.every_seconds

    def written(self) -> None:
        self.last = time.monotonic()


class CheckpointFiles:
    """Writes `ckpt-<step>.h5` files into `directory`, keeping the newest `keep` written
    by this object (files that were there before are left alone). Temp files of
    interrupted writes found at the start are deleted."""

    def __init__(self, directory, keep: int):
        self.directory = os.fspath(directory)
        self.keep = keep
        self.paths: list[str] = []
        os.makedirs(self.directory, exist_ok=True)
        for name in os.listdir(self.directory):
            match = _TEMP.fullmatch(name)
            if match:
                remove_temp_files(os.path.join(self.directory, match.group(1)))

    def write(self, model, step: int, epoch: int, batch: int) -> str:
        """Write `model` and its optimizer as the checkpoint of `step`; returns the path."""
        path = os.path.join(self.directory, f"ckpt-{step}.h5")
        extra = {"step": int(step), "epoch": int(epoch), "batch": int(batch)}
        save_checkpoint(path, model, model.optimizer, int(epoch), extra, shuffle_seed=getattr(model, "_fit_seed", None))
        if path in self.paths:
            self.paths.remove(path)
        self.paths.append(path)
        while len(self.paths) > self.keep:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.paths.pop(0))
        return path


def latest_checkpoint(directory) -> str | None:
    """The path of the checkpoint of the highest step in `directory`, or None.

    >>> import tempfile
    >>> latest_checkpoint(tempfile.mkdtemp()) is None
    True
    """
    steps = [int(m.group(1)) for m in map(_NAME.fullmatch, os.listdir(directory)) if m]
    return os.path.join(os.fspath(directory), f"ckpt-{max(steps)}.h5") if steps else None
