"""`predict` and `evaluate` on a cluster: a frozen inference graph, shipped to the workers
as graph-file bytes, runs on one contiguous part of the rows per worker.

Each worker gets only its part of the inputs (scattered to it directly) and the graph
bytes, runs its rows in batches of `batch_size`, and sends its results back; the client
puts them together in row order. `predict` gives the outputs of `model.predict` on the
client's weights (each row is computed alone, so batch boundaries do not matter).
`evaluate` cuts the rows at the same batch boundaries as `model.evaluate`: the workers
return each batch's predictions and loss, and the client updates the compiled metrics
batch by batch in order, so the result equals evaluating in one process.

A part whose worker dies runs again on a worker alive, once the cluster has as many
workers as the strategy needs again (its nanny's replacement, say), as `fit` waits for
them; when none joins in time, the error names the worker lost.
"""

from __future__ import annotations

import concurrent.futures
import io
import time

import numpy as np

from tapeflow.distributed.runtime.liveness import WorkerLost, find_lost, lost_workers, wait_for_workers
from tapeflow.distributed.runtime.tasks import watched_result
from tapeflow.graph.executor import check_feed
from tapeflow.graph.runnable import load_graph
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze
from tapeflow.ops.registry import as_tensor

MAX_LOSSES = 3  # times the worker running one part may die before predict or evaluate gives up


def predict_on_cluster(model, x, batch_size: int, cluster, parts: int, need: int, timeout: float) -> np.ndarray:
    """The outputs of `model` for `x` (an array or a tuple/list of arrays), computed in
    `parts` parts on the workers of `cluster` once `need` of them are alive; every wait is
    bounded by `timeout` seconds. A model with several outputs gives a list of arrays."""
    inputs = _input_arrays("predict", x)
    _build(model, inputs)
    buffer = io.BytesIO()
    model.freeze().save(buffer)
    bounds = np.linspace(0, len(inputs[0]), parts + 1).round().astype(int)
    work = _Parts(cluster, need, timeout, "predict")
    parts = work.run(_predict_part, buffer.getvalue(), inputs, bounds, batch_size)
    if isinstance(parts[0], list):
        return [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]
    return np.concatenate(parts)


