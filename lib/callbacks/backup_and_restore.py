"""BackupAndRestore: checkpoints training and resumes it after an interruption."""

from __future__ import annotations

import contextlib
import os

from tapeflow.callbacks.callback import Callback
from tapeflow.files.atomic import remove_temp_files
from tapeflow.saving.checkpoint import load_checkpoint, save_checkpoint


class BackupAndRestore(Callback):
    """Resume an interrupted `fit` where it stopped, as Keras' callback of this name does.

    At the end of every epoch it writes `<backup_dir>/checkpoint.h5` atomically (the
    layout is in docs/file-formats.md). When `fit` starts and that file exists, it
    restores the weights, the optimizer state, the random streams and fit's shuffle
    seed, and `fit` goes on from the epoch after the saved one. Given the same data, the
    resumed run ends with exactly the weights of an uninterrupted one, because each
    epoch's shuffle depends on (shuffle seed, epoch) alone. A `tp.data.Dataset` is
    iterated as it is, so it resumes exactly only if its order does not depend on how
    many passes it made before.

    A `fit` that ends normally (early stopping included) deletes the checkpoint unless
    `delete_checkpoint=False`; an exception or a killed process leaves it for the next
    run. Restoring needs a built model: `fit` builds one from array data itself, but with
    a Dataset call the model on a batch first. Layers must keep the names they were saved
    under (pass `name=`).

    >>> import tempfile
    >>> import numpy as np
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(1, name="d")])
    >>> model.compile("sgd", "mse")
    >>> backup = tp.callbacks.BackupAndRestore(tempfile.mkdtemp(), delete_checkpoint=False)
    >>> _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, callbacks=[backup], verbose=0)
    >>> model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=3, callbacks=[backup], verbose=0).epoch
    [2]
    """

    def __init__(self, backup_dir, delete_checkpoint: bool = True):
        super().__init__()
        self.backup_dir = os.fspath(backup_dir)
        self.delete_checkpoint = bool(delete_checkpoint)
        self.path = os.path.join(self.backup_dir, "checkpoint.h5")

    def on_train_begin(self, logs=None):
        os.makedirs(self.backup_dir, exist_ok=True)
        remove_temp_files(self.path)
        if not os.path.exists(self.path):
            return
        if not self.model.built:
            raise ValueError(
                f"BackupAndRestore: {self.model.name} must be built to restore {self.path!r}; "
                "call it on one batch of inputs before fit"
            )
        info = load_checkpoint(self.path, self.model, self.model.optimizer)
        self.model._initial_epoch = info.epoch + 1
        if info.shuffle_seed is not None:
            self.model._fit_seed = info.shuffle_seed

    def on_epoch_end(self, epoch, logs=None):
        seed = getattr(self.model, "_fit_seed", None)
        save_checkpoint(self.path, self.model, self.model.optimizer, epoch, shuffle_seed=seed)

    def on_train_end(self, logs=None):
        if self.delete_checkpoint:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
