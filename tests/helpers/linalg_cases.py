"""The small-matrix ops' cases against torch.linalg (tests/ops/test_linalg.py; autodiff's
gradients of them, tests/graph/test_autodiff.py)."""

from __future__ import annotations

import numpy as np
import torch


def normal(shape, seed=0):
    """Standard normal samples of `shape` (seeded)."""
    return np.random.default_rng(seed).standard_normal(shape)


def positive_definite(shape, seed=0):
    """A symmetric positive definite matrix (batch) of `shape`."""
    x = normal(shape, seed)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


CASES = [  # op, inputs, attrs, torch's function of the same inputs
    ("MatrixInverse", [normal((2, 3, 4, 4))], {}, torch.linalg.inv),
    ("MatrixSolve", [normal((3, 4, 4)), normal((3, 4, 2), 1)], {}, torch.linalg.solve),
    ("MatrixSolve", [normal((5, 5)), normal((5, 3), 1)], {"transpose": True},
     lambda a, b: torch.linalg.solve(a.mT, b)),
    ("MatrixSlogdet", [normal((3, 4, 4))], {}, torch.linalg.slogdet),
    ("Cholesky", [positive_definite((2, 4, 4))], {}, torch.linalg.cholesky),
    ("MatrixQr", [normal((2, 5, 3))], {}, torch.linalg.qr),
    ("MatrixQr", [normal((4, 4), 2)], {}, torch.linalg.qr),
    # 1-norms near 9 (squared twice) and 0.3 (a low Padé degree)
    ("MatrixExp", [normal((2, 4, 4), 3)], {}, torch.linalg.matrix_exp),
    ("MatrixExp", [0.1 * normal((3, 3), 4)], {}, torch.linalg.matrix_exp),
]
