"""reduce ops (being written)."""
