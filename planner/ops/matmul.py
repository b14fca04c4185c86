"""matmul ops (being written)."""
