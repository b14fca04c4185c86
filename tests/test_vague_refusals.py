"""Refusals that named the wrong thing (issue 85, "Vague"; item 7): each now one line naming
its input and, where torch refuses it too, in torch's words. Multinomial of a row that is not
a distribution names the multinomial node, not the look-up that refuses it (the reference
interpreter and the executor, through torch.compile); an ONNX input past the tensor size limit
names the tensor and the limit, not pydantic's report and URL; an `out_dir` that is a file
names out_dir, not a bare FileExistsError."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cli.main import main
from planner.errors import UserError

TORCH_WORDS = ("(multinomial): probability tensor contains either inf, nan or element < 0, or "
               "a row sums to 0 (torch.multinomial refuses it)")


class _Draw:
    """A module drawing from its input's rows (a torch.nn.Module made on first use)."""

    def __new__(cls):
        import torch

        class Draw(torch.nn.Module):
            def forward(self, p):
                return torch.multinomial(p, 3, replacement=True) + 0

        return Draw()


@pytest.mark.parametrize("row", [[np.nan, 1, 1, 1], [1, -1, 1, 1], [1, np.inf, 1, 1],
                                 [0, 0, 0, 0]])
def test_multinomial_of_no_distribution_names_the_multinomial_in_torchs_words(row):
    torch = pytest.importorskip("torch")
    from planner.graph import run
    from planner.importers.torch.convert import convert
    from planner.ops.base import OpError

    converted = convert(torch.export.export(_Draw(), (torch.ones(2, 4),)))
    p = np.array([[0.1, 0.2, 0.3, 0.4], row], np.float32)
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or "
                                           "element < 0|invalid multinomial distribution"):
        torch.multinomial(torch.from_numpy(p), 3, replacement=True)  # torch's own, alike
    with pytest.raises(OpError) as e:
        run(converted.graph, {converted.inputs[0]: p}, converted.params(), keep="outputs")
    assert str(e.value).startswith("op 'multinomial") and str(e.value).endswith(TORCH_WORDS)
    assert "Embedding" not in str(e.value) and "invalid_probabilities" not in str(e.value)


def test_the_executor_names_the_multinomial_in_torchs_words():
    torch = pytest.importorskip("torch")
    compiled = torch.compile(_Draw(), backend="planner", options={"fallback": False})
    ok = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0]])
    assert compiled(ok).shape == (2, 3)
    with pytest.raises(Exception) as e:
        compiled(torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, float("nan"), 1.0, 1.0]]))
    text = str(e.value)
    assert "op 'multinomial" in text and TORCH_WORDS in text, text
    assert "invalid_probabilities" not in text and "out of range" not in text, text


def test_an_onnx_input_past_the_size_limit_names_the_tensor_and_the_limit(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    huge = [2**40, 2**40]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, huge)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, huge)])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph), path)
    assert main(["graph", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"planner: error: {path}: tensor 'x': shape [1099511627776, 1099511627776] "
                   f"holds more than 2^56 elements (the most one tensor may hold)")


def test_an_out_dir_that_is_a_file_names_out_dir(tmp_path):
    torch = pytest.importorskip("torch")
    from planner.torch import trainer

    taken = tmp_path / "taken"
    taken.write_text("the user's file\n")
    model = torch.nn.Linear(3, 2)
    with pytest.raises(UserError) as e:
        trainer(model, [torch.ones(4, 3)], torch.nn.functional.cross_entropy,
                torch.zeros(4, dtype=torch.int64), costs="analytical", out_dir=taken)
    assert str(e.value) == (f"out_dir {str(taken)!r}: is a file, not a folder; name a folder "
                            f"for the executors' sources")
    assert taken.read_text() == "the user's file\n"  # untouched
    compiled = torch.compile(model, backend="planner", options={"fallback": False,
                                                                "out_dir": str(taken)})
    with pytest.raises(UserError, match=f"^out_dir {str(taken)!r}: is a file, not a folder"):
        compiled(torch.ones(2, 3))
    below = taken / "sub"
    with pytest.raises(UserError, match=f"^out_dir {str(below)!r}: cannot be made \\(Not a "
                                        "directory\\)$"):
        trainer(model, [torch.ones(4, 3)], torch.nn.functional.cross_entropy,
                torch.zeros(4, dtype=torch.int64), costs="analytical", out_dir=below)
