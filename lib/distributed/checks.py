"""Checks of a strategy's arguments and of what it can train, with errors that name the
strategy and the offending value.

>>> check_count("replicas", 0, minimum=1, owner="DataParallel")
Traceback (most recent call last):
ValueError: DataParallel: replicas must be an integer >= 1, got 0
"""

from __future__ import annotations

MEAN_REDUCTIONS = ("sum_over_batch_size", "mean_with_sample_weight")


def check_count(label: str, value, minimum: int, owner: str) -> None:
    """A ValueError unless `value` is an integer >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {label} must be an integer >= {minimum}, got {value!r}")


def check_seconds(label: str, value, owner: str) -> None:
    """A ValueError unless `value` is a number of seconds > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{owner}: {label} must be a number of seconds > 0, got {value!r}")


def check_loss(loss) -> None:
    """A ValueError for a loss that does not average over the batch: its shards' losses
    would not add up to the batch's."""
    reduction = getattr(loss, "reduction", "sum_over_batch_size")
    if reduction not in MEAN_REDUCTIONS:
        raise ValueError(
            f"fit: the loss's reduction {reduction!r} does not split over replicas or micro-batches; use a loss "
            f"that averages over the batch ({', '.join(map(repr, MEAN_REDUCTIONS))}) with distribute="
        )


def split_sizes(batch_sizes: set[int], parts: int) -> set[int]:
    """Every non-empty part size of batches of `batch_sizes` rows cut into `parts` parts
    whose sizes differ by at most one.

    >>> sorted(split_sizes({10, 3}, parts=4))
    [1, 2, 3]
    """
    sizes = set()
    for size in batch_sizes:
        sizes |= {size // parts + 1} if size % parts else set()
        sizes |= {size // parts} if size // parts else set()
    return sizes
