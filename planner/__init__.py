"""planner: an ahead-of-time planner for neural-network training steps.

Pipeline: model -> Graph -> (schedule, memory) -> Plan -> generated executor.
"""

__version__ = "0.1.0"
