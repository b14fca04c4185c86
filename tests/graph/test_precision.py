"""The precision policies (planner/frontend/passes/precision.py) on training graphs, and bf16-mixed
training in the reference interpreter (bfloat16 emulated exactly with ml_dtypes) against
float32: the loss curves of 30 SGD steps."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.frontend.passes.precision import (
    FOLLOW_OPS,
    LOW_PARAMS,
    LOW_PRECISION_OPS,
    apply_precision,
)
from planner.graph.interpret import init_params, random_feeds, train_step
from planner.graph.optimizer import Optimizer
from planner.graph.validate import check_graph
from planner.zoo import build

U = 2.0 ** -8  # bfloat16's unit roundoff

SMALL = {
    "mlp": dict(batch=16, hidden=[32], in_features=24, classes=5),
    "lenet": dict(batch=8, image=16, classes=4),
    "resnet": dict(batch=4, image=16, depth=18, width=0.125, classes=4),
    "lstm": dict(batch=2, seq=3, hidden=8, layers=1, vocab=11),
}


def training(model: str, precision: str, lr: float = 0.05):
    return make_training_graph(build(model, **SMALL[model]), Optimizer(kind="sgd", lr=lr),
                               precision=precision)


def test_tf32_marks_the_math_and_changes_nothing_else():
    """tf32 is a math mode of the GPU's kernels: the graph's tensors and ops are fp32's, its
    `math` says tf32 and survives the JSON round trip; an fp32 graph has no math field at all
    (so every fp32 graph, plan and hash is what it was before the field existed)."""
    from planner.ir.graph import Graph

    fp32, tf32 = training("lenet", "fp32"), training("lenet", "tf32")
    assert fp32.math is None and tf32.math == "tf32"
    assert tf32.model_copy(update={"math": None}) == fp32
    assert '"math"' not in fp32.to_json()
    assert Graph.model_validate_json(tf32.to_json()) == tf32
    assert Graph.model_validate_json(fp32.to_json()).math is None


@pytest.mark.parametrize("model", sorted(SMALL))
@pytest.mark.parametrize("low", [("bf16-mixed", "bfloat16"), ("fp16-mixed", "float16")])
def test_mixed_policy(model, low):
    precision, dtype = low
    g = training(model, precision)
    check_graph(g)
    types = {t.name: t.dtype for t in g.tensors}
    producer = g.producer
    # master weights, optimizer state and the loss stay float32
    assert all(t.dtype == "float32" for t in g.by_role("param", "optimizer-state"))
    assert types["loss"] == "float32"
    low_ops = [n for n in g.nodes if n.op in LOW_PRECISION_OPS]
    assert low_ops
    def floats(names):
        return {types[t] for t in names if types[t].startswith(("float", "bf"))}

    for n in g.nodes:
        dtypes = floats((*n.inputs, *n.outputs))
        if n.op in LOW_PRECISION_OPS:
            assert dtypes == {dtype}, n.name
        elif n.op in FOLLOW_OPS and dtype in dtypes:
            # in the low type: its data inputs and outputs; parameters, statistics and a
            # reduction's result stay float32
            ins, outs = FOLLOW_OPS[n.op]
            data_in = [*(range(len(n.inputs)) if ins is None else ins),
                       *LOW_PARAMS.get(n.op, ())]
            assert floats(n.inputs[i] for i in data_in) == {dtype}, n.name
            assert floats(n.outputs[k] for k in outs) <= {dtype}, n.name
            others = [y for k, y in enumerate(n.outputs) if k not in outs]
            others += [x for i, x in enumerate(n.inputs) if i not in data_in]
            assert floats(others) <= {"float32"}, n.name
        elif n.op != "Cast":  # softmax, losses, statistics, reductions, updates: float32
            assert dtype not in dtypes, n.name
    casts = [(n.inputs[0], n.attrs["to"]) for n in g.nodes if n.op == "Cast"]
    assert len(casts) == len(set(casts)), "a tensor is cast to one type at most once"
    for x, to in casts:  # casts of casts are elided: low -> float32 -> low never happens
        assert not (to == dtype and x in producer and producer[x].op == "Cast")


def test_the_saved_low_copy_serves_forward_and_backward():
    g = training("lenet", "bf16-mixed")
    readers = [n.op for n in g.nodes if "conv2/weight/bfloat16" in n.inputs]
    assert readers == ["Conv2D", "Conv2DBackpropInput"]
    assert g.tensor("conv2/weight/bfloat16").nbytes == g.tensor("conv2/weight").nbytes // 2


def test_unknown_policy_and_taken_names_are_refused():
    g = training("mlp", "fp32")
    with pytest.raises(ValueError, match="precision 'bf16' is not one of"):
        apply_precision(g, "bf16")
    taken = g.model_copy(update={"tensors": (*g.tensors, g.tensor("x").model_copy(
        update={"name": "x/bfloat16", "role": "input"}))})
    with pytest.raises(ValueError, match="'x/bfloat16'.* already has it"):
        apply_precision(taken, "bf16-mixed")


# Learning rates at which 30 steps on one batch halve the loss or more but do not drive it near
# zero (memorising one batch: a relative gap of two vanishing losses measures nothing).
CURVE_LR = {"mlp": 0.05, "lenet": 0.005, "lstm": 0.05}


def curve(model: str, precision: str, steps: int = 30) -> list[float]:
    g = training(model, precision, CURVE_LR[model])
    state, feeds = init_params(g, seed=0), random_feeds(g, seed=0)
    losses = []
    for _ in range(steps):
        out, state = train_step(g, feeds, state)
        losses.append(float(out["loss"]))
    return losses


@pytest.mark.parametrize("model", sorted(CURVE_LR))
def test_bf16_mixed_tracks_the_float32_loss_curve(model):
    """30 SGD steps on one batch from the same start: the bfloat16 operands perturb each step's
    gradient by a few u (2^-8) relative, which SGD carries along without amplifying it at these
    learning rates; the last loss stays within 2% of float32's."""
    f32, bf16 = curve(model, "fp32"), curve(model, "bf16-mixed")
    assert f32[-1] < 0.9 * f32[0], "the float32 run itself must learn"
    assert abs(bf16[-1] - f32[-1]) / f32[-1] < 0.02, (f32[-1], bf16[-1])


