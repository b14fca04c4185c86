"""Look-ups that stand for torch's refusals: how a failed step names them.

A torch rule refuses at step time what torch refuses (torch.multinomial of a row that is not a
distribution: planner/importers/torch/rules_random.py) through an Embedding look-up named
`NODE/invalid_probabilities` that a bad row's ids overrun. Its failure is said in torch's
words, naming NODE, by the reference interpreter (`said`) and by the executors
(templates/common/loader.cpp's op_failure, the same text), not as the look-up's own id range.

    >>> said("multinomial_1/invalid_probabilities", "Embedding: ids must lie in [0, 4)")[:61]
    "op 'multinomial_1' (multinomial): probability tensor contains"
    >>> said("emb", "Embedding: ids must lie in [0, 4)") is None
    True
"""

from __future__ import annotations

INVALID_PROBABILITIES = "/invalid_probabilities"
MULTINOMIAL = ("probability tensor contains either inf, nan or element < 0, or a row sums to 0 "
               "(torch.multinomial refuses it)")


def said(node: str, what: str) -> str | None:
    """The refusal node `node`'s failure `what` stands for, in torch's words; None for a node
    that stands for none (its own error says what failed)."""
    if node.endswith(INVALID_PROBABILITIES) and len(node) > len(INVALID_PROBABILITIES):
        return f"op '{node[:-len(INVALID_PROBABILITIES)]}' (multinomial): {MULTINOMIAL}"
    return None
