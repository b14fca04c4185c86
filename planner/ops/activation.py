"""activation ops (being written)."""
