"""Graphs frozen from eager code: IR, tracing, execution and passes."""

from tapeflow.graph import control, fused_layers
from tapeflow.graph.executor import Executor, NodeError
from tapeflow.graph.gradients import gradients
from tapeflow.graph.ir import Graph, GraphError, Node, Value
from tapeflow.graph.serialize import GraphFileError, load_graph
from tapeflow.graph.trace import TensorSpec, freeze
from tapeflow.tensor import FreezeError
