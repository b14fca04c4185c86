"""Graph IR, builder, validation, networkx view and the numpy reference interpreter."""

from planner.graph.autodiff import make_training_graph  # noqa: F401, E402
from planner.graph.builder import GraphBuilder, GraphBuildError  # noqa: F401
from planner.graph.interpret import init_params, random_feeds, run, train_step  # noqa: F401, E402
from planner.dtypes import DTYPE_BYTES  # noqa: F401
from planner.graph.ir import Graph, Node, Tensor, canonical_json  # noqa: F401
from planner.graph.optimizer import Optimizer  # noqa: F401, E402
from planner.graph.summary import summarize  # noqa: F401, E402
from planner.graph.validate import GraphError, check_graph, normalize_attrs, to_networkx  # noqa: F401
