"""`tp.Graph`: the graph IR with running, saving and exporting added.

`tapeflow.graph.ir.GraphIR` is the data structure; this subclass is what freezing and
loading give: calling it runs the whole graph (outputs and state writes) with an
executor it builds once and drops when the graph is edited, `run` executes part of it,
and `save` and `export_onnx` write it out.

>>> import numpy as np
>>> g = Graph("sq")
>>> x = g.add_input("x", (2,), "float32")
>>> g.outputs = g.add_node("multiply", [x, x], {}, [((2,), "float32")])
>>> g(np.array([2.0, 3.0], np.float32)).numpy().tolist()
[4.0, 9.0]
"""

from __future__ import annotations

import numpy as np

from tapeflow.devices import Device
from tapeflow.graph import ir, onnx
from tapeflow.graph.executor import Executor, check_feed
from tapeflow.graph.file_format import reader, writer
from tapeflow.graph.ir import GraphError, SparseGradient
from tapeflow.graph.structure import flatten_structure, rebuild_structure
from tapeflow.tensor import IndexedSlices, Tensor


class Graph(ir.GraphIR):
    """A dataflow graph that runs: `graph(*inputs)`, `graph.run(feeds, fetches)`,
    `graph.save(path)` and `graph.export_onnx(path)`."""

    def __init__(self, name: str = "graph", device: Device | None = None):
        super().__init__(name, device)
        self._executor = None
        self._one_array_call = None

    def changed(self) -> None:
        self._executor = None
        self._one_array_call = None

    def execute(self, arrays, cancelled=None) -> list[np.ndarray]:
        """Run the whole graph on one checked array per input; returns the output arrays.
        With `cancelled`, the run stops with `RunCancelled` between nodes once it returns true."""
        if self._executor is None:
            self._executor = Executor(self, self.outputs, self.inputs, with_updates=True)
        return self._executor.run(arrays, cancelled)

    def __call__(self, *args):
        """Run the whole graph (outputs and state writes) on positional inputs;
        returns tensors in the structure the traced function returned."""
        one = self._one_array_call  # (shape, dtype, device) a graph of one input and output last took
        if one is not None and len(args) == 1:
            a = args[0]
            if type(a) is np.ndarray and a.shape == one[0] and a.dtype is one[1]:
                return Tensor._wrap(self._executor.run((a,))[0], one[2])
        inputs = self.inputs
        leaves = args  # the common case: one array or tensor per input
        if len(args) != len(inputs):
            leaves, _ = flatten_structure(args)
        else:
            for a in args:
                if type(a) is not np.ndarray and not isinstance(a, Tensor):
                    leaves, _ = flatten_structure(args)
                    break
        if len(leaves) != len(inputs):
            raise GraphError(
                f"{self.name}: expected {len(inputs)} inputs ({', '.join(v.name for v in inputs)}), got {len(leaves)}"
            )
        fed = [check_feed(self.name, v, a) for v, a in zip(inputs, leaves, strict=True)]
        results = self.execute(fed)
        structure, devices = self.output_structure, self._executor.fetch_devices
        if structure is not None and "leaf" in structure:
            leaf = structure["leaf"]
            if len(fed) == 1 == len(results) and fed[0] is leaves[0] and type(fed[0]) is np.ndarray:
                self._one_array_call = (fed[0].shape, fed[0].dtype, devices[leaf])  # checked: the next such call is not
            return Tensor._wrap(results[leaf], devices[leaf])
        return rebuild_structure(structure, [Tensor._wrap(a, d) for a, d in zip(results, devices, strict=True)])

    def run(self, feeds: dict | None = None, fetches=None):
        """Partial execution: compute only what `fetches` need, from `feeds`.

        Keys of `feeds` and items of `fetches` are value names (as printed,
        without the %) or values; a fed inner value replaces its computation.
        State writes are not run. Returns NumPy arrays (one, or a list when
        `fetches` is a list); a sparse gradient from `tp.gradients` comes back as a
        `tp.IndexedSlices`.
        """
        by_name = self.values()
        feeds = feeds or {}
        single = fetches is not None and not isinstance(fetches, list | tuple)
        wanted = self.outputs if fetches is None else [fetches] if single else list(fetches)
        flat = [part for f in wanted for part in ((f.values, f.indices) if isinstance(f, SparseGradient) else (f,))]
        fetch_values = [self._resolve(f, by_name, "fetch") for f in flat]
        feed_values = [self._resolve(k, by_name, "feed") for k in feeds]
        arrays = [check_feed(self.name, v, a) for v, a in zip(feed_values, feeds.values(), strict=True)]
        executor = Executor(self, fetch_values, feed_values, with_updates=False)
        outs = executor.run(arrays)
        outs = iter([Tensor._wrap(a, d)._host() for a, d in zip(outs, executor.fetch_devices, strict=True)])
        results = [
            IndexedSlices(Tensor._wrap(next(outs)), Tensor._wrap(next(outs)), f.dense_shape)
            if isinstance(f, SparseGradient)
            else next(outs)
            for f in wanted
        ]
        return results[0] if single else results

    def save(self, path) -> None:
        """Write the graph with its state and constants to one file, or to a binary file
        object such as `io.BytesIO` (see docs/file-formats.md)."""
        writer.save_graph(self, path)

    def export_onnx(self, path, opset: int = 17) -> None:
        """Write the graph as an ONNX model file (see tapeflow.graph.onnx; needs the onnx package)."""
        onnx.export_onnx(self, path, opset=opset)


