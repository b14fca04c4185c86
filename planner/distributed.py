"""The old name of planner.runtime.distributed, the same module object: executors generated
before the move import it by this name (their packages and the runtime library in the build
cache). A rebuild (`planner build`) imports the new name; remove this when none are left."""

import sys

from planner.runtime import distributed as _module

sys.modules[__name__] = _module
