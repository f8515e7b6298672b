"""The program a replica runs: one batch's gradients (`tapeflow.trainers.train_step`'s
`batch_gradients`, the step fit runs, less the update) frozen into one graph, shipped to
workers as graph-file bytes (the format `tp.load_graph` reads), and `GradientRunner`,
which runs it there on pulled parameters.

The graph's inputs are the model's inputs, the labels and, when traced with them, the
sample weights of one shard (one graph per shard size, since shapes are static); its
outputs are the loss, one gradient per trainable variable the loss depends on, then the
predictions when the client needs them for metrics. The gradients are unscaled: under a
LossScaleOptimizer the graph differentiates the scaled loss (at the scale of the moment
it was traced) and divides the scale out, so the parameter servers apply true
gradients. With `sparse=True` a sparse gradient (an Embedding's) stays sparse: two
outputs, its rows and their ids, which the runner hands out as `SparseRows`; otherwise it
is densified. Variables the forward pass writes (batch-normalization statistics) are
read back after each run.

>>> import numpy as np
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.layers.Dense(2)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
>>> _ = model(x)
>>> graphs, layout, variables = freeze_gradient_step(model, x, y, shard_sizes=[4], with_predictions=False)
>>> runner = GradientRunner(graphs, layout)
>>> loss, arrays, _ = runner.run([v.numpy() for v in variables], x, y)
>>> [a.shape for a in arrays], float(loss) == float(model.loss(y, model(x)))
([(3, 2), (2,)], True)
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from tapeflow.distributed.sparse_rows import SparseRows
from tapeflow.graph.executor import check_feed
from tapeflow.graph.ir import ASSIGN
from tapeflow.graph.runnable import load_graph
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import IndexedSlices
from tapeflow.trainers.train_step import batch_gradients, unscaled


@dataclass(frozen=True)
class GradientLayout:
    """How the frozen step's state and outputs line up with the parameter-server variables:
    variable i is the graph state `state_names[i]`; the first `n_trainable` get gradients,
    sparse (as rows and ids) for the variables numbered in `sparse`."""

    state_names: tuple[str, ...]
    n_trainable: int
    with_predictions: bool
    sparse: tuple[int, ...] = ()
    weighted: bool = False  # the graph takes sample weights after the labels


def freeze_gradient_step(model, x, y, shard_sizes, with_predictions: bool, sparse: bool = False, sample_weight=None):
    """(graph-file bytes by shard size, layout, the model's Variables in layout order): one
    frozen gradient step per shard size in `shard_sizes`, for batches shaped like `x` (an
    array, or a tuple of arrays), `y` and, if given, `sample_weight`. A model that cannot
    be frozen raises tapeflow's FreezeError, naming the line. `sparse` keeps sparse
    gradients sparse (see the module docstring)."""
    graphs, layout, variables = trace_gradient_steps(
        model, x, y, shard_sizes, with_predictions, sparse=sparse, sample_weight=sample_weight
    )
    return {size: graph_bytes(graph) for size, graph in graphs.items()}, layout, variables


def trace_gradient_steps(
    model, x, y, shard_sizes, with_predictions: bool, forward=None, sparse: bool = False, sample_weight=None
):
    """As `freeze_gradient_step`, but the graphs themselves; `forward(inputs, training)`
    replaces the model's call (to place its layers on devices, say)."""
    trainable = list(model.trainable_weights)
    connected: list[int] = []
    sparse_at: list[int] = []

    def gradient_step(inputs, labels, weights=None):
        step = batch_gradients(model, inputs, labels, weights, trainable, forward)
        grads = unscaled(model.optimizer, step.gradients)
        connected[:] = [i for i, g in enumerate(grads) if g is not None]
        sparse_at[:] = [n for n, i in enumerate(connected) if sparse and isinstance(grads[i], IndexedSlices)]
        outputs = [step.loss]
        for n, i in enumerate(connected):
            outputs += [grads[i].values, grads[i].indices] if n in sparse_at else [grads[i]]
        return tuple(outputs + [step.y_pred] if with_predictions else outputs)

    graphs, layout, variables = {}, None, None
    weighted = sample_weight is not None
    for size in sorted(set(shard_sizes)):
        x_spec = [_spec(a, size) for a in x] if isinstance(x, tuple) else _spec(x, size)
        specs = [x_spec, _spec(y, size)] + ([_spec(sample_weight, size)] if weighted else [])
        graph = freeze(gradient_step, *specs, name=f"{model.name}_gradient_step")
        if layout is None:
            by_variable = {id(var): name for name, var in graph.state.items()}
            written = {node.attrs["variable"] for node in graph.nodes if node.op == ASSIGN}
            variables = [trainable[i] for i in connected]
            variables += [v for v in model.non_trainable_weights if by_variable.get(id(v)) in written]
            names = tuple(by_variable[id(v)] for v in variables)
            layout = GradientLayout(names, len(connected), with_predictions, tuple(sparse_at), weighted)
        graphs[size] = graph
    return graphs, layout, variables


def graph_bytes(graph) -> bytes:
    """The graph file of `graph`, as bytes to ship to a worker."""
    buffer = io.BytesIO()
    graph.save(buffer)
    return buffer.getvalue()


def _spec(array: np.ndarray, rows: int) -> TensorSpec:
    return TensorSpec((rows, *np.shape(array)[1:]), as_tensor(np.asarray(array[:1])).dtype)


class GradientRunner:
    """Runs the frozen gradient steps loaded from graph-file bytes (one per shard size)."""

    def __init__(self, graphs: dict[int, bytes], layout: GradientLayout):
        self.graphs = {size: load_graph(io.BytesIO(data)) for size, data in graphs.items()}
        self.layout = layout

    def run(self, parameters: list[np.ndarray], x, y, cancelled=None, sample_weight=None):
        """(loss, arrays, predictions) for one shard with the given parameters: `arrays`
        holds the gradients of the trainable variables, then the written state's values.
        `sample_weight` is required by, and only taken by, a step traced with weights.
        With `cancelled`, the graph stops between nodes with `RunCancelled` once it is true."""
        if self.layout.weighted != (sample_weight is not None):
            needs = "needs" if self.layout.weighted else "was traced without"
            raise ValueError(f"GradientRunner.run: this gradient step {needs} sample weights")
        graph = self.graphs[len(y)]
        state = [graph.state[name] for name in self.layout.state_names]
        for var, value in zip(state, parameters, strict=True):
            var.assign(as_tensor(value))
        feeds = [*x, y] if isinstance(x, tuple) else [x, y]
        feeds += [sample_weight] if sample_weight is not None else []
        feeds = [check_feed(graph.name, v, a) for v, a in zip(graph.inputs, feeds, strict=True)]
        outputs = graph.execute(feeds, cancelled)
        n, rest, arrays = self.layout.n_trainable, iter(outputs[1:]), []
        for i in range(n):
            values = next(rest)
            arrays.append(SparseRows(np.asarray(next(rest)).reshape(-1), values) if i in self.layout.sparse else values)
        arrays += [var.numpy() for var in state[n:]]
        return outputs[0], arrays, next(rest) if self.layout.with_predictions else None
