# Sourced: a venv over the image's packages with the carried wheels, logs under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ ! -x /tmp/venv/bin/python ]; then
  python3 -m venv --system-site-packages /tmp/venv
  /tmp/venv/bin/python -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
fi
export PATH=/tmp/venv/bin:$PATH:/usr/local/cuda/bin
export PLANNER_CACHE=/tmp/planner-cache
export PYTHONPATH=$PWD
python -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc; uptime
