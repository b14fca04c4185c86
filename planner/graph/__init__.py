"""Graph IR, builder, validation, networkx view and the numpy reference interpreter."""

from planner.graph.builder import GraphBuilder, GraphBuildError  # noqa: F401
from planner.graph.ir import DTYPE_BYTES, Graph, Node, Tensor, canonical_json  # noqa: F401
from planner.graph.validate import GraphError, check_graph, normalize_attrs, to_networkx  # noqa: F401
