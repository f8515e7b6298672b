"""What a queue operation raises when it cannot finish: the queue was closed and holds too
few elements, the queue was closed under a waiting enqueue, or the wait ran past its timeout.

>>> issubclass(DeadlineExceededError, TimeoutError)
True
"""

from __future__ import annotations


class QueueError(RuntimeError):
    """The base of the queue errors. A queue node of a running graph raises them as they
    are (with the node named), so that a loop over a graph can catch OutOfRangeError."""

    keeps_type_in_graphs = True

    def __reduce__(self):
        """Rebuilt from the message alone, so that the error crosses processes as it is."""
        return (type(self), self.args)


class OutOfRangeError(QueueError):
    """A dequeue from a closed queue that holds fewer elements than it asked for."""


class CancelledError(QueueError):
    """An enqueue to a closed queue (or one pending when the queue closed with
    `cancel_pending_enqueues=True`)."""


class DeadlineExceededError(QueueError, TimeoutError):
    """A blocking queue operation that waited longer than its `timeout`."""


class UnavailableError(QueueError):
    """A queue held by another process that cannot be reached: its worker died."""
