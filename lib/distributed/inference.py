"""`predict` on a cluster: the model's inference graph (`model.freeze()`), shipped to the
workers as graph-file bytes, runs on one contiguous part of the rows per worker.

Each worker gets only its part of the inputs (scattered to it directly) and the graph
bytes, runs its rows in batches of `batch_size`, and sends its outputs back; the client
concatenates them in row order. The outputs equal `model.predict` on the client's weights
(to float32 rounding across batch boundaries: none, since each row is computed alone).
"""

from __future__ import annotations

import io
import time

import numpy as np

from tapeflow.graph.runnable import load_graph


def predict_on_cluster(strategy, model, x, batch_size: int) -> np.ndarray:
    """The outputs of `model` for `x` (an array or a tuple/list of arrays), computed on the
    first `strategy.replicas` workers of `strategy.cluster`; every wait is bounded by
    `strategy.timeout`. A model with several outputs gives a list of arrays."""
    client, timeout = strategy.cluster.client, strategy.timeout
    inputs = tuple(np.asarray(a) for a in x) if isinstance(x, tuple | list) else (np.asarray(x),)
    n = len(inputs[0])
    if any(len(a) != n for a in inputs):
        raise ValueError(f"predict: the inputs have different numbers of rows {[len(a) for a in inputs]}")
    if not model.built:
        model([a[:1] for a in inputs] if len(inputs) > 1 else inputs[0][:1], training=False)
    buffer = io.BytesIO()
    model.freeze().save(buffer)
    workers = strategy.workers()[: strategy.replicas]
    bounds = np.linspace(0, n, len(workers) + 1).round().astype(int)
    deadline = time.monotonic() + timeout
    futures = []
    for worker, start, stop in zip(workers, bounds[:-1], bounds[1:], strict=True):
        if stop > start:
            part = client.scatter([a[start:stop] for a in inputs], workers=[worker], hash=False, timeout=timeout)
            futures.append(
                client.submit(
                    _predict_part, buffer.getvalue(), part, batch_size, workers=[worker], allow_other_workers=False
                )
            )
    parts = [_result(f, deadline, timeout) for f in futures]
    if not parts:
        return np.zeros((0,))
    if isinstance(parts[0], list):
        return [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]
    return np.concatenate(parts)


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


def _result(future, deadline: float, timeout: float):
    try:
        return future.result(timeout=max(deadline - time.monotonic(), 0.01))
    except TimeoutError:
        if future.done():
            return future.result()
        raise TimeoutError(f"predict: a worker did not return its part within {timeout:g}s") from None
