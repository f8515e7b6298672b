"""Callbacks: hooks the training loop calls at the start and end of training, epochs and
batches, as Keras 3's `keras.callbacks`. History and the progress bar are always installed
by `fit`.

>>> import tapeflow as tp
>>> h = tp.callbacks.History()
>>> h.on_train_begin(); h.on_epoch_end(0, {"loss": 0.5})
>>> h.history
{'loss': [0.5]}
"""

from tapeflow.callbacks.backup_and_restore import BackupAndRestore
from tapeflow.callbacks.callback import Callback, CallbackList
from tapeflow.callbacks.csv_logger import CSVLogger
from tapeflow.callbacks.early_stopping import EarlyStopping
from tapeflow.callbacks.history import History
from tapeflow.callbacks.lambda_callback import LambdaCallback
from tapeflow.callbacks.learning_rate_scheduler import LearningRateScheduler
from tapeflow.callbacks.model_checkpoint import ModelCheckpoint
from tapeflow.callbacks.orbax_checkpoint import OrbaxCheckpoint
from tapeflow.callbacks.progbar_logger import ProgbarLogger
from tapeflow.callbacks.reduce_lr_on_plateau import ReduceLROnPlateau
from tapeflow.callbacks.remote_monitor import RemoteMonitor
from tapeflow.callbacks.swap_ema_weights import SwapEMAWeights
from tapeflow.callbacks.tensorboard import TensorBoard
from tapeflow.callbacks.terminate_on_nan import TerminateOnNaN

__all__ = [
    "BackupAndRestore",
    "CSVLogger",
    "Callback",
    "CallbackList",
    "EarlyStopping",
    "History",
    "LambdaCallback",
    "LearningRateScheduler",
    "ModelCheckpoint",
    "OrbaxCheckpoint",
    "ProgbarLogger",
    "ReduceLROnPlateau",
    "RemoteMonitor",
    "SwapEMAWeights",
    "TensorBoard",
    "TerminateOnNaN",
]
