"""loss ops (being written)."""
