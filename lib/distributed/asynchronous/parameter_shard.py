"""`AsyncParameterShard`: a Dask Actor holding some parameter blocks and their optimizer
slots, applying each replica's update as soon as its turn comes, with no barrier.

The shard's version is the number of updates applied so far (the optimizer's step
counter). `push(step, arrays)` brings update number `step` (the update log numbers the
updates, so every shard applies them in the same order): the shard applies it, with the
model's own optimizer, once update `step - 1` is applied here, then answers with its
version and blocks as `pull` does. Trainable blocks receive gradients; state that the
forward pass writes (batch-normalization statistics) takes the pushed values.

The methods are coroutines on the worker's event loop: a push waiting for its turn never
blocks another push or a pull, and an update is applied whole between two answers.

>>> import numpy as np
>>> from tapeflow.distributed.parameters.variable_blocks import Block
>>> sgd = {"class_name": "SGD", "config": {}}
>>> async def two_updates():
...     shard = AsyncParameterShard([Block(0, None, 0)], ["w"], [True], [True], sgd, timeout=5.0)
...     await shard.begin_epoch([np.ones(2, np.float32)], [{}], iterations=0, learning_rate=0.5)
...     second = asyncio.create_task(shard.push(1, [np.ones(2, np.float32)]))
...     await asyncio.sleep(0)  # update 1 arrives first and waits for update 0
...     first = await shard.push(0, [np.full(2, 2.0, np.float32)])
...     return first[0], await second
>>> first_version, (version, (w,)) = asyncio.run(two_updates())
>>> first_version, version, [round(float(v), 4) for v in w]  # w = 1 - 0.5 * 2 - 0.5 * 1
(2, 2, [-0.5, -0.5])
"""

from __future__ import annotations

import asyncio

from tapeflow.distributed.sync.parameter_shard import ParameterShard
from tapeflow.ops.registry import as_tensor


class AsyncParameterShard:
    """One shard of the parameters, updated asynchronously (see the module docstring).

    The arguments are `ParameterShard`'s, which holds the blocks, the optimizer and its
    slots here: `blocks`, and per block the variable's name, whether it is trainable and
    whether weight decay applies; `optimizer_config` (`tp.optimizers.serialize`) and
    `timeout`, the longest an update waits for its turn.
    """

    def __init__(self, blocks, names, trainable, decays, optimizer_config: dict, timeout: float):
        self.held = ParameterShard(blocks, names, trainable, decays, optimizer_config, timeout)
        self.timeout = float(timeout)
        self.version = 0
        self.waiting: dict[int, list] = {}
        self.stopped = False
        self._applied = asyncio.Condition()

    async def begin_epoch(self, values, slots, iterations: int, learning_rate) -> None:
        """Take the client's parameters, slots, step counter and learning rate (None when
        the optimizer follows a schedule)."""
        await self.held.begin_epoch(None, values, slots, iterations, learning_rate)
        async with self._applied:
            self.version, self.waiting, self.stopped = int(iterations), {}, False
            self._applied.notify_all()

    async def state(self):
        """(values, slots, iterations), as `ParameterShard.state`."""
        return await self.held.state()

    async def stop(self) -> None:
        """Answer every waiting push, and every later call, with None."""
        async with self._applied:
            self.stopped = True
            self._applied.notify_all()

    async def pull(self):
        """(version, arrays): the blocks now, and how many updates they include; None after `stop`."""
        if self.stopped:
            return None
        return self.version, [v.numpy() for v in self.held.variables]

    async def push(self, step: int, arrays: list):
        """Apply update `step` in its turn, then answer as `pull`. A repeated or past step
        changes nothing."""
        async with self._applied:
            if not self.stopped and step >= self.version and step not in self.waiting:
                self.waiting[step] = arrays
                while self.version in self.waiting:
                    self._apply(self.waiting.pop(self.version))
                    self.version += 1
                self._applied.notify_all()
            try:
                await asyncio.wait_for(
                    self._applied.wait_for(lambda: self.stopped or self.version > step), self.timeout
                )
            except asyncio.TimeoutError:
                raise TimeoutError(
                    f"parameter shard holding {sorted(set(self.held.names))}: update {self.version} did not arrive "
                    f"within {self.timeout:g}s, and update {step} waits for it"
                ) from None
        return await self.pull()

    def _apply(self, arrays: list) -> None:
        grads, updated = [], []
        for var, array, trainable in zip(self.held.variables, arrays, self.held.trainable, strict=True):
            if trainable:
                grads.append(as_tensor(array))
                updated.append(var)
            else:
                var.assign(array)
        if updated:
            self.held.optimizer.apply_gradients(zip(grads, updated, strict=True))
        else:
            self.held.optimizer.iterations += 1