def evaluate_on_cluster(model, x, y, batch_size: int, cluster, parts: int, need: int, timeout: float) -> dict:
    """The loss and compiled metrics of `model` over (x, y) as a dict of floats, equal to
    `model.evaluate(x, y, batch_size)`: the batches' forward passes and losses run on the
    workers (in `parts` parts, as `predict_on_cluster`), the metrics are updated here."""
    inputs = _input_arrays("evaluate", x)
    if y is None:
        raise ValueError("evaluate: distribute= with arrays needs y")
    labels = np.asarray(y)
    if len(labels) != len(inputs[0]):
        raise ValueError(f"evaluate: x has {len(inputs[0])} rows but y has {len(labels)}")
    _build(model, inputs)
    sizes = {min(batch_size, len(labels)), len(labels) % batch_size} - {0}
    graphs = _frozen_test_steps(model, inputs, labels, sizes)
    n_batches = -(-len(labels) // batch_size)
    bounds = np.minimum(np.linspace(0, n_batches, parts + 1).round().astype(int) * batch_size, len(labels))
    work = _Parts(cluster, need, timeout, "evaluate")
    parts = work.run(_evaluate_part, graphs, (*inputs, labels), bounds, batch_size)
    model.reset_metrics()
    logs = {}
    start = 0
    for batch in (b for part in parts for b in part):
        loss, predictions = batch[0], batch[1:]
        y_batch = as_tensor(labels[start : start + len(predictions[0])])
        start += len(predictions[0])
        y_pred = [as_tensor(p) for p in predictions] if len(predictions) > 1 else as_tensor(predictions[0])
        logs = model.update_metrics(y_batch, y_pred, as_tensor(loss))
    return {k: float(v) for k, v in logs.items()}


def _input_arrays(method: str, x) -> tuple[np.ndarray, ...]:
    inputs = tuple(np.asarray(a) for a in x) if isinstance(x, tuple | list) else (np.asarray(x),)
    if any(len(a) != len(inputs[0]) for a in inputs):
        raise ValueError(f"{method}: the inputs have different numbers of rows {[len(a) for a in inputs]}")
    if not len(inputs[0]):
        raise ValueError(f"{method}: the data is empty: x has no samples")
    return inputs


def _build(model, inputs) -> None:
    if not model.built:
        model([a[:1] for a in inputs] if len(inputs) > 1 else inputs[0][:1], training=False)


def _frozen_test_steps(model, inputs, labels, sizes) -> dict[int, bytes]:
    """Graph-file bytes of (loss, predictions...) for a batch, one graph per batch size
    (a loss's mean needs the batch's static size)."""

    def test_step(x, y):
        predictions = model(x, training=False)
        outputs = predictions if isinstance(predictions, list | tuple) else [predictions]
        return (model.compute_loss(y=y, y_pred=predictions), *outputs)

    graphs = {}
    for size in sizes:
        specs = [TensorSpec((size, *a.shape[1:]), as_tensor(a[:1]).dtype) for a in inputs]
        y_spec = TensorSpec((size, *labels.shape[1:]), as_tensor(labels[:1]).dtype)
        buffer = io.BytesIO()
        freeze(test_step, specs if len(specs) > 1 else specs[0], y_spec, name=f"{model.name}_test_step").save(buffer)
        graphs[size] = buffer.getvalue()
    return graphs


class _Parts:
    """Parts of the rows run on the workers of `cluster`, each by one task on one worker,
    with every wait bounded by `timeout`; a part whose worker died runs again elsewhere."""

    def __init__(self, cluster, need: int, timeout: float, method: str):
        self.cluster, self.need, self.timeout, self.method = cluster, need, timeout, method
        self.lost: list[str] = []

    def run(self, function, graphs, arrays, bounds, batch_size: int) -> list:
        """`function(graphs, part, batch_size)` over each part bounds[i]:bounds[i+1] of `arrays`
        (empty parts skipped); the results in row order."""
        rows = [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        results, losses, pending = {}, [0] * len(rows), list(range(len(rows)))
        while pending:
            workers = wait_for_workers(self.cluster, self.need, self.timeout, self.method, "inference", self.lost)
            placed = [(i, workers[k % len(workers)]) for k, i in enumerate(pending)]
            started = [(i, w, self._submit(function, graphs, arrays, rows[i], w, batch_size)) for i, w in placed]
            pending, deadline = [], time.monotonic() + self.timeout
            for i, worker, future in started:
                try:
                    results[i] = self._result(future, worker, rows[i], deadline)
                except Exception as error:
                    if not self._lost(worker, error):
                        raise
                    losses[i] += 1
                    if losses[i] >= MAX_LOSSES:
                        raise RuntimeError(
                            f"{self.method}: workers died {losses[i]} times in a row running rows "
                            f"{rows[i][0]}:{rows[i][1]} (last lost: {[worker]}); giving up"
                        ) from error
                    pending.append(i)
        return [results[i] for i in range(len(rows))]

    def _submit(self, function, graphs, arrays, rows: tuple[int, int], worker: str, batch_size: int):
        """The future of `function` on `worker` over `rows` of `arrays` (scattered to it), or
        the error that stopped it from starting."""
        client, (start, stop) = self.cluster.client, rows
        try:
            part = client.scatter([a[start:stop] for a in arrays], workers=[worker], hash=False, timeout=self.timeout)
            return client.submit(function, graphs, part, batch_size, workers=[worker], allow_other_workers=False)
        except Exception as error:  # noqa: BLE001 - raised again when the part's result is asked for
            return error

    def _result(self, future, worker: str, rows: tuple[int, int], deadline: float):
        if isinstance(future, Exception):
            raise future
        what = f"the worker {worker} (rows {rows[0]}:{rows[1]})"

        def watch():
            if lost_workers([worker], self.cluster.workers):
                raise WorkerLost([worker])

        return watched_result(future, what, self.timeout, watch, deadline, method=self.method)

    def _lost(self, worker: str, error: BaseException) -> bool:
        """Whether `error` came from `worker` leaving the cluster (remembered); a cancelled
        task with its worker still there is an error of its own."""
        if find_lost(self.cluster, [worker], error):
            self.lost.append(worker)
            return True
        if isinstance(error, concurrent.futures.CancelledError):
            raise RuntimeError(f"{self.method}: the task on {worker} was cancelled") from error
        return False


def _predict_part(graph_bytes: bytes, inputs: list, batch_size: int):
    """Run the inference graph over `inputs` in batches, on a worker."""
    graph = load_graph(io.BytesIO(graph_bytes))
    outputs = []
    for start in range(0, len(inputs[0]), batch_size):
        result = graph(*[a[start : start + batch_size] for a in inputs])
        outputs.append([r.numpy() for r in result] if isinstance(result, list | tuple) else result.numpy())
    if isinstance(outputs[0], list):
        return [np.concatenate([o[i] for o in outputs]) for i in range(len(outputs[0]))]
    return np.concatenate(outputs)


def _evaluate_part(graphs: dict[int, bytes], arrays: list, batch_size: int) -> list:
    """[loss, predictions...] of each batch of `arrays` (inputs, then labels), on a worker,
    with the test-step graph of the batch's size."""
    loaded = {size: load_graph(io.BytesIO(data)) for size, data in graphs.items()}
    results = []
    for start in range(0, len(arrays[0]), batch_size):
        feeds = [a[start : start + batch_size] for a in arrays]
        graph = loaded[len(feeds[0])]
        results.append(graph.execute([check_feed(graph.name, v, a) for v, a in zip(graph.inputs, feeds, strict=True)]))
    return results
