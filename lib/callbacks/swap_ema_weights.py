"""SwapEMAWeights: evaluate (and optionally checkpoint) with the optimizer's moving
averages of the weights instead of the weights themselves."""

from __future__ import annotations

import numpy as np

from tapeflow.callbacks.callback import Callback

__all__ = ["SwapEMAWeights"]

_NO_EMA = (
    "SwapEMAWeights: the optimizer keeps no weight averages (use_ema={}); "
    "compile with an optimizer made with use_ema=True"
)


def _ema_optimizers(model) -> list:
    """The optimizers of `model` that keep moving averages (those inside a
    LossScaleOptimizer or a MultiOptimizer too), or a ValueError as Keras raises it."""
    optimizer = getattr(model, "optimizer", None)
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    if optimizer is None:
        raise ValueError("SwapEMAWeights: the model has no optimizer; compile it with one that sets use_ema=True")
    if hasattr(optimizer, "optimizers"):
        chosen = [opt for opt in optimizer.optimizers if getattr(opt, "use_ema", False)]
        if not chosen:
            raise ValueError(
                "SwapEMAWeights must be used when at least one inner optimizer has `use_ema=True` set. Received a "
                "MultiOptimizer with all inner optimizers having `use_ema=False`."
            )
    else:
        chosen = [optimizer]
    for opt in chosen:
        if not getattr(opt, "use_ema", False) or not opt._variables:
            # an optimizer with use_ema makes its averages on its first update, as in Keras
            raise ValueError(_NO_EMA.format(getattr(opt, "use_ema", False)))
    return chosen


def _pairs(optimizer):
    """(variable, its moving average) for every variable `optimizer` keeps."""
    return [(var, optimizer.slots(var)["average"]) for var in optimizer._variables]


class SwapEMAWeights(Callback):
    """Puts the optimizer's moving averages of the weights (`use_ema=True`) into the model
    for evaluation and the model's own weights back afterwards: validation during `fit`,
    `evaluate` and `predict` then see the averaged weights. The values trade places, so
    nothing is copied twice; another callback that changes the weights or the averages
    in between makes the result undefined.

    With `swap_on_epoch=True` the averages are also in the model from `on_epoch_end` to
    the next `on_epoch_begin`, so callbacks listed after this one (ModelCheckpoint)
    see them. At the end of the last epoch the averages are made equal to the swapped-in
    weights, so that `fit`'s final `finalize_variable_values` leaves them in the model.

    Unlike Keras 3.15.1, whose `on_predict_end` leaves the averages in the model,
    `predict` swaps the model's own weights back at its end, as evaluation does.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Input((1,)), tp.layers.Dense(1, kernel_initializer="ones")])
    >>> model.compile(optimizer=tp.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5), loss="mse")
    >>> x, y = tp.ones((4, 1)), tp.zeros((4, 1))
    >>> _ = model.fit(x, y, epochs=2, validation_data=(x, y), callbacks=[SwapEMAWeights()], verbose=0)
    >>> SwapEMAWeights(swap_on_epoch=True).swap_on_epoch
    True
    """

    def __init__(self, swap_on_epoch: bool = False):
        super().__init__()
        self.swap_on_epoch = swap_on_epoch
        self._ema_weights_in_model = False

    def _swap_variables(self) -> None:
        for optimizer in _ema_optimizers(self.model):
            for var, average in _pairs(optimizer):
                own = np.array(var.numpy(), copy=True)
                var.assign(average)
                average.assign(own)

    def _finalize_ema_values(self) -> None:
        for optimizer in _ema_optimizers(self.model):
            for var, average in _pairs(optimizer):
                average.assign(var)

    def _swap_in(self) -> None:
        if not self._ema_weights_in_model:
            self._swap_variables()
            self._ema_weights_in_model = True

    def _swap_out(self) -> None:
        if self._ema_weights_in_model:
            self._swap_variables()
            self._ema_weights_in_model = False

    def on_epoch_begin(self, epoch, logs=None):
        if self.swap_on_epoch:
            self._swap_out()

    def on_epoch_end(self, epoch, logs=None):
        if self.swap_on_epoch and not self._ema_weights_in_model:
            self._swap_in()
            if epoch == self.params.get("epochs", 0) - 1:  # fit's finalize then keeps the averages in the model
                self._finalize_ema_values()

    def on_test_begin(self, logs=None):
        self._swap_in()

    def on_test_end(self, logs=None):
        self._swap_out()

    def on_predict_begin(self, logs=None):
        self._swap_in()

    def on_predict_end(self, logs=None):
        self._swap_out()