def load_graph(path, queues: dict | None = None) -> Graph:
    """Read a graph written by `Graph.save` from a path or a binary file object;
    loading never runs code from the file.

    A file names the queues its queue ops use, and holds nothing else of them: `queues`
    maps each of those names to a queue of this process (`tp.queue.FIFOQueue`, ...) that
    the graph then uses. A name it leaves out is an error here; a graph loaded without
    `queues` loads, and its first run names the queue it lacks.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> g = tp.freeze(lambda x: x * 2.0, tp.TensorSpec((2,)))
    >>> path = os.path.join(tempfile.mkdtemp(), "double.tfg")
    >>> g.save(path)
    >>> load_graph(path)(tp.ones((2,))).numpy().tolist()
    [2.0, 2.0]
    """
    graph = reader.load_graph(path, graph_class=Graph)
    if queues is not None:
        graph.queues = _bound_queues(graph, queues)
    return graph


def _bound_queues(graph: Graph, queues: dict) -> dict:
    """`queues` checked against the queue ops of `graph`: every name bound, no other name
    given, and each queue of the dtypes its dequeues give."""
    if not isinstance(queues, dict) or not all(isinstance(k, str) for k in queues):
        raise TypeError(f"load_graph: queues must be a dict from queue names to queues, got {queues!r:.80}")
    used = {n.attrs["queue"]: n for n in graph.nodes if n.op in ir.QUEUE_OPS}
    missing = sorted(set(used) - set(queues))
    if missing:
        raise GraphError(
            f"load_graph: graph {graph.name!r} uses queues {missing}, which `queues` does not bind "
            f"(it binds {sorted(queues)})"
        )
    unused = sorted(set(queues) - set(used))
    if unused:
        raise GraphError(
            f"load_graph: queues binds {unused}, which graph {graph.name!r} does not use (it uses {sorted(used)})"
        )
    for node in graph.nodes:
        if node.op not in ir.QUEUE_OPS or "dtypes" not in node.attrs:
            continue
        queue = queues[node.attrs["queue"]]
        have = tuple(getattr(d, "name", str(d)) for d in getattr(queue, "dtypes", ()))
        if have != tuple(node.attrs["dtypes"]):
            raise GraphError(
                f"load_graph: node '{node.name}' ({node.op}) dequeues {list(node.attrs['dtypes'])} from queue "
                f"{node.attrs['queue']!r}, but the queue bound to it holds {list(have)}"
            )
    return dict(queues)
