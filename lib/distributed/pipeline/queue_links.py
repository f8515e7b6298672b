"""Values between pipeline stages through cluster queues (`Pipeline(..., transport="queues")`):
one FIFO queue per transfer, held by the worker of the stage that receives it, so that a
value goes from the sender's worker straight to the receiver's, never through the scheduler.

An element is (step, micro-batch, payload); a bfloat16-compressed payload (16-bit words)
travels as float16 bits, a dtype queues hold. Each stage sends to a queue from one thread
of its own, so each queue gets its values in micro-batch order, and the receiver, which
reads its queues in its own process, takes them in that order; an element of an earlier
(abandoned) step is dropped. Every wait is bounded, and a sender whose receiver's worker
died gets the queues' `UnavailableError` naming it.

>>> check_transport("queues", "Pipeline")
'queues'
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import time

import numpy as np

from tapeflow.distributed.pipeline.compression import sent_dtype
from tapeflow.distributed.queue import held_here
from tapeflow.graph.partition import Transfer
from tapeflow.queue.errors import DeadlineExceededError
from tapeflow.queue.queues import FIFOQueue

TRANSPORTS = ("actors", "queues")
_QUEUED_AS = {"uint16": "float16"}  # what a payload's bits travel as, where queues hold no such dtype
_POLL = 0.5  # seconds between looks at whether a waiting stage was stopped


def check_transport(transport, owner: str) -> str:
    """`transport` if it is one of TRANSPORTS, else a ValueError naming `owner`."""
    if transport not in TRANSPORTS:
        raise ValueError(
            f"{owner}: transport must be one of {list(TRANSPORTS)} (how stages hand values to each other), "
            f"got {transport!r}"
        )
    return transport


def make_queues(cluster, receivers: list[tuple[Transfer, str | None, str]], capacity: int) -> dict:
    """One queue per transfer of `receivers` ((transfer, compression, receiving worker) triples),
    on the receiving worker, holding up to `capacity` elements; the proxies by transfer key."""
    queues = {}
    for transfer, compression, worker in receivers:
        if transfer.key not in queues:
            sent = sent_dtype(transfer.dtype, compression)
            dtypes = ["int64", "int64", _QUEUED_AS.get(sent, sent)]
            name = f"pipeline_{transfer.value}"
            queues[transfer.key] = FIFOQueue(capacity, dtypes, name=name, cluster=cluster, worker=worker)
    return queues


class QueueLinks:
    """A stage's ends of the transfer queues (`queues`, proxies by key): it takes what it
    receives from the queues on its own worker, and sends each value from a thread that
    serves one destination queue, waiting at most `timeout` seconds on a queue."""

    def __init__(self, queues: dict, device: str, timeout: float):
        self.queues, self.device, self.timeout = dict(queues), device, timeout
        self._near: dict = {}
        self._senders: dict[str, concurrent.futures.ThreadPoolExecutor] = {}

    def _queue(self, key: str):
        if key not in self._near:
            self._near[key] = held_here(self.queues[key])
        return self._near[key]

    def send(self, step: int, micro_batch: int, transfer: Transfer, payload: np.ndarray) -> concurrent.futures.Future:
        """Enqueue `payload` for `micro_batch` of `step` on `transfer`'s queue, after what was
        sent there before; the future of the enqueue."""
        sender = self._senders.get(transfer.key)
        if sender is None:
            sender = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"send-{transfer.value}")
            self._senders[transfer.key] = sender
        queued_as = _QUEUED_AS.get(payload.dtype.name)
        element = [np.int64(step), np.int64(micro_batch), payload if queued_as is None else payload.view(queued_as)]
        enqueue = self._queue(transfer.key).enqueue
        # run in the stage's context, where the worker (and so its client) is known
        return sender.submit(contextvars.copy_context().run, enqueue, element, timeout=self.timeout)

    def take(self, step: int, micro_batch: int, transfer: Transfer, compression, stopped) -> np.ndarray:
        """The payload sent for `micro_batch` of `step` on `transfer` under `compression`,
        waiting at most `timeout` seconds, or until `stopped()` (then a RuntimeError)."""
        queue = self._queue(transfer.key)
        deadline = time.monotonic() + self.timeout
        while True:
            if stopped():
                raise RuntimeError(f"{self.device}: stopped while waiting for '{transfer.value}' (step {step})")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"{self.device}: '{transfer.value}' of micro-batch {micro_batch} of step {step} did not "
                    f"arrive from {transfer.source} within {self.timeout:g}s"
                )
            try:
                sent_step, sent_micro_batch, payload = queue.dequeue(timeout=min(_POLL, left))
            except DeadlineExceededError:
                continue
            got = (int(sent_step), int(sent_micro_batch))
            if got[0] < step:
                continue  # left by an abandoned step
            if got != (step, micro_batch):
                raise RuntimeError(
                    f"{self.device}: '{transfer.value}' came for micro-batch {got[1]} of step {got[0]} while "
                    f"micro-batch {micro_batch} of step {step} was awaited"
                )
            sent = sent_dtype(transfer.dtype, compression)
            return payload.numpy().view(sent) if sent in _QUEUED_AS else payload.numpy()

    def close(self) -> None:
        """Let the sending threads end."""
        for sender in self._senders.values():
            sender.shutdown(wait=False, cancel_futures=True)
        self._senders = {}
