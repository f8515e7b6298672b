"""Graph passes, each `run(graph) -> changed`, and the pass manager that runs them.

DEFAULT_PASSES simplify, fold constants, merge common subexpressions, drop
dead code, fold bias adds and relus into the matmul or conv before them
(`fused_matmul`, `fused_conv2d`) and a relu gradient's bias sum into it
(`relu_bias_grad`), fuse the remaining chains of elementwise ops
into single `fused_elementwise` kernels (`FUSION`), and fold a plain gradient descent
step into the product that makes its gradient (`sgd_matmul_update`).

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: x * 1.0 - 0.0, tp.TensorSpec((3,)), optimize=False)
>>> optimize(g)["changed"], g.op_counts()
(True, {})
"""

from __future__ import annotations

from tapeflow.graph.ir import GraphIR
from tapeflow.graph.passes.bias_grad import ReluBiasGradFusion
from tapeflow.graph.passes.cse import CommonSubexpressionElimination
from tapeflow.graph.passes.dce import DeadCodeElimination
from tapeflow.graph.passes.descent import ProductDescentFusion
from tapeflow.graph.passes.epilogue import BiasActivationFusion
from tapeflow.graph.passes.fold import ConstantFolding
from tapeflow.graph.passes.fuse import ElementwiseFusion
from tapeflow.graph.passes.simplify import AlgebraicSimplification

FUSION = ElementwiseFusion()
DEFAULT_PASSES: list = [
    AlgebraicSimplification(),
    ConstantFolding(),
    CommonSubexpressionElimination(),
    DeadCodeElimination(),
    BiasActivationFusion(),
    ReluBiasGradFusion(),
    FUSION,
    ProductDescentFusion(),
]


def optimize(graph: GraphIR, passes=None, max_rounds: int = 4) -> dict:
    """Run `passes` (default DEFAULT_PASSES) until nothing changes, linting after each.

    Returns {"changed": bool, "rounds": int, "by_pass": {pass name: times changed}}.
    """
    passes = DEFAULT_PASSES if passes is None else passes
    by_pass: dict[str, int] = {}
    rounds = 0
    any_change = False
    for rounds in range(1, max_rounds + 1):  # noqa: B007 - reported below
        changed = False
        for p in passes:
            if p.run(graph):
                changed = True
                by_pass[p.name] = by_pass.get(p.name, 0) + 1
                graph.changed()
                graph.lint()
        any_change = any_change or changed
        if not changed:
            break
    return {"changed": any_change, "rounds": rounds, "by_pass": by_pass}
