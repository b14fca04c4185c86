"""The front end: a GRAPH argument loaded (load; a user's graph JSON is parsed by
planner.io.read), and the checked passes that turn the model into the step graph every command
plans (prepare, under one GraphOptions)."""
