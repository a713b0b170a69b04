#!/usr/bin/env bash
# The GPU device check of issue 31, for a machine with an NVIDIA GPU (sized
# for 8 minutes on one H200, the build included): builds meshrun and the
# `cuda_check` example with `--features cuda`, then runs 4 ranks sharing
# the GPU over shared memory and TCP. Each rank runs every collective and
# point-to-point on device buffers, in every dtype, against the host call
# (bit for bit); rank 0 prints the staged all_reduce against the host call
# and the copies alone, then loads NCCL, prints its version and runs every
# collective NCCL carries through meshwork's NCCL path in a world of one,
# every dtype, against the host. Exit status: 0 all exact, 1 a case
# differs, 2 no GPU (the error names what is missing).
#
#   benches/cuda/device-check.sh            # build if needed, then run
#   SKIP_BUILD=1 benches/cuda/device-check.sh   # use target/release as is
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
nproc

# NCCL as torch wheels ship it (nvidia-nccl-cu12/cu13), when no system
# libnccl: meshwork opens libnccl.so.2 itself, from the loader's path.
nccl_dir=
# (grep without -q reads all of ldconfig's output: no SIGPIPE under
# pipefail.)
system=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep 'libnccl.so.2 ' || true)
if [ -n "$system" ]; then
  nccl_dir=$(dirname "$(echo "$system" | head -1 | sed 's/.*=> //')")
else
  for py in python3 python; do
    dir=$($py -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
    if [ -n "$dir" ] && [ -e "$dir/libnccl.so.2" ]; then
      nccl_dir=$dir
      break
    fi
  done
fi
if [ -n "$nccl_dir" ]; then
  export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "nccl: $nccl_dir/libnccl.so.2"
else
  echo "nccl: no libnccl.so.2 found (the world-of-one check will say so)"
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "== build (release, --features cuda)"
  start=$(date +%s)
  cargo build --release --features cuda --example cuda_check --bin meshrun 2>&1 | tail -3
  echo "build: $(( $(date +%s) - start )) s"
fi
echo "== meshrun devices"
target/release/meshrun devices || true

run() {
  echo "== 4 ranks, $1"
  start=$(date +%s)
  set +e
  env "${@:2}" timeout 300 target/release/meshrun -n 4 -- target/release/examples/cuda_check
  rc=$?
  set -e
  echo "run: $(( $(date +%s) - start )) s, exit $rc"
  return $rc
}

status=0
run "shared memory (the default on one host)" SHM=1 || status=$?
run "TCP, no shared memory" SHM=0 TRANSPORT=tcp || status=$?
exit $status
