"""The PyTorch baseline of the benches: one SGD training step of a forward graph translated
node by node to torch calls (tests/torch_translator.py), with torch.autograd and
torch.optim.SGD, eagerly or under torch.compile (inductor), on the CPU or a GPU (there also
captured whole as one CUDA graph and replayed, PyTorch's recipe for launch-bound steps)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.graph.interpret import init_params, random_feeds  # noqa: E402


def compile_ops() -> dict:
    """The translator's ops as the benches time them: torch's own dropout (its RNG, in the
    compiled graph), as a PyTorch user runs it, rather than the translator's bit-exact copy of
    the planner's mask (numpy); Flatten's size through math.prod (the translator's np.prod of
    a torch.Size breaks Dynamo's graph)."""
    import torch

    from tests.torch_translator import TORCH_OPS

    return {**TORCH_OPS,
            "Dropout": lambda xs, a: [torch.nn.functional.dropout(xs[0], a["rate"],
                                                                  training=True)],
            "Flatten": lambda xs, a: [xs[0].reshape(math.prod(xs[0].shape[:a["axis"]]), -1)]}


def traced_loss(forward, ops: dict) -> Callable:
    """The loss of `forward` from torch values, each node's attributes normalized once here:
    tests/torch_translator.py's torch_forward normalizes them in its loop, where Dynamo cannot
    trace the attributes' sort, so torch.compile skipped the whole step and compiled each op's
    helper alone (no fusion across ops; the helpers hit the recompile limit and ran eagerly)."""
    from planner.ops import get_op

    nodes = [(ops[n.op], tuple(n.inputs), tuple(n.outputs),
              get_op(n.op).normalize_attrs(n.attrs)) for n in forward.nodes]

    def loss(values: dict):
        env = dict(values)
        for fn, inputs, outputs, attrs in nodes:
            env.update(zip(outputs, fn([env[i] for i in inputs], attrs), strict=True))
        return env["loss"]
    return loss


def torch_trainer(forward, lr: float, threads: int, compiled: bool = False,
                  device: str = "cpu", cuda_graph: bool = False,
                  autocast: str | None = None, tf32: bool = False,
                  compile_mode: str = "default") -> Callable[[], None]:
    """A function running one training step of `forward`'s loss on `threads` threads (or the
    GPU `device`, returning once the step has finished there); warmed up (and compiled, or
    captured as one CUDA graph) before it is returned. `autocast` ("bfloat16", "float16"):
    the forward runs under torch.autocast with that dtype (PyTorch's mixed precision); `tf32`:
    float32 convolutions and GEMMs on TF32 tensor cores (torch.backends' allow_tf32).
    `compile_mode`: torch.compile's mode ("default", "max-autotune-no-cudagraphs", ...)."""
    import torch

    ops = compile_ops()

    torch.set_num_threads(threads)
    if device != "cpu":
        # float32 as the executor computes it: no TF32 rounding in either unless both run
        # the tf32 policy.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    state = init_params(forward, seed=0)
    feeds = random_feeds(forward, seed=1)
    params = {t.name: torch.tensor(state[t.name], device=device, requires_grad=True)
              for t in forward.by_role("param")}
    values = {**{k: torch.tensor(v, device=device) for k, v in state.items()},
              **{k: torch.tensor(v, device=device) for k, v in feeds.items()}, **params}
    opt = torch.optim.SGD(list(params.values()), lr=lr)

    traced = traced_loss(forward, ops)

    def loss(vals):
        if autocast is None:
            return traced(vals)
        with torch.autocast(device.split(":")[0], dtype=getattr(torch, autocast)):
            return traced(vals)

    mode = None if compile_mode == "default" else compile_mode
    fn = torch.compile(loss, dynamic=False, mode=mode) if compiled else loss

    def step() -> None:
        opt.zero_grad(set_to_none=not cuda_graph)
        fn(values).backward()
        opt.step()

    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    if cuda_graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up on a side stream, as the capture recipe asks
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()

        def replay() -> None:
            graph.replay()
            sync()

        replay()
        return replay

    def run() -> None:
        step()
        sync()

    run()
    run()
    return run