# More zoo models: (small configuration, learning rate) at which 30 SGD steps on one batch learn
# (the float32 loss falls by >= 10%). Not here: ResNet, DenseNet and Inception at sizes that run
# in seconds, where the curves leave float32's by 9-35% and PyTorch's autocast's do as much
# (bench/bench_bf16_curves.py, bench/results/2026-11-23-bf16-curves.md). Their last stages
# normalise over 4 to 36 values per channel, which makes the step ill-conditioned: float32's
# first gradients are already 700 unit roundoffs off float64's, bfloat16's (ours and autocast's
# alike) are O(1) off, and two float32 implementations (ours and PyTorch's) end 30 steps up to
# 39% apart. tests/graph/test_precision_vs_autocast.py holds them to autocast instead: op by op
# on the forward, and the loss after the first update (22% off float32's, autocast's to 4e-5).
# At a size where the statistics are well conditioned ResNet-18 tracks float32 (64x64, batch 8:
# 1.5%; 32x32, batch 16, lr 1e-4: 1.9%, autocast 1.6%), too slow for here.
ZOO_CURVES = {
    "gpt": (dict(batch=2, seq=4, dim=8, heads=2, layers=1, vocab=11), 0.1),
    "bert": (dict(batch=2, seq=4, dim=8, heads=2, layers=1, vocab=11), 0.1),
    "wide_deep": (dict(batch=4, tables=5, vocab=[7, 3, 5, 2, 9], dim=3, hidden=[8, 4]), 0.1),
    "vgg16": (dict(batch=4, image=32, width=0.0625, classes=5), 0.001),
}


# VGG's curve is the slowest (10 s): in the slow tier for CI's 20 minutes.
@pytest.mark.parametrize("model", [pytest.param(m, marks=pytest.mark.slow) if m == "vgg16"
                                   else pytest.param(m, marks=pytest.mark.ci_sample)
                                   for m in sorted(ZOO_CURVES)])
