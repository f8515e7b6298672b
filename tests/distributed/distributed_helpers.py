"""What the distributed tests share: optimizers to train with, and a callback that records
the calls `fit` makes."""

import tapeflow as tp

OPTIMIZERS = {
    "sgd": lambda: tp.optimizers.SGD(0.1),
    "momentum": lambda: tp.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: tp.optimizers.Adam(0.01),
}


class Recorder(tp.callbacks.Callback):
    """Every callback call with what it saw; `epoch_logs` adds the keys of the epoch's logs."""

    def __init__(self, epoch_logs: bool = True):
        super().__init__()
        self.epoch_logs = epoch_logs
        self.calls = []

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(("epoch", epoch))

    def on_train_batch_begin(self, batch, logs=None):
        self.calls.append(("begin", batch))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("end", batch, sorted(logs)))

    def on_epoch_end(self, epoch, logs=None):
        keys = (sorted(logs),) if self.epoch_logs else ()
        self.calls.append(("epoch end", epoch, *keys, self.model.get_weights()[0].sum().round(3)))
