#!/usr/bin/env bash
# mpi4py on meshwork's MPI, by hand (not in CI: it downloads mpi4py's
# source and Cython from PyPI and compiles for about five minutes):
# build mpi4py 4.1 from its source distribution with MPI4PY_BUILD_MPIABI=1
# against mpi/bin/mpicc into a venv, run `mpi4py.bench helloworld` and
# `ringtest` under meshrun, then its point-to-point, collective,
# communicator and operator test modules on 1, 2 and 4 ranks (583 tests;
# all pass).
#
#   cargo build --release --workspace && mpi/tests/mpi4py.sh [WORKDIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d)}
meshrun=$root/target/release/meshrun
[ -e "$root/target/release/libmpi_abi.so" ] || { echo "cargo build --release --workspace first" >&2; exit 1; }
python3 -m venv "$work/venv"
py=$work/venv/bin/python
"$py" -m pip install -q "cython>=3" setuptools build wheel
"$py" -m pip download -q --no-deps --no-binary :all: "mpi4py==4.1.*" -d "$work"
tar xzf "$work"/mpi4py-4.1.*.tar.gz -C "$work"
src=$(ls -d "$work"/mpi4py-4.1.*/ | head -1)
# MPI4PY_BUILD_CONFIGURE: mpi4py tests which functions and constants the
# header declares, rather than assume all of MPI-5's.
(cd "$src" && MPI4PY_BUILD_MPIABI=1 MPI4PY_BUILD_CONFIGURE=1 MPICC="$root/mpi/bin/mpicc" \
  MESHWORK_MPI_LIBDIR="$root/target/release" "$py" -m pip install -q --no-build-isolation .)
"$meshrun" -n 4 -- "$py" -m mpi4py.bench helloworld
"$meshrun" -n 4 -- "$py" -m mpi4py.bench ringtest
cd "$src/test"
for n in 1 2 4; do
  echo "== $n ranks"
  TIMEOUT_S=5 "$meshrun" -n "$n" -- "$py" main.py test_p2p_buf test_p2p_obj test_p2p_buf_matched test_p2p_obj_matched \
    test_cco_buf test_cco_obj test_cco_vec test_cco_nb_buf test_cco_nb_vec test_cco_pr_buf \
    test_cco_pr_vec test_comm test_comm_topo test_op test_group test_request test_info test_environ \
    test_status test_msgzero test_cco_ngh_buf test_cco_ngh_obj test_cco_pr_ngh_buf \
    test_pack test_grequest test_errorcode test_address test_mpiapi test_util_dtlib 2>&1 |
    grep -E "^\[0\] (Ran|OK|FAILED)" || true
done
