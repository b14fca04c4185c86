"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class UserError(Exception):
    """Bad input from the user (a file, a spec, a flag). The message says what and where.

    Library errors that are the user's fault (GraphError, OpError, ZooError, OnnxImportError)
    are ValueErrors; the CLI reports those the same way.
    """
