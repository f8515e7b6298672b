"""One epoch of synchronous data-parallel steps: which rows each step's shards hold,
which replica computes each shard, and how many shard gradients each step applies.

Every global batch is cut into `parts = replicas + backup_workers` shards of consecutive
rows whose sizes differ by at most one (larger ones first, as `np.array_split` does).
Replica r computes shard (r + step) mod parts, so the assignment rotates and a slow
replica's late shards are different rows each step. A step applies the first
`min(replicas, non-empty shards)` shard gradients to arrive.

>>> plan = EpochPlan(first_step=10, batch_sizes=(5, 2), replicas=2, backup_workers=1)
>>> plan.end, [plan.shard_bounds(10, s) for s in range(3)], plan.needed(11)
(12, [(0, 2), (2, 4), (4, 5)], 2)
>>> plan.shard_of(replica=0, step=11), plan.replica_of(shard=1, step=11)
(2, 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class EpochPlan:
    """Steps `first_step` .. `end - 1`, batch i of `batch_sizes[i]` rows of the epoch's row order."""

    first_step: int
    batch_sizes: tuple[int, ...]
    replicas: int
    backup_workers: int = 0

    @property
    def parts(self) -> int:
        return self.replicas + self.backup_workers

    @property
    def end(self) -> int:
        return self.first_step + len(self.batch_sizes)

    @cached_property
    def _offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.batch_sizes, dtype=np.int64)])

    def batch_start(self, step: int) -> int:
        """The offset of `step`'s batch in the epoch's row order."""
        return int(self._offsets[step - self.first_step])

    def batch_size(self, step: int) -> int:
        return self.batch_sizes[step - self.first_step]

    def shard_bounds(self, step: int, shard: int) -> tuple[int, int]:
        """(start, stop) of a shard within its batch."""
        size, parts = self.batch_size(step), self.parts
        base, extra = divmod(size, parts)
        start = shard * base + min(shard, extra)
        return start, start + base + (shard < extra)

    def shard_rows(self, order: np.ndarray, step: int, shard: int) -> np.ndarray:
        """The row numbers of one shard of `step`'s batch."""
        offset = self.batch_start(step)
        start, stop = self.shard_bounds(step, shard)
        return order[offset + start : offset + stop]

    def launched(self, step: int) -> int:
        """Shards of `step` that hold rows (all `parts`, unless the batch is smaller)."""
        return min(self.parts, self.batch_size(step))

    def needed(self, step: int) -> int:
        """Shard gradients `step` applies."""
        return min(self.replicas, self.launched(step))

    def shard_of(self, replica: int, step: int) -> int:
        return (replica + step) % self.parts

    def replica_of(self, shard: int, step: int) -> int:
        return (shard - step) % self.parts
