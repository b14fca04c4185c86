"""The PyTorch (ATen) importer: torch.export programs to planner Graphs."""
