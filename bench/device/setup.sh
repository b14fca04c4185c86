# Sourced by every device script: the image's Python (the one with PyTorch) with the carried
# wheels (.whl/, made by bench/device/prepare.sh) installed under /tmp/pfx, logs under $OUT.
# Returns non-zero, saying why, when a wheel does not install or a package does not import: a
# call stops there instead of spending its minutes on import errors. With DRY set (prepare.sh's
# dry runs on a development machine): $PLANNER_PY (else python3), nothing installed, no GPU.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export OUT
if [ -n "${DRY:-}" ]; then
  PY=${PLANNER_PY:-$(command -v python3)}
  export PYTHONPATH=$PWD
else
  PY=$(command -v python3)
  if [ ! -d /tmp/pfx ]; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
      echo "setup: no wheels in .whl/: run bash bench/device/prepare.sh here and carry .whl" >&2
      return 1
    fi
    # .whl-cpu/: oneDNN's wheels, carried to the CPU call only (bench/device/wheels-cpu.txt)
    if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --prefix /tmp/pfx .whl/*.whl \
      $(ls .whl-cpu/*.whl 2>/dev/null)
    then
      echo "setup: the wheels in .whl/ did not install (above)" >&2
      rm -rf /tmp/pfx
      return 1
    fi
  fi
  site=$("$PY" -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '/tmp/pfx', 'platbase': '/tmp/pfx'}))")
  export PYTHONPATH=$PWD:$site
  # oneDNN's headers and CMake config come with its wheels when carried (codegen.build.venv_prefix).
  export PLANNER_PREFIX=/tmp/pfx
  export PATH=$PATH:/usr/local/cuda/bin
  export PLANNER_CACHE=/tmp/planner-cache
fi
export PY
export PATH=$(dirname "$PY"):$PATH
python() { "$PY" "$@"; }
if ! "$PY" -c "
import highspy, jinja2, ml_dtypes, nanobind, networkx, numpy, onnx, pydantic, typing_extensions
import codegen.build, planner.pipeline
print('imports ok: pydantic', pydantic.VERSION, 'numpy', numpy.__version__)"; then
  echo "setup: a package does not import (above): stopping" >&2
  return 1
fi
if [ -z "${DRY:-}" ]; then
  "$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))" || return 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
nproc
uptime
