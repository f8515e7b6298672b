"""`predict` and `evaluate` on a cluster: a frozen inference graph, shipped to the workers
as graph-file bytes, runs on one contiguous part of the rows per worker.

Each worker gets only its part of the inputs (scattered to it directly) and the graph
bytes, runs its rows in batches of `batch_size`, and sends its results back; the client
puts them together in row order. `predict` gives the outputs of `model.predict` on the
client's weights (each row is computed alone, so batch boundaries do not matter).
`evaluate` cuts the rows at the same batch boundaries as `model.evaluate`: the workers
return each batch's predictions and loss, and the client updates the compiled metrics
batch by batch in order, so the result equals evaluating in one process.
"""

from __future__ import annotations

import io
import time

import numpy as np

from tapeflow.graph.executor import check_feed
from tapeflow.graph.runnable import load_graph
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze
from tapeflow.ops.registry import as_tensor


def predict_on_cluster(model, x, batch_size: int, client, workers: list[str], timeout: float) -> np.ndarray:
    """The outputs of `model` for `x` (an array or a tuple/list of arrays), computed on
    `workers` through Dask's `client`; every wait is bounded by `timeout` seconds. A model
    with several outputs gives a list of arrays."""
    inputs = _input_arrays("predict", x)
    _build(model, inputs)
    buffer = io.BytesIO()
    model.freeze().save(buffer)
    bounds = np.linspace(0, len(inputs[0]), len(workers) + 1).round().astype(int)
    parts = _run_parts(
        client, workers, timeout, "predict", _predict_part, buffer.getvalue(), inputs, bounds, batch_size
    )
    if not parts:
        return np.zeros((0,))
    if isinstance(parts[0], list):
        return [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]
    return np.concatenate(parts)


def evaluate_on_cluster(model, x, y, batch_size: int, client, workers: list[str], timeout: float) -> dict:
    """The loss and compiled metrics of `model` over (x, y) as a dict of floats, equal to
    `model.evaluate(x, y, batch_size)`: the batches' forward passes and losses run on the
    workers, the metrics are updated here."""
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
    bounds = np.minimum(np.linspace(0, n_batches, len(workers) + 1).round().astype(int) * batch_size, len(labels))
    arrays = (*inputs, labels)
    parts = _run_parts(client, workers, timeout, "evaluate", _evaluate_part, graphs, arrays, bounds, batch_size)
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


def _run_parts(client, workers, timeout: float, method: str, function, graphs, arrays, bounds, batch_size: int) -> list:
    """`function(graphs, part, batch_size)` on each worker's rows bounds[i]:bounds[i+1]
    (empty parts skipped), results in row order; every wait bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    futures = []
    for worker, start, stop in zip(workers, bounds[:-1], bounds[1:], strict=True):
        if stop > start:
            part = client.scatter([a[start:stop] for a in arrays], workers=[worker], hash=False, timeout=timeout)
            futures.append(
                client.submit(function, graphs, part, batch_size, workers=[worker], allow_other_workers=False)
            )
    return [_result(method, f, deadline, timeout) for f in futures]


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


def _result(method: str, future, deadline: float, timeout: float):
    try:
        return future.result(timeout=max(deadline - time.monotonic(), 0.01))
    except TimeoutError:
        if future.done():
            return future.result()
        raise TimeoutError(f"{method}: a worker did not return its part within {timeout:g}s") from None
