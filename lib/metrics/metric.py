"""The Metric base class, and the label checks metrics share."""

from __future__ import annotations

import re

import numpy as np


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _same_rank(owner: str, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Arrays whose ranks agree: a trailing size-1 axis on one side only is dropped."""
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.ndim == p.ndim + 1 and t.shape[-1:] == (1,):
        t = t[..., 0]
    elif p.ndim == t.ndim + 1 and p.shape[-1:] == (1,):
        p = p[..., 0]
    if t.shape != p.shape:
        raise ValueError(f"{owner}: y_true shape {t.shape} and y_pred shape {p.shape} do not match")
    return t, p


def _class_ids(owner: str, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Integer labels of shape y_pred.shape[:-1] (a trailing size-1 axis is dropped)."""
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if p.ndim < 1:
        raise ValueError(f"{owner}: y_pred must have a class axis, got shape {p.shape}")
    if t.ndim == p.ndim and t.shape[-1:] == (1,):
        t = t[..., 0]
    if t.shape != p.shape[:-1]:
        raise ValueError(
            f"{owner}: y_true shape {np.shape(y_true)} does not match y_pred shape {p.shape}: "
            f"expected class ids of shape {p.shape[:-1]}"
        )
    return t, p


# ------------------------------------------------------------------ classes
class Metric:
    """Base class: subclasses keep their state as floats set in `reset_state`."""

    def __init__(self, name: str | None = None):
        self.name = name or _snake(type(self).__name__)
        self.reset_state()

    def reset_state(self) -> None:
        raise NotImplementedError

    def update_state(self, *args, **kwargs) -> None:
        raise NotImplementedError

    def result(self) -> float:
        raise NotImplementedError

    def __call__(self, *args, **kwargs) -> float:
        """Add a batch and return the result so far."""
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self) -> dict:
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
