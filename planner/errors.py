"""The planner's exceptions: the one the CLI turns into a one-line message and a non-zero exit,
and the domain results every stage may raise."""


class UserError(Exception):
    """Bad input from the user (a file, a spec, a flag). The message says what and where.

    Library errors that are the user's fault (GraphError, OpError, ZooError, OnnxImportError)
    are ValueErrors; the CLI reports those the same way.
    """


class NotWritten(OSError, UserError):
    """A file the planner could not write (a full disk, a read-only folder, a file where its
    folder should be): the message names the path. Still an OSError, so callers that carry
    on without writing (a read-only cache) catch it as before."""


class InfeasibleBudget(ValueError):
    """No plan fits the memory budget; `smallest_bytes` is the smallest budget that would fit
    (or a lower bound on it, where the message says "at least")."""

    def __init__(self, message: str, smallest_bytes: int) -> None:
        super().__init__(message)
        self.smallest_bytes = smallest_bytes


class PlanError(ValueError):
    """A plan that cannot be used as it is: another backend's, an older schema, or one that
    fails verification. The message names the plan's field, op or tensor."""
