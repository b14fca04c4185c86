"""embedding ops (being written)."""
