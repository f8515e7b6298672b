"""How the variables are sharded over the parameter servers: whole variables, or row
blocks of large ones, so that no shard holds or sends all of a large model.

A variable of more than `row_block_bytes` bytes (and more than one row) is cut by rows
into one block per shard (fewer if it has fewer rows), block i on shard i. The other
variables go whole, largest first, to the shard holding the fewest bytes so far (the
lowest index on a tie), so the blocks depend only on the shapes.

>>> blocks = split_variables([(1000, 10), (10,), (4, 3)], n_shards=2, row_block_bytes=16_000, itemsize=4)
>>> [(b.variable, b.rows, b.shard) for b in blocks]
[(0, (0, 500), 0), (0, (500, 1000), 1), (1, None, 1), (2, None, 0)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapeflow.distributed.sparse_rows import SparseRows


@dataclass(frozen=True)
class Block:
    """Rows `rows` (start, stop) of variable number `variable`, or all of it (rows None),
    held by parameter shard number `shard`."""

    variable: int
    rows: tuple[int, int] | None
    shard: int

    def take(self, array: np.ndarray) -> np.ndarray:
        """This block's part of a whole variable (or of its gradient, dense or `SparseRows`, or slot)."""
        if isinstance(array, SparseRows):
            return array.block(self.rows)
        return array if self.rows is None else array[self.rows[0] : self.rows[1]]


def split_variables(shapes, n_shards: int, row_block_bytes: int, itemsize: int = 4) -> list[Block]:
    """The blocks of every variable (by position in `shapes`), ordered by variable then row."""
    blocks, whole, load = [], [], [0] * n_shards
    for index, shape in enumerate(shapes):
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        rows = shape[0] if len(shape) else 1
        if nbytes > row_block_bytes and rows > 1 and n_shards > 1:
            bounds = np.linspace(0, rows, min(n_shards, rows) + 1).round().astype(int).tolist()
            for shard, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
                blocks.append(Block(index, (start, stop), shard))
                load[shard] += nbytes * (stop - start) // rows
        else:
            whole.append((nbytes, index))
    for nbytes, index in sorted(whole, key=lambda item: (-item[0], item[1])):
        shard = min(range(n_shards), key=lambda s: (load[s], s))
        load[shard] += nbytes
        blocks.append(Block(index, None, shard))
    return sorted(blocks, key=lambda b: (b.variable, -1 if b.rows is None else b.rows[0]))


def join_blocks(parts: dict[Block, np.ndarray]) -> list[np.ndarray]:
    """Whole variables, by variable number, from the arrays of all their blocks.

    >>> a, b = Block(0, (0, 1), 0), Block(0, (1, 3), 1)
    >>> [v.tolist() for v in join_blocks({b: np.array([2, 3]), a: np.array([1]), Block(1, None, 1): np.zeros(2)})]
    [[1, 2, 3], [0.0, 0.0]]
    """
    by_variable: dict[int, list[Block]] = {}
    for block in sorted(parts, key=lambda b: (b.variable, -1 if b.rows is None else b.rows[0])):
        by_variable.setdefault(block.variable, []).append(block)
    return [
        parts[blocks[0]] if blocks[0].rows is None else np.concatenate([parts[b] for b in blocks])
        for _, blocks in sorted(by_variable.items())
    ]
