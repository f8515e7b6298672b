"""Optimizers: turn gradients into Variable updates, with Keras 3 semantics.

Every update assigns a new array to a Variable; none is written in place, so
the values a GradientTape saved stay as they were.

>>> import tapeflow as tp
>>> w = tp.Variable([1.0, 2.0], name="w")
>>> opt = tp.optimizers.SGD(learning_rate=0.1, momentum=0.9)
>>> opt.apply_gradients([(tp.tensor([1.0, -1.0]), w)])
>>> [round(x, 3) for x in w.numpy().tolist()], opt.iterations
([0.9, 2.1], 1)
>>> sorted(opt.get_state())
['iterations', 'w/momentum']
"""

from tapeflow.optimizers import schedules
from tapeflow.optimizers.adadelta import Adadelta
from tapeflow.optimizers.adafactor import Adafactor
from tapeflow.optimizers.adagrad import Adagrad
from tapeflow.optimizers.adam import Adam, AdamW
from tapeflow.optimizers.adamax import Adamax
from tapeflow.optimizers.ftrl import Ftrl
from tapeflow.optimizers.lamb import Lamb
from tapeflow.optimizers.lion import Lion
from tapeflow.optimizers.lookup import deserialize, get, serialize
from tapeflow.optimizers.loss_scale_optimizer import LossScaleOptimizer
from tapeflow.optimizers.multi_optimizer import MultiOptimizer, OptimizerMap
from tapeflow.optimizers.muon import Muon
from tapeflow.optimizers.nadam import Nadam
from tapeflow.optimizers.optimizer import Optimizer
from tapeflow.optimizers.rmsprop import RMSprop
from tapeflow.optimizers.schedule_free_adamw import ScheduleFreeAdamW
from tapeflow.optimizers.sgd import SGD

__all__ = [
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Ftrl",
    "Lamb",
    "Lion",
    "LossScaleOptimizer",
    "MultiOptimizer",
    "Muon",
    "Nadam",
    "Optimizer",
    "OptimizerMap",
    "RMSprop",
    "SGD",
    "ScheduleFreeAdamW",
    "deserialize",
    "get",
    "schedules",
    "serialize",
]
