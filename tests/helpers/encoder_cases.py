"""A small encoder whose sequence length changes every batch (dynamic padding), and its seeded
batches: what the tests of one trace for every size (tests/importers/test_symbolic_trace.py)
and of a range's new lengths (tests/importers/test_range_lengths.py) train."""

from __future__ import annotations

import torch

nn = torch.nn


class Encoder(nn.Module):
    """Token ids and a padding mask of any length: attention, a mean over the valid tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, tokens, keep):
        h = self.layer(self.embed(tokens), src_key_padding_mask=~keep)
        w = keep.unsqueeze(-1).float()
        return self.head((h * w).sum(1) / w.sum(1).clamp(min=1.0))


def batch(length: int, rows: int = 4, seed: int = 0):
    """Token ids, a mask (the first row padded past half the length) and labels, drawn from
    `seed + length`."""
    g = torch.Generator().manual_seed(seed + length)
    tokens = torch.randint(0, 20, (rows, length), generator=g)
    keep = torch.ones(rows, length, dtype=torch.bool)
    keep[0, length // 2:] = False
    return tokens, keep, torch.randint(0, 3, (rows,), generator=g)
