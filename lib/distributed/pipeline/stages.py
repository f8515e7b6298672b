"""The stages of a partitioned graph on workers: `StageWorker`, a Dask actor that holds
the partitions of one device and runs them micro-batch by micro-batch, sending values to
the other stages worker to worker (by calls on their actors, or through queues on their
workers: `queue_links`); `stage_specs`, which says what each actor runs; and
`StageGroup`, the client's handle on them, with every wait bounded and lost workers named.
docs/distributed.md tells how a step flows through the stages.

Each stage applies its own variables' update once a step's micro-batches are done. With
`global_clipnorm` the stages first send each other their gradients' sums of squares (one
value per stage and step, by a call on each other stage's actor), and every stage scales
by the factor of the sum over all of them; `clipnorm` needs nothing more, as each variable
lives on one stage.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tapeflow import optimizers
from tapeflow.devices import WorkerDevice
from tapeflow.distributed.gradient_graph import graph_bytes
from tapeflow.distributed.pipeline.compression import decode, encode
from tapeflow.distributed.pipeline.queue_links import QueueLinks, make_queues
from tapeflow.distributed.runtime.liveness import WorkerLost, find_lost, lost_workers
from tapeflow.distributed.runtime.local_actor import in_process
from tapeflow.distributed.runtime.tasks import actor_answer, start_actor, stop_actors, watched_result
from tapeflow.graph.partition import Transfer, partition
from tapeflow.graph.runnable import load_graph
from tapeflow.ops import sparse
from tapeflow.ops.math import cast
from tapeflow.ops.registry import as_tensor
from tapeflow.ops.transfer import rendezvous
from tapeflow.optimizers.optimizer import clip_scale, squared_norm
from tapeflow.profiler.recording import span

PROBE_WAIT = 2.0  # seconds each stage gets to answer a probe when a call on the stages is late
SQUARES = -1  # the micro-batch number under which the stages send each other their sums of squares


@dataclass(frozen=True)
class StagePartition:
    """One partition as shipped: its graph file and the transfers it receives and sends."""

    graph: bytes
    recvs: tuple[Transfer, ...]
    sends: tuple[Transfer, ...]


@dataclass(frozen=True)
class StageSpec:
    """What the actor of `device` runs: its partitions by micro-batch size (in rank order;
    key None for a graph of any batch size), the graph inputs it reads, the variables it
    trains (state names) with the values of their gradients and whether weight decay
    applies, the loss it computes (or None) and the other graph outputs it computes and
    returns (`outputs`, value names), the optimizer (None when it only runs forward), the
    compression, the transport of the values it receives and sends ("actors" or
    "queues") and the timeout of every wait."""

    device: str
    partitions: dict
    feeds: tuple[str, ...]
    variables: tuple[str, ...] = ()
    gradients: tuple[str, ...] = ()
    decays: tuple[bool, ...] = ()
    loss: str | None = None
    outputs: tuple[str, ...] = ()
    optimizer_config: dict | None = None
    compression: str | None = None
    transport: str = "actors"
    timeout: float = 60.0


@dataclass(frozen=True)
class Roles:
    """What the graphs' outputs mean, by position: the loss (or None), then the gradient of
    each variable of `variables` (state names, with whether weight decay applies), and
    `outputs`, the positions of those the client gets back."""

    loss: int | None = None
    variables: tuple[str, ...] = ()
    decays: tuple[bool, ...] = ()
    outputs: tuple[int, ...] = ()
    optimizer_config: dict | None = None


def stage_specs(
    graphs: dict, devices: list[str], roles: Roles, compression, timeout: float, transport: str = "actors"
) -> list[StageSpec]:
    """One StageSpec per device of `devices`, from the partitions of each graph of `graphs`
    (by micro-batch size); the variables of `roles` are trained where they live."""
    by_device: dict[str, dict] = {d: {} for d in devices}
    for size, graph in graphs.items():
        for part in partition(graph, devices).partitions:
            by_device[part.device].setdefault(size, []).append(part)
    graph = next(iter(graphs.values()))
    outputs = [v.name for v in graph.outputs]
    first = 0 if roles.loss is None else roles.loss + 1
    gradient_of = dict(zip(roles.variables, outputs[first : first + len(roles.variables)], strict=True))
    decays = dict(zip(roles.variables, roles.decays, strict=True))
    specs = []
    for where in devices:
        by_size = by_device[where]
        if not by_size or len({len(parts) for parts in by_size.values()}) > 1:
            raise ValueError(f"model parallel: the stage on {where} has no partitions, or different ones per size")
        parts = next(iter(by_size.values()))
        made = {name for p in parts for name in p.output_names}
        read = {name for p in parts for name in p.input_names}
        held = [name for name in roles.variables if any(name in p.graph.state for p in parts)]
        for name in held:
            if gradient_of[name] not in made:
                raise ValueError(f"model parallel: the gradient of '{name}' is not computed on {where}, which holds it")
        specs.append(
            StageSpec(
                device=where,
                partitions={
                    size: tuple(StagePartition(graph_bytes(p.graph), tuple(p.recvs), tuple(p.sends)) for p in ps)
                    for size, ps in by_size.items()
                },
                feeds=tuple(v.name for v in graph.inputs if v.name in read),
                variables=tuple(held),
                gradients=tuple(gradient_of[name] for name in held),
                decays=tuple(decays[name] for name in held),
                loss=outputs[roles.loss] if roles.loss is not None and outputs[roles.loss] in made else None,
                outputs=tuple(outputs[i] for i in roles.outputs if outputs[i] in made),
                optimizer_config=roles.optimizer_config,
                compression=compression,
                transport=transport,
                timeout=timeout,
            )
        )
    return specs


class StageWorker:
    """The actor of one device: its partitions, its variables and their optimizer, and an
    inbox for the values other stages send it by calls (or its ends of the queues)."""

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
        self.optimizer, self.global_clipnorm = None, None
        if spec.optimizer_config is not None:
            config = spec.optimizer_config["config"]
            # the global norm takes in every stage's gradients: the stage clips by it itself
            self.global_clipnorm = config.get("global_clipnorm")
            if self.global_clipnorm is not None:
                config = {**config, "global_clipnorm": None}
            self.optimizer = optimizers.get({**spec.optimizer_config, "config": config})
            self.optimizer.build(self.trainable)
            self.optimizer.exclude_from_weight_decay(
                var_list=[v for v, d in zip(self.trainable, spec.decays, strict=True) if not d]
            )
        self.data: dict[str, np.ndarray] = {}
        self.peers: dict = {}
        self.links: QueueLinks | None = None
        self.inbox: dict[tuple, np.ndarray] = {}
        self.stopped = False
        self._arrived = threading.Condition()

    # ------------------------------------------------------------ setup
    async def connect(self, peers: dict, queues: dict | None = None) -> None:
        """Take the actors of the other devices, by device name, and with the "queues"
        transport the transfer queues (proxies by transfer key)."""
        self.peers = dict(peers)
        if self.spec.transport == "queues":
            if self.links is not None:
                self.links.close()
            self.links = QueueLinks(queues, self.spec.device, self.spec.timeout)

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

    async def probe(self) -> str:
        """The device: an answer at once from a worker that runs, whatever its stage is doing."""
        return self.spec.device

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
        with span("recv", args={"from": transfer.source, "value": transfer.value, "step": step}) as received:
            value = self._arrival(step, micro_batch, transfer)
            received.moved(value)
        return value

    def _arrival(self, step: int, micro_batch: int, transfer: Transfer) -> np.ndarray:
        if self.links is not None:
            compression = self._compression(transfer)
            payload = self.links.take(step, micro_batch, transfer, compression, lambda: self.stopped)
            return decode(payload, compression, transfer.dtype)
        where = (step, micro_batch, transfer.key)
        with self._arrived:
            arrived = self._arrived.wait_for(lambda at=where: at in self.inbox or self.stopped, self.spec.timeout)
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
    def _partitions(self, rows) -> list:
        """The partitions for a micro-batch of row numbers `rows` (None: the whole data), those
        of its size or else those of any size (key None)."""
        found = self.partitions.get(None if rows is None else len(rows), self.partitions.get(None))
        if found is None:
            raise ValueError(f"{self.spec.device}: no partitions for micro-batches of {len(rows)} rows")
        return found

    async def run_step(self, step: int, micro_rows: list, rows: int) -> dict:
        """Run `step` over the micro-batches of row numbers `micro_rows` (of a batch of `rows`
        rows; [None] runs the whole data once), then apply the update. Returns the loss and
        the outputs where this device computes them (outputs joined over the micro-batches
        along their first axis), the seconds spent computing (partitions and update) and
        the bytes sent."""
        return await asyncio.to_thread(self._step, step, micro_rows, rows)

    def _step(self, step: int, micro_rows: list, rows: int) -> dict:
        started = time.perf_counter()
        with self._arrived:  # values of an abandoned earlier step are of no use any more
            self.inbox = {k: v for k, v in self.inbox.items() if k[0] >= step}
        stores = [{n: self.data[n] if r is None else self.data[n][r] for n in self.spec.feeds} for r in micro_rows]
        peers = {device: in_process(actor) for device, actor in self.peers.items()}
        calls, busy, sent, between = [], 0.0, 0, 0
        for index in range(len(self._partitions(micro_rows[0]))):
            for mb, store in enumerate(stores):
                graph, part = self._partitions(micro_rows[mb])[index]
                table = {t.key: self._take(step, mb, t) for t in part.recvs}
                begun = time.perf_counter()
                with rendezvous(table):  # the partition's recv nodes take from it, its send nodes give to it
                    results = graph.execute([store[v.name] for v in graph.inputs])
                busy += time.perf_counter() - begun
                store.update((v.name, a) for v, a in zip(graph.outputs, results, strict=True))
                for t in part.sends:
                    with span("send", args={"to": t.destination, "value": t.value, "step": step}) as sending:
                        payload = encode(table.pop(t.key), self._compression(t))
                        if self.links is not None:
                            calls.append((t, self.links.send(step, mb, t, payload)))
                        else:
                            calls.append((t, peers[t.destination].receive(step, mb, t.key, payload)))
                        sending.moved(payload)
                    sent += payload.nbytes
                    between += payload.nbytes if _crosses(t) else 0
        for t, call in calls:
            actor_answer(call, self.spec.timeout, f"{t.destination} (receiving '{t.value}', step {step})")
        result = {"busy": busy, "bytes": sent, "bytes_between_workers": between}
        weights = [np.float32(1.0 if r is None else len(r) / rows) for r in micro_rows]
        if self.spec.loss is not None:
            result["loss"] = float(sum(w * float(s[self.spec.loss]) for w, s in zip(weights, stores, strict=True)))
        result["outputs"] = {name: _joined([s[name] for s in stores]) for name in self.spec.outputs}
        begun = time.perf_counter()
        self._apply(step, [[s[g] for s in stores] for g in self.spec.gradients], weights)
        result["busy"] += time.perf_counter() - begun
        result["seconds"] = time.perf_counter() - started
        return result

    def _apply(self, step: int, gradients: list, weights: list) -> None:
        """Apply the rows-weighted sum of each variable's micro-batch gradients."""
        if self.optimizer is None:
            return
        if not self.trainable:
            if self.global_clipnorm is not None:
                self._global_squares(step, 0.0)  # the other stages wait for this stage's share
            self.optimizer.iterations += 1
            return
        summed = []
        for var, parts in zip(self.trainable, gradients, strict=True):
            total = None
            for w, g in zip(weights, parts, strict=True):
                part = np.multiply(g, w.astype(var.dtype.np), dtype=var.dtype.np)
                total = part if total is None else np.add(total, part, out=total)
            summed.append(as_tensor(total))
        if self.global_clipnorm is not None:
            own = sum(cast(squared_norm(g), "float64") for g in summed)
            total = as_tensor(self._global_squares(step, float(own)))
            scale = clip_scale(total, self.global_clipnorm, global_norm=True)
            summed = [sparse.scale_gradient(g, cast(scale, g.dtype)) for g in summed]
        self.optimizer.apply_gradients(zip(summed, self.trainable, strict=True))

    def _global_squares(self, step: int, own: float) -> np.float64:
        """The sum over every stage of its gradients' sum of squares of `step` (`own` here),
        added in the stages' order so that every stage gets the same number."""
        key = f"sum of squares from {self.spec.device}"
        others = [d for d in self.peers if d != self.spec.device]
        calls = [(d, in_process(self.peers[d]).receive(step, SQUARES, key, own)) for d in others]
        for device, call in calls:
            actor_answer(call, self.spec.timeout, f"{device} (receiving the sum of squares of step {step})")
        shares = {self.spec.device: own}
        with self._arrived:
            for device in others:
                where = (step, SQUARES, f"sum of squares from {device}")
                arrived = self._arrived.wait_for(lambda at=where: at in self.inbox or self.stopped, self.spec.timeout)
                if self.stopped:
                    raise RuntimeError(
                        f"{self.spec.device}: stopped while waiting for the sums of squares of step {step}"
                    )
                if not arrived:
                    raise TimeoutError(
                        f"{self.spec.device}: the sum of squares of step {step} did not arrive from {device} "
                        f"within {self.spec.timeout:g}s"
                    )
                shares[device] = self.inbox.pop(where)
        return np.float64(sum(shares[d] for d in self.peers or shares))  # the peers are every stage, this one too


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One micro-batch's value as it is; several joined along the first axis (0-d ones stacked)."""
    if len(parts) == 1:
        return parts[0]
    return np.stack(parts) if np.ndim(parts[0]) == 0 else np.concatenate(parts)


