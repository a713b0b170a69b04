//! MPI programs, unmodified, against meshwork's MPI: the OSU
//! micro-benchmarks from `../shared/osu` (a client nobody on this project
//! wrote) built with `mpi/bin/mpicc` and run with validation (`-c`) under
//! `meshrun`, on 2 and 4 ranks, over the default transport and over TCP;
//! `tests/c/semantics.c` (matching, types, communicators, errors) on 1 to
//! 4 ranks; `tests/c/reductions.c`, the reductions the MPI layer folds
//! itself; `tests/c/killed.c`, a rank SIGKILLed mid-collective and
//! before a send; `tests/c/profiled.c`, a profiling tool over the
//! `PMPI_` names; and every function `include/mpi.h` declares found in
//! the library, each also under its `PMPI_` name.
//!
//! The library is this test's own build (`libmpi_abi.so` beside the test
//! executable); `meshrun` is the root crate's binary, which `cargo nextest
//! run --workspace` builds. The benchmarks run at small sizes here; the
//! full table is `benches/mpi_abi.sh` (docs/benchmarks.md).

#[path = "../../ffi/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::{deps_dir, meshrun, run_bounded, show, skip, slurm_unavailable, srun};

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// The OSU sources: `../shared/osu/c` beside the repository, or
/// `$OSU_DIR`.
fn osu_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("OSU_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(CRATE).join("../../shared/osu/c"));
    dir.join("util/osu_util.c").exists().then_some(dir)
}

