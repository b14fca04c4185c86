"""The front end: a GRAPH argument loaded (load), a user's graph JSON parsed (json_input), and
the checked passes that turn the model into the step graph every command plans (prepare, under
one GraphOptions)."""
