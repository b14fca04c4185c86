# Sourced: the image's Python (the one with PyTorch) plus the carried wheels under /tmp/pfx,
# logs under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PY=$(command -v python3)
if [ ! -d /tmp/pfx ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --prefix /tmp/pfx .whl/*.whl
fi
site=$($PY -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '/tmp/pfx', 'platbase': '/tmp/pfx'}))")
export PYTHONPATH=$PWD:$site
# oneDNN's headers and CMake config came with its wheels (codegen.build.venv_prefix).
export PLANNER_PREFIX=/tmp/pfx
export PATH=$(dirname "$PY"):$PATH:/usr/local/cuda/bin
export PLANNER_CACHE=/tmp/planner-cache
alias python=$PY
python() { "$PY" "$@"; }
$PY -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc; uptime
