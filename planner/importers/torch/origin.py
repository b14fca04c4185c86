"""Where an fx node came from, for the import's messages: the module path (`layers.3.attn`),
the function the user called when the node is one of its decomposition's (`logsumexp` for the
`aten.eq.Scalar` inside torch.logsumexp, `logit` for torch.logit's compares), and for a node in
the top-level forward, where nothing else places it, the file and line of the user's code; a
node of the loss the trainer traces with the module is `in the loss`.

From the node's meta as torch.export writes it: nn_module_stack, from_node (the provenance
chain back to the traced call) or original_aten, and stack_trace. The file is given by its
base name: a message names the user's line, not the machine's folders.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')



def module_path(node: Any, root: str = "") -> str:
    """The path of the innermost module whose forward wrote the fx node (`layers.3.attn`),
    less the `root` prefix; "" for the root module or a node without an nn_module_stack."""
    stack = node.meta.get("nn_module_stack") or {}
    path = next((str(v[0]) for v in reversed(list(stack.values()))
                 if isinstance(v, tuple) and v), "")
    if root and (path == root or path.startswith(root + ".")):
        path = path[len(root) + 1:]
    return path

def _innermost(node: Any) -> str | None:
    stack = node.meta.get("nn_module_stack") or {}
    return next((str(v[0]) for v in reversed(list(stack.values())) if isinstance(v, tuple) and v),
                None)


def source_function(node: Any) -> str:
    """The ATen function the user called that decomposed into this node (`logsumexp`), or ""
    when the node is that call itself."""
    own = str(node.target)
    source = node.meta.get("from_node") or []
    first = source[0] if source else None
    while first is not None and getattr(first, "from_node", None):
        first = first.from_node[0]
    for candidate in (getattr(first, "target", None), node.meta.get("original_aten")):
        name = str(candidate) if candidate is not None else ""
        if name.startswith("aten.") and name != own and name.count(".") == 2:
            return name.split(".")[1]
    return ""


def user_line(node: Any) -> str:
    """`file.py:LINE` of the innermost frame of the node's stack trace ("" without one)."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    filename, line = frames[-1]
    return f"{PurePath(filename).name}:{line}"


def location(node: Any, root: str = "") -> str:
    """The node's place for a message, as NodeCtx.module holds it: `layers.3.attn`,
    `inner, from logsumexp`, `the loss, from logsumexp`, or for the top-level forward
    `from logit at model.py:8` / `at model.py:12` (context._in puts " in " before a module
    path only)."""
    path = module_path(node, root)
    source = source_function(node)
    in_loss = bool(root) and _innermost(node) == ""
    head = path or ("the loss" if in_loss else "")
    parts = [head] if head else []
    if source:
        parts.append(f"from {source}")
    text = ", ".join(parts)
    if not head and _innermost(node) is not None:
        line = user_line(node)
        text = f"{text} at {line}".strip() if line else text
    return text
