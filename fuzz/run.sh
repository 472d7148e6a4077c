#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) from its committed seeds.
# Usage: bash fuzz/run.sh [SECONDS] [TARGET...]
# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take them.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${secs}s"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=0
done
