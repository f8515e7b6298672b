"""The Callback base class and the list `fit` calls at each hook."""

from __future__ import annotations


class Callback:
    """Base class: every hook does nothing; `model` is set by `fit`."""

    def __init__(self):
        self.model = None
        self.params: dict = {}

    def set_model(self, model) -> None:
        self.model = model

    def set_params(self, params: dict) -> None:
        self.params = params

    def on_train_begin(self, logs=None): ...

    def on_train_end(self, logs=None): ...

    def on_epoch_begin(self, epoch, logs=None): ...

    def on_epoch_end(self, epoch, logs=None): ...

    def on_train_batch_begin(self, batch, logs=None): ...

    def on_train_batch_end(self, batch, logs=None): ...

    def on_test_begin(self, logs=None): ...

    def on_test_end(self, logs=None): ...


class CallbackList:
    """Calls each hook on every callback, in order. `callbacks` is None, one callback, or a
    list or tuple of them (nested lists are flattened, as Keras does).

    >>> [type(cb).__name__ for cb in CallbackList([Callback(), [Callback()]], None, {}).callbacks]
    ['Callback', 'Callback']
    """

    def __init__(self, callbacks, model, params: dict):
        self.callbacks = _flatten_callbacks(callbacks)
        for cb in self.callbacks:
            cb.set_model(model)
            cb.set_params(params)

    def __getattr__(self, hook):
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def call_all(*args, **kwargs):
            for cb in self.callbacks:
                getattr(cb, hook)(*args, **kwargs)

        return call_all


def _flatten_callbacks(callbacks) -> list:
    """The callbacks of None, one callback, or nested lists/tuples of them, in order."""
    if callbacks is None:
        return []
    if isinstance(callbacks, CallbackList):
        return list(callbacks.callbacks)
    if not isinstance(callbacks, list | tuple):
        callbacks = [callbacks]
    out = []
    for cb in callbacks:
        if isinstance(cb, list | tuple | CallbackList):
            out.extend(_flatten_callbacks(cb))
        elif callable(getattr(cb, "set_model", None)) and callable(getattr(cb, "set_params", None)):
            out.append(cb)
        else:
            raise TypeError(
                f"callbacks: expected a Callback or a list of Callbacks, got {type(cb).__name__} {cb!r:.80}"
            )
    return out
