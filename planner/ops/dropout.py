"""dropout ops (being written)."""
