"""Import a built executor package (see codegen.build) by its folder.

Example:
    >>> module = load("generated/lenet")        # doctest: +SKIP
    >>> ex = module.Executor()                  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load(package_dir: str | Path) -> ModuleType:
    """The package in `package_dir` (its folder name is the module name), imported fresh.

    Each call executes the package's __init__ again, so a rebuilt plan takes effect; the
    runtime extension it loads is shared by every plan of the process.
    """
    d = Path(package_dir).resolve()
    held = sys.modules.get(d.name)
    if held is not None and not (hasattr(held, "Executor") and hasattr(held, "plan")):
        # Registering would replace a module the process already uses (a folder named onnx
        # or torch): every later `import onnx` would get the executor.
        raise ImportError(f"{d}: its name {d.name!r} is the module {held.__name__} this process "
                          f"already imported; build into a folder of another name")
    init = d / "__init__.py"
    if not init.exists():
        raise ImportError(f"{d}: not a generated executor (no __init__.py); render it first")
    spec = importlib.util.spec_from_file_location(d.name, init,
                                                  submodule_search_locations=[str(d)])
    if spec is None or spec.loader is None:
        raise ImportError(f"{d}: cannot import")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[d.name] = module
    return module
