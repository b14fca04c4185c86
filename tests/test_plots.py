"""The drawings of planner/report/plots.py: the same plan gives the same bytes, a format by
suffix, and a one-line error naming the extra when matplotlib is missing."""

from __future__ import annotations

import json
import re
import sys

import pytest

from planner.cli import main
from planner.errors import UserError
from planner.report.plots import plot_format, timeline_plot

SPEC = "zoo:lenet?image=8&batch=4"


@pytest.fixture(scope="module")
def lenet_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("plots") / "lenet.plan.json"
    assert main(["plan", SPEC, "--train", "sgd", "--target", "xeon-8180", "-o", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_same_plan_same_bytes(lenet_plan, fmt):
    first = timeline_plot(lenet_plan, fmt)
    assert first == timeline_plot(lenet_plan, fmt)
    assert first.startswith({"svg": b"<?xml", "png": b"\x89PNG"}[fmt])


def test_every_row_is_labelled(lenet_plan):
    svg = timeline_plot(lenet_plan, "svg").decode()
    cpus = {c for op in lenet_plan["ops"] for c in op["cpus"]}
    assert len(cpus) > 1 and all(f">cpu {c}</text>" in svg for c in cpus)


def test_a_suffix_it_cannot_write_is_refused():
    assert plot_format("a/b.PNG") == "png"
    with pytest.raises(UserError, match="not 'jpg'"):
        plot_format("x.jpg")


def test_missing_matplotlib_names_the_extra(lenet_plan, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(UserError, match=r"pip install 'planner\[plot\]'"):
        timeline_plot(lenet_plan, "svg")


LEGEND = re.compile(r'fill: (#[0-9a-f]{6});[^>]*/>\s*</g>\s*<g id="text_\d+">\s*<text[^>]*>'
                    r'(\w+) \(')


def test_two_pictures_colour_each_op_type_alike(tmp_path):
    """Two timelines (two models on two targets, whose op types rank differently by busy
    time): each op type has one colour in both legends, and the longest op is named on its
    bar."""
    pictures = []
    for spec, target in (("zoo:resnet?batch=2&image=16&depth=18&width=0.25&classes=5",
                          "xeon-8180"), (SPEC, "knl-7250")):
        path = tmp_path / f"{target}.plan.json"
        assert main(["plan", spec, "--train", "adam", "--target", target, "--costs",
                     "analytical", "-o", str(path)]) == 0
        data = json.loads(path.read_text())
        svg = timeline_plot(data, "svg").decode()
        legend = {t: c for c, t in LEGEND.findall(svg)}
        assert len(legend) >= 6 and len(set(legend.values())) == len(legend), legend
        longest = max(data["ops"], key=lambda op: (op["end"] - op["start"], op["name"]))
        assert f">{longest['name']}</text>" in svg
        pictures.append(legend)
    a, b = pictures
    common = [t for t in a if t in b]
    assert common != [t for t in b if t in a], "the two rank their common types differently"
    assert len(common) >= 5 and all(a[t] == b[t] for t in common), (a, b)


def test_show_memory_writes_the_format_its_suffix_names(lenet_plan, tmp_path):
    """`show --memory m.png` is a PNG (it was SVG text once), m.svg an SVG; a CPU plan's chart
    is titled for the host arena and names its peak at the op where the plan's bytes peak."""
    from planner.plan import load_plan
    from planner.report.memory import graph_order, plan_curve

    path = tmp_path / "lenet.plan.json"
    path.write_text(json.dumps(lenet_plan))
    for suffix, head in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml")):
        out = tmp_path / f"m.{suffix}"
        assert main(["show", str(path), "--memory", str(out)]) == 0
        assert out.read_bytes().startswith(head)
    svg = (tmp_path / "m.svg").read_text()
    plan = load_plan(str(path))
    ordered = sorted(plan.ops, key=lambda o: o.order)
    curve = plan_curve(plan)
    peak = max((int(curve[k]), -k) for k, o in enumerate(ordered)
               if o.name in plan.graph.node_map)
    assert "host memory (arena)" in svg and "device memory" not in svg
    assert f"peak {peak[0] / 2**20:,.1f} MiB at {ordered[-peak[1]].name}" in svg
    assert graph_order(plan)[0] in svg  # the ops on the axis
    assert main(["show", str(path), "--memory", str(tmp_path / "m.jpg")]) == 2
    assert not (tmp_path / "m.jpg").exists()
