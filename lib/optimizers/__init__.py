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
from tapeflow.optimizers.adagrad import Adagrad
from tapeflow.optimizers.adam import Adam, AdamW
from tapeflow.optimizers.lookup import get, serialize
from tapeflow.optimizers.loss_scale_optimizer import LossScaleOptimizer
from tapeflow.optimizers.optimizer import Optimizer
from tapeflow.optimizers.rmsprop import RMSprop
from tapeflow.optimizers.sgd import SGD

__all__ = [
    "Adagrad",
    "Adam",
    "AdamW",
    "LossScaleOptimizer",
    "Optimizer",
    "RMSprop",
    "SGD",
    "get",
    "schedules",
    "serialize",
]
