"""Training: compile, fit, evaluate and predict, and the data and compile utilities they use."""

from tapeflow.trainers.trainer import Trainer

__all__ = ["Trainer"]
