"""A module saved as .pt2 and read by the planner's reader gives the in-process path's Graph
(tests/importers/test_pt2_reader.py, test_torch_linalg.py)."""

from __future__ import annotations

import torch

from planner.importers.torch.convert import convert
from planner.torch import load_pt2


def same_as_in_process(module, x, tmp_path, decomposed=False):
    program = torch.export.export(module, x if isinstance(x, tuple) else (x,))
    saved = program.run_decompositions() if decomposed else program
    path = tmp_path / "m.pt2"
    torch.export.save(saved, str(path))
    got = load_pt2(path, name="m")
    want = convert(saved, name="m").graph
    assert canonical(got) == canonical(want)


def canonical(graph):
    """The graph up to its activations' names and the order of independent nodes: fx numbers
    a repeated op's nodes (`convolution_1`) from a counter earlier traces in the process move,
    and a parametrization's weight may be computed before or after an independent branch.
    What is kept: every input, param and state tensor exactly, every node's op and attributes
    with the shapes, dtypes and roles (or names, for non-activations) of what it reads and
    writes, and the outputs' shapes."""
    by_name = {t.name: t for t in graph.tensors}

    def key(name):
        t = by_name[name]
        return (t.name if t.role != "activation" else "", t.shape, t.dtype, t.role)

    kept = tuple(t for t in graph.tensors if t.role != "activation")
    nodes = sorted(repr((n.op, sorted(n.attrs.items()), [key(i) for i in n.inputs],
                         [key(o) for o in n.outputs])) for n in graph.nodes)
    return kept, tuple(nodes), tuple(key(o) for o in graph.outputs), graph.kind
