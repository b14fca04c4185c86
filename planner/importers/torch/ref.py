"""A tensor value of a traced or saved program, by its name: what a call's arguments and a
.pt2 file's nodes (planner/importers/pt2/saved.py) point at. Apart, so that the .pt2 reader
and the ATen importer's records and context share it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ref:
    """A tensor value of the program, by its name."""

    name: str
