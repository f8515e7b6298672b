"""The placer: give every node of a graph a worker device, keeping the ones the user chose.

Nodes traced inside `tp.device("/worker:W...")` carry that device, and gradient nodes
carry the device of the op they differentiate. `place(graph)` puts the rest with a
greedy rule, in this order (a simplified form of the TensorFlow paper's placer, with
the shape rules' sizes as the only cost):

1. A node keeps the device it has. With `devices` given, a device outside that list is
   an error naming the node.
2. Colocate with inputs: in graph order, a node whose inputs come from placed nodes goes
   to the device, among those of its inputs, that has to receive the fewest bytes
   (the sizes of its inputs made on other devices; a dynamic dimension counts as 1;
   graph inputs and constants are free), the first such device on a tie.
3. Colocate with readers: in reverse graph order, a node still unplaced (it reads only
   graph inputs, constants or state) goes to the device of its readers that reads the
   most bytes of its outputs, the first on a tie.
4. What is left (nothing placed around it) goes to `default`, the first of `devices`,
   or "/worker:0/cpu:0".
5. A variable lives on one device: its reads and writes all go to the device one of
   them was given explicitly, or else to that of its first read or write; explicit
   reads or writes of one variable on two devices are an error.

>>> import tapeflow as tp
>>> def f(x):
...     with tp.device("/worker:1"):
...         y = tp.exp(x)
...     return y * 2.0
>>> g = tp.freeze(f, tp.TensorSpec((3,)), optimize=False)
>>> place(g)
1
>>> [n.device for n in g.nodes]
['/worker:1/cpu:0', '/worker:1/cpu:0']
"""

from __future__ import annotations

from tapeflow.devices import canonical_placement, is_local_name
from tapeflow.graph.cost_model import Simulator, simulate, value_bytes
from tapeflow.graph.ir import ASSIGN, READ, GraphError, GraphIR

DEFAULT_DEVICE = "/worker:0/cpu:0"


class PlacementError(GraphError):
    """A node that cannot be placed where it was asked to be."""


def place(
    graph: GraphIR, devices=None, default: str | None = None, cost_model=None, constraints: dict | None = None
) -> int:
    """Give every unplaced node of `graph` a device (see the module docstring); returns
    how many nodes it placed. `devices` limits where nodes may go.

    With a `cost_model` (`tapeflow.graph.cost_model.CostModel`), unplaced nodes go, in graph
    order, to the device among `devices` (or, without them, those the graph names and
    `default`) where the simulated step would finish them first, counting the transfers
    of their inputs; then nodes without inputs (reads, constants) and the variables placed
    here move to where their values are read. `constraints` maps node names to a worker
    ("/worker:1": any device of worker 1) or a device the node must run on. Explicit devices
    and variables' homes are kept as in the greedy rule. Without constraints, the greedy
    rule's placement is kept instead where the cost model finds its step no slower."""
    allowed = None if devices is None else [canonical_placement(d) for d in devices]
    default = canonical_placement(default or (allowed[0] if allowed else DEFAULT_DEVICE))
    for node in graph.nodes:
        if is_local_name(node.device):
            raise PlacementError(
                f"{graph.name}: node '{node.name}' ({node.op}) runs on this process's {node.device}; a graph "
                f"placed on workers names worker devices (trace it inside tp.device('/worker:0/{node.device}'))"
            )
        if node.device is not None:
            node.device = canonical_placement(node.device)
            if allowed is not None and node.device not in allowed:
                raise PlacementError(
                    f"{graph.name}: node '{node.name}' ({node.op}) is placed on {node.device}, "
                    f"which is not one of the devices {allowed}"
                )
    homes = _variable_homes(graph)
    unplaced = [n for n in graph.nodes if n.device is None]
    if constraints and cost_model is None:
        raise PlacementError(f"{graph.name}: constraints are honoured by the cost-model placer; pass cost_model=")
    if cost_model is not None:
        candidates = allowed or list(dict.fromkeys([*(n.device for n in graph.nodes if n.device), default]))
        given = [n.device for n in graph.nodes]
        _place_by_cost(
            graph, dict(homes), cost_model, candidates, _constraint_sets(graph, candidates, constraints or {})
        )
        if not constraints:  # the rule knows no constraints; without them, the faster of the two in simulation
            by_cost = [n.device for n in graph.nodes]
            cost_seconds = simulate(graph, cost_model).step_seconds
            for node, device in zip(graph.nodes, given, strict=True):
                node.device = device
            _place_by_rule(graph, unplaced, dict(homes), default)
            if cost_seconds < simulate(graph, cost_model).step_seconds:
                for node, device in zip(graph.nodes, by_cost, strict=True):
                    node.device = device
        graph.changed()
        return len(unplaced)
    _place_by_rule(graph, unplaced, homes, default)
    graph.changed()
    return len(unplaced)


