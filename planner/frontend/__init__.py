"""The front end: a GRAPH argument loaded (load; a user's graph JSON is parsed by
planner.io.read), and the checked passes that turn the model into the step graph every command
plans (prepare, under one GraphOptions): the loss (loss), autodiff (autodiff; vjp cuts its
graph in two for the torch door), and the rewrites of passes/, one module per pass in the
order of planner.frontend.passes.PASSES."""
