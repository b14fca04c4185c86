"""The budget solver both backends' memory planning share (search.py: the state and its moves;
solver.py: decide, lay, workspaces, times, the MemoryDecision). Its fronts are
planner.memory.gpu and planner.memory.cpu_budget."""