def test_zoo_models_track_the_float32_loss_curve_in_bf16_mixed(model):
    """As test_bf16_mixed_tracks_the_float32_loss_curve, on the zoo's transformer, wide & deep
    and VGG graphs (bfloat16 activations between the convolutions, BatchNorm-free)."""
    cfg, lr = ZOO_CURVES[model]

    def last_losses(precision: str, start=lambda state: state) -> list[float]:
        g = make_training_graph(build(model, **cfg), Optimizer(kind="sgd", lr=lr),
                                precision=precision)
        state, feeds = start(init_params(g, seed=0)), random_feeds(g, seed=0)
        losses = []
        for _ in range(30):
            out, state = train_step(g, feeds, state)
            losses.append(float(out["loss"]))
        return losses

    f32, bf16 = last_losses("fp32"), last_losses("bf16-mixed")
    assert f32[-1] < 0.9 * f32[0], "the float32 run itself must learn"
    gap = abs(bf16[-1] - f32[-1]) / f32[-1]
    if gap < 0.02:
        return
    # Some curves amplify any perturbation (VGG's: one rounding of the start moves float32's
    # own 30th loss by ~1%, and how much depends on the machine's BLAS summation order). There
    # the bound is what float32 itself does from a start rounded once to bfloat16, times 10:
    # bf16-mixed rounds operands at every step, but each rounding is of that size.
    rounded = last_losses("fp32", lambda state: {
        k: v.astype(ml_dtypes.bfloat16).astype(v.dtype) if v.dtype == np.float32 else v
        for k, v in state.items()})
    amplified = abs(rounded[-1] - f32[-1]) / f32[-1]
    assert gap < 10 * amplified, (f32[-1], bf16[-1], rounded[-1])


def test_tolerance_sees_bfloat16_rounding():
    """The executor test's bound (4u of each update, tests/codegen/mixed_cases.py) is
    tight enough to tell a bfloat16 step from a float32 one: on that test's LeNet and start,
    the two reference steps differ by more than it."""
    from tests.codegen.helpers import start_state
    from tests.codegen.mixed_cases import MODELS, mixed_graph, update_errors

    g16 = mixed_graph("lenet")
    g32 = make_training_graph(build("lenet", **MODELS["lenet"]), Optimizer(kind="sgd", lr=0.1))
    state, feeds = start_state(g16), random_feeds(g16, seed=2)
    _, want16 = train_step(g16, feeds, state)
    _, want32 = train_step(g32, feeds, state)
    assert max(update_errors(g16, state, want32, want16).values()) > 4 * U


def test_cli_needs_train_for_precision(capsys):
    from planner.cli import main

    assert main(["graph", "zoo:mlp", "--precision", "bf16-mixed"]) != 0
    assert "--precision needs --train" in capsys.readouterr().err


def _loss_scale_ops(graph_json: str) -> dict[str, dict]:
    import json

    return {n["op"]: n.get("attrs", {}) for n in json.loads(graph_json)["nodes"]
            if n["op"] in ("UnscaleGrads", "UpdateLossScale")}


def test_loss_scaling_flags(tmp_path):
    """`planner graph` and `planner plan` take GradScaler's knobs for fp16-mixed
    (planner/cli/precision.py), as make_training_graph's loss_scaling does."""
    from planner.cli import main

    out = tmp_path / "mlp.json"
    assert main(["graph", "zoo:mlp?batch=2", "--train", "sgd", "--precision", "fp16-mixed",
                 "--loss-scale-growth-interval", "3", "--loss-scale-backoff-factor", "0.25",
                 "-o", str(out)]) == 0
    update = _loss_scale_ops(out.read_text())["UpdateLossScale"]
    assert (update["growth_interval"], update["backoff_factor"]) == (3, 0.25)
    assert main(["graph", "zoo:mlp?batch=2", "--train", "sgd", "--precision", "fp16-mixed",
                 "--no-loss-scaling", "-o", str(out), "--force"]) == 0
    assert _loss_scale_ops(out.read_text()) == {}
    plan = tmp_path / "mlp.plan.json"
    assert main(["plan", "zoo:mlp?batch=2", "--train", "sgd", "--precision", "fp16-mixed",
                 "--loss-scale-growth-factor", "4", "--target", "xeon-8180",
                 "-o", str(plan)]) == 0
    import json

    graph = json.dumps(json.loads(plan.read_text())["graph"])
    assert _loss_scale_ops(graph)["UpdateLossScale"]["growth_factor"] == 4


