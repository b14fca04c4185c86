"""What `torch.compile(model, backend="planner", options={...})` takes: the planner's options.

    options={"costs": "analytical", "strategy": "uniform", "memory_budget": 2**30,
             "target": "host", "fallback": False}

- costs: what plans are priced with, as `trainer`'s `costs` (None, the default: times kept
  on this host, the rest measured in the background and the call planned again once they
  are in, codegen/measure_later.py; "measured": measured first; "analytical"; "in-step"; a
  cost table or its path);
- target: "host" (default) or a CPU target preset;
- strategy: the CPU scheduler's (planner.schedule.options: optimized, paper, uniform);
- memory_budget: bytes one planned call may use (None: no limit);
- precision: "fp32" only (a bf16 plan of a piece would change what autograd sees: refused);
- fallback: True (default): a graph the planner refuses runs eagerly, named in one warning
  line; False: the refusal is raised (`fullgraph=True` only forbids graph breaks in Dynamo);
- lanes: "measured" (default): each plan's calls run the way this process measures faster,
  measured again now and then (planner/torch/lane_choice.py); True: on the plan's lanes,
  co-running, each lane with an OpenMP team of its own and the executor's wait policy; False:
  its ops one at a time in plan order on the calling thread's OpenMP team (PyTorch's), each
  with the thread count of the schedule `adaptive` chose. Why it is measured: on a quiet
  machine the team avoids what extra teams cost in PyTorch's process (with more OpenMP threads
  than CPUs libgomp cuts every team's spinning short: mobilenet_v2's forward convolutions
  14-18 ms a call on lanes, 3.7-4.3 ms on PyTorch's team, 2-core VM); beside other busy
  processes PyTorch's team waits for a descheduled thread at every parallel region (a
  transformer encoder's forward call 150 ms on the team, 12-18 ms on lanes at load 3):
  bench/RESULTS.md. The same bits any way;
- adaptive: True (default): the executors switch to the plan's schedules for fewer free cores
  by the cores granted and the step times measured, on the lanes and on PyTorch's team alike,
  each computing the same bits (the trainer's `adaptive`: a busy host's planned calls choose
  their cores and lanes as the trainer's steps do); False: the main schedule always;
- kept_calls: planned call signatures (shapes, which inputs need gradients) whose executors
  the process keeps, least recently called let go first (default 32; a let-go one's next
  call makes its executors again from its kept build: no planning, no build); the plans of
  4 times as many more are kept too (a call past those imports and plans again, building
  nothing);
- out_dir: where executors' sources go (default: the cache folder's packages/, $PLANNER_CACHE
  or ~/.cache/planner, one folder per plan by its digest, found there by any later process:
  nothing compiled again, nothing left in $TMPDIR; bounded by $PLANNER_CACHE_MAX_BYTES,
  codegen/cached.py).

An unknown key, or a value of the wrong kind, is a ValueError naming it at torch.compile's
first call, never later in the loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field

from planner.ir.record import Record


class BackendOptions(Record):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    costs: Any = None
    target: str = "host"
    strategy: Literal["optimized", "paper", "uniform"] = "optimized"
    memory_budget: int | None = Field(default=None, gt=0)
    precision: Literal["fp32"] = "fp32"
    fallback: bool = True
    lanes: bool | Literal["measured"] = "measured"
    adaptive: bool = True
    out_dir: str | None = None
    kept_calls: int = Field(default=32, ge=1)

    @classmethod
    def parse(cls, options: dict[str, Any] | None) -> BackendOptions:
        """The options given to torch.compile, checked; ValueError in one line naming a key."""
        from pydantic import ValidationError

        try:
            return cls(**(options or {}))
        except ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(p) for p in err.get("loc", ())) or "options"
            raise ValueError(f"torch.compile(backend='planner'): options[{key!r}]: "
                             f"{err.get('msg', 'invalid')} (the options: costs, target, "
                             f"strategy, memory_budget, precision, fallback, lanes, adaptive, "
                             f"out_dir, kept_calls)") from None

    def folder(self) -> Path | None:
        """The caller's out_dir, else None: the cache's packages folder (codegen.cached)."""
        return Path(self.out_dir) if self.out_dir is not None else None
