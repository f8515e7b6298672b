"""The Optimizer base class: slots, learning rate, clipping and the update loop every optimizer shares."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np

from tapeflow.autodiff import GradientTape
from tapeflow.devices import device
from tapeflow.ops import sparse
from tapeflow.ops.array import gather, reshape
from tapeflow.ops.math import cast, clip, equal, maximum, not_equal, sqrt, square, where
from tapeflow.ops.numpy import mod
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.optimizers import schedules
from tapeflow.optimizers.schedules import LearningRateSchedule
from tapeflow.tensor import TRACING, FreezeError, IndexedSlices, Tensor, Variable, eager_scope

_AVERAGE = "average"  # the slot holding a variable's moving average when use_ema is set


def _nonnegative(owner: str, label: str, value, upper: float | None = None, closed: bool = True) -> float:
    """`value` as a float, or a ValueError naming `owner` and `label`."""
    ok = isinstance(value, int | float | np.floating | np.integer) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and value >= 0
    if ok and upper is not None:
        ok = value <= upper if closed else value < upper
    if not ok:
        bound = "" if upper is None else f" and {'<=' if closed else '<'} {upper}"
        raise ValueError(f"{owner}: {label} must be a number >= 0{bound}, got {value!r}")
    return float(value)


class Optimizer:
    """Base class: learning rate (float or schedule), clipping, decoupled weight
    decay, per-variable slots and a step counter.

    Subclasses declare their slots in `slot_initials` and implement
    `update_rule(gradient, value, slots, learning_rate)`, which serves dense gradients
    and the rows of sparse ones (IndexedSlices, as from an Embedding): those update only
    their rows of the variable and its slots. A subclass may instead implement
    `update_step(gradient, variable, learning_rate)`, which gets dense gradients.
    Weight decay always applies to the whole variable. `iterations` counts the updates
    applied; a schedule sees it before the update (0 on the first).

    With `use_ema`, each variable also gets an "average" slot: after every update it
    becomes `ema_momentum * average + (1 - ema_momentum) * variable` (the variable itself
    after the first update); every `ema_overwrite_frequency` updates the variables take
    their averages, and `finalize_variable_values` gives them their averages at the end.
    """

    _rule_decays = False  # whether update_rule applies `self._decay`, the weight decay, for dense gradients

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        use_ema: bool = False,
        ema_momentum: float = 0.99,
        ema_overwrite_frequency: int | None = None,
        name: str | None = None,
    ):
        owner = type(self).__name__
        if use_ema:
            _nonnegative(owner, "ema_momentum", ema_momentum, upper=1.0)
            frequency = ema_overwrite_frequency
            if frequency and (isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1):
                raise ValueError(f"{owner}: ema_overwrite_frequency must be an integer >= 1 or None, got {frequency!r}")
        self.use_ema = bool(use_ema)
        self.ema_momentum = ema_momentum
        self.ema_overwrite_frequency = ema_overwrite_frequency
        given = {"clipnorm": clipnorm, "clipvalue": clipvalue, "global_clipnorm": global_clipnorm}
        if sum(v is not None for v in given.values()) > 1:
            raise ValueError(f"{owner}: only one of clipnorm, clipvalue and global_clipnorm can be set, got {given}")
        for label, value in given.items():
            if value is not None and _nonnegative(owner, label, value) == 0:
                raise ValueError(f"{owner}: {label} must be > 0, got {value!r}")
        self.clipnorm = None if clipnorm is None else float(clipnorm)
        self.clipvalue = None if clipvalue is None else float(clipvalue)
        self.global_clipnorm = None if global_clipnorm is None else float(global_clipnorm)
        self.weight_decay = None if weight_decay is None else _nonnegative(owner, "weight_decay", weight_decay)
        self.name = name or owner.lower()
        self._iterations = 0
        self._counter: Variable | None = None  # the count frozen functions advance (made by the first trace)
        self._step = 1  # the step number the update in progress uses (counted from 1)
        self._decay = 0.0  # the weight decay the update in progress applies itself (see _rule_decays)
        self._learning_rate = self._checked_learning_rate(learning_rate)
        self._variables: list[Variable] = []  # tracked model variables, in the order first seen
        self._index: dict[int, int] = {}  # id(variable) -> position in _variables
        self._slots: list[dict[str, Variable]] = []
        self._keys: list[str] = []  # each variable's unique name in get_state
        self._no_decay_ids: set[int] = set()
        self._no_decay_pattern: re.Pattern | None = None

    # ------------------------------------------------------------ learning rate
    def _checked_learning_rate(self, value):
        """A number >= 0 (a one-element tensor too), a LearningRateSchedule, or a
        zero-argument callable (as in Keras)."""
        if callable(value):
            return value
        if isinstance(value, Tensor) and value.size == 1:
            value = value.item()
        return _nonnegative(type(self).__name__, "learning_rate", value)

    @property
    def learning_rate(self) -> float:
        """The learning rate the next update will use; set a number or a schedule to change
        it from the next update on (eager or `compile(jit=True)` training alike). An optimizer
        created with a schedule only takes another schedule, as in Keras.

        >>> import tapeflow as tp
        >>> opt = tp.optimizers.SGD(0.1)
        >>> opt.learning_rate = 0.05
        >>> opt.learning_rate, opt.lr
        (0.05, 0.05)
        """
        lr = self._learning_rate
        if isinstance(lr, LearningRateSchedule):
            value, source = lr(self.iterations), f"its schedule at step {self.iterations}"
        elif callable(lr):
            value, source = lr(), "its learning-rate function"
        else:
            return lr
        # a schedule's NaN would turn every weight into NaN at once
        return _nonnegative(type(self).__name__, f"learning_rate from {source}", value)

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        if isinstance(self._learning_rate, LearningRateSchedule) and not callable(value):
            raise TypeError(
                f"{type(self).__name__}: this optimizer was created with a LearningRateSchedule, so its "
                "learning rate cannot be set to a number; create it with a float learning_rate instead"
            )
        self._learning_rate = self._checked_learning_rate(value)

    @property
    def lr(self) -> float:
        """Keras' alias of `learning_rate`, readable and settable."""
        return self.learning_rate

    @lr.setter
    def lr(self, value) -> None:
        self.learning_rate = value

    # ------------------------------------------------------------------- slots
    def slot_initials(self, variable: Variable) -> dict[str, float]:
        """The slots kept per variable, as {slot name: initial fill value}."""
        return {}

    def build(self, var_list) -> None:
        """Create the slots of every variable in `var_list` (done lazily on the first
        update otherwise; needed before `set_state` on a fresh optimizer)."""
        for var in var_list:
            self._track(var)

    def _track(self, var: Variable) -> dict[str, Variable]:
        pos = self._index.get(id(var))
        if pos is not None:
            return self._slots[pos]
        if not isinstance(var, Variable):
            raise TypeError(f"{type(self).__name__}: expected a Variable, got {type(var).__name__}")
        key, n = var.name, 0
        while key in self._keys:
            n += 1
            key = f"{var.name}_{n}"
        initials = dict(self.slot_initials(var))
        if self.use_ema:
            initials[_AVERAGE] = 0.0
        with eager_scope(), device(var.device):  # made eagerly (also on a first step in a freeze), beside var
            slots = {
                slot: Variable(np.full(var.shape, fill, var.dtype.np), trainable=False, name=f"{key}/{slot}")
                for slot, fill in initials.items()
            }
        self._index[id(var)] = len(self._variables)
        self._variables.append(var)
        self._slots.append(slots)
        self._keys.append(key)
        return slots

    def slots(self, variable: Variable) -> dict[str, Variable]:
        """The slot variables kept for `variable`, by slot name (its moving average as
        "average" when `use_ema` is set)."""
        return self._track(variable)

    def _rule_slots(self, variable: Variable) -> dict[str, Variable]:
        """The slots the update rule reads and writes: all but the moving average."""
        return {name: slot for name, slot in self._track(variable).items() if name != _AVERAGE}

    @property
    def variables(self) -> list[Variable]:
        """Every slot variable, variable by variable in tracking order."""
        return [v for slots in self._slots for v in slots.values()]

    # ---------------------------------------------------------------- updating
    @property
    def iterations(self) -> int:
        """The updates applied so far: each `apply_gradients` counts one, also where a
        `tp.function` that calls it runs frozen (the graph reads and advances the count).

        >>> import tapeflow as tp
        >>> w, opt = tp.Variable([1.0]), tp.optimizers.Adam(0.1)
        >>> @tp.function
        ... def step():
        ...     with tp.GradientTape() as tape:
        ...         loss = tp.sum(w * w)
        ...     opt.apply_gradients([(tape.gradient(loss, w), w)])
        >>> for _ in range(3):
        ...     step()
        >>> opt.iterations
        3
        """
        counter = self._counter
        if counter is None:
            return self._iterations
        with eager_scope():  # inside a freeze too: the count reached so far
            return int(counter.numpy())

    @iterations.setter
    def iterations(self, value) -> None:
        self._iterations = int(value)
        if self._counter is not None:
            self._counter.assign(np.int64(value))

    def apply_gradients(self, grads_and_vars) -> None:
        """Update each variable from its gradient, then count one iteration.

        Pairs whose gradient is None are skipped with a warning; if every
        gradient is None that is an error. An empty list does nothing. Inside a
        function being frozen, the step number (and a schedule's learning rate) come
        from a counter the graph reads and advances, so every run takes the next step.
        """
        pairs = self._checked_pairs(grads_and_vars)
        if not pairs:
            return
        if TRACING.tracer is not None:
            self._apply_traced(pairs)
            return
        self._apply_pairs(pairs, self.learning_rate, self.iterations + 1)
        self.iterations += 1

    def _apply_traced(self, pairs) -> None:
        """`apply_gradients` recorded into a graph: the step is the counter plus one, in the
        first variable's float dtype, and the counter is advanced by the graph."""
        if self._counter is None:
            with eager_scope(), device(pairs[0][1].device):  # beside the variables, as the slots are
                self._counter = Variable(np.int64(self._iterations), trainable=False, name=f"{self.name}/iterations")
        count = self._counter + 1
        dtype = pairs[0][1].dtype
        step = cast(count, dtype if dtype.kind == "f" else "float32")
        self._apply_pairs(pairs, self._traced_rate(step), step)
        self._counter.assign(count)

    def _traced_rate(self, step):
        """The learning rate for a traced step: a schedule evaluated on it where the schedule
        is written in ops; one in Python arithmetic gives its value at the count reached so
        far, fixed in the graph, with a warning."""
        schedule = self._learning_rate
        if not isinstance(schedule, LearningRateSchedule):
            return self.learning_rate
        try:
            return schedule(step)
        except FreezeError:
            warnings.warn(
                f"{type(self).__name__}: the learning-rate schedule {type(schedule).__name__} computes in Python, "
                f"so this frozen function keeps its rate at step {self.iterations + 1} for every run; train with "
                "model.fit (which feeds the rate at every step) to follow the schedule",
                stacklevel=4,
            )
            return self.learning_rate

    def apply_gradients_at(self, grads_and_vars, learning_rate, step) -> None:
        """Update like `apply_gradients`, with the learning rate and the step number
        (from 1) given as scalar tensors, without counting the iteration.

        A frozen train step calls this, with `learning_rate` and `step` as graph
        inputs, so one graph serves every step and any schedule; the caller
        counts `iterations` outside the graph.
        """
        pairs = self._checked_pairs(grads_and_vars)
        if pairs:
            self._apply_pairs(pairs, learning_rate, step)

    def _apply_pairs(self, pairs, lr, step) -> None:
        grads, touched = [], []  # touched: the rows a sparse gradient writes, where it was made dense
        for g, _ in pairs:
            rows = None
            if isinstance(g, IndexedSlices) and sparse.coalesces_on(g.values.device):
                g = sparse.coalesce(g)
            elif isinstance(g, IndexedSlices):
                rows, g = sparse.touched_rows(g), sparse.convert_to_tensor(g)
            grads.append(g)
            touched.append(rows)
        grads = self._clipped(grads)
        variables = [v for _, v in pairs]
        for var in variables:
            self._track(var)
        # an optimizer whose rule decays (_rule_decays) does so itself for dense gradients, in the same op
        folded = [
            self._rule_decays and r is None and not isinstance(g, IndexedSlices)
            for g, r in zip(grads, touched, strict=True)
        ]
        decays = [bool(self.weight_decay) and self.uses_weight_decay(var) for var in variables]
        for var, fold, decay in zip(variables, folded, decays, strict=True):
            if decay and not fold:
                var.assign(var - var * (_beside(lr, var) * self.weight_decay))
        own_step = type(self).update_step is not Optimizer.update_step  # written for dense gradients
        for grad, var, rows, fold, decay in zip(grads, variables, touched, folded, decays, strict=True):
            if own_step and isinstance(grad, IndexedSlices):
                grad = sparse.convert_to_tensor(grad)
            self._step = _beside(step, var)
            self._decay = self.weight_decay if fold and decay else 0.0
            if rows is None or own_step:
                self.update_step(grad, var, _beside(lr, var))
            else:
                self._update_rows(grad, var, _beside(lr, var), rows)
            if var.constraint is not None:  # a weight's constraint holds after every update, as in Keras
                var.assign(var.constraint(var))
        if self.use_ema:  # every variable the optimizer keeps, as Keras does
            self._update_averages(self._variables, step)

    def _update_averages(self, variables, step) -> None:
        """Move each variable's average towards it (on step 1 the average takes its value),
        then, on every `ema_overwrite_frequency`-th step, give the variables their averages.
        `step` (from 1) is a number eagerly and a scalar tensor in a frozen step."""
        frequency = self.ema_overwrite_frequency
        for var in variables:
            average, at = self.slots(var)[_AVERAGE], _beside(step, var)
            if isinstance(at, Tensor):
                kept = cast(not_equal(at, 1), var.dtype) * self.ema_momentum
                taken = 1 - kept
            else:  # both rounded to the variable's dtype, as the frozen step's tensors are
                momentum = var.dtype.np.type(self.ema_momentum if at != 1 else 0.0)
                kept, taken = float(momentum), float(1 - momentum)
            average.assign(average * kept + var * taken)
            if not frequency:
                continue
            if isinstance(at, Tensor):
                var.assign(where(equal(mod(at, frequency), 0), average, var))
            elif at % frequency == 0:
                var.assign(average)

    def finalize_variable_values(self, var_list) -> None:
        """Give each variable in `var_list` its moving average when `use_ema` is set (`fit`
        calls this with the model's trainable variables when it ends); otherwise do nothing.

        >>> import tapeflow as tp
        >>> w = tp.Variable([1.0], name="w")
        >>> opt = tp.optimizers.SGD(0.5, use_ema=True, ema_momentum=0.5)
        >>> for _ in range(2):
        ...     opt.apply_gradients([(tp.tensor([1.0]), w)])
        >>> opt.finalize_variable_values([w])
        >>> w.numpy().tolist()
        [0.25]
        """
        if not self.use_ema:
            return
        var_list = list(var_list)
        if var_list and not self._variables:
            raise ValueError(
                f"{type(self).__name__}.finalize_variable_values: the optimizer keeps no moving averages yet; "
                "it must update (or be built with) these variables first"
            )
        for var in var_list:  # a variable the optimizer never saw keeps its value
            pos = self._index.get(id(var))
            if pos is not None:
                var.assign(self._slots[pos][_AVERAGE])

    def scale_loss(self, loss):
        """The loss to differentiate: `loss` itself here, scaled by a LossScaleOptimizer."""
        return loss

    def apply(self, grads, trainable_variables) -> None:
        """`apply_gradients(zip(grads, trainable_variables))`, the Keras 3 form."""
        self.apply_gradients(zip(grads, trainable_variables, strict=True))

    def minimize(self, loss, var_list, tape: GradientTape | None = None):
        """Take one step on `loss` (a zero-argument callable, or a tensor recorded
        on `tape`) with respect to `var_list` (a list or a callable returning one).
        Returns the loss value.

        >>> import tapeflow as tp
        >>> x = tp.Variable(10.0)
        >>> _ = tp.optimizers.SGD(0.1).minimize(lambda: x * x / 2.0, [x])
        >>> round(float(x), 4)
        9.0
        """
        if callable(loss):
            with GradientTape() as tape:
                value = loss()
        elif tape is None:
            raise ValueError(f"{type(self).__name__}.minimize: a loss tensor needs the tape that recorded it")
        else:
            value = loss
        variables = list(var_list() if callable(var_list) else var_list)
        grads = tape.gradient(value, variables)
        self.apply_gradients(zip(grads, variables, strict=True))
        return value

    def update_step(self, gradient, variable: Variable, learning_rate) -> None:
        """Update one variable and its slots by `update_rule`. A sparse gradient (an
        IndexedSlices, each row once) updates only its rows of the variable and of the
        slots; the other rows stay as they are, bit for bit."""
        slots = self._rule_slots(variable)
        if not isinstance(gradient, IndexedSlices):
            new_value, new_slots = self.update_rule(gradient, variable, dict(slots), learning_rate)
            for name, slot in slots.items():
                slot.assign(new_slots[name])
            variable.assign(new_value)
            return
        self.update_rows(gradient, variable, learning_rate)

    def update_rows(self, gradient: IndexedSlices, variable: Variable, learning_rate) -> None:
        """The sparse form of `update_step`: `update_rule` on the rows the gradient names (each
        once), taken out of the variable and its slots and written back. An optimizer with an op
        that updates rows where they lie overrides this."""
        slots = self._rule_slots(variable)
        rows = gradient.indices
        old = {name: gather(slot, rows) for name, slot in slots.items()}
        new_value, new_slots = self.update_rule(gradient.values, gather(variable, rows), old, learning_rate)
        for name, slot in slots.items():
            slot.scatter_update(IndexedSlices(new_slots[name], rows, slot.shape))
        variable.scatter_update(IndexedSlices(new_value, rows, variable.shape))

    def _update_rows(self, gradient: Tensor, variable: Variable, learning_rate, rows: Tensor) -> None:
        """The sparse update of `update_step` with fixed shapes: the rule runs on every row
        of a dense gradient and only the `rows` that the sparse gradient touched take the
        result, so the other rows and their slots stay as they are."""
        slots = self._rule_slots(variable)
        new_value, new_slots = self.update_rule(gradient, variable, dict(slots), learning_rate)
        mask = reshape(rows, (-1,) + (1,) * (len(variable.shape) - 1))
        for name, slot in slots.items():
            slot.assign(where(mask, new_slots[name], slot))
        variable.assign(where(mask, new_value, variable))

    def update_rule(self, gradient: Tensor, value: Tensor, slots: dict, learning_rate):
        """(new value, {slot name: new slot value}) from a gradient, the current value and
        slots; the same rule serves whole variables and the rows a sparse gradient touches."""
        raise NotImplementedError(f"{type(self).__name__} must implement update_rule or update_step")

    def _checked_pairs(self, grads_and_vars) -> list[tuple]:
        owner = f"{type(self).__name__}.apply_gradients"
        pairs, missing = [], []
        for g, v in grads_and_vars:
            if not isinstance(v, Variable):
                raise TypeError(f"{owner}: expected Variables, got {type(v).__name__}")
            if g is None:
                missing.append(v.name)
                continue
            g = g if isinstance(g, Tensor | IndexedSlices) else as_tensor(g, name=owner)
            if tuple(g.shape) != tuple(v.shape):
                raise ValueError(f"{owner}: gradient of shape {g.shape} for variable '{v.name}' of shape {v.shape}")
            if g.dtype.kind != "f":
                raise TypeError(f"{owner}: gradient for variable '{v.name}' has non-float dtype {g.dtype}")
            pairs.append((g if g.dtype is v.dtype else sparse.cast_gradient(g, v.dtype), v))
        if missing and not pairs:
            raise ValueError(f"{owner}: no gradients provided for any variable (all None for {missing})")
        if missing:
            warnings.warn(f"{owner}: gradients do not exist for variables {missing}; skipped", stacklevel=3)
        return pairs

    def _clipped(self, grads: list) -> list:
        """Clipped gradients; a sparse one (rows distinct) is clipped as its dense form would be."""
        if self.clipnorm is not None:
            return [sparse.scale_gradient(g, clip_scale(squared_norm(g), self.clipnorm)) for g in grads]
        if self.global_clipnorm is not None:
            total = sum(cast(squared_norm(g), "float64") for g in grads)
            scale = clip_scale(total, self.global_clipnorm, global_norm=True)
            return [sparse.scale_gradient(g, cast(scale, g.dtype)) for g in grads]
        if self.clipvalue is not None:
            return [_map_values(g, lambda v: clip(v, -self.clipvalue, self.clipvalue)) for g in grads]
        return grads

    # ------------------------------------------------------------ weight decay
    def exclude_from_weight_decay(self, var_list=None, var_names=None) -> None:
        """Skip weight decay for the given variables, and for every variable whose
        name contains one of `var_names` (regular expressions, searched)."""
        self._no_decay_ids = {id(v) for v in var_list or ()}
        self._no_decay_pattern = re.compile("|".join(var_names)) if var_names else None

    def uses_weight_decay(self, var: Variable) -> bool:
        """Whether `weight_decay` applies to `var` (it is not excluded by
        `exclude_from_weight_decay`); parameter servers ask it for each variable they hold."""
        if id(var) in self._no_decay_ids:
            return False
        return self._no_decay_pattern is None or self._no_decay_pattern.search(var.name) is None

    # ------------------------------------------------------------------ config
    def get_config(self) -> dict:
        """The constructor arguments; `from_config` rebuilds an optimizer (without state)."""
        lr = self._learning_rate
        return {
            "name": self.name,
            "learning_rate": schedules.serialize(lr) if isinstance(lr, LearningRateSchedule) else lr,
            "weight_decay": self.weight_decay,
            "clipnorm": self.clipnorm,
            "global_clipnorm": self.global_clipnorm,
            "clipvalue": self.clipvalue,
            "use_ema": self.use_ema,
            "ema_momentum": self.ema_momentum,
            "ema_overwrite_frequency": self.ema_overwrite_frequency,
        }

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict | None = None) -> Optimizer:
        config = dict(config)
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = schedules.deserialize(config["learning_rate"], custom_objects)
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, learning_rate={self._learning_rate!r})"

    # ------------------------------------------------------------------- state
    def get_state(self) -> dict[str, np.ndarray]:
        """Copies of the step counter and every slot, keyed "iterations" and
        "<variable name>/<slot name>" (a repeated variable name gets "_1", "_2"...
        in the order the optimizer first saw the variables)."""
        state = {"iterations": np.array(self.iterations, dtype=np.int64)}
        for key, slots in zip(self._keys, self._slots, strict=True):
            for slot, var in slots.items():
                state[f"{key}/{slot}"] = np.array(var.numpy(), copy=True)
        return state

    def set_state(self, state: dict, var_list=None) -> None:
        """Restore what `get_state` returned. A fresh optimizer must first learn its
        variables: pass `var_list` (or call `build`) with them in the same order.
        Nothing changes unless every name and shape matches.

        >>> import tapeflow as tp
        >>> w = tp.Variable([1.0], name="w")
        >>> opt = tp.optimizers.SGD(0.1, momentum=0.9)
        >>> opt.apply_gradients([(tp.tensor([1.0]), w)])
        >>> fresh = tp.optimizers.SGD(0.1, momentum=0.9)
        >>> fresh.set_state(opt.get_state(), var_list=[w])
        >>> fresh.iterations, [round(x, 3) for x in fresh.slots(w)["momentum"].numpy().tolist()]
        (1, [-0.1])
        """
        owner = f"{type(self).__name__}.set_state"
        if var_list is not None:
            self.build(var_list)
        expected = {"iterations": ()}
        targets = {}
        for key, slots in zip(self._keys, self._slots, strict=True):
            for slot, var in slots.items():
                expected[f"{key}/{slot}"] = var.shape
                targets[f"{key}/{slot}"] = var
        missing = [k for k in expected if k not in state]
        unexpected = [k for k in state if k not in expected]
        if missing or unexpected:
            hint = "" if self._variables else "; this optimizer tracks no variables yet: pass var_list="
            raise ValueError(f"{owner}: state names do not match: missing {missing}, unexpected {unexpected}{hint}")
        arrays = {}
        for key, shape in expected.items():
            arr = np.asarray(state[key])
            if arr.shape != tuple(shape):
                raise ValueError(f"{owner}: '{key}' has shape {arr.shape}, expected {tuple(shape)}")
            if arr.dtype.kind not in "iuf":
                raise ValueError(f"{owner}: '{key}' must be numeric, got dtype {arr.dtype}")
            arrays[key] = arr
        steps = arrays.pop("iterations")
        if steps < 0 or steps != np.floor(steps):
            raise ValueError(f"{owner}: 'iterations' must be a whole number >= 0, got {steps}")
        for key, arr in arrays.items():
            targets[key].assign(arr)
        self.iterations = int(steps)


