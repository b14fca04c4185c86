"""The executor backends codegen renders for, chosen once from the plan's `backend`.

A backend is one folder of templates/ behind one interface: its runtime sources (built once
per host and cached), its per-plan package template, the element types it moves, and the ops
it has kernels for. That list is read from the kernel registrations themselves
(`r["Op"] = factory;` inside PLANNER_REGISTER_KERNELS, templates/cpu/runtime/kernel.h), so
adding a kernel is one file and one registration; a test checks it against the built
runtime's `registered_ops()`.

    templates/common/   schedule data, attrs parser, loader, arena, array checks: every backend
    templates/cpu/      oneDNN + OpenMP kernels, the CPU executor, its bindings
    templates/cuda/     cuDNN, cuBLAS and TVM-generated kernels, the CUDA executor, its bindings

Example:
    >>> cpu, cuda = BACKENDS["cpu"], BACKENDS["cuda"]
    >>> "Conv2D" in cpu.ops and "float32" in cpu.dtypes, cuda.module
    (True, 'planner_cuda_rt')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from codegen.errors import UnsupportedError

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
COMMON = TEMPLATES / "common"

_REGISTRATION = re.compile(r'\br\["([A-Za-z0-9_]+)"\]\s*=')


@dataclass(frozen=True)
class Backend:
    """One executor backend: where its templates are and what it runs."""

    name: str
    # The enumerator of schedule.h's Backend that its schedules carry.
    code: str
    # The runtime's Python extension module.
    module: str
    runtime: Path
    package: Path
    dtypes: frozenset[str]
    kernels: Path = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernels", self.runtime / "kernels")

    @cached_property
    def registered(self) -> frozenset[str]:
        """Op names its kernel files register (the runtime's `registered_ops()`)."""
        return frozenset(m.group(1) for f in sorted(self.kernels.glob("*.c[pu]*"))
                         for m in _REGISTRATION.finditer(f.read_text(encoding="utf-8")))

    @cached_property
    def ops(self) -> frozenset[str]:
        """The graph ops it runs: its registrations but the transfers memory planning adds
        (planner.memory.decision.TRANSFER_OPS), which no graph node may name."""
        from planner.memory.decision import TRANSFER_OPS

        return self.registered - frozenset(TRANSFER_OPS.values())


BACKENDS: dict[str, Backend] = {
    "cpu": Backend("cpu", "CPU", "planner_cpu_rt", TEMPLATES / "cpu" / "runtime",
                   TEMPLATES / "cpu" / "plan",
                   # float32 math, int64 ids and labels, bool conditions (Where)
                   frozenset({"float32", "int64", "bool"})),
    "cuda": Backend("cuda", "CUDA", "planner_cuda_rt", TEMPLATES / "cuda" / "runtime",
                    TEMPLATES / "cuda" / "plan", frozenset({"float32", "int64", "bool"})),
}


def backend_for(plan) -> Backend:
    """The backend that runs `plan`; UnsupportedError for one this planner cannot generate."""
    backend = BACKENDS.get(plan.backend)
    if backend is None:
        raise UnsupportedError(
            f"plan for target {plan.target.name!r} is a {plan.backend} plan, and this planner "
            f"generates executors for {', '.join(sorted(BACKENDS))} only")
    return backend
