"""How torch.linalg.eig's eigenvalue order and eigenvector phases compare with the planner's
MatrixEig (LAPACK dgeev, planner/ops/linalg_eig.py's reference; the CPU kernel computes the
same in float64): on PyTorch's OpInfo sample inputs of linalg.eig and linalg.eigvals, and on
seeded standard normal n x n matrices, n in 1..8, in float32 and float64. Prints, per set
and dtype, how many matrices torch orders otherwise (the same eigenvalues, another order),
and of those in the same order, how many have an eigenvector whose phase differs from the
planner's by more than a sign of a real vector (torch's phase is LAPACK's: a complex vector's
largest entry real, of either sign; the planner's makes it positive).

    python bench/eig_orders.py [--matrices 2000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _matrices(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, n)) for n in rng.integers(1, 9, count)]


def _opinfo_matrices() -> list[np.ndarray]:
    """Every square matrix of the first 3 samples of OpInfo linalg.eig and linalg.eigvals."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    out = []
    for op in op_db:
        if op.name in ("linalg.eig", "linalg.eigvals"):
            for k, s in enumerate(op.sample_inputs("cpu", torch.float64)):
                if k == 3:
                    break
                x = s.input.detach().numpy()
                if x.size:
                    out += list(x.reshape(-1, *x.shape[-2:]))
    return out


def _compare(a: np.ndarray, dtype) -> tuple[bool, bool]:
    """(torch orders the eigenvalues otherwise, some eigenvector's phase differs)."""
    import torch

    from planner.ops import get_op

    w, v = get_op("MatrixEig").reference([a], {})
    w, v = w[..., 0] + 1j * w[..., 1], v[..., 0] + 1j * v[..., 1]
    lt, vt = (t.numpy().astype(complex) for t in torch.linalg.eig(torch.tensor(a, dtype=dtype)))
    tol = 1e-3 if dtype == torch.float32 else 1e-9
    if not np.allclose(lt, w, atol=tol, rtol=tol):
        return True, False
    phase = np.sum(v.conj() * vt, axis=-2)
    real = np.abs(w.imag) == 0
    return False, not (np.allclose(phase[~real], 1, atol=tol) and
                       np.allclose(np.abs(phase[real]), 1, atol=tol))


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", type=int, default=2000)
    args = parser.parse_args(argv)
    print("| matrices | torch dtype | count | other order | same order, other phase |")
    print("| --- | --- | --- | --- | --- |")
    for name, ms in (("OpInfo samples", _opinfo_matrices()),
                     ("normal, n in 1..8", _matrices(args.matrices))):
        for dtype in (torch.float32, torch.float64):
            rows = [_compare(m, dtype) for m in ms]
            print(f"| {name} | {str(dtype)[6:]} | {len(rows)} | {sum(r[0] for r in rows)} | "
                  f"{sum(r[1] for r in rows)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
