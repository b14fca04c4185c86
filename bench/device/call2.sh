# GPU call 2 of 2 (bench/device/README.md): speed. Carries call 1's runtime (.rt/rt.tgz), so no
# minute goes to rebuilding it. Stages, each under its own timeout, each writing its rows as
# they finish (a stage cut short keeps the models it measured):
#   fp32      bench_gpu.py on resnet50, inception_v3, lstm, bert, gpt: ours on the plan's
#             streams, one stream, CUDA graph on streams and on one stream, host feeds, and
#             PyTorch eager (device feeds on both sides), predicted step beside each
#   bf16      the same in bf16-mixed against PyTorch under autocast(bfloat16)
#   compile   torch.compile (inductor) where it compiles in the time: lstm, gpt
#   dp        the data-parallel GPU tests (2 ranks on one GPU over gloo)
#   profile   bench_gpu_profile.py resnet50: cuDNN's measured algorithms per convolution, the
#             profiled cost table, plans from the analytical model and from the table, each
#             predicted against measured (whatever time is left; the table is checkpointed)
# Back in $OUT (7 files): bench.txt bench_fp32.jsonl bench_bf16.jsonl bench_compile.jsonl
#   dp.log gpu_profile.txt resnet50.gpu.costs.json
# Usage: bash bench/device/call2.sh [--dry-run]   (--dry-run: no GPU; plans and builds)
if [ "${1:-}" = --dry-run ]; then export DRY=1; OUT=${OUT:-$(mktemp -d)}; fi
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{ . bench/device/setup.sh; } >"$OUT/bench.txt" 2>&1
ok=$?
cat "$OUT/bench.txt"
[ $ok = 0 ] || exit 1
if [ -z "${DRY:-}" ]; then
  if [ -f .rt/rt.tgz ]; then tar xzf .rt/rt.tgz -C /tmp && echo "runtime from call 1 unpacked"
  else echo "no .rt/rt.tgz: the first bench builds the runtime (~85 s)"; fi
fi
M=resnet50,inception_v3,lstm,bert,gpt
if [ -n "${DRY:-}" ]; then B="--dry-run"; else B="--steps 10 --rounds 3"; fi
stage() {  # stage NAME SECONDS ARGS...: one bench_gpu.py run, its rows in $OUT/bench_NAME.jsonl
  local name=$1 limit=$2; shift 2
  echo "== $name at ${SECONDS}s" | tee -a "$OUT/bench.txt"
  local rows=(--out "$OUT/bench_$name.jsonl")
  [ -n "${DRY:-}" ] && rows=()
  timeout "$limit" "$PY" bench/bench_gpu.py "$@" $B "${rows[@]}" 2>&1 | tee -a "$OUT/bench.txt" \
    | grep -v "one stream, per op type"
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS}s" | tee -a "$OUT/bench.txt"
}
stage fp32 210 --models $M --no-compile
stage bf16 150 --models $M --precision bf16-mixed --no-compile
stage compile 90 --models lstm,gpt
echo "== dp at ${SECONDS}s"
D="-p no:cacheprovider -o addopts= tests/cuda/test_cuda_data_parallel.py"
if [ -n "${DRY:-}" ]; then "$PY" -m pytest --collect-only -q $D >"$OUT/dp.log" 2>&1
else timeout 60 "$PY" -m pytest -v --tb=short $D >"$OUT/dp.log" 2>&1; fi
echo "dp rc=$? at ${SECONDS}s"; tail -4 "$OUT/dp.log"
echo "== profile at ${SECONDS}s"
if [ -n "${DRY:-}" ]; then P="--dry-run"; else P="--steps 10 --rounds 3"; fi
timeout $((585 - SECONDS)) "$PY" bench/bench_gpu_profile.py --models resnet50 --costs-dir "$OUT" \
  $P >"$OUT/gpu_profile.txt" 2>&1
echo "profile rc=$? at ${SECONDS}s"
grep -v "^  \[" "$OUT/gpu_profile.txt" | tail -30
