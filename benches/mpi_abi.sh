#!/usr/bin/env bash
# The OSU micro-benchmarks, one source built twice — against Open MPI's
# mpicc and against meshwork's (mpi/bin/mpicc) — and run in the same
# session on this host, beside meshwork's own Rust API running the same
# loops (examples/osu_rust.rs). Prints one table per benchmark: latency
# (2 ranks, µs), bandwidth (2 ranks, MB/s) and all-reduce of floats
# (4 ranks, µs).
#
#   benches/mpi_abi.sh            # after: cargo build --release --workspace --lib --bins --examples
#   OSU_DIR=... MAX_SIZE=1048576 RUNS=5 benches/mpi_abi.sh
#
# RUNS (default 3) rounds of every column, interleaved, each round in
# another order; each cell is the median of its runs.
#
# Columns: Open MPI over TCP (`--mca btl tcp,self`) and shared memory
# (`vader`); meshwork's MPI over shared memory (meshrun's default on one
# host) and over TCP (`--transport tcp`, SHM=0: every byte through the
# kernel's loopback, as Open MPI's tcp); meshwork's Rust API the same two
# ways. Open MPI's columns read "-" where mpicc/mpirun are not installed
# (Debian: openmpi-bin libopenmpi-dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
osu=${OSU_DIR:-$root/../shared/osu/c}
max=${MAX_SIZE:-4194304}
runs=${RUNS:-3}
meshrun=$root/target/release/meshrun
rust=$root/target/release/examples/osu_rust
for f in "$meshrun" "$rust" "$root/target/release/libmpi_abi.so"; do
  [ -e "$f" ] || { echo "missing $f: cargo build --release --workspace --lib --bins --examples" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build() { # compiler outdir
  mkdir -p "$2"
  for b in pt2pt/standard/osu_latency pt2pt/standard/osu_bw collective/blocking/osu_allreduce; do
    "$1" -O2 -I "$osu/util" -DFIELD_WIDTH=18 -DFLOAT_PRECISION=2 -o "$2/$(basename $b)" \
      "$osu/util/osu_util.c" "$osu/util/osu_util_mpi.c" "$osu/util/osu_util_validation.c" \
      "$osu/util/osu_util_graph.c" "$osu/util/osu_util_papi.c" "$osu/mpi/$b.c" -lm
  done
}
build "$root/mpi/bin/mpicc" "$work/mw"
ompi=no
if command -v mpicc >/dev/null && command -v mpirun >/dev/null && mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  build "$(command -v mpicc)" "$work/ompi"
  ompi=yes
fi

# Each run adds "size value" lines to $work/<bench>.<column>.
run() { # bench column command...
  local bench=$1 col=$2
  shift 2
  "$@" 2>/dev/null | sed 's/^\[[0-9]*\] //' | awk '$1 ~ /^[0-9]+$/ {print $1, $2}' >>"$work/$bench.$col" || true
}
# The median of a column's runs at one size, or "-".
median() { # file size
  awk -v s="$2" '$1 == s {print $2}' "$1" 2>/dev/null | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
osu_args() { # bench
  case $1 in
    osu_allreduce) echo "-m 4:$max -T mpi_float" ;;
    *) echo "-m 1:$max" ;;
  esac
}
ranks() { [ "$1" = osu_allreduce ] && echo 4 || echo 2; }
rust_name() { case $1 in osu_latency) echo latency ;; osu_bw) echo bw ;; *) echo allreduce ;; esac; }

# One column's run.
column() { # bench column
  local bench=$1 col=$2 n
  n=$(ranks "$bench")
  case $col in
    ompi-tcp) [ $ompi = yes ] && run "$bench" "$col" mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl tcp,self "$work/ompi/$bench" $(osu_args "$bench") ;;
    ompi-vader) [ $ompi = yes ] && run "$bench" "$col" mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl vader,self "$work/ompi/$bench" $(osu_args "$bench") ;;
    abi-shm) run "$bench" "$col" "$meshrun" -n "$n" -- "$work/mw/$bench" $(osu_args "$bench") ;;
    abi-tcp) run "$bench" "$col" env SHM=0 "$meshrun" -n "$n" --transport tcp -- "$work/mw/$bench" $(osu_args "$bench") ;;
    rust-shm) run "$bench" "$col" env MAX_SIZE="$max" "$meshrun" -n "$n" -- "$rust" "$(rust_name "$bench")" ;;
    rust-tcp) run "$bench" "$col" env MAX_SIZE="$max" SHM=0 "$meshrun" -n "$n" --transport tcp -- "$rust" "$(rust_name "$bench")" ;;
  esac
  return 0
}

# Each round runs the columns in another order: a run can leave the
# machine slower for the next (after Open MPI over TCP, shared-memory
# latency above 32 KiB was 3x for a few seconds, whoever ran), and the
# median then drops the round where a column came right after it.
orders=(
  "ompi-tcp ompi-vader abi-shm abi-tcp rust-shm rust-tcp"
  "rust-tcp rust-shm abi-tcp abi-shm ompi-vader ompi-tcp"
  "abi-shm rust-shm ompi-vader abi-tcp rust-tcp ompi-tcp"
)
for bench in osu_latency osu_bw osu_allreduce; do
  for r in $(seq 0 $((runs - 1))); do
    for col in ${orders[$((r % 3))]}; do
      column "$bench" "$col"
    done
  done
  case $bench in
    osu_latency) unit="latency, 2 ranks (us, lower is better)" ;;
    osu_bw) unit="bandwidth, 2 ranks (MB/s, higher is better)" ;;
    *) unit="all_reduce of floats, 4 ranks (us, lower is better)" ;;
  esac
  echo
  echo "## $bench: $unit"
  echo
  echo "| size | Open MPI tcp | Open MPI vader | meshwork MPI shm | meshwork MPI tcp | Rust API shm | Rust API tcp |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for size in $(awk '{print $1}' "$work/$bench.abi-shm" | sort -gu); do
    row="| $size"
    for col in ompi-tcp ompi-vader abi-shm abi-tcp rust-shm rust-tcp; do
      row="$row | $(median "$work/$bench.$col" "$size")"
    done
    echo "$row |"
  done
done
