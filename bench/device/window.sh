# Sourced first by a GPU call script, with the script's arguments and its DEADLINE default set:
#   DEADLINE=${DEADLINE:-500}; . bench/device/window.sh "$@" || exit 1
# --dry-run sets DRY (no GPU, no time limits: prepare.sh's dry runs on a development machine);
# $OUT is where the call's files go; `left N` prints the smaller of N seconds and what is left
# before DEADLINE (at least 5), for each stage's `timeout`; `failed` collects the stages that
# failed. Then the image's Python is set up (setup.sh) with its log in $OUT/env.txt, and the
# GPU, driver and load appended there; a setup that fails returns non-zero.
if [ "${1:-}" = --dry-run ]; then export DRY=1; OUT=${OUT:-$(mktemp -d)}; fi
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
failed=""
left() { [ -n "${DRY:-}" ] && { echo 1800; return; }; local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo "$((l > 5 ? l : 5))" || echo "$1"; }
{ timeout 90 bash -c '. bench/device/setup.sh' && . bench/device/setup.sh; } >"$OUT/env.txt" 2>&1
window_ok=$?
tail -5 "$OUT/env.txt"
if [ $window_ok = 0 ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/env.txt" 2>&1
  uptime >>"$OUT/env.txt"
fi
[ $window_ok = 0 ]
