"""`ParameterShard`: a Dask Actor holding some parameter blocks, their optimizer slots and
the step counter, and applying each synchronous step's update exactly once.

Replicas `pull(step)` the blocks and `push(step, shard, rows, arrays)` one shard's
gradients; once the step's plan has all its shards, they are combined in shard order with
weights rows / total rows and applied with tapeflow's own optimizer (a sparse gradient as
one IndexedSlices, so only its rows change). Armed snapshots copy the state as the step
counter reaches a step, so checkpoints are consistent without pausing the replicas. The
methods are coroutines on the worker's event loop: a `pull` waiting for the next step
never blocks a `push`.

Clipping by norm (`clipnorm`, `global_clipnorm`) is done here, on the combined gradients,
before the optimizer (which itself does not clip): a norm that takes in blocks held by
other shards (every block for `global_clipnorm`, the other row blocks of a split variable
for `clipnorm`) adds up the shards' sums of squares through one call per step to the
step log (`StepLog.add_squares`), so every shard scales by the same factor.

>>> import numpy as np
>>> from tapeflow.distributed.sync.epoch_plan import EpochPlan
>>> from tapeflow.distributed.parameters.variable_blocks import Block
>>> async def one_step():
...     shard = ParameterShard([Block(0, None, 0)], ["w"], [True], [True], {"class_name": "SGD", "config": {}}, 5.0)
...     plan = EpochPlan(first_step=0, batch_sizes=(3,), replicas=2)
...     await shard.begin_epoch(plan, [np.ones(2, np.float32)], [{}], iterations=0, learning_rate=0.5)
...     first = asyncio.create_task(shard.push(0, 1, 1, [np.zeros(2, np.float32)]))  # one row, gradient 0
...     second = await shard.push(0, 0, 2, [np.ones(2, np.float32)])  # two rows, gradient 1
...     return await first, second
>>> first, (status, step, (w,)) = asyncio.run(one_step())
>>> status, step, [round(float(v), 4) for v in w]  # w = 1 - 0.5 * (2/3 * 1 + 1/3 * 0)
('ok', 1, [0.6667, 0.6667])
"""

from __future__ import annotations

import asyncio

import numpy as np

from tapeflow import optimizers
from tapeflow.distributed.parameters.variable_blocks import Block
from tapeflow.distributed.sparse_rows import SparseRows
from tapeflow.distributed.sync.epoch_plan import EpochPlan
from tapeflow.ops import sparse
from tapeflow.ops.math import cast
from tapeflow.ops.registry import as_tensor
from tapeflow.optimizers.optimizer import clip_scale, squared_norm
from tapeflow.tensor import IndexedSlices, Tensor, Variable

GLOBAL = "global"  # the key of the sum of squares of every gradient in an exchange of norms