def _answered(call, deadline: float) -> bool:
    """Whether an actor `call` answered by `deadline` (time.monotonic)."""
    try:
        call.result(timeout=max(deadline - time.monotonic(), 0.01))
    except Exception:  # noqa: BLE001 - whatever the reason, it did not answer
        return False
    return True


def _crosses(transfer: Transfer) -> bool:
    """Whether `transfer` goes from one worker to another."""
    return WorkerDevice.parse(transfer.source).worker != WorkerDevice.parse(transfer.destination).worker


@dataclass
class StepAnswers:
    """What the stages answered for one step: the loss (None where no stage computes it),
    the outputs by value name, the seconds each stage computed, and the bytes sent."""

    loss: float | None
    outputs: dict
    busy: tuple[float, ...]
    bytes_sent: int
    bytes_between_workers: int
    seconds: float = field(default=0.0)


class StagesLost(RuntimeError):
    """Workers holding pipeline stages left the cluster."""

    def __init__(self, workers: list[str], stages: list[str], during: str):
        self.workers, self.stages = sorted(workers), list(stages)
        super().__init__(
            f"workers {self.workers} holding pipeline stages {self.stages} left the cluster during {during}"
        )


class StageGroup:
    """The client's handle on the StageWorkers of one partitioned graph: starts them on
    `workers` (one per spec, `workers[i]` for `specs[i]`), connects them and gives each
    the data `columns` it reads; every call waits at most `timeout` seconds and asks the
    scheduler every half second whether a worker holding a stage left (then the wait
    raises WorkerLost). A call not answered in time ends with a TimeoutError naming the
    stages that do not answer a probe. Errors name `method` (the Model method running).
    With the "queues" transport, each transfer gets a queue on its receiver's worker, room
    for the values of two steps of `micro_batches`. `close` releases the actors and queues;
    a worker lost while they start raises StagesLost."""

    def __init__(
        self,
        cluster,
        specs: list[StageSpec],
        workers: list[str],
        columns: dict,
        timeout: float,
        method: str = "fit",
        micro_batches: int = 1,
    ):
        self.cluster, self.specs, self.workers, self.timeout = cluster, specs, list(workers), float(timeout)
        self.method, self.micro_batches = method, micro_batches
        self.devices = [spec.device for spec in specs]
        self.actors, self._held, self.queues = [], [], {}
        try:
            self._start(columns)
        except Exception as error:
            failure = self.failure(error, "the start of the stages")
            self.close()
            if failure is error:
                raise
            raise failure from error
        except BaseException:
            self.close()
            raise

    def _start(self, columns: dict) -> None:
        client = self.cluster.client
        self._held = [
            start_actor(client, StageWorker, spec, worker=w) for spec, w in zip(self.specs, self.workers, strict=True)
        ]
        self.actors = self.answers(self._held, "start")
        peers = dict(zip(self.devices, self.actors, strict=True))
        if any(spec.transport == "queues" for spec in self.specs):
            receivers = [
                (t, spec.compression if _crosses(t) else None, w)
                for spec, w in zip(self.specs, self.workers, strict=True)
                for parts in spec.partitions.values()
                for p in parts
                for t in p.recvs
            ]
            self.queues = make_queues(self.cluster, receivers, 2 * self.micro_batches + 2)
        self.answers([a.connect(peers, self.queues) for a in self.actors], "connect")
        data = [{n: columns[n] for n in spec.feeds} for spec in self.specs]
        self.answers([a.load_data(d) for a, d in zip(self.actors, data, strict=True)], "data")

    def answers(self, calls, what: str) -> list:
        """The answers of one call per stage (together at most `timeout` seconds). A stage
        that waits for another may be the one late, so a TimeoutError names the stages that
        do not answer a probe, not the first one waited for."""
        deadline = time.monotonic() + self.timeout
        try:
            return [
                watched_result(call, f"the stage {d} on {w} ({what})", self.timeout, self._watch, deadline, self.method)
                for call, d, w in zip(calls, self.devices, self.workers, strict=True)
            ]
        except TimeoutError:
            if not self.actors:  # the actors are starting: nothing to probe yet
                raise
            late = self._late(calls)
            raise TimeoutError(f"{self.method}: {what} did not complete within {self.timeout:g}s ({late})") from None

    def _late(self, calls) -> str:
        """Which stages do not answer a probe, or, when all answer, which have not finished `calls`."""
        silent = self.silent(PROBE_WAIT)
        if silent:
            return f"no answer within {PROBE_WAIT:g}s from {', '.join(silent)}"
        named = zip(calls, self.devices, self.workers, strict=True)
        return ", ".join(f"the stage {d} on {w}" for call, d, w in named if not call.done()) + " still busy"

    def silent(self, wait: float) -> list[str]:
        """The stages (as "the stage DEVICE on WORKER") that do not answer a probe within `wait` seconds."""
        probes = []
        for actor in self.actors:
            try:
                probes.append(actor.probe())
            except Exception:  # noqa: BLE001 - whatever the reason, it did not answer
                probes.append(None)
        deadline, silent = time.monotonic() + wait, []
        for probe, d, w in zip(probes, self.devices, self.workers, strict=True):
            if probe is None or not _answered(probe, deadline):
                silent.append(f"the stage {d} on {w}")
        return silent

    def step(self, step: int, micro_rows: list, rows: int) -> StepAnswers:
        """Run `step` on every stage over the micro-batches of row numbers `micro_rows`."""
        started = time.perf_counter()
        answers = self.answers([a.run_step(step, micro_rows, rows) for a in self.actors], f"step {step}")
        return StepAnswers(
            loss=next((a["loss"] for a in answers if "loss" in a), None),
            outputs={name: value for a in answers for name, value in a["outputs"].items()},
            busy=tuple(a["busy"] for a in answers),
            bytes_sent=sum(a["bytes"] for a in answers),
            bytes_between_workers=sum(a["bytes_between_workers"] for a in answers),
            seconds=time.perf_counter() - started,
        )

    def _watch(self) -> None:
        lost = lost_workers(self.workers, self.cluster.workers)
        if lost:
            raise WorkerLost(lost)

    def failure(self, error: BaseException, during: str) -> BaseException:
        """What to raise for `error`: after releasing the stages still waiting, StagesLost
        naming the workers that left and their stages, or `error` itself if none left."""
        if isinstance(error, StagesLost):
            return error
        self._stop()
        lost = find_lost(self.cluster, self.workers, error)
        if not lost:
            return error
        return StagesLost(lost, [d for d, w in zip(self.devices, self.workers, strict=True) if w in lost], during)

    def _stop(self) -> None:
        """Release the stages still alive from a failed step (best effort, a few seconds)."""
        if not self.actors:  # they did not all start: nothing runs a step
            return
        try:
            alive = self.cluster.workers
        except Exception:  # noqa: BLE001 - a scheduler that does not answer: nothing to release
            return
        stop_actors(zip(self.actors, self.workers, strict=True), alive)

    def close(self) -> None:
        """Release the stage actors and the queues between them (safe to call twice)."""
        if self._held:
            self.cluster.client.cancel(self._held, force=True)
        self._held, self.actors, self.queues = [], [], {}  # a queue lives as long as the client's proxy