/// `mpi/bin/mpicc` against this build's library.
fn mpicc() -> Command {
    let lib = deps_dir();
    assert!(
        lib.join("libmpi_abi.so").exists(),
        "libmpi_abi.so is missing in {}: cargo builds it with this test (crate-type cdylib)",
        lib.display()
    );
    let mut cmd = Command::new(Path::new(CRATE).join("bin/mpicc"));
    cmd.env("MESHWORK_MPI_LIBDIR", lib);
    cmd
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Run `cmd` (a compiler) and panic with what it printed if it failed.
fn compile(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run mpicc for {what}: {e}"));
    assert!(
        out.status.success(),
        "mpicc failed for {what}: {}",
        show(&out)
    );
}

/// The programs `tests/c/*.c`, built with `-Wall -Wextra -Werror` into
/// scratch directory `dir` (one per test: tests run side by side).
fn program(dir: &str, name: &str) -> PathBuf {
    let exe = scratch(dir).join(name);
    compile(
        mpicc()
            .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(Path::new(CRATE).join("tests/c").join(format!("{name}.c"))),
        name,
    );
    exe
}

/// `cmd` with this test's own `libmpi_abi.so` first: cargo puts
/// `target/<profile>` on `LD_LIBRARY_PATH` for its tests, where a library
/// from another build (`cargo build -p meshwork-mpi`) would come before
/// the one `mpicc`'s run path names.
fn own_library(cmd: &mut Command) -> &mut Command {
    cmd.env("LD_LIBRARY_PATH", deps_dir())
}

/// `meshrun -n n extra… -- exe args…`, bounded.
fn launch(n: u32, extra: &[&str], exe: &Path, args: &[&str]) -> std::process::Output {
    let meshrun = meshrun().expect("meshrun is built (checked by the caller)");
    let mut cmd = Command::new(meshrun);
    own_library(&mut cmd)
        .args(["-n", &n.to_string()])
        .args(extra)
        .arg("--")
        .arg(exe)
        .args(args)
        .env("TIMEOUT_S", "20");
    run_bounded(&mut cmd, Duration::from_secs(120))
}

fn ready() -> bool {
    if meshrun().is_none() {
        skip("target/<profile>/meshrun is not built (cargo nextest run --workspace builds it)");
        return false;
    }
    true
}

/// The benchmarks the issue names: point-to-point (two ranks) and
/// blocking collectives.
const PT2PT: [&str; 3] = ["osu_latency", "osu_bw", "osu_bibw"];
const COLLECTIVES: [&str; 9] = [
    "osu_allreduce",
    "osu_bcast",
    "osu_barrier",
    "osu_allgather",
    "osu_alltoall",
    "osu_reduce",
    "osu_reduce_scatter",
    "osu_gather",
    "osu_scatter",
];

/// Build the benchmarks into `dir` the way ../shared/osu/BUILD.md says:
/// the utility files once, then each benchmark.
fn build_osu(osu: &Path, dir: &Path) {
    let util = osu.join("util");
    let flags = ["-O2", "-DFIELD_WIDTH=18", "-DFLOAT_PRECISION=2"];
    let units = [
        "osu_util",
        "osu_util_mpi",
        "osu_util_validation",
        "osu_util_graph",
        "osu_util_papi",
    ];
    let mut objects = Vec::new();
    for u in units {
        let obj = dir.join(format!("{u}.o"));
        compile(
            mpicc()
                .args(flags)
                .arg("-I")
                .arg(&util)
                .arg("-c")
                .arg(util.join(format!("{u}.c")))
                .arg("-o")
                .arg(&obj),
            u,
        );
        objects.push(obj);
    }
    for (kind, names) in [
        ("mpi/pt2pt/standard", &PT2PT[..]),
        ("mpi/collective/blocking", &COLLECTIVES[..]),
    ] {
        for name in names {
            compile(
                mpicc()
                    .args(flags)
                    .arg("-I")
                    .arg(&util)
                    .args(&objects)
                    .arg(osu.join(kind).join(format!("{name}.c")))
                    .arg("-lm")
                    .arg("-o")
                    .arg(dir.join(name)),
                name,
            );
        }
    }
}

/// Run benchmark `name` on `n` ranks with validation and small sizes;
/// every size it prints must say `Pass`.
fn validate(dir: &Path, name: &str, n: u32, transport: &[&str]) {
    // osu_barrier has no sizes and nothing to validate: it runs.
    let args: &[&str] = if name == "osu_barrier" {
        &["-i", "20", "-x", "2"]
    } else {
        &["-c", "-m", "1:16384", "-i", "20", "-x", "2"]
    };
    let out = launch(n, transport, &dir.join(name), args);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .collect();
    let context = format!("{name} on {n} ranks {transport:?}: {}", show(&out));
    assert!(out.status.success(), "{context}");
    if name != "osu_barrier" {
        assert!(rows.len() >= 10, "too few sizes reported: {context}");
        assert!(
            rows.iter().all(|r| r.ends_with("Pass")),
            "a size failed validation: {context}"
        );
    }
}

fn osu_over(transport: &[&str], dir_name: &str) {
    if !ready() {
        return;
    }
    let Some(osu) = osu_dir() else {
        skip("the OSU micro-benchmarks are not at ../shared/osu/c (or $OSU_DIR)");
        return;
    };
    let dir = scratch(dir_name);
    build_osu(&osu, &dir);
    for name in PT2PT {
        validate(&dir, name, 2, transport);
    }
    for name in COLLECTIVES {
        for n in [2, 4] {
            validate(&dir, name, n, transport);
        }
    }
}

#[test]
fn osu_benchmarks_build_unmodified_and_validate_over_the_default_transport() {
    osu_over(&[], "osu-default");
}

#[test]
fn osu_benchmarks_build_unmodified_and_validate_over_tcp() {
    osu_over(&["--transport", "tcp"], "osu-tcp");
}

/// `tests/c/<name>.c` (built into scratch directory `dir`) on 1 to 4
/// ranks and on 4 over TCP: each run ends well with `<name> ok` from
/// every rank.
fn ok_on_one_to_four_ranks(dir: &str, name: &str) {
    if !ready() {
        return;
    }
    let exe = program(dir, name);
    for (n, transport) in [
        (1, &[][..]),
        (2, &[]),
        (3, &[]),
        (4, &[]),
        (4, &["--transport", "tcp"]),
    ] {
        let out = launch(n, transport, &exe, &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.matches(&format!("{name} ok")).count() == n as usize,
            "{name} on {n} ranks {transport:?}: {}",
            show(&out)
        );
    }
}

#[test]
fn mpi_semantics_hold_on_one_to_four_ranks() {
    ok_on_one_to_four_ranks("c", "semantics");
}

/// `tests/c/groups.c`: the group algebra and communicators made from its
/// groups, refusals included; MPI-4.1's request status calls that leave
/// the requests as they are; `MPI_INFO_ENV`, `MPI_Info_create_env` and
/// `MPI_Get_hw_resource_info`; the thread level given between two.
#[test]
fn mpi_groups_and_the_environment_on_one_to_four_ranks() {
    ok_on_one_to_four_ranks("groups", "groups");
}

/// `tests/c/decoding.c`: the envelope and contents of every datatype
/// constructor (the `_c` forms' as counts), subarrays in both orders
/// moved between ranks, type names, the (value, index) pairs and
/// `MPI_Dims_create`, refusals included.
#[test]
fn mpi_datatypes_decode_and_subarrays_on_one_to_four_ranks() {
    ok_on_one_to_four_ranks("decoding", "decoding");
}

/// `tests/c/topology.c`: a Cartesian grid of every rank with its
/// coordinates, neighbours (a halo exchange through them, MPI_PROC_NULL
/// at the edges) and rows; a grid smaller than the world; a ring as a
/// graph and as distributed graphs (weighted and not); and
/// `MPI_Pack`/`MPI_Unpack` of a mixed message sent as `MPI_PACKED`.
#[test]
fn mpi_cartesian_grids_and_packing_on_one_to_four_ranks() {
    ok_on_one_to_four_ranks("topology", "topology");
}

/// `tests/c/neighbours.c`: the neighbourhood collectives on a periodic
/// ring as a grid (whose two neighbours are one rank on 1 and 2 ranks), a
/// grid with `MPI_PROC_NULL` past its edges, a graph and a distributed
/// graph with a type per block; blocking, non-blocking, persistent and
/// `_c` forms; no topology and `MPI_IN_PLACE` refused.
#[test]
fn mpi_neighbourhood_collectives_on_every_topology() {
    ok_on_one_to_four_ranks("neighbours", "neighbours");
}

/// `tests/c/external.c`: `external32`'s exact bytes (a C long in 4, a
/// long double as a quad, a pair unpadded), a struct and a subarray in
/// type-map order sent packed around a ring, the `_c` forms, and an
/// unknown representation, no room and a long too large refused.
#[test]
fn mpi_external32_packs_portably_on_one_to_four_ranks() {
    ok_on_one_to_four_ranks("external", "external");
}

/// `tests/c/grequest.c`: generalized requests completed by another
/// thread of the program while MPI_Wait waits, tested before and after,
/// cancelled, freed before completion, failing in their query function,
/// and waited for beside a receive.
#[test]
fn mpi_generalized_requests_complete_from_the_programs_thread() {
    ok_on_one_to_four_ranks("grequest", "grequest");
}

/// `tests/c/errcodes.c`: the program's own error handler, called with
/// the communicator and the code; its own error classes, codes and
/// strings, `MPI_LASTUSEDCODE` following them, and their removal
/// (refused while a class has codes or a code its string).
#[test]
fn mpi_programs_add_and_remove_their_own_error_codes() {
    ok_on_one_to_four_ranks("errcodes", "errcodes");
}

/// `tests/c/persistent.c`: persistent collectives made once and started
/// round after round on refilled buffers (together through
/// `MPI_Startall`, a `v` form, a `_c` form, rooted and scan), a second
/// start refused, and their requests freed.
#[test]
fn mpi_persistent_collectives_restart_on_one_to_four_ranks() {
    ok_on_one_to_four_ranks("persistent", "persistent");
}

/// `tests/c/reductions.c`: the reductions meshwork's collectives lack
/// (bitwise, logical, MINLOC/MAXLOC, the program's own through
/// `MPI_Op_create`, one that does not commute and one on a strided
/// type), folded by the MPI layer, through every reducing collective, on
/// 1 to 4 ranks and over TCP.
#[test]
fn mpi_reductions_meshwork_lacks_are_folded_in_rank_order() {
    ok_on_one_to_four_ranks("reductions", "reductions");
}

/// A rank SIGKILLed mid-collective, and before a message another rank
/// waits for: each survivor's call returns MPI_ERR_PROC_ABORTED (58)
/// naming rank 1, within the deadline. The survivors stay up once they
/// have reported; the test then kills them all.
#[test]
fn faults_mpi_a_killed_rank_is_an_error_naming_it() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    if !ready() {
        return;
    }
    let exe = program("c", "killed");
    for mode in [&[][..], &["recv"]] {
        let mut child = own_library(&mut Command::new(meshrun().expect("checked by ready()")))
            .args(["-n", "4", "--keep-going", "--"])
            .arg(&exe)
            .args(mode)
            .env("TIMEOUT_S", "20")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start meshrun");
        let pid = child.id();
        let stdout = child.stdout.take().expect("piped stdout");
        // Read the reports on a thread; the deadline is the test's.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let until = std::time::Instant::now() + Duration::from_secs(60);
        let mut failed = Vec::new();
        let mut seen = Vec::new();
        while failed.len() < 3 {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if line.contains("failed:") {
                        failed.push(line.clone());
                    }
                    seen.push(line);
                }
                Err(_) => break,
            }
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
        let _ = child.wait();
        assert_eq!(failed.len(), 3, "{mode:?}: {seen:#?}");
        assert!(
            failed
                .iter()
                .all(|l| l.contains("class 58") && l.contains("rank 1")),
            "{mode:?}: {seen:#?}"
        );
    }
}

