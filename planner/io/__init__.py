"""The user's files: reading them (read.py: JSON parsed and checked, naming the file and field)
and writing them so that nothing is lost (write.py: atomic writes, folder locks)."""
