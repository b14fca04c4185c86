"""Regenerate the committed example plans: a few zoo models on two CPU presets and a GPU one.

    python examples/plans/regenerate.py          # rewrite every plan here
    python examples/plans/regenerate.py --check  # exit 1 if any committed plan is stale

Plans are deterministic, so a clean regeneration changes nothing; when the planner changes, the
diff of these files (read through `git diff` with the textconv in the README) shows how its
decisions moved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from planner.target import preset
from planner.zoo import from_spec

HERE = Path(__file__).parent
MODELS = {
    "lenet-digits": "zoo:lenet?image=8&batch=32",
    "resnet18-b16": "zoo:resnet?depth=18&batch=16&image=64",
    "dcgan-b8": "zoo:dcgan?batch=8",
}
TARGETS = ("knl-7250", "xeon-8180", "k40c-12gb")


def plans() -> dict[Path, str]:
    out = {}
    for label, spec in MODELS.items():
        graph = make_training_graph(from_spec(spec), Optimizer(kind="sgd"))
        for target in TARGETS:
            out[HERE / f"{label}.{target}.plan.json"] = plan(graph, preset(target)).to_json()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    stale = []
    for path, text in plans().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(text)
    verb = "stale" if args.check else "rewrote"
    print(f"{verb}: {', '.join(stale)}" if stale else "all plans up to date")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
