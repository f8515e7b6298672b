"""Graphs frozen from eager code: IR, tracing, execution and passes."""

from tapeflow.graph import control
from tapeflow.graph.executor import Executor, NodeError, RunCancelled
from tapeflow.graph.file_format.codec import GraphFileError
from tapeflow.graph.gradients import gradients
from tapeflow.graph.ir import GraphError, Node, Value
from tapeflow.graph.runnable import Graph, load_graph
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze
from tapeflow.tensor import FreezeError
