"""Collection rules for the whole tree (pyproject runs the library's docstrings as tests)."""

# The old names of moved run-time modules (planner/runtime/) are the new modules themselves
# (sys.modules aliases, kept for executors built before the move): their docstrings are
# collected once, under the new names.
collect_ignore = ["planner/runtime/checkpoint.py", "planner/runtime/distributed.py", "planner/runtime/hyperparameters.py"]
