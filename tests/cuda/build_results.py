"""What the CUDA build tests read from what they built: the runtime extension, imported, and
a rendered schedule's string table (tests/cuda/test_cuda_build.py, test_gpu_profile.py)."""

from __future__ import annotations

import importlib.util
import sys


def import_runtime(path):
    """The built CUDA runtime extension at `path`, as the module planner_cuda_rt (the name the
    generated executors import it by), loaded once per process."""
    if "planner_cuda_rt" in sys.modules:
        return sys.modules["planner_cuda_rt"]
    spec = importlib.util.spec_from_file_location("planner_cuda_rt", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["planner_cuda_rt"] = module
    return module


def schedule_strings(tree) -> bytes:
    """A rendered tree's schedule string table, as bytes (names and attrs are data, not source
    text)."""
    text = tree.files["schedule.cpp"]
    body = text[text.index("kBytes[] = {") + len("kBytes[] = {"):]
    body = body[:body.index("}")]
    return bytes(int(b) for b in body.replace("\n", " ").split(",") if b.strip())
