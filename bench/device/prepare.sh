# Before a GPU window, on the development machine (no GPU needed): makes .whl/ (the wheels the
# GPU image lacks, pinned in bench/device/wheels.txt, git-ignored), checks that they agree and
# import, runs every device-free check (the CUDA runtime's nvcc builds for sm_80 and sm_90, the
# dry runs of both GPU calls: planning and building what they run) and prints the two commands
# for the device tool. Stops at the first failure, saying which.
# Usage: bash bench/device/prepare.sh [--quick]   (--quick: the wheels and the dry runs only)
set -eo pipefail
cd "$(git rev-parse --show-toplevel)"
PLANNER_PY=${PLANNER_PY:-$( [ -x .venv/bin/python ] && echo "$PWD/.venv/bin/python" || command -v python3)}
export PLANNER_PY
PY=$PLANNER_PY
fail() { echo "prepare: FAILED: $*" >&2; exit 1; }
git check-ignore -q .whl/x && git check-ignore -q .rt/x || fail ".whl/ and .rt/ must be git-ignored (.gitignore)"

echo "== wheels (bench/device/wheels.txt) for CPython 3.12 on x86-64 Linux"
mkdir -p .whl
mapfile -t pins < <(grep -vE '^\s*(#|$)' bench/device/wheels.txt)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d .whl "${pins[@]}" || fail "pip download of ${pins[*]}"
# One version of each (two stop the whole install there), every requirement met by the set.
"$PY" bench/device/carry_check.py bench/device/wheels.txt .whl || fail "the wheels disagree"
echo "== oneDNN's wheels for the CPU call (bench/device/wheels-cpu.txt) into .whl-cpu/"
mkdir -p .whl-cpu
mapfile -t cpu_pins < <(grep -vE '^\s*(#|$)' bench/device/wheels-cpu.txt)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d .whl-cpu "${cpu_pins[@]}" || fail "pip download of ${cpu_pins[*]}"
"$PY" bench/device/carry_check.py bench/device/wheels-cpu.txt .whl-cpu || fail "oneDNN's wheels disagree"
site=$(mktemp -d)
# Installed as the image's CPython 3.12 would install them (this Python may be another).
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 .whl/*.whl \
  || fail "the wheels do not install for CPython 3.12"
if [ "$("$PY" -c 'import sys; print(sys.version_info[:2] == (3, 12))')" != True ]; then
  echo "  $("$PY" --version) here: the wheels' imports are checked by setup.sh on the GPU machine"
else "$PY" -c "
import sys; sys.path.insert(0, '$site')
import annotated_types, highspy, pydantic, pydantic_core, typing_extensions, typing_inspection
assert pydantic.__file__.startswith('$site'), pydantic.__file__
pydantic.TypeAdapter(int).validate_python('1')
print('wheels import:', 'pydantic', pydantic.VERSION, 'pydantic-core', pydantic_core.__version__)
" || fail "a carried wheel does not import"
fi
rm -rf "$site"
du -sh .whl

if [ "${1:-}" != --quick ]; then
  echo "== device-free CUDA checks (nvcc builds for sm_80 and sm_90; minutes on 2 cores)"
  nice "$PY" -m pytest -q -p no:cacheprovider -o addopts= -m "not gpu and not slow" tests/cuda \
    tests/codegen/test_cuda_sources.py tests/codegen/test_cuda_arch.py || fail "CUDA checks"
fi
echo "== call 1, dry run"
OUT=$(mktemp -d) bash bench/device/call1.sh --dry-run || fail "call 1's dry run"
echo "== call 2 (the CPUs), dry run"
OUT=$(mktemp -d) bash bench/device/call_cpu.sh --dry-run || fail "call 2's dry run"

echo "== what travels"
"$PY" bench/device/carry_check.py --tree . || fail "the tree is too large to travel"
cat <<'TXT'
prepare: OK. On the GPU machine (the device tool's run; compile-checked here, not run on a GPU):
  call 1: command "bash bench/device/call1.sh"  carry [".whl"]  timeout_s 500
  call 2: command "bash bench/device/call_cpu.sh"  carry [".whl", ".whl-cpu"]  timeout_s 330   (only if call 1 left the time)
  then:   give_back; cp FILES_AT/costs/*.json bench/device/costs/GPU/ (call 1's profile.txt names GPU)
Read the results as bench/device/README.md says; numbers go to bench/RESULTS.md.
TXT
