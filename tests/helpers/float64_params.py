"""The float64 training tests' parameter check (tests/codegen/test_float64*.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def assert_params_close(got: Mapping[str, Any], want: Mapping[str, Any], tol: float) -> None:
    """Each of `want`'s tensors (torch's, by name) within `tol` of `got`'s (torch tensors or
    arrays), relative to its largest magnitude; the error names the tensor."""
    for key, w in want.items():
        w = w.detach().numpy()
        g = got[key]
        g = g.detach().numpy() if hasattr(g, "detach") else np.asarray(g)
        err = float(np.abs(g - w).max()) / float(np.abs(w).max())
        assert err <= tol, f"{key}: rel. error {err:.2e}"
