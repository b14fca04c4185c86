"""The models a PyTorch user has, as nn.Modules, for bench_gpu.py's `--modules`: torchvision's
resnet50 (batch 64) and inception_v3 (batch 16), a BERT-base encoder block and a GPT-2-small
decoder block (batch 8, 128 tokens). The same module is trained by PyTorch (eager, its whole
step captured as a CUDA graph, torch.compile mode="max-autotune") and, exported through ONNX,
by our executor: one model, two runtimes, not a node-by-node translation.

    graph = onnx_graph("gpt_block", workdir)       # exported, imported, loss attached, SGD
    step = module_trainer("gpt_block", "compile")  # one timed training step on the GPU

ONNX export: the TorchScript exporter in training mode first (BatchNormalization kept as
batch statistics, no folding into the convolutions, as PyTorch trains it), else the dynamo
exporter (nn.TransformerEncoderLayer's attention only exports there).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LR = 0.01


@dataclass(frozen=True)
class ModuleSpec:
    """How to make one model: its module, its input's shape, its loss (cross-entropy over
    `classes`, or mse against a float target of the output's shape)."""

    make: Callable[[], object]
    input_shape: tuple[int, ...]
    loss: str
    classes: int = 0


def _torchvision(name: str, **kw):
    def make():
        try:
            import torchvision
        except ImportError:
            raise RuntimeError("torchvision is not installed") from None
        return getattr(torchvision.models, name)(weights=None, **kw)
    return make


def gpt_block(d: int = 768, heads: int = 12):
    """A GPT-2 decoder block (pre-LayerNorm, causal self-attention, GELU MLP)."""
    import torch
    from torch import nn

    class GptBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2)
                       for z in self.qkv(self.ln1(x)).split(d, dim=2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // heads))
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
            y = (att.masked_fill(mask, float("-inf")).softmax(-1) @ v)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))

    return GptBlock()


def bert_block(d: int = 768, heads: int = 12):
    """A BERT-base encoder block: PyTorch's own nn.TransformerEncoderLayer (post-LayerNorm,
    GELU), no dropout (timing, not regularisation)."""
    from torch import nn

    return nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                      batch_first=True)


MODULES = {
    "tv_resnet50": ModuleSpec(_torchvision("resnet50"), (64, 3, 224, 224), "cross-entropy", 1000),
    "tv_inception_v3": ModuleSpec(_torchvision("inception_v3", aux_logits=False,
                                               init_weights=True),
                                  (16, 3, 299, 299), "cross-entropy", 1000),
    "bert_block": ModuleSpec(bert_block, (8, 128, 768), "mse"),
    "gpt_block": ModuleSpec(gpt_block, (8, 128, 768), "mse"),
}


def export_onnx(name: str, folder: Path) -> Path:
    """The module exported to `folder/NAME.onnx` (module docstring: which exporter)."""
    import warnings

    import torch

    spec = MODULES[name]
    torch.manual_seed(0)
    module = spec.make().train()
    x = torch.randn(*spec.input_shape)
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"],
                              dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)
        except Exception:  # noqa: BLE001 - the other exporter is the fallback
            torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"],
                              dynamo=True, verbose=False)
    return path


def onnx_graph(name: str, folder: Path):
    """Our training graph of the module: its ONNX export imported, the loss attached to its
    output (cross-entropy with a label input, or mse with a target input), SGD."""
    from planner.frontend.load import load_graph
    from planner.frontend.loss import with_loss
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.optimizer import Optimizer

    graph = with_loss(load_graph(str(export_onnx(name, folder))), MODULES[name].loss)
    return prepare(graph, GraphOptions(optimizer=Optimizer(kind="sgd", lr=LR)))


def module_trainer(name: str, mode: str = "eager", device: str = "cuda") -> Callable[[], None]:
    """One SGD training step of the module on `device`, returning once it has finished there;
    warmed up (compiled, or captured) before it is returned. mode: "eager", "graph" (the whole
    step captured as one CUDA graph and replayed) or "compile" (torch.compile,
    mode="max-autotune"). Float32, TF32 off, as our executor computes."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    spec = MODULES[name]
    torch.manual_seed(0)
    model = spec.make().to(device).train()
    x = torch.randn(*spec.input_shape, device=device)
    with torch.no_grad():
        out_shape = model(x).shape
    if spec.loss == "cross-entropy":
        target = torch.randint(0, spec.classes, (spec.input_shape[0],), device=device)
        loss_fn = torch.nn.functional.cross_entropy
    else:
        target = torch.randn(*out_shape, device=device)
        loss_fn = torch.nn.functional.mse_loss
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    forward = torch.compile(model, mode="max-autotune") if mode == "compile" else model

    def step() -> None:
        opt.zero_grad(set_to_none=mode != "graph")
        loss_fn(forward(x), target).backward()
        opt.step()

    sync = torch.cuda.synchronize
    if mode == "graph":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # PyTorch's recipe: warm up on a side stream before capture
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()

        def run() -> None:
            graph.replay()
            sync()
        return run
    for _ in range(3):
        step()
    sync()

    def run() -> None:
        step()
        sync()
    return run
