"""Plan -> generated executor: render sources, build them (CMake + Ninja, cached), load.

    backends.py  the backends (templates/common + templates/<backend>), chosen from the plan
    render.py    plan -> source tree under generated/NAME/ (jinja2 templates)
    layout.py    arena offsets of the tensors and scratch areas (the memory plan's, or our own)
    support.py   which ops and dtypes a backend's executor runs
    build.py     the cached runtime (per backend and host) and the per-plan schedule library
    load.py      import a built executor package
    cli.py       `planner build PLAN [-o DIR]`

Example (what `planner build` does):
    >>> from codegen import render, build, load            # doctest: +SKIP
    >>> tree = render.render(plan, "generated/lenet")      # doctest: +SKIP
    >>> module = load.load(build.build(tree).dir)      # doctest: +SKIP
    >>> module.Executor().step(feeds)["loss"]              # doctest: +SKIP
"""

from codegen.errors import BuildError, UnsupportedError  # noqa: F401
