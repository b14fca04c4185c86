"""The IR: the graph records every stage reads (graph.py: Graph, Node, Tensor), the pydantic
base of every record with its canonical JSON and units (record.py), and the gradient
accumulation vocabulary the graph passes and the runtime share (accumulation.py), and the
parts of a training step a node belongs to (phases.py)."""
