"""Command-line flags that set a field of an options record: a value the record refuses is
refused naming the flag that gave it, for every command (planner.cli reports it).

A flag is declared with the record and field it sets (`field_flag`); the record keeps the
one definition of what the field accepts, and `flag_message` turns its ValidationError back
into the flag's words.

>>> import argparse
>>> from planner.schedule.parallel import DataParallelOptions
>>> p = argparse.ArgumentParser()
>>> field_flag(p, "--data-parallel", DataParallelOptions, "ranks", type=int, default=1)
>>> from pydantic import ValidationError
>>> try:
...     DataParallelOptions(ranks=p.parse_args(["--data-parallel", "0"]).data_parallel)
... except ValidationError as e:
...     print(flag_message(e))
--data-parallel 0: input should be greater than or equal to 1
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import BaseModel, ValidationError

# (record class name, field) -> the flag that sets it. Written as the parser is built, before
# any command runs; a field two commands set has one flag name in both.
_FLAGS: dict[tuple[str, str], str] = {}


def field_flag(parser: argparse.ArgumentParser | Any, flag: str, record: type[BaseModel],
               field: str, **kwargs: Any) -> None:
    """`parser.add_argument(flag, **kwargs)` for a flag whose value becomes `record.field`."""
    if field not in record.model_fields:
        raise KeyError(f"{record.__name__} has no field {field!r} for {flag}")
    _FLAGS[(record.__name__, field)] = flag
    parser.add_argument(flag, **kwargs)


def flag_message(e: ValidationError) -> str | None:
    """'FLAG VALUE: why' for a refused field some flag sets; None when no flag sets it."""
    first = e.errors()[0]
    loc = first["loc"]
    flag = _FLAGS.get((e.title, str(loc[0]))) if loc else None
    if flag is None:
        return None
    # an int is shown as given; a float may be the flag's value in other units (--min-team-us)
    value = first.get("input")
    shown = f" {value}" if isinstance(value, int) and not isinstance(value, bool) else ""
    return f"{flag}{shown}: {first['msg'][:1].lower()}{first['msg'][1:]}"
