"""Graph tools: the builder, validation and networkx view, dependency walks, views, summaries,
the evaluation graph, the optimizer record, and the numpy reference interpreter (the IR itself
is planner/ir/; the passes that rewrite graphs are planner/frontend/ and planner/step/)."""

from planner.dtypes import DTYPE_BYTES
from planner.graph.builder import GraphBuilder, GraphBuildError
from planner.graph.interpret import init_params, random_feeds, run, train_step
from planner.graph.optimizer import Optimizer
from planner.graph.summary import summarize
from planner.graph.validate import GraphError, check_graph, normalize_attrs, to_networkx
from planner.ir.graph import Graph, Node, Tensor, canonical_json

__all__ = [
    "DTYPE_BYTES", "Graph", "GraphBuildError", "GraphBuilder", "GraphError", "Node",
    "Optimizer", "Tensor", "canonical_json", "check_graph", "init_params", "normalize_attrs",
    "random_feeds", "run", "summarize", "to_networkx", "train_step",
]
