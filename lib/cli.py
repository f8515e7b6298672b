"""The `tapeflow` command: inspect a saved graph file, run it on .npy inputs, or measure
this machine for the placer's cost model.

    tapeflow inspect model.tfg [--timeout S]
    tapeflow run model.tfg --input x.npy [--input x2.npy ...] [--output y.npy] [--timeout S]
    tapeflow calibrate [--output cost.json] [--timeout S]

`run` feeds the inputs in the graph's input order and writes one .npy file per output:
`y.npy` for a single output, `y_0.npy`, `y_1.npy`, ... for several. Inputs are read
with `allow_pickle=False`. Errors print one line to stderr, never a traceback, and exit
with status 1 (2 for bad usage, 130 when interrupted). `calibrate` measures this machine's
constants for the placer's cost model (`tapeflow.graph.cost_model`) and writes them as JSON.
With `--timeout S`, a command still running after S seconds (a graph from elsewhere whose
loop never ends, say) is stopped with a message and exit status 124, as `timeout(1)` does.

>>> main(["inspect", "missing.tfg"])
1
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading

import numpy as np

from tapeflow.files.safe_h5 import check_regular_file
from tapeflow.graph import cost_model
from tapeflow.graph.file_format import reader
from tapeflow.graph.runnable import Graph, load_graph

TIMEOUT_STATUS = 124


def describe(graph: Graph) -> str:
    """The signatures, node counts by op, parameter count and text of a graph.

    >>> import tapeflow as tp
    >>> print(describe(tp.freeze(lambda x: x * 2.0, tp.TensorSpec((None, 3)))).splitlines()[1])
    inputs:  x: float32[?,3]
    """
    state = graph.state.values()
    lines = [
        f"graph:   {graph.name}",
        "inputs:  " + (", ".join(f"{v.name}: {v.type_string()}" for v in graph.inputs) or "(none)"),
        "outputs: " + (", ".join(f"{v.name}: {v.type_string()}" for v in graph.outputs) or "(none)"),
        f"nodes:   {len(graph.nodes)}",
    ]
    lines += [f"  {op:<24} {count}" for op, count in graph.op_counts().items()]
    lines.append(f"parameters: {graph.parameter_count()} in {len(state)} state tensors")
    lines += ["", str(graph)]
    return "\n".join(lines)


def _inspect(args) -> int:
    # the state and constants are never printed, so never read: a graph of any size is described at once
    print(describe(reader.load_graph(args.graph, graph_class=Graph, read_data=False)))
    return 0


def _output_paths(output: str, count: int) -> list[str]:
    if count == 1:
        return [output]
    stem, ext = os.path.splitext(output)
    return [f"{stem}_{i}{ext or '.npy'}" for i in range(count)]


def _run(args) -> int:
    graph = load_graph(args.graph)
    inputs = args.input or []
    if len(inputs) != len(graph.inputs):
        names = ", ".join(f"{v.name}: {v.type_string()}" for v in graph.inputs)
        raise ValueError(f"{args.graph}: the graph takes {len(graph.inputs)} inputs ({names}), got {len(inputs)}")
    for path in inputs:  # a FIFO or a device would block the read
        check_regular_file(path, "--input")
    output_paths = _output_paths(args.output, len(graph.outputs))
    for path in output_paths:  # an existing FIFO, device or folder would block or fail the write
        if os.path.exists(path):
            check_regular_file(path, "--output")
    feeds = {}
    for value, path in zip(graph.inputs, inputs, strict=True):
        try:
            array = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"{path}: not a plain .npy array ({err})") from None
        if not isinstance(array, np.ndarray):
            array.close()
            raise ValueError(f"{path}: an .npz archive; pass one .npy file per input")
        feeds[value.name] = array
    outputs = graph.run(feeds, list(graph.outputs))
    for path, array in zip(output_paths, outputs, strict=True):
        np.save(path, np.asarray(array), allow_pickle=False)
        print(f"wrote {path}: {np.asarray(array).dtype}{list(np.shape(array))}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tapeflow", description="Inspect or run saved graphs (.tfg), or calibrate the placer's cost model."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="print signatures, op counts, parameters and the graph text")
    inspect.add_argument("graph", help="a graph file written by Graph.save")
    _add_timeout(inspect)
    inspect.set_defaults(handler=_inspect)
    run = commands.add_parser("run", help="run a graph on .npy inputs and write .npy outputs")
    run.add_argument("graph", help="a graph file written by Graph.save")
    run.add_argument("--input", action="append", metavar="X.npy", help="an input array; repeat in input order")
    run.add_argument("--output", default="output.npy", metavar="Y.npy", help="output path (default output.npy)")
    _add_timeout(run)
    run.set_defaults(handler=_run)
    calibrate = commands.add_parser("calibrate", help="measure this machine's constants for the placer's cost model")
    calibrate.add_argument("--output", default="cost_model.json", metavar="COST.json", help="where to write them")
    _add_timeout(calibrate)
    calibrate.set_defaults(handler=_calibrate)
    return parser


def _calibrate(args) -> int:
    model = cost_model.calibrate()
    model.save(args.output)
    print(
        f"sgemm {model.flops_per_s / 1e9:.2f} GFLOP/s, memory {model.bytes_per_s / 1e9:.2f} GB/s, "
        f"{model.overhead_s * 1e6:.2f} us per node; wrote {args.output}"
    )
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"--timeout must be a positive number of seconds, got {text!r}")
    return value


def _add_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=_seconds, metavar="S", help=f"stop after S seconds with exit status {TIMEOUT_STATUS}"
    )


def _start_watchdog(seconds: float, command: str) -> threading.Timer:
    """A timer that ends the process once `seconds` have passed, whatever the main thread is doing."""

    def expire():
        sys.stderr.write(f"tapeflow {command}: error: timed out after {seconds:g} s (--timeout); stopped\n")
        sys.stderr.flush()
        os._exit(TIMEOUT_STATUS)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def main(argv=None) -> int:
    """Entry point of the `tapeflow` command; returns the exit status."""
    args = _parser().parse_args(argv)
    watchdog = _start_watchdog(args.timeout, args.command) if args.timeout else None
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print(f"tapeflow {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the command reports every failure as one line
        message = str(err) if isinstance(err, ValueError | TypeError | OSError) else f"{type(err).__name__}: {err}"
        print(f"tapeflow {args.command}: error: {' '.join(message.split())}", file=sys.stderr)
        return 1
    finally:
        if watchdog is not None:
            watchdog.cancel()


if __name__ == "__main__":
    sys.exit(main())
