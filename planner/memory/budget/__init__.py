"""The budget solver both backends' memory planning share (search.py: the state and its moves;
materialize.py: a state's buffers and per-op specs; floor.py: a state's lower bound, checked
before it is laid out; solver.py: decide, lay, workspaces, times, the MemoryDecision). Its
fronts are planner.memory.gpu and planner.memory.cpu_budget."""