/// `srun -n 4 ./prog` of an MPI program with nothing else set: `MPI_Init`
/// forms the world from Slurm's environment, and every rank's semantics
/// hold.
#[test]
fn an_mpi_program_runs_under_srun() {
    if let Some(reason) = slurm_unavailable() {
        skip(&reason);
        return;
    }
    let exe = program("c-srun", "semantics");
    let mut srun = srun(4, "meshwork-mpi-test", &exe);
    let out = run_bounded(own_library(&mut srun), Duration::from_secs(180));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "srun -n 4: {}", show(&out));
    for rank in 0..4 {
        assert!(
            text.contains(&format!("semantics ok on rank {rank} of 4")),
            "rank {rank} did not finish: {}",
            show(&out)
        );
    }
}

/// The prototypes `include/mpi.h` declares: a configure step (mpi4py's)
/// takes a function the header lacks for one the library lacks.
fn declared() -> Vec<String> {
    let header = std::fs::read_to_string(Path::new(CRATE).join("include/mpi.h")).unwrap();
    header
        .lines()
        .filter_map(|l| {
            // `int`, `double`, or a handle or address type, then the name.
            let (ty, rest) = l.trim_start().split_once(' ')?;
            if !(ty == "int" || ty == "double" || ty.starts_with("MPI_")) {
                return None;
            }
            let (name, _) = rest.split_once('(')?;
            name.starts_with("MPI_").then(|| name.to_string())
        })
        .collect()
}

