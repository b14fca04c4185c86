"""The onnx package's PyTorch-exported conformance cases (backend/test/data/pytorch-converted and
pytorch-operator): each folder holds model.onnx and test_data_set_0 with its stored inputs and
outputs. The reference interpreter (tests/importers/test_onnx_conformance.py) and the generated
executor (tests/codegen/test_onnx_conformance.py) run them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from tests.importers.onnx_models import ONNX_DATA

CASE_DIRS = sorted(p for sub in ("pytorch-converted", "pytorch-operator")
                   for p in (ONNX_DATA / sub).iterdir() if (p / "model.onnx").exists())


def load_tensor(path: Path) -> np.ndarray:
    """A stored input or output (a TensorProto file) as an array."""
    return numpy_helper.to_array(onnx.load_tensor(str(path)))
