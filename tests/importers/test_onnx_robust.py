"""Bad files: truncated or random bytes, corrupt models and unreadable paths all give one
OnnxImportError of one line, never a protobuf or numpy traceback."""

from __future__ import annotations

import numpy as np
import pytest

from planner.importers import OnnxImportError, load_onnx
from tests.importers.onnx_models import ONNX_DATA

MODEL = ONNX_DATA / "light" / "light_squeezenet.onnx"
SMALL = ONNX_DATA / "pytorch-converted" / "test_Conv2d" / "model.onnx"


def one_line_error(data) -> OnnxImportError:
    with pytest.raises(OnnxImportError) as e:
        load_onnx(data)
    assert "\n" not in str(e.value) and str(e.value)
    return e.value


def test_every_truncation_is_reported():
    data = MODEL.read_bytes()
    for cut in [0, 1, 2, 10, *range(100, len(data), len(data) // 37), len(data) - 1]:
        error = one_line_error(data[:cut])
        assert "ONNX bytes" in str(error) and not error.unsupported


def test_random_bytes_are_reported():
    rng = np.random.default_rng(0)
    for _ in range(100):
        data = rng.integers(0, 256, int(rng.integers(1, 3000)), dtype=np.uint8).tobytes()
        one_line_error(data)


def test_text_and_json_are_not_onnx():
    assert "not an ONNX model" in str(one_line_error(b'{"nodes": []}'))
    assert "not an ONNX model" in str(one_line_error(b"ir_version: 8\ngraph {}\n"))


@pytest.mark.parametrize("source", [MODEL, SMALL])
def test_corrupted_bytes_give_import_errors_or_a_valid_graph(source):
    # Flipped bytes may leave a parseable model with odd names, types, shapes or attributes:
    # whatever the import makes of it, only OnnxImportError may escape.
    data = bytearray(source.read_bytes())
    rng = np.random.default_rng(1)
    for _ in range(60):
        corrupt = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            corrupt[int(rng.integers(0, len(corrupt)))] = int(rng.integers(0, 256))
        try:
            load_onnx(bytes(corrupt))
        except OnnxImportError as e:
            assert "\n" not in str(e)


def test_missing_file_and_directory(tmp_path):
    assert "cannot read" in str(one_line_error(tmp_path / "nope.onnx"))
    assert "cannot read" in str(one_line_error(tmp_path))


def test_file_path_and_bytes_give_the_same_graph():
    assert load_onnx(SMALL) == load_onnx(SMALL.read_bytes())
    assert load_onnx(SMALL, name="conv").name == "conv"