/// The functions `libmpi_abi.so` exports (as `nm -D` lists them), by name,
/// with their addresses.
fn exported() -> std::collections::BTreeMap<String, String> {
    let lib = deps_dir().join("libmpi_abi.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils) runs");
    assert!(out.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [at, "T", name] => Some((name.to_string(), at.to_string())),
            _ => None,
        })
        .collect()
}

/// Every function meshwork implements (exported by `libmpi_abi.so`, not
/// one of `src/unsupported.rs`'s) has its prototype in `include/mpi.h`.
#[test]
fn every_function_meshwork_implements_is_declared() {
    let named_there = std::fs::read_to_string(Path::new(CRATE).join("src/unsupported.rs")).unwrap();
    let words: std::collections::HashSet<&str> = named_there
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    let declared = declared();
    let exported: Vec<String> = exported()
        .into_keys()
        .filter(|name| name.starts_with("MPI_"))
        .collect();
    assert!(
        exported.len() > 600,
        "nm listed {} MPI functions",
        exported.len()
    );
    let undeclared: Vec<&String> = exported
        .iter()
        .filter(|name| !words.contains(name.as_str()) && !declared.contains(name))
        .collect();
    assert!(
        undeclared.is_empty(),
        "implemented but not in mpi.h: {undeclared:?}"
    );
}

