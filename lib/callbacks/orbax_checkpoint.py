"""OrbaxCheckpoint: Keras's checkpointing through Orbax, which tapeflow does not offer."""

from __future__ import annotations

from tapeflow.callbacks.callback import Callback


class OrbaxCheckpoint(Callback):
    """Keras 3's checkpoint callback built on Orbax, a JAX library; tapeflow does not
    run on JAX, so creating one raises NotImplementedError. Use `ModelCheckpoint` (or
    `BackupAndRestore` to resume) instead.

    >>> try:
    ...     OrbaxCheckpoint("/tmp/ckpt")
    ... except NotImplementedError as error:
    ...     print("JAX" in str(error))
    True
    """

    def __init__(self, directory, *args, **kwargs):
        raise NotImplementedError(
            "OrbaxCheckpoint: Orbax is a JAX library and tapeflow does not run on JAX; use "
            "tp.callbacks.ModelCheckpoint (or BackupAndRestore) instead"
        )
