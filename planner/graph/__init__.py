"""Graph IR, builder, validation, networkx view, autodiff and the numpy reference interpreter."""

from planner.dtypes import DTYPE_BYTES
from planner.graph.autodiff import make_training_graph
from planner.graph.builder import GraphBuilder, GraphBuildError
from planner.graph.interpret import init_params, random_feeds, run, train_step
from planner.graph.loss import LOSS_KINDS, LossError, attach_loss
from planner.graph.optimizer import Optimizer
from planner.graph.summary import summarize
from planner.graph.validate import GraphError, check_graph, normalize_attrs, to_networkx
from planner.ir.graph import Graph, Node, Tensor, canonical_json

__all__ = [
    "DTYPE_BYTES", "LOSS_KINDS", "Graph", "GraphBuildError", "GraphBuilder", "GraphError",
    "LossError", "Node", "Optimizer", "Tensor", "attach_loss", "canonical_json", "check_graph",
    "init_params", "make_training_graph", "normalize_attrs", "random_feeds", "run", "summarize",
    "to_networkx", "train_step",
]
