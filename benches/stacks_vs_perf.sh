#!/usr/bin/env bash
# Symbolized samples per second with call stacks: `perfring watch --call-graph fp|dwarf`
# (unwinds and names every sample while the workload runs) against `perf record -g` /
# `--call-graph dwarf` followed by `perf script` (names them afterwards), on the same
# workload, in the same run, one after the other.
#
#   bash benches/stacks_vs_perf.sh            # needs cc, perf, a release build
#   N=3000000 PERIOD=20000 bash benches/stacks_vs_perf.sh
#
# For each tool and mode it prints: samples, samples lost, wall seconds until every
# sample is symbolized (perfring: the watch; perf: record + script), CPU seconds of the
# tool and workload together (the workload is the same in every row, so differences are
# the tools'), and symbolized samples per wall second. A sample counts as symbolized
# when its innermost user frame is named `leaf`, `mid` or `top`.
set -euo pipefail

cd "$(dirname "$0")/.."
PERFRING=${PERFRING:-target/release/perfring}
N=${N:-3000000}
PERIOD=${PERIOD:-20000}
[ -x "$PERFRING" ] || cargo build --release --bin perfring
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)"; exit 1; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/busy.c" <<'EOF'
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
NOINLINE long leaf(long x) { volatile long l = x; for (int i = 0; i < 200; i++) sink += l * i; return sink; }
NOINLINE long mid(long x) { long r = leaf(x + 1); sink += r; return r + 1; }
NOINLINE long top(long x) { long r = mid(x + 2); sink += r; return r + 2; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000, acc = 0;
    for (long i = 0; i < n; i++) acc += top(i);
    return acc == 42;
}
EOF
cc -O1 -g -fno-omit-frame-pointer -o "$dir/busy" "$dir/busy.c"

# Seconds (wall, user+sys) of a command, its output to $2.
timed() {
    local out=$1; shift
    /usr/bin/time -f "%e %U %S" -o "$dir/time" "$@" >"$out" 2>"$dir/stderr" || {
        cat "$dir/stderr"; exit 1; }
    read -r wall user sys <"$dir/time"
    echo "$wall $(echo "$user + $sys" | bc)"
}

printf "%-22s %9s %6s %8s %8s %12s\n" tool samples lost wall_s cpu_s symbolized/s
for mode in fp dwarf; do
    # perfring: every overflow unwound and named as it is drained.
    read -r wall cpu < <(timed "$dir/watch.json" "$PERFRING" watch -e cpu-clock:u -c "$PERIOD" \
        --call-graph "$mode" --json -- "$dir/busy" "$N")
    samples=$(grep -c '"type":"overflow"' "$dir/watch.json" || true)
    named=$(grep '"type":"overflow"' "$dir/watch.json" | grep -cE '"sym":"(leaf|mid|top)"' || true)
    lost=$(grep '"type":"summary"' "$dir/watch.json" | sed -E 's/.*"lost":([0-9]+).*/\1/')
    printf "%-22s %9s %6s %8s %8s %12.0f\n" "perfring watch $mode" "$samples" "$lost" "$wall" "$cpu" \
        "$(echo "$named / $wall" | bc -l)"

    # perf: record, then script.
    flag=(-g); [ "$mode" = dwarf ] && flag=(--call-graph dwarf)
    read -r wall1 cpu1 < <(timed "$dir/record.txt" perf record -q -e cpu-clock:u -c "$PERIOD" \
        "${flag[@]}" -o "$dir/perf.data" -- "$dir/busy" "$N")
    # perf's --stats lists LOST and LOST_SAMPLES counts (records, then samples in the
    # aggregated section): the largest is the closest to samples lost.
    lost=$(perf report -i "$dir/perf.data" --stats 2>/dev/null |
        awk '/LOST/ {for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) { if ($i > m) m = $i; break }} END {print m + 0}')
    read -r wall2 cpu2 < <(timed "$dir/script.txt" perf script -i "$dir/perf.data")
    samples=$(grep -c 'cpu-clock' "$dir/script.txt" || true)
    # The first frame line after each sample header.
    named=$(awk '/cpu-clock/ {first = 1; next} first && NF {first = 0; if ($2 ~ /^(leaf|mid|top)\+/) n++} END {print n + 0}' "$dir/script.txt")
    wall=$(echo "$wall1 + $wall2" | bc)
    cpu=$(echo "$cpu1 + $cpu2" | bc)
    printf "%-22s %9s %6s %8s %8s %12.0f\n" "perf record+script $mode" "$samples" "$lost" "$wall" "$cpu" \
        "$(echo "$named / $wall" | bc -l)"
done
