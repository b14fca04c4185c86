"""The `planner` command. Every reporting command takes --json for machine-readable stdout.

Errors caused by the user's input print one line, `planner: error: ...`, and exit 2; the
traceback of an internal error is shown only with PLANNER_DEBUG=1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from planner.errors import UserError

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3


def _flag_message(e: Exception) -> str | None:
    # An options record's refusal of a field a flag set names the flag (planner.cli.flags).
    from pydantic import ValidationError

    from planner.cli.flags import flag_message

    return flag_message(e) if isinstance(e, ValidationError) else None


def build_parser() -> argparse.ArgumentParser:
    # The one place the planner's commands and code generation's meet: `build`, and the
    # executors that `profile` measures kernels with (the stages never import codegen).
    from codegen.cli import add_build_commands
    from planner import __version__
    from planner.cli.cache import add_cache_commands
    from planner.cli.costs import add_cost_commands
    from planner.cli.explain import add_explain_command
    from planner.cli.fit import add_memory_commands
    from planner.cli.plan import add_plan_commands
    from planner.cli.target import add_target_commands

    parser = argparse.ArgumentParser(
        prog="planner",
        description="Ahead-of-time planner for neural-network training steps.")
    parser.add_argument("--version", action="version", version=f"planner {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_graph_command(sub)
    add_target_commands(sub)
    add_plan_commands(sub, executor_measurers)
    add_build_commands(sub)
    add_memory_commands(sub, measure_plans, executor_measurers)
    add_explain_command(sub)
    add_cost_commands(sub, executor_measurers)
    add_cache_commands(sub, kernel_library)
    return parser


def kernel_library():
    """`planner cache`'s hooks: the folder of this environment's CPU runtime (nothing built),
    and its build (codegen.build)."""
    from codegen.build import build_runtime, runtime_folder

    return runtime_folder, lambda say: build_runtime(progress=say)


def measure_plans(plans: list, steps: int) -> list[dict[str, float]]:
    """`planner fit --pareto --measure`: the plans built and stepped (codegen.measure)."""
    from codegen.measure import measure_plans as run

    return run(plans, steps)


def executor_measurers():
    """The Measurers `planner profile` runs kernels with: the generated executors."""
    from codegen.build import runtime_key
    from codegen.gpu_profiling import GpuProfiler
    from codegen.profiling import (
        KernelTimer,
        measure_signatures,
        profile_in_step,
        step_contention,
    )
    from planner.costs.profile import Measurers

    return Measurers(kernel_timer=KernelTimer, in_step=profile_in_step, gpu=GpuProfiler,
                     signatures=measure_signatures, step_corun=step_contention,
                     kernels=runtime_key)


# ---- planner graph --------------------------------------------------------------------------

def add_graph_command(sub: Any) -> None:
    from planner.cli.graph_flags import add_graph_flags

    p = sub.add_parser(
        "graph", help="summarize a graph, convert it to graph JSON, or build its training graph",
        description="GRAPH is an ONNX file, a graph JSON file or a zoo spec such as "
                    "'zoo:resnet?depth=50&batch=32'.")
    p.add_argument("graph", metavar="GRAPH")
    add_graph_flags(p)
    p.add_argument("-o", "--output", metavar="FILE", help="write the graph as canonical JSON")
    p.add_argument("--force", action="store_true", help="overwrite an existing different FILE")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=run_graph)


def run_graph(args: argparse.Namespace) -> int:
    from planner.cli.graph_flags import graph_options
    from planner.frontend.prepare import prepare
    from planner.graph.summary import summarize
    from planner.io.write import write_text

    graph = prepare(args.graph, graph_options(args))
    if args.output:
        write_text(args.output, graph.to_json(), force=args.force)
    summary = summarize(graph)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(format_summary(summary))
        if args.output:
            print(f"wrote {args.output}")
    return 0


def format_summary(s: dict[str, Any]) -> str:
    """Human-readable text of `summarize`'s dict."""
    lines = [f"graph {s['name']} ({s['kind']}): {s['nodes']} nodes, {s['tensors']} tensors",
             f"  parameters   {s['param_count']:,} ({_bytes(s['param_bytes'])})",
             f"  activations  {_bytes(s['activation_bytes'])}",
             f"  FLOPs        {_flops(s['flops'])}"]
    phases = s.get("phases")
    if phases:
        for phase, info in phases.items():
            lines.append(f"  {phase:<12} {info['nodes']} nodes, {_flops(info['flops'])}")
        if s.get("backward_forward_flop_ratio") is not None:
            lines.append(f"  backward/forward FLOPs  {s['backward_forward_flop_ratio']:.2f}")
    lines.append("ops by type:")
    width = max((len(k) for k in s["op_counts"]), default=0)
    lines += [f"  {op:<{width}}  {n}" for op, n in sorted(s["op_counts"].items())]
    return "\n".join(lines)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _flops(n: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}FLOP"
    return f"{n:.0f} FLOP"


# ---- entry point ----------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    # Names come from untrusted files: a control character in one must not drive the terminal.
    sys.stdout, sys.stderr = EscapingWriter(out), EscapingWriter(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (UserError, ValueError, OSError) as e:
        # ValueError covers GraphError, OpError, ZooError, OnnxImportError and pydantic's
        # ValidationError: all name the offending node, tensor or field.
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print(f"planner: error: {_flag_message(e) or _one_line(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except (RecursionError, OverflowError, MemoryError) as e:
        # Input nested too deeply or sized past what can be held: the input's fault.
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print(f"planner: error: input too deeply nested or too large ({type(e).__name__}: "
              f"{_one_line(e)})", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("planner: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # an internal error: say so plainly, traceback on request
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print(f"planner: internal error: {type(e).__name__}: {_one_line(e)} "
              f"(run with PLANNER_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


class EscapingWriter:
    """A text stream that writes control characters (but newline and tab) as `\\xNN` escapes.

    >>> import io; buf = io.StringIO(); _ = EscapingWriter(buf).write("a\\x1b[2Jb\\n")
    >>> buf.getvalue()
    'a\\\\x1b[2Jb\\n'
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.raw = stream  # for the terminal control the planner itself writes

    def write(self, text: str) -> int:
        self._stream.write(_CONTROL.sub(_escape, text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# Lone surrogates too (a path from argv that is not UTF-8): no stream can encode them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename:
        return f"{e.filename}: {e.strerror}"
    text = str(e).strip() or type(e).__name__
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