def _beside(value, var: Variable):
    """A learning rate or step number on the device of the variable it updates (a tensor
    from another device is copied there: a transfer node in a frozen step)."""
    return value.to(var.device) if isinstance(value, Tensor) and value.device != var.device else value


def squared_norm(g) -> Tensor:
    """The sum of squares of a gradient, dense or sparse (rows distinct), in its dtype: what
    `clipnorm` and `global_clipnorm` measure.

    >>> import tapeflow as tp
    >>> float(squared_norm(tp.tensor([3.0, 4.0])))
    25.0
    """
    return reduce_sum(square(_values(g)))


def clip_scale(squares, limit: float, global_norm: bool = False) -> Tensor:
    """The factor that brings gradients whose sum of squares is `squares` to a norm of at most
    `limit` (1 when they are within it). For `global_clipnorm` (`global_norm`), an infinite or
    NaN norm makes the factor NaN, as in Keras, rather than zero.

    >>> import tapeflow as tp
    >>> float(clip_scale(tp.tensor(16.0), 2.0)), float(clip_scale(tp.tensor(0.25), 1.0))
    (0.5, 1.0)
    """
    norm = sqrt(squares)
    scale = limit / maximum(norm, limit)
    return scale + (norm - norm) if global_norm else scale


def _values(g):
    """The stored values of a dense or sparse gradient."""
    return g.values if isinstance(g, IndexedSlices) else g


def _map_values(g, fn):
    return IndexedSlices(fn(g.values), g.indices, g.dense_shape) if isinstance(g, IndexedSlices) else fn(g)
