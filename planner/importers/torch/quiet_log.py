"""torch's own loggers held quiet while the planner traces a program: where a trace fails
(a wrong feature size, aten.set_ on an input), torch's fake-tensor logger prints a ten-line
"E ... Traceback" block before the exception reaches the planner, which then says what failed
in one line naming the module and op. The block says nothing the line does not, and a user
reads the traceback as the planner's crash.

>>> import logging
>>> with quiet_torch_logs():
...     logging.getLogger("torch._subclasses.fake_tensor").isEnabledFor(logging.ERROR)
False
>>> logging.getLogger("torch._subclasses.fake_tensor").isEnabledFor(logging.ERROR)
True
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

# The loggers that report a failed trace before raising it.
LOGGERS = ("torch._subclasses.fake_tensor",)


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """The block with LOGGERS disabled (each restored after, whatever it was)."""
    loggers = [logging.getLogger(name) for name in LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was in zip(loggers, before, strict=True):
            logger.disabled = was
