"""LambdaCallback: a callback made of plain functions."""

from __future__ import annotations

from tapeflow.callbacks.callback import Callback


class LambdaCallback(Callback):
    """A callback whose hooks are the functions given: `on_epoch_begin(epoch, logs)`,
    `on_epoch_end(epoch, logs)`, `on_train_begin(logs)`, `on_train_end(logs)`,
    `on_train_batch_begin(batch, logs)`, `on_train_batch_end(batch, logs)`, and any other
    hook by keyword (`on_test_begin=...`, `on_test_batch_end=...`), as Keras's.

    >>> seen = []
    >>> cb = LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append((epoch, logs["loss"])))
    >>> cb.on_epoch_end(0, {"loss": 0.5})
    >>> seen
    [(0, 0.5)]
    """

    def __init__(
        self,
        on_epoch_begin=None,
        on_epoch_end=None,
        on_train_begin=None,
        on_train_end=None,
        on_train_batch_begin=None,
        on_train_batch_end=None,
        **kwargs,
    ):
        super().__init__()
        hooks = {
            "on_epoch_begin": on_epoch_begin,
            "on_epoch_end": on_epoch_end,
            "on_train_begin": on_train_begin,
            "on_train_end": on_train_end,
            "on_train_batch_begin": on_train_batch_begin,
            "on_train_batch_end": on_train_batch_end,
            **kwargs,
        }
        for name, fn in hooks.items():
            if fn is None:
                continue
            if not name.startswith("on_") or not callable(fn):
                raise TypeError(f"LambdaCallback: {name}= must be a hook (on_...) given a function, got {fn!r}")
            setattr(self, name, _with_logs(fn, indexed="batch" in name or "epoch" in name))


def _with_logs(fn, indexed: bool):
    """`fn` called as Keras calls hooks, with `logs` always passed (None when fit has none)."""
    if indexed:
        return lambda index, logs=None: fn(index, logs)
    return lambda logs=None: fn(logs)
