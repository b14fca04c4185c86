"""The PyTorch importer: torch.export programs to planner Graphs."""