def _place_by_rule(graph: GraphIR, unplaced: list, homes: dict, default: str) -> None:
    """The greedy rule (steps 1-5 of the module docstring) for the nodes of `unplaced`."""
    for node in unplaced:
        if node.op in (READ, ASSIGN) and node.attrs["variable"] in homes:
            node.device = homes[node.attrs["variable"]]
    for node in graph.nodes:  # 2. colocate with inputs
        if node.device is None:
            node.device = _cheapest(
                [(v.producer.device, value_bytes(v)) for v in node.inputs if v.producer is not None]
            )
    readers = graph.consumers()
    for node in reversed(graph.nodes):  # 3. colocate with readers
        if node.device is None:
            reads = [(r.device, value_bytes(v)) for v in node.outputs for r in readers.get(id(v), ())]
            node.device = _busiest(reads)
    for node in unplaced:  # 4. the default
        if node.device is None:
            node.device = default
    for node in unplaced:  # 5. a variable lives on one device
        if node.op in (READ, ASSIGN):
            homes.setdefault(node.attrs["variable"], node.device)
    for node in graph.nodes:
        if node.op in (READ, ASSIGN):
            node.device = homes[node.attrs["variable"]]


def _constraint_sets(graph: GraphIR, candidates: list[str], constraints: dict) -> dict[str, list[str]]:
    """node name -> the candidates it may run on."""
    names = {n.name for n in graph.nodes}
    out = {}
    for name, spec in constraints.items():
        if name not in names:
            raise PlacementError(f"{graph.name}: a constraint names node '{name}', which the graph does not have")
        text = str(spec).strip().lower().rstrip("/")
        if text.count("/") >= 2:
            text = canonical_placement(text)
        fits = [d for d in candidates if d == text or d.startswith(text + "/")]
        if not fits:
            raise PlacementError(f"{graph.name}: node '{name}' must run on {spec!r}, which none of {candidates} is")
        out[name] = fits
    return out


def _place_by_cost(graph: GraphIR, homes: dict, cost_model, candidates: list[str], constraints: dict) -> None:
    """The cost-model rule: in graph order, each unplaced node goes where the simulated step
    finishes it first (the earlier candidate on a tie); a variable's reads and writes
    follow the first of them placed."""
    simulator = Simulator(graph, cost_model)
    explicit_homes, placed_here = set(homes), {id(n) for n in graph.nodes if n.device is None}
    for node in graph.nodes:
        variable = node.attrs.get("variable") if node.op in (READ, ASSIGN) else None
        if node.device is None:
            if variable is not None and variable in homes:
                node.device = homes[variable]
            else:
                options = constraints.get(node.name, candidates)
                node.device = min(options, key=lambda d: (simulator.finish_on(node, d), options.index(d)))
        if variable is not None:
            homes.setdefault(variable, node.device)
        simulator.run(node, node.device)
    _colocate_sources(graph, placed_here, explicit_homes, constraints, candidates)


def _colocate_sources(graph: GraphIR, placed_here: set, explicit_homes: set, constraints: dict, candidates) -> None:
    """The cost-model rule's second pass. Scored one by one, a node without inputs (a read, a
    constant) finishes first on an idle device, and then every reader pays a transfer; so
    such a node moves to the device that reads most of its bytes, and a variable placed here
    (all its reads and writes) moves to where its reads are read and its new values made."""
    readers = graph.consumers()
    uses: dict[str, list] = {}
    for node in graph.nodes:
        if node.op in (READ, ASSIGN):
            uses.setdefault(node.attrs["variable"], []).append(node)
    for variable, nodes in uses.items():
        if variable in explicit_homes or any(id(n) not in placed_here for n in nodes):
            continue
        traffic = [
            (r.device, value_bytes(v)) for n in nodes if n.op == READ for v in n.outputs for r in readers.get(id(v), ())
        ]
        traffic += [
            (v.producer.device, value_bytes(v)) for n in nodes if n.op == ASSIGN for v in n.inputs if v.producer
        ]
        allowed = set(candidates).intersection(*(constraints.get(n.name, candidates) for n in nodes))
        home = _busiest([(d, size) for d, size in traffic if d in allowed])
        if home is not None:
            for n in nodes:
                n.device = home
    for node in graph.nodes:
        if id(node) in placed_here and not node.inputs and node.op not in (READ, ASSIGN):
            options = constraints.get(node.name, candidates)
            reads = [
                (r.device, value_bytes(v)) for v in node.outputs for r in readers.get(id(v), ()) if r.device in options
            ]
            node.device = _busiest(reads) or node.device


def _variable_homes(graph: GraphIR) -> dict[str, str]:
    """The device of each variable that an explicitly placed read or write gives."""
    homes: dict[str, tuple[str, str]] = {}
    for node in graph.nodes:
        if node.op in (READ, ASSIGN) and node.device is not None:
            name = node.attrs["variable"]
            home = homes.setdefault(name, (node.device, node.name))
            if home[0] != node.device:
                raise PlacementError(
                    f"{graph.name}: variable '{name}' is used on {home[0]} (node '{home[1]}') and on "
                    f"{node.device} (node '{node.name}'); a variable lives on one device"
                )
    return {name: device for name, (device, _) in homes.items()}


def _cheapest(inputs: list[tuple[str | None, int]]) -> str | None:
    """The device among the inputs' that receives the fewest bytes from the others."""
    candidates = list(dict.fromkeys(d for d, _ in inputs if d is not None))
    if not candidates:
        return None
    return min(candidates, key=lambda d: sum(size for dev, size in inputs if dev is not None and dev != d))


def _busiest(reads: list[tuple[str | None, int]]) -> str | None:
    """The device whose readers read the most bytes (the first on a tie)."""
    totals: dict[str, int] = {}
    for dev, size in reads:
        if dev is not None:
            totals[dev] = totals.get(dev, 0) + size
    return max(totals, key=lambda d: totals[d]) if totals else None
