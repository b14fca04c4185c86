"""Errors of the code generator, each naming what is wrong and where."""

from planner.errors import UserError


class UnsupportedError(UserError):
    """The plan holds an op or dtype its backend's executor has no kernel for (names the node)."""


class BuildError(UserError):
    """Compiling generated sources failed.

    `first_error` is the compiler's first error line, `path` the source file it names (a
    generated file or a runtime source), `log` the whole build output.
    """

    def __init__(self, message: str, first_error: str = "", path: str = "", log: str = ""):
        super().__init__(message)
        self.first_error = first_error
        self.path = path
        self.log = log
