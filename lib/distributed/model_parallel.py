"""Partitions on workers: `StageWorker`, a Dask actor that holds the partitions of one
device of a partitioned training step and runs them, micro-batch by micro-batch.

Each device of the partitioned graph (tapeflow.graph.partition) gets one actor on the
worker that owns it ("/worker:w/..." is the w-th worker of the pipeline). The client
ships each its partitions as graph-file bytes (one set per micro-batch size, since
shapes are static) and the data columns it reads; the Variables of its partitions
live there, with an optimizer of their own.

A step (`run_step`, one actor call per device from the client, carrying only the row
numbers of each micro-batch) runs the device's partitions in rank order, each over
every micro-batch in order: a recv waits for its value, a send calls the receiving
actor's `receive` directly (worker to worker, never through the scheduler; an actor
on the same worker is called in process, see `local_actor`). Values stay on the device
between its partitions. So stage k works on micro-batch i while stage k+1 works on
micro-batch i-1, forward and then backward. The step ends with a synchronous flush:
each actor sums its variables' micro-batch gradients, weighted by rows / batch rows
(the mean loss over the whole batch), and applies its optimizer. Cross-worker
transfers may be compressed to 16 bits (`tapeflow.distributed.compression`).

Every wait is bounded by `timeout`: a recv whose sender died raises a TimeoutError
naming the value, the device it comes from and the step, and `stop` releases a step
waiting on a dead peer at once.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from dataclasses import dataclass

import numpy as np

from tapeflow import optimizers
from tapeflow.devices import WorkerDevice
from tapeflow.distributed.compression import decode, encode
from tapeflow.distributed.local_actor import in_process
from tapeflow.distributed.replica import actor_answer
from tapeflow.graph.partition import Transfer
from tapeflow.graph.runnable import load_graph
from tapeflow.ops.registry import as_tensor


@dataclass(frozen=True)
class StagePartition:
    """One partition as shipped: its graph file and the transfers it receives and sends."""

    graph: bytes
    recvs: tuple[Transfer, ...]
    sends: tuple[Transfer, ...]


@dataclass(frozen=True)
class StageSpec:
    """What the actor of `device` runs: its partitions by micro-batch size (in rank order),
    the graph inputs it reads, the variables it holds (state names) with the values of
    their gradients and whether weight decay applies, the loss and predictions values it
    computes (or None), the optimizer, the compression and the timeout of every wait."""

    device: str
    partitions: dict
    feeds: tuple[str, ...]
    variables: tuple[str, ...]
    gradients: tuple[str, ...]
    decays: tuple[bool, ...]
    loss: str | None
    predictions: str | None
    optimizer_config: dict
    compression: str | None
    timeout: float


class StageWorker:
    """The actor of one device (see the module docstring)."""

    def __init__(self, spec: StageSpec):
        self.spec = spec
        self.variables: dict = {}
        self.partitions = {}
        for size, parts in spec.partitions.items():
            self.partitions[size] = [(load_graph(io.BytesIO(p.graph)), p) for p in parts]
            for graph, _ in self.partitions[size]:
                for name, var in graph.state.items():  # the device's partitions share one Variable each
                    graph.state[name] = self.variables.setdefault(name, var)
        missing = [n for n in spec.variables if n not in self.variables]
        if missing:
            raise ValueError(f"StageWorker {spec.device}: its partitions do not hold the variables {missing}")
        self.trainable = [self.variables[n] for n in spec.variables]
        self.optimizer = optimizers.get(spec.optimizer_config)
        self.optimizer.build(self.trainable)
        self.optimizer.exclude_from_weight_decay(
            var_list=[v for v, d in zip(self.trainable, spec.decays, strict=True) if not d]
        )
        self.data: dict[str, np.ndarray] = {}
        self.peers: dict = {}
        self.inbox: dict[tuple, np.ndarray] = {}
        self.stopped = False
        self._arrived = threading.Condition()

    # ------------------------------------------------------------ setup
    async def connect(self, peers: dict) -> None:
        """Take the actors of the other devices, by device name."""
        self.peers = dict(peers)

    async def load_data(self, columns: dict) -> None:
        """Take the data columns (graph input name -> array of all rows) this device reads."""
        self.data = {name: np.asarray(a) for name, a in columns.items()}

    async def begin(self, values: dict, slots: dict, iterations: int, learning_rate) -> None:
        """Set the variables, their optimizer slots, the step counter and the learning rate
        (None under a schedule) to the client's."""
        for name, var in self.variables.items():
            if name in values:
                var.assign(values[name])
        for name in self.spec.variables:
            for slot, value in slots.get(name, {}).items():
                self.optimizer.slots(self.variables[name])[slot].assign(value)
        self.optimizer.iterations = int(iterations)
        if learning_rate is not None:
            self.optimizer.learning_rate = float(learning_rate)
        with self._arrived:
            self.inbox, self.stopped = {}, False

    async def state(self) -> tuple[dict, dict, int]:
        """(values, slots by name, step counter) of the variables this device holds."""
        values = {name: v.numpy() for name, v in self.variables.items()}
        slots = {
            name: {slot: s.numpy() for slot, s in self.optimizer.slots(self.variables[name]).items()}
            for name in self.spec.variables
        }
        return values, slots, self.optimizer.iterations

    # ------------------------------------------------------------ transfers
    async def receive(self, step: int, micro_batch: int, key: str, payload) -> None:
        """A value sent to this device for `micro_batch` of `step` under rendezvous `key`."""
        with self._arrived:
            self.inbox[(step, micro_batch, key)] = payload
            self._arrived.notify_all()

    async def stop(self) -> None:
        """Release a step that waits for values (its sender died): it raises at once."""
        with self._arrived:
            self.stopped = True
            self._arrived.notify_all()

    def _take(self, step: int, micro_batch: int, transfer: Transfer) -> np.ndarray:
        where = (step, micro_batch, transfer.key)
        with self._arrived:
            arrived = self._arrived.wait_for(lambda: where in self.inbox or self.stopped, self.spec.timeout)
            if self.stopped:
                raise RuntimeError(f"{self.spec.device}: stopped while waiting for '{transfer.value}' (step {step})")
            if not arrived:
                raise TimeoutError(
                    f"{self.spec.device}: '{transfer.value}' of micro-batch {micro_batch} of step {step} did not "
                    f"arrive from {transfer.source} within {self.spec.timeout:g}s"
                )
            payload = self.inbox.pop(where)
        return decode(payload, self._compression(transfer), transfer.dtype)

    def _compression(self, transfer: Transfer) -> str | None:
        return self.spec.compression if _crosses(transfer) else None

    # ------------------------------------------------------------ steps
    async def run_step(self, step: int, micro_rows: list, rows: int) -> dict:
        """Run `step` over the micro-batches of row numbers `micro_rows` (of a batch of `rows`
        rows), then apply the update; returns the loss and predictions (on the device that
        computes them), the seconds spent computing (partitions and update) and the bytes sent."""
        return await asyncio.to_thread(self._step, step, micro_rows, rows)

    def _step(self, step: int, micro_rows: list, rows: int) -> dict:
        started = time.perf_counter()
        with self._arrived:  # values of an abandoned earlier step are of no use any more
            self.inbox = {k: v for k, v in self.inbox.items() if k[0] >= step}
        stores = [{name: self.data[name][r] for name in self.spec.feeds} for r in micro_rows]
        peers = {device: in_process(actor) for device, actor in self.peers.items()}
        calls, busy, sent, between = [], 0.0, 0, 0
        for index in range(len(self.partitions[len(micro_rows[0])])):
            for mb, store in enumerate(stores):
                graph, part = self.partitions[len(micro_rows[mb])][index]
                for t in part.recvs:
                    store[t.value] = self._take(step, mb, t)
                begun = time.perf_counter()
                results = graph.execute([store[v.name] for v in graph.inputs])
                busy += time.perf_counter() - begun
                store.update((v.name, a) for v, a in zip(graph.outputs, results, strict=True))
                for t in part.sends:
                    payload = encode(store[t.value], self._compression(t))
                    calls.append((t, peers[t.destination].receive(step, mb, t.key, payload)))
                    sent += payload.nbytes
                    between += payload.nbytes if _crosses(t) else 0
        for t, call in calls:
            actor_answer(call, self.spec.timeout, f"{t.destination} (receiving '{t.value}', step {step})")
        result = {"busy": busy, "bytes": sent, "bytes_between_workers": between}
        weights = [np.float32(len(r) / rows) for r in micro_rows]
        if self.spec.loss is not None:
            result["loss"] = float(sum(w * float(s[self.spec.loss]) for w, s in zip(weights, stores, strict=True)))
        if self.spec.predictions is not None:
            result["predictions"] = np.concatenate([s[self.spec.predictions] for s in stores])
        begun = time.perf_counter()
        self._apply([[s[g] for s in stores] for g in self.spec.gradients], weights)
        result["busy"] += time.perf_counter() - begun
        result["seconds"] = time.perf_counter() - started
        return result

    def _apply(self, gradients: list, weights: list) -> None:
        """Apply the rows-weighted sum of each variable's micro-batch gradients."""
        if not self.trainable:
            self.optimizer.iterations += 1
            return
        summed = []
        for var, parts in zip(self.trainable, gradients, strict=True):
            total = None
            for w, g in zip(weights, parts, strict=True):
                part = np.multiply(g, w.astype(var.dtype.np), dtype=var.dtype.np)
                total = part if total is None else np.add(total, part, out=total)
            summed.append(as_tensor(total))
        self.optimizer.apply_gradients(zip(summed, self.trainable, strict=True))


def _crosses(transfer: Transfer) -> bool:
    """Whether `transfer` goes from one worker to another."""
    return WorkerDevice.parse(transfer.source).worker != WorkerDevice.parse(transfer.destination).worker