/// Every function `include/mpi.h` declares is in `libmpi_abi.so`, and
/// so is each of a sample of the ABI's functions meshwork does not
/// implement (they return MPI_ERR_UNSUPPORTED_OPERATION).
#[test]
fn every_function_the_header_declares_is_exported() {
    let mut names = declared();
    assert!(
        names.len() > 100,
        "too few prototypes read from mpi.h: {}",
        names.len()
    );
    names.extend(
        [
            "MPI_Win_lock",
            "MPI_File_open",
            "MPI_Comm_spawn",
            "MPI_T_init_thread",
            "MPI_Comm_fromint",
        ]
        .map(String::from),
    );
    let lib = deps_dir().join("libmpi_abi.so");
    let path = std::ffi::CString::new(lib.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: loading the library runs no code of ours beyond Rust's
    // static initialisation; the handle is closed below.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "cannot dlopen {}", lib.display());
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            let c = std::ffi::CString::new(n.as_str()).unwrap();
            // SAFETY: a valid handle and a NUL-terminated name.
            unsafe { libc::dlsym(handle, c.as_ptr()) }.is_null()
        })
        .collect();
    // SAFETY: the handle from dlopen above.
    unsafe { libc::dlclose(handle) };
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

/// The profiling interface: every `MPI_` function the library exports is
/// exported as `PMPI_` too, at the same address, and no `PMPI_` name
/// stands alone; `include/mpi.h` declares the `PMPI_` name of each
/// function it declares.
#[test]
fn every_function_has_its_profiling_name() {
    let exported = exported();
    let functions: Vec<&String> = exported.keys().filter(|n| n.starts_with("MPI_")).collect();
    assert!(
        functions.len() > 600,
        "nm listed {} MPI functions",
        functions.len()
    );
    let unnamed: Vec<&&String> = functions
        .iter()
        .filter(|n| exported.get(&format!("P{n}")) != exported.get(n.as_str()))
        .collect();
    assert!(
        unnamed.is_empty(),
        "without a PMPI_ name at their address: {unnamed:?}"
    );
    let alone: Vec<&String> = exported
        .keys()
        .filter(|n| n.starts_with("PMPI_") && !exported.contains_key(&n[1..]))
        .collect();
    assert!(
        alone.is_empty(),
        "PMPI_ names with no MPI_ function: {alone:?}"
    );

    let header = std::fs::read_to_string(Path::new(CRATE).join("include/mpi.h")).unwrap();
    let profiled: std::collections::BTreeSet<String> = header
        .split("MESHWORK_PMPI(")
        .skip(1)
        .filter_map(|rest| rest.split_once(')'))
        .map(|(name, _)| format!("MPI_{name}"))
        .filter(|name| name != "MPI_name")
        .collect();
    let declared: std::collections::BTreeSet<String> = declared().into_iter().collect();
    assert_eq!(
        profiled, declared,
        "mpi.h's PMPI_ declarations differ from its MPI_ prototypes"
    );
}

/// A profiling tool (`tests/c/profiled.c`) defines `MPI_Send`, `MPI_Recv`,
/// `MPI_Allreduce` and `MPI_Finalize` and calls meshwork's through their
/// `PMPI_` names: on 1 to 3 ranks it counts every call and byte of a ring
/// of 10 messages and an all-reduce, and the program's checks of the data
/// pass.
#[test]
fn a_profiling_tool_sees_each_call_through_pmpi() {
    if !ready() {
        return;
    }
    let exe = program("profiled", "profiled");
    for n in 1..=3 {
        let out = launch(n, &[], &exe, &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        for rank in 0..n {
            let line = format!(
                "profiled rank {rank} of {n}: sends 10 (40000 bytes), receives 10 (40000 bytes), all-reduces 1"
            );
            assert!(
                out.status.success() && text.contains(&line),
                "{n} ranks, rank {rank}: {}",
                show(&out)
            );
        }
    }
}