class ParameterShard:
    """One shard of the parameters (see the module docstring).

    `blocks` are this shard's blocks; `names`, `trainable` and `decays` give, per block,
    the model variable's name, whether an optimizer updates it (else it is state the
    forward pass writes) and whether weight decay applies; `optimizer_config` is
    `tp.optimizers.serialize` of the model's optimizer; `timeout` bounds every wait.
    """

    def __init__(self, blocks: list[Block], names, trainable, decays, optimizer_config: dict, timeout: float):
        self.blocks = list(blocks)
        self.names = list(names)
        self.trainable = [bool(t) for t in trainable]
        self.decays = [bool(d) for d in decays]
        config = optimizer_config["config"]
        self.clipnorm, self.global_clipnorm = config.get("clipnorm"), config.get("global_clipnorm")
        # the shard clips by norm itself, with norms that may take in other shards' blocks
        unclipped = {**config, "clipnorm": None, "global_clipnorm": None} if "clipnorm" in config else config
        self.optimizer = optimizers.get({**optimizer_config, "config": unclipped})
        self.exchange = None  # (step log, shard number, shards taking part) when norms take in other shards
        # a sparse gradient changes only its rows, unless the optimizer's own update_step densifies it
        self._row_updates = type(self.optimizer).update_step is optimizers.Optimizer.update_step
        self.timeout = float(timeout)
        self.variables: list[Variable] | None = None
        self.plan: EpochPlan | None = None
        self.step = 0
        self.pending: dict[int, tuple[int, list]] = {}
        self.armed: set[int] = set()
        self.snapshots: dict[int, tuple] = {}
        self.stopped = False
        self.delta: tuple[int, dict[int, np.ndarray]] | None = None  # (step, rows of sparse variables it changed)
        self._advanced = asyncio.Condition()

    # ------------------------------------------------------------ state
    async def begin_epoch(
        self, plan: EpochPlan, values, slots, iterations: int, learning_rate, snapshot_steps=(), exchange=None
    ) -> None:
        """Take the client's parameters, slots, step counter and learning rate (None when the
        optimizer follows a schedule) before the steps of `plan`, and arm a snapshot at each
        of `snapshot_steps`. `exchange` is (step log, this shard's number, number of shards
        taking part) when the norms to clip by take in other shards' blocks."""
        self.exchange = exchange
        if self.variables is None:
            self.variables = [Variable(np.array(v), name=n) for v, n in zip(values, self.names, strict=True)]
            self.optimizer.build([v for v, t in zip(self.variables, self.trainable, strict=True) if t])
            self.optimizer.exclude_from_weight_decay(
                var_list=[v for v, d in zip(self.variables, self.decays, strict=True) if not d]
            )
        for var, value in zip(self.variables, values, strict=True):
            var.assign(value)
        for var, var_slots, is_trainable in zip(self.variables, slots, self.trainable, strict=True):
            if is_trainable:
                for name, value in var_slots.items():
                    self.optimizer.slots(var)[name].assign(value)
        self.optimizer.iterations = int(iterations)
        if learning_rate is not None:
            self.optimizer.learning_rate = float(learning_rate)
        async with self._advanced:
            self.plan, self.step, self.pending, self.stopped = plan, int(iterations), {}, False
            self.delta = None
            self.armed, self.snapshots = {int(s) for s in snapshot_steps if s > self.step}, {}
            self._advanced.notify_all()

    async def state(self):
        """(values, slots, iterations): this shard's blocks, their optimizer slots and the step counter."""
        return self._state()

    def _state(self, copy: bool = False):
        take = np.array if copy else np.asarray
        values = [take(v.numpy()) for v in self.variables]
        slots = [
            {name: take(s.numpy()) for name, s in self.optimizer.slots(v).items()} if t else {}
            for v, t in zip(self.variables, self.trainable, strict=True)
        ]
        return values, slots, self.optimizer.iterations

    # ------------------------------------------------------------ snapshots
    async def arm(self, step: int) -> tuple[bool, int]:
        """(armed, current step): keep a snapshot of the state of `step`, unless this shard
        has already passed it (then nothing is armed)."""
        async with self._advanced:
            if self.step > step:
                return False, self.step
            if self.step == step:
                self.snapshots[step] = self._state(copy=True)
                self._advanced.notify_all()
            else:
                self.armed.add(int(step))
        return True, self.step

    async def disarm(self, step: int) -> None:
        """Forget the snapshot of `step`, armed or taken."""
        self.armed.discard(step)
        self.snapshots.pop(step, None)

    async def snapshot(self, step: int):
        """`state()` as of `step`, once this shard reaches it; the snapshot must have been
        armed. None after `stop`; a TimeoutError if the shard does not reach `step`."""
        async with self._advanced:
            try:
                await asyncio.wait_for(
                    self._advanced.wait_for(lambda: self.stopped or step in self.snapshots or step not in self.armed),
                    self.timeout,
                )
            except asyncio.TimeoutError:
                raise TimeoutError(
                    f"parameter shard holding {sorted(set(self.names))}: step {step} of the snapshot was not "
                    f"reached within {self.timeout:g}s (the shard is at step {self.step})"
                ) from None
            if self.stopped:
                return None
            if step not in self.snapshots:
                raise ValueError(f"parameter shard: no snapshot of step {step} was armed")
            return self.snapshots.pop(step)

    async def progress(self) -> tuple[int, list[int]]:
        """(step, shards): the step this shard waits to apply and the shards of it received."""
        return self.step, sorted(self.pending)

    async def stop(self) -> None:
        """Release every waiting `pull` with 'stop' and ignore further pushes."""
        async with self._advanced:
            self.stopped = True
            self._advanced.notify_all()

    # ------------------------------------------------------------ steps
    async def pull(self, step: int, since: int | None = None):
        """('ok', step, arrays) once the parameters are those of `step`; ('ahead', s, None)
        when this shard has moved on to step s; ('stop', step, None) after `stop`.

        A caller holding the blocks of step `since` = step - 1 gets, for each block a
        sparse gradient updated, only the rows that step changed, as `SparseRows` of new
        values (to overwrite, not to add); other blocks come whole."""
        async with self._advanced:
            try:
                await asyncio.wait_for(self._advanced.wait_for(lambda: self.stopped or self.step >= step), self.timeout)
            except asyncio.TimeoutError:
                waiting = sorted(set(range(self.plan.launched(self.step))) - set(self.pending))
                raise TimeoutError(
                    f"parameter shard holding {sorted(set(self.names))}: step {self.step} did not complete within "
                    f"{self.timeout:g}s (no gradients yet from shards {waiting})"
                ) from None
            if self.stopped:
                return "stop", step, None
            if self.step > step:
                return "ahead", self.step, None
            changed = self.delta[1] if since == step - 1 and self.delta and self.delta[0] == step else {}
            return (
                "ok",
                step,
                [
                    SparseRows(changed[i], v.numpy()[changed[i]]) if i in changed else v.numpy()
                    for i, v in enumerate(self.variables)
                ],
            )

    async def push(self, step: int, shard: int, rows: int, arrays: list):
        """Add one shard's arrays for `step`, apply the step once its plan's shards are in,
        and answer as `pull(step + 1)` does. A push for a closed step or a repeated shard
        changes nothing."""
        if not self.stopped and step == self.step and shard not in self.pending:
            self.pending[shard] = (int(rows), arrays)
            if len(self.pending) == self.plan.needed(step):
                changed = await self._apply(step, self.pending)
                if changed is None:  # stopped while adding up norms: the pull answers 'stop'
                    return await self.pull(step + 1, since=step)
                async with self._advanced:
                    self.step, self.pending, self.delta = step + 1, {}, (step + 1, changed)
                    if self.step in self.armed:
                        self.armed.discard(self.step)
                        self.snapshots[self.step] = self._state(copy=True)
                    self._advanced.notify_all()
        return await self.pull(step + 1, since=step)

    async def _apply(self, step: int, pending: dict) -> dict[int, np.ndarray] | None:
        """Apply a step; returns, for the variables updated by rows only, the rows changed
        (None, applying nothing, if the step log stopped while the norms were added up)."""
        shards = sorted(pending)
        total = sum(pending[s][0] for s in shards)
        grads, updated, positions, changed = [], [], [], {}
        for i, var in enumerate(self.variables):
            if isinstance(pending[shards[0]][1][i], SparseRows):
                grads.append(_sparse_mean(var, [pending[s] for s in shards], i, total))
                updated.append(var)
                positions.append(i)
                if self._row_updates and not (self.optimizer.weight_decay and self.decays[i]):  # decay: every row
                    changed[i] = np.unique(grads[-1].indices.numpy())
                continue
            mean = None
            for s in shards:  # in shard order, whatever the order of arrival
                rows, arrays = pending[s]
                part = np.multiply(arrays[i], var.dtype.np.type(rows / total), dtype=var.dtype.np)
                mean = part if mean is None else np.add(mean, part, out=mean)
            if self.trainable[i]:
                grads.append(as_tensor(mean))
                updated.append(var)
                positions.append(i)
            else:
                var.assign(mean)
        grads = await self._clipped(step, grads, positions)  # with no gradient here, to take part in the exchange
        if grads is None:
            return None
        if updated:
            self.optimizer.apply_gradients(zip(grads, updated, strict=True))
        else:
            self.optimizer.iterations += 1
        return changed

    async def _clipped(self, step: int, grads: list, positions: list[int]) -> list | None:
        """`grads` (of the blocks at `positions`) clipped by `clipnorm` or `global_clipnorm`
        as the optimizer would clip the whole gradients, adding up sums of squares with the
        other shards taking part when the norms need theirs; None if the step log stops first."""
        if (self.clipnorm is None and self.global_clipnorm is None) or not (grads or self.exchange):
            return grads
        squares = [squared_norm(_distinct_rows(g)) for g in grads]
        if self.global_clipnorm is not None:
            total = sum(cast(s, "float64") for s in squares)
            if self.exchange is not None:
                totals = await self._add_squares(step, {GLOBAL: float(total)})
                if totals is None:
                    return None
                total = as_tensor(np.float64(totals[GLOBAL]))
            scale = clip_scale(total, self.global_clipnorm, global_norm=True)
            return [sparse.scale_gradient(g, cast(scale, g.dtype)) for g in grads]
        split = {j: self.blocks[i].variable for j, i in enumerate(positions) if self.blocks[i].rows is not None}
        if self.exchange is not None:
            totals = await self._add_squares(step, {split[j]: float(squares[j]) for j in split})
            if totals is None:
                return None
            for j, variable in split.items():
                squares[j] = as_tensor(np.array(totals[variable], grads[j].dtype.np))
        return [sparse.scale_gradient(g, clip_scale(s, self.clipnorm)) for g, s in zip(grads, squares, strict=True)]

    async def _add_squares(self, step: int, squares: dict) -> dict | None:
        """The sums over the shards taking part of their `squares` ({key: sum of squares}) of
        `step`; None if the step log was stopped."""
        log, shard, parties = self.exchange
        try:
            totals = await log.add_squares(step, shard, squares, parties, self.timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise TimeoutError(
                f"parameter shard holding {sorted(set(self.names))}: the other shards' sums of squares of step "
                f"{step} did not arrive within {self.timeout:g}s"
            ) from None
        return totals


def _distinct_rows(g):
    """A gradient as the optimizer measures it: a sparse one with each row once."""
    if not isinstance(g, IndexedSlices):
        return g
    return sparse.coalesce(g) if sparse.coalesces_on(g.values.device) else sparse.convert_to_tensor(g)


def _sparse_mean(var: Variable, parts: list, i: int, total: int) -> IndexedSlices:
    """The weighted mean of the shards' sparse gradients of variable `i`, as one
    IndexedSlices over the rows they name (in shard order; the optimizer sums repeats)."""
    indices = np.concatenate([arrays[i].indices for _, arrays in parts]).astype(np.int64, copy=False)
    values = np.concatenate(
        [np.multiply(arrays[i].values, var.dtype.np.type(rows / total), dtype=var.dtype.np) for rows, arrays in parts]
    ).reshape((len(indices), *var.shape[1:]))
    return IndexedSlices(Tensor(values), indices, var.shape)
