"""Mixed precision, as Keras does it: variables in float32, computation in float16 or bfloat16."""

from tapeflow.mixed_precision.policy import Policy, global_policy, set_global_policy
from tapeflow.optimizers import LossScaleOptimizer

__all__ = ["Policy", "global_policy", "set_global_policy", "LossScaleOptimizer"]
