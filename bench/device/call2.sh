# GPU call 2 of 2 (bench/device/README.md): what call 1 leaves, only after it (the same 15
# minutes of device time: run it when call 1 came back under about 9 minutes in all). Carries
# call 1's runtime (.rt/rt.tgz), so no minute goes to rebuilding it. Stages, each under its own
# timeout and one deadline (DEADLINE, 420 s), each writing its rows as they finish:
#   dp        the data-parallel GPU tests (2 ranks on one GPU over gloo; NCCL on 2 GPUs)
#   tests     every other GPU test (those of bench/device/features.txt deselected)
#   fp32      bench_gpu.py on inception_v3, lstm, bert: streams, one stream, CUDA graphs, eager
#   profile   bench_gpu_profile.py resnet50 with what time is left (the table is checkpointed)
# Back in $OUT (6 files): bench.txt bench_fp32.jsonl dp.log gpu_tests.log gpu_profile.txt
#   resnet50.gpu.costs.json
# Usage: bash bench/device/call2.sh [--dry-run]   (--dry-run: no GPU; plans and builds)
if [ "${1:-}" = --dry-run ]; then export DRY=1; OUT=${OUT:-$(mktemp -d)}; fi
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-420}
# A dry run on 2 cores plans and builds what 16 cores would in a fraction: no time limits there.
failed=""  # a dry run fails when a stage does: prepare.sh stops there
left() { [ -n "${DRY:-}" ] && { echo 1800; return; }; local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo "$((l > 5 ? l : 5))" || echo "$1"; }
{ timeout 90 bash -c '. bench/device/setup.sh' && . bench/device/setup.sh; } >"$OUT/bench.txt" 2>&1
ok=$?
cat "$OUT/bench.txt"
[ $ok = 0 ] || exit 1
if [ -z "${DRY:-}" ]; then
  if [ -f .rt/rt.tgz ]; then tar xzf .rt/rt.tgz -C /tmp && echo "runtime from call 1 unpacked"
  else echo "no .rt/rt.tgz: the first test builds the runtime (~85 s)"; fi
fi
echo "== dp at ${SECONDS}s"
D=(-p no:cacheprovider -o addopts= tests/cuda/test_cuda_data_parallel.py)
if [ -n "${DRY:-}" ]; then "$PY" -m pytest --collect-only -q "${D[@]}" >"$OUT/dp.log" 2>&1
else timeout "$(left 60)" "$PY" -m pytest -v --tb=short "${D[@]}" >"$OUT/dp.log" 2>&1; fi
rc=$?; [ $rc = 0 ] || failed+=" dp"
echo "dp rc=$rc at ${SECONDS}s"; tail -4 "$OUT/dp.log"
echo "== tests at ${SECONDS}s"
X=()
while read -r f; do
  case "$f" in *::*) X+=(--deselect "$f");; *) X+=(--ignore "$f");; esac
done < <(grep -vE '^\s*(#|$)' bench/device/features.txt)
T=(-p no:cacheprovider -o addopts= -m gpu tests/cuda --ignore=tests/cuda/test_cuda_data_parallel.py "${X[@]}")
if [ -n "${DRY:-}" ]; then "$PY" -m pytest --collect-only -q "${T[@]}" >"$OUT/gpu_tests.log" 2>&1
else timeout "$(left 180)" "$PY" -m pytest -v --tb=short --timeout 120 "${T[@]}" >"$OUT/gpu_tests.log" 2>&1; fi
rc=$?; [ $rc = 0 ] || failed+=" tests"
echo "pytest rc=$rc at ${SECONDS}s"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -30; tail -3 "$OUT/gpu_tests.log"
echo "== fp32 at ${SECONDS}s" | tee -a "$OUT/bench.txt"
if [ -n "${DRY:-}" ]; then B="--dry-run"; R=(); else B="--steps 10 --rounds 3"; R=(--out "$OUT/bench_fp32.jsonl"); fi
timeout "$(left 100)" "$PY" bench/bench_gpu.py --models inception_v3,lstm,bert --no-compile $B "${R[@]}" 2>&1 \
  | tee -a "$OUT/bench.txt" | grep -v "one stream, per op type"
rc=${PIPESTATUS[0]}; [ $rc = 0 ] || failed+=" fp32"
echo "fp32 rc=$rc at ${SECONDS}s" | tee -a "$OUT/bench.txt"
echo "== profile at ${SECONDS}s"
if [ -n "${DRY:-}" ]; then P="--dry-run"; else P="--steps 10 --rounds 3"; fi
timeout "$(left 600)" "$PY" bench/bench_gpu_profile.py --models resnet50 --costs-dir "$OUT" \
  $P >"$OUT/gpu_profile.txt" 2>&1
rc=$?; [ $rc = 0 ] || failed+=" profile"
echo "profile rc=$rc at ${SECONDS}s"
grep -v "^  \[" "$OUT/gpu_profile.txt" | tail -30
echo "call 2 done at ${SECONDS}s${failed:+; failed:$failed}"
[ -z "${DRY:-}" ] || [ -z "$failed" ]
