"""OptimizerMap and MultiOptimizer: a different optimizer for each group of variables."""

from __future__ import annotations

import re
from collections.abc import MutableMapping

import numpy as np

from tapeflow import serialization
from tapeflow.optimizers.loss_scale_optimizer import LossScaleOptimizer
from tapeflow.optimizers.optimizer import Optimizer
from tapeflow.tensor import FreezeError, Variable


class NoLearningRateError(FreezeError, AttributeError):
    """A MultiOptimizer has no learning rate of its own (its sub-optimizers have theirs).
    Being a FreezeError too, it makes `fit` under jit="auto" train eagerly, where each
    sub-optimizer reads its own rate (or schedule) at every step."""


def _variable_key(variable: Variable) -> str:
    return getattr(variable, "path", None) or variable.name


def _check_inner(owner: str, optimizer) -> Optimizer:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{owner}: expected a tapeflow Optimizer, got {optimizer!r}")
    if isinstance(optimizer, LossScaleOptimizer):
        raise ValueError(f"{owner}: a LossScaleOptimizer cannot be used inside a MultiOptimizer")
    if isinstance(optimizer, MultiOptimizer):
        raise ValueError(f"{owner}: a MultiOptimizer cannot be used inside a MultiOptimizer")
    return optimizer


def _builtin(name: str):
    """tapeflow's optimizer class called `name`, among the subclasses of Optimizer."""
    found, todo = None, list(Optimizer.__subclasses__())
    while todo and found is None:
        cls = todo.pop()
        found = cls if cls.__name__ == name and cls.__module__.startswith("tapeflow.") else None
        todo.extend(cls.__subclasses__())
    return found


def _deserialize(config) -> Optimizer:
    return serialization.deserialize(config, Optimizer, _builtin, "OptimizerMap.from_config")


class OptimizerMap(MutableMapping):
    """Variable paths (or names) to optimizers, with `default_optimizer` for the rest. A key
    matches a variable's path exactly, or else as a regular expression (`re.fullmatch`);
    two matching patterns are an error. Calling the map with a variable gives its optimizer.

    >>> import tapeflow as tp
    >>> sgd, adam = tp.optimizers.SGD(0.1), tp.optimizers.Adam()
    >>> m = OptimizerMap(sgd, {"encoder/.*": adam})
    >>> m["encoder/dense/kernel"] is adam, m["head/kernel"] is sgd
    (True, True)
    """

    def __init__(self, default_optimizer, optimizer_map: dict | None = None):
        if not isinstance(default_optimizer, Optimizer):
            raise TypeError(f"OptimizerMap: default_optimizer must be an Optimizer, got {default_optimizer!r}")
        if optimizer_map is not None and not isinstance(optimizer_map, dict):
            raise TypeError(f"OptimizerMap: optimizer_map must be a dict, got {optimizer_map!r}")
        self._default_optimizer = _check_inner("OptimizerMap", default_optimizer)
        self._optimizer_map: dict[str, Optimizer] = {}
        for key, optimizer in (optimizer_map or {}).items():
            self[key] = optimizer

    @property
    def default_optimizer(self) -> Optimizer:
        return self._default_optimizer

    def __getitem__(self, key: str) -> Optimizer:
        if key in self._optimizer_map:
            return self._optimizer_map[key]
        matching = [pattern for pattern in self._optimizer_map if re.fullmatch(pattern, key)]
        if len(matching) > 1:
            raise ValueError(f"OptimizerMap: several optimizers match variable {key!r}: patterns {matching}")
        return self._optimizer_map[matching[0]] if matching else self._default_optimizer

    def __setitem__(self, key: str, optimizer) -> None:
        if not isinstance(key, str):
            raise ValueError(f"OptimizerMap: keys must be strings, got {key!r}")
        if key in self._optimizer_map:
            raise ValueError(f"OptimizerMap: {key!r} is already mapped to {self._optimizer_map[key]!r}")
        self._optimizer_map[key] = _check_inner("OptimizerMap", optimizer)

    def __delitem__(self, key: str) -> None:
        del self._optimizer_map[key]

    def __len__(self) -> int:
        return len(self._optimizer_map)

    def __iter__(self):
        return iter(self._optimizer_map)

    def __call__(self, variable: Variable) -> Optimizer:
        return self[_variable_key(variable)]

    def get_config(self) -> dict:
        return {
            "default_optimizer": serialization.serialize(self._default_optimizer),
            "optimizer_map": {key: serialization.serialize(opt) for key, opt in self._optimizer_map.items()},
        }

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict | None = None) -> OptimizerMap:
        with serialization.custom_object_scope(custom_objects):
            default = _deserialize(config["default_optimizer"])
            mapped = {key: _deserialize(value) for key, value in config["optimizer_map"].items()}
        return cls(default, mapped)


