"""The user's backward hooks, which the trainer cannot apply: refused in one line, never ignored.

torch.export traces the forward only. A hook PyTorch runs inside `loss.backward()` (a
parameter's `register_hook`, how pruning masks and partially frozen embeddings are written; a
module's `register_full_backward_hook`, `register_backward_hook` or
`register_full_backward_pre_hook`; their global forms in torch.nn.modules.module; a
parameter's `register_post_accumulate_grad_hook`, for a `.grad` the trainer never makes) leaves
no trace in the program, so the step would train with the unhooked gradient, silently. The
trainer refuses each, naming the hook and the parameter or module. Forward hooks and pre-hooks
run while torch.export traces the module, so what they compute is in the program: honoured.
A tensor hook registered inside forward (`h.register_hook(fn)` on an activation) is caught by
the trace's watch (planner/torch/export_watch.py).

    >>> import torch
    >>> lin = torch.nn.Linear(2, 2)
    >>> _ = lin.weight.register_hook(lambda g: g * 0)
    >>> print(backward_hooks(lin, "Linear"))  # doctest: +ELLIPSIS
    Linear: parameter 'weight' has a gradient hook (Tensor.register_hook): torch.export ...
"""

from __future__ import annotations

from typing import Any

# What works instead, for every refusal here.
INSTEAD = ("torch.export traces the forward only, so the step would train with the unhooked "
           "gradient; remove the hook, write it in forward (a pruning mask: `w * mask` in "
           "forward, as torch.nn.utils.prune does), or train with torch.compile(model, "
           "backend=\"planner\"), which applies it")


def backward_hooks(module: Any, name: str) -> str | None:
    """One line naming the first backward hook PyTorch would run for `module`'s training, or
    None: the parameters' tensor hooks (of parameters that train), the submodules' backward
    hooks and pre-hooks, the global module backward hooks."""
    from torch.nn.modules import module as nn_module

    for path, p in module.named_parameters(remove_duplicate=False):
        if not p.requires_grad:
            continue  # (no gradient: PyTorch runs none of its hooks)
        if getattr(p, "_backward_hooks", None):
            return (f"{name}: parameter {path!r} has a gradient hook (Tensor.register_hook): "
                    f"{INSTEAD}")
        if getattr(p, "_post_accumulate_grad_hooks", None):
            return (f"{name}: parameter {path!r} has a post-accumulate-grad hook "
                    f"(Tensor.register_post_accumulate_grad_hook): {INSTEAD}")
    for path, m in module.named_modules():
        where = f"module {path!r} ({type(m).__name__})" if path else f"the module {name}"
        if getattr(m, "_backward_pre_hooks", None):
            return (f"{name}: {where} has a backward pre-hook "
                    f"(register_full_backward_pre_hook): {INSTEAD}")
        if getattr(m, "_backward_hooks", None):
            kind = ("register_full_backward_hook" if getattr(m, "_is_full_backward_hook", True)
                    else "register_backward_hook")
            return f"{name}: {where} has a backward hook ({kind}): {INSTEAD}"
    for hooks, kind in ((nn_module._global_backward_pre_hooks,
                         "register_module_full_backward_pre_hook"),
                        (nn_module._global_backward_hooks, "register_module_full_backward_hook")):
        if hooks:
            return (f"{name}: a global module backward hook "
                    f"(torch.nn.modules.module.{kind}) is registered: {INSTEAD}")
    return None