@pytest.mark.parametrize("argv,message", [
    (["--precision", "bf16-mixed", "--loss-scale-growth-interval", "3"],
     "--loss-scale-growth-interval applies to --precision fp16-mixed"),
    (["--no-loss-scaling"], "--no-loss-scaling applies to --precision fp16-mixed"),
    (["--precision", "fp16-mixed", "--loss-scale-growth-interval", "0"],
     "--loss-scale-growth-interval 0: input should be greater than or equal to 1"),
    (["--precision", "fp16-mixed", "--loss-scale-backoff-factor", "1.5"],
     "--loss-scale-backoff-factor 1.5: input should be less than 1"),
    (["--precision", "fp16-mixed", "--loss-scale-growth-interval", "3", "--no-loss-scaling"],
     "--loss-scale-growth-interval and --no-loss-scaling contradict each other"),
])
@pytest.mark.parametrize("command", ["graph", "plan"])
def test_bad_loss_scaling_flags_are_refused(command, argv, message, capsys, tmp_path):
    from planner.cli import main

    target = ["--target", "xeon-8180", "-o", str(tmp_path / "p.json")] if command == "plan" \
        else []
    assert main([command, "zoo:mlp?batch=2", "--train", "sgd", *target, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_plans_count_the_low_type_bytes(tmp_path):
    """`planner plan --precision bf16-mixed`: the plan's buffers of bfloat16 tensors hold 2 bytes
    per element, the float32 masters 4, and the plan verifies (casts are planned ops)."""
    import json

    from planner.cli import main

    out = tmp_path / "lenet.plan.json"
    assert main(["plan", "zoo:lenet?image=12&batch=8", "--train", "sgd", "--precision",
                 "bf16-mixed", "--target", "xeon-8180", "-o", str(out)]) == 0
    plan = json.loads(out.read_text())
    types = {t["name"]: t for t in plan["graph"]["tensors"]}
    sizes = {"bfloat16": 2, "float32": 4}
    checked = 0
    for b in plan["tensors"]:
        t = types.get(b["tensor"])
        if t and b["name"] == b["tensor"] and not b["alias_of"] and t["dtype"] in sizes:
            elements = 1
            for d in t["shape"]:
                elements *= d
            assert b["bytes"] == elements * sizes[t["dtype"]], b["name"]
            checked += t["dtype"] == "bfloat16"
    assert checked > 10
    assert main(["verify", str(out)]) == 0


def test_no_float32_copy_of_an_activation_is_kept():
    """bf16-mixed ResNet: the only values cast back to float32 are what float32 ops need by
    design (the logits for the loss, the weight gradients for the master update); every
    activation and activation gradient between the convolutions exists in bfloat16 only."""
    g = training("resnet", "bf16-mixed")
    back = [n.outputs[0] for n in g.nodes if n.op == "Cast" and n.attrs["to"] == "float32"]
    assert back
    producers = {y: n for n in g.nodes for y in n.outputs}
    for y in back:
        made_by = producers[g.node_map[f"{y}/cast_float32"].inputs[0]].op
        assert made_by in ("Conv2DBackpropFilter", "MatMul", "BiasAdd"), (y, made_by)
        if made_by != "Conv2DBackpropFilter":  # the classifier: logits, or weight gradient
            assert g.tensor(y).shape[-1] == SMALL["resnet"]["classes"] or y.startswith("grad/")
    for op in ("Relu", "ReluGrad", "BatchNorm", "BatchNormGrad", "Add", "MaxPool",
               "MaxPoolGrad"):
        assert all(g.tensor(n.outputs[0]).dtype == "bfloat16" for n in g.nodes if n.op == op), op


def test_fit_holds_about_twice_the_float32_batch():
    """`planner fit 'zoo:resnet?depth=50' --vary batch` in bf16-mixed holds >= 1.8x float32's
    batch (issue 23's acceptance, there at 224x224 in 11 GiB on h100-80gb: 814 -> 1555). Here
    the same ResNet-50 at 64x64 and a quarter of the width in 256 MiB (128 -> 256), without
    recompute and offload (which would find room in both precisions at a search cost of
    minutes): saved activations dominate, and bfloat16 halves them. (At 32x32 in 64 MiB it is
    96 -> 160, 1.67x: a bfloat16 convolution gradient's cuDNN workspace holds NHWC copies of its
    operands, measured on an H200, and at that size one op's copies weigh on the peak.)"""
    from planner.fit import fit
    from planner.memory.options import MemoryOptions
    from planner.target import preset

    spec = "zoo:resnet?depth=50&image=64&width=0.25"
    options = MemoryOptions(offload=False, recompute="off")
    batch = {p: fit(spec, preset("h100-80gb"), 256 << 20, "batch", multiple=16, precision=p,
                    options=options).value for p in ("fp32", "bf16-mixed")}
    assert batch["fp32"] >= 64, batch
    assert batch["bf16-mixed"] >= 1.8 * batch["fp32"], batch
