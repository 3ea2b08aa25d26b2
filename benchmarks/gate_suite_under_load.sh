#!/usr/bin/env bash
# The main job's speed gates under load: N runs of the gate suite's timing tests, each on two
# cores of its own with one of them kept busy by unrelated work (a spin loop), several at once on
# a many-core machine. Prints one line per run and the count of runs whose verdicts were all the
# expected ones. Usage: benchmarks/gate_suite_under_load.sh RUNS PARALLEL [pytest args...]
set -u
runs=${1:-10}; parallel=${2:-5}; shift 2 || true
out=/tmp/gate-load; mkdir -p "$out"
one() {
    local i=$1 a=$(( ($1 % parallel) * 2 )); shift; local b=$(( a + 1 ))
    taskset -c "$a" python3 -c 'while True: pass' & local hog=$!
    local dir; dir=$(mktemp -d)
    taskset -c "$a,$b" python3 -m pytest -m npu --lossless -p no:cacheprovider -q \
        -k "faster or a_a" --lossless-lock-dir "$dir/locks" --lossless-receipts "$dir/r" \
        --basetemp "$dir/t" "$@" > "$out/run-$i.log" 2>&1
    local rc=$?
    kill "$hog" 2>/dev/null
    echo "run $i rc=$rc $(grep -E '^[0-9]+ (PASS|FAIL|INCONCLUSIVE)' "$out/run-$i.log" | tail -1)"
    grep -E "speed (5s|15s|A/A)" "$out/run-$i.log" | sed "s/^/  run $i: /"
    grep -A1 -E "speed (5s|15s|A/A)" "$out/run-$i.log" | grep -E '^\s+[0-9]' | sed "s/^/  run $i: /"
}
export -f one; export parallel out
seq 0 $((runs - 1)) | xargs -P "$parallel" -I{} bash -c 'one {} "$@"' _ "$@" | tee "$out/summary.txt"
ok=$(grep -c "rc=0" "$out/summary.txt")
echo "expected verdicts held in $ok of $runs runs"
