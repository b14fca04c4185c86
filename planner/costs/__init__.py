"""Costs: measured op times (CostTable), the model that predicts them at any thread count, the
analytical fallback, the hill-climbing profiling driver, and seed 002's published numbers.

    signature.py   what a cost is keyed by (op, input shapes and dtypes, attrs)
    records.py     CostTable and its samples; merge, save, load
    analytical.py  roofline plus per-op scaling curve, for signatures never measured
    model.py       CostModel.time(signature, threads, affinity) -> Prediction
    team_scale.py  CostTable.team_scale fitted from a step measured on one thread and on all
    accuracy.py    seed 002 Table V's accuracy and the hold-out experiment
    profile.py     hill climbing against a time_op callable
    host_costs.py  measured costs kept per host, what plans of this machine are priced by
    fixtures.py    seed 002's Tables II, III and VI as cost tables on knl-7250
"""

from planner.costs.accuracy import holdout_accuracy, prediction_accuracy  # noqa: F401
from planner.costs.analytical import CLASS_CURVES, ScalingCurve, Work, op_work  # noqa: F401
from planner.costs.model import (  # noqa: F401
    CostModel,
    GpuPrediction,
    MissingCostWarning,
    Prediction,
    interpolate,
)
from planner.costs.profile import ProfileOptions, ProfileRun, hill_climb, profile  # noqa: F401
from planner.costs.records import (  # noqa: F401
    ConvAlgoSample,
    CostEntry,
    CostTable,
    CpuSample,
    LaunchSample,
    Provenance,
    load_table,
    merge,
    save_table,
)
from planner.costs.signature import (  # noqa: F401
    OpSignature,
    graph_signatures,
    node_signature,
    signature_of,
    unique_signatures,
)