class MultiOptimizer(Optimizer):
    """Applies each variable's gradient with the optimizer `optimizer_map` gives it (an
    OptimizerMap, or any function of a variable returning an Optimizer), as Keras 3's
    MultiOptimizer. It has no learning rate of its own: read and set the sub-optimizers'.
    A frozen train step takes one learning rate, so `fit` trains a model compiled with a
    MultiOptimizer eagerly (with a warning under jit="auto"; jit=True raises).

    >>> import tapeflow as tp
    >>> a, b = tp.Variable([1.0], name="a"), tp.Variable([1.0], name="b")
    >>> opt = MultiOptimizer(OptimizerMap(tp.optimizers.SGD(0.1), {"b": tp.optimizers.SGD(0.5)}))
    >>> opt.apply_gradients([(tp.tensor([1.0]), a), (tp.tensor([1.0]), b)])
    >>> [round(float(v.numpy()[0]), 3) for v in (a, b)], opt.iterations
    ([0.9, 0.5], 1)
    """

    def __init__(self, optimizer_map, loss_scale_factor=None, name: str | None = None):
        if loss_scale_factor is not None:
            raise NotImplementedError(
                "MultiOptimizer: loss_scale_factor is not supported (None only); wrap the model's loss scaling "
                "in a LossScaleOptimizer around single optimizers instead"
            )
        if not callable(optimizer_map):
            raise TypeError(
                f"MultiOptimizer: optimizer_map must be an OptimizerMap or a function, got {optimizer_map!r}"
            )
        super().__init__(0.0, name=name or "multi_optimizer")
        self._optimizer_map = optimizer_map
        self._inner: list[Optimizer] = []
        if isinstance(optimizer_map, OptimizerMap):
            for opt in [*optimizer_map.values(), optimizer_map.default_optimizer]:
                if all(opt is not known for known in self._inner):
                    self._inner.append(opt)
        self._owner: dict[int, Optimizer] = {}

    @property
    def optimizers(self) -> list[Optimizer]:
        """The sub-optimizers, in the order first met."""
        return list(self._inner)

    @property
    def learning_rate(self):
        raise NoLearningRateError(
            "MultiOptimizer has no learning rate of its own: read or set it on its sub-optimizers "
            "(`.optimizers`); a frozen train step needs a single rate, so train it eagerly"
        )

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        raise NoLearningRateError(
            "MultiOptimizer has no learning rate of its own: set it on its sub-optimizers (`.optimizers`)"
        )

    def _optimizer_of(self, variable: Variable) -> Optimizer:
        found = self._owner.get(id(variable))
        if found is None:
            found = _check_inner(
                f"MultiOptimizer (variable {_variable_key(variable)!r})", self._optimizer_map(variable)
            )
            if all(found is not known for known in self._inner):
                self._inner.append(found)
            self._owner[id(variable)] = found
        return found

    def build(self, var_list) -> None:
        """Give each variable to its sub-optimizer and let that one create its slots."""
        groups: dict[int, list] = {}
        for var in var_list:
            groups.setdefault(id(self._optimizer_of(var)), []).append(var)
        for opt in self._inner:
            if id(opt) in groups:
                opt.build(groups[id(opt)])

    def apply_gradients(self, grads_and_vars) -> None:
        groups: dict[int, list] = {}
        for grad, var in grads_and_vars:
            groups.setdefault(id(self._optimizer_of(var)), []).append((grad, var))
        if not groups:
            return
        for opt in self._inner:
            if id(opt) in groups:
                opt.apply_gradients(groups[id(opt)])
        self.iterations += 1

    def apply_gradients_at(self, grads_and_vars, learning_rate, step) -> None:
        raise NoLearningRateError(
            "MultiOptimizer: a frozen train step passes one learning rate, but each sub-optimizer has its own; "
            "train eagerly (compile(jit_compile=False))"
        )

    @property
    def variables(self) -> list[Variable]:
        return [v for opt in self._inner for v in opt.variables]

    def finalize_variable_values(self, var_list) -> None:
        """Each sub-optimizer finalizes the variables it updates."""
        groups: dict[int, list] = {}
        for var in var_list:
            groups.setdefault(id(self._optimizer_of(var)), []).append(var)
        for opt in self._inner:
            if id(opt) in groups:
                opt.finalize_variable_values(groups[id(opt)])

    def get_state(self) -> dict[str, np.ndarray]:
        """ "iterations" and each sub-optimizer's state under "optimizer_<i>/"."""
        state = {"iterations": np.array(self.iterations, dtype=np.int64)}
        for i, opt in enumerate(self._inner):
            state.update({f"optimizer_{i}/{key}": value for key, value in opt.get_state().items()})
        return state

    def set_state(self, state: dict, var_list=None) -> None:
        if var_list is not None:
            self.build(var_list)
        for i, opt in enumerate(self._inner):
            prefix = f"optimizer_{i}/"
            opt.set_state({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
        known = {"iterations"} | {k for k in state if k.split("/", 1)[0].startswith("optimizer_")}
        unexpected = sorted(set(state) - known)
        if unexpected:
            raise ValueError(f"MultiOptimizer.set_state: unexpected state names {unexpected}")
        self.iterations = int(np.asarray(state["iterations"]))

    def get_config(self) -> dict:
        if not isinstance(self._optimizer_map, OptimizerMap):
            raise TypeError("MultiOptimizer.get_config: only a MultiOptimizer made from an OptimizerMap can be saved")
        return {"optimizer_map": self._optimizer_map.get_config(), "loss_scale_factor": None, "name": self.name}

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict | None = None) -> MultiOptimizer:
        config = dict(config)
        config["optimizer_map"] = OptimizerMap.from_config(config["optimizer_map"], custom_objects)
        return cls(**config)

    def __repr__(self) -> str:
        return f"MultiOptimizer(name={self.name!r}, optimizers={self._inner!r})"
