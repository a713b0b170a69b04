//! `--features cuda` on whatever machine runs the suite: a device that is
//! not there, or an NCCL that is not, is a typed error naming it, never a
//! panic. (The staging pipeline itself is tested on host memory in
//! `src/staging/`; on a GPU, `benches/cuda/device-check.sh`. The watch
//! every NCCL call goes through is tested here with a rank killed inside
//! it.)

use meshwork::cuda::{Device, MIN_NCCL};
use meshwork::Error;

/// No machine has device 1 000 000: without a driver the error names the
/// driver's library, with one it names the ordinal and how many there
/// are.
#[test]
fn a_device_that_is_not_there_is_named() {
    let ordinal = 1_000_000;
    match Device::open(ordinal) {
        Err(Error::DeviceUnavailable { what }) => {
            let driverless = what.contains("libcuda.so");
            let counted = what.contains("CUDA device 1000000") && what.contains("sees");
            assert!(driverless || counted, "{what}");
            // What `count` says agrees with what `open` said.
            match Device::count() {
                Ok(n) => assert!(counted && what.contains(&format!("sees {n}")), "{what}"),
                Err(Error::DeviceUnavailable { what: w }) => {
                    assert!(driverless && w.contains("libcuda.so"), "{w}")
                }
                Err(other) => panic!("{other:?}"),
            }
        }
        other => panic!("device {ordinal} opened, or failed otherwise: {other:?}"),
    }
}

/// On this suite's CI machine there is no GPU stack at all: both errors
/// are what a user without one meets. Where a driver is installed the
/// test cannot reach them: `SKIPPED` (under `CI=true`, a failure: CI is
/// the driverless machine this test is for).
#[test]
fn without_a_driver_every_entry_point_says_so() {
    if Device::count().is_ok() {
        crate::netlab::skip(
            "a CUDA driver is installed here: the no-driver errors are not reachable",
        );
        return;
    }
    for r in [Device::count().map(drop), Device::open(0).map(drop)] {
        assert!(
            matches!(&r, Err(Error::DeviceUnavailable { what }) if what.contains("libcuda.so")),
            "{r:?}"
        );
    }
    let e = Device::open(0).unwrap_err().to_string();
    assert!(e.starts_with("device unavailable: the CUDA driver"), "{e}");
}

/// `meshrun devices` with the given `LD_LIBRARY_PATH` (none: removed):
/// its exit status and its `nccl:` line.
fn devices(library_path: Option<&str>) -> (Option<i32>, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_meshrun"));
    cmd.arg("devices");
    match library_path {
        Some(p) => cmd.env("LD_LIBRARY_PATH", p),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    let out = cmd.output().expect("meshrun runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let nccl = text
        .lines()
        .find_map(|l| l.strip_prefix("nccl: "))
        .unwrap_or_else(|| panic!("no nccl line in {text:?}"))
        .to_string();
    (out.status.code(), nccl)
}

/// The NCCL that torch's wheels ship (`nvidia-nccl-cu13`, which CI
/// installs for the torch tests) is loaded for real: its version is read
/// through `ncclGetVersion` — no GPU needed for that — and passes the
/// 2.18 floor; every call the in-node path makes is found in it and a
/// unique id is made. Without it on the loader's path, the same command names
/// `libnccl.so.2` as missing, unless the system has its own NCCL.
#[test]
fn a_real_nccl_is_loaded_and_its_version_read_or_its_absence_named() {
    let found = std::process::Command::new("python3")
        .args([
            "-c",
            "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|dir| std::path::Path::new(dir).join("libnccl.so.2").exists());
    let Some(dir) = found else {
        crate::netlab::skip("no nvidia-nccl wheel for python3 (pip install nvidia-nccl-cu13)");
        return;
    };
    let (status, nccl) = devices(Some(&dir));
    // Beyond the version: every NCCL call meshwork makes resolved from
    // the real library, and ncclGetUniqueId run through meshwork's own
    // binding (a wrong signature or name fails here).
    let Some((nccl, checked)) = nccl.split_once(' ') else {
        panic!("no check after the version: {nccl:?}")
    };
    assert_eq!(
        checked, "(every call meshwork makes found; a unique id made)",
        "{nccl}"
    );
    let v: Vec<u32> = nccl
        .split('.')
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("not a version: {nccl:?}"))
        })
        .collect();
    assert_eq!(v.len(), 3, "{nccl}");
    let min = MIN_NCCL;
    assert!((v[0], v[1]) >= (min.major, min.minor), "{nccl}");
    // No driver on a machine like CI's: the command still says so, exit 2.
    if Device::count().is_err() {
        assert_eq!(status, Some(2));
    }
    // ldconfig is in /sbin, which a non-root PATH may lack; grep reads
    // all of its output (no -q: no SIGPIPE under a long cache).
    let system_nccl = std::process::Command::new("sh")
        .args([
            "-c",
            "{ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep 'libnccl.so.2 ' >/dev/null",
        ])
        .status()
        .is_ok_and(|s| s.success());
    let (status, nccl) = devices(None);
    if !system_nccl {
        assert_eq!(status, Some(2));
        assert!(
            nccl.starts_with("device unavailable: NCCL (libnccl.so.2): not found"),
            "{nccl}"
        );
    }
}

/// A rank of a collective that another engine carries (as NCCL's calls
/// are): each rank enters a call whose engine never finishes, says so,
/// and reports what the group's watch made of it.
#[allow(
    clippy::print_stdout,
    reason = "rank processes report to the test on stdout"
)]
pub(crate) fn outside_scenario(g: &meshwork::ProcessGroup) -> meshwork::Result<String> {
    g.barrier()?;
    let started = std::time::Instant::now();
    let (r, aborts) = meshwork::testing::stalled_outside_call(g, || {
        println!("READY");
        let _ = std::io::Write::flush(&mut std::io::stdout());
    });
    match r {
        Ok(()) => Err(meshwork::Error::InvalidArgument(
            "a call whose engine never finishes finished".into(),
        )),
        Err(meshwork::Error::PeerDisconnected { rank }) => Ok(format!(
            "PeerDisconnected rank {rank} after {:.2} s, engine aborted {aborts}",
            started.elapsed().as_secs_f64()
        )),
        Err(e) => Err(e),
    }
}

/// A rank killed (SIGKILL) while every rank is inside a collective that
/// another engine carries (NCCL's calls go through the same watch): each
/// survivor's call ends with `PeerDisconnected` naming it, its engine
/// aborted once, well before the 30 s deadline.
#[test]
fn faults_a_rank_killed_inside_an_outside_call_is_named_by_every_survivor() {
    use crate::procs::{spawn, Launch};
    use std::time::{Duration, Instant};
    let mut launch = Launch::loopback(3, "mesh", 30.0).on("tcp");
    launch.set("HOLD_ON_ERROR", "1");
    launch.set("SHM", "0");
    let mut ranks = spawn(&launch, "outside_killed");
    ranks.wait_for(&[0, 1, 2], "READY", Duration::from_secs(60));
    let hit = Instant::now();
    ranks.signal(2, libc::SIGKILL);
    let results = ranks.wait_for(&[0, 1], "RESULT ", Duration::from_secs(20));
    let took = hit.elapsed();
    for (r, line) in &results {
        assert!(
            line.starts_with("RESULT ok PeerDisconnected rank 2 after")
                && line.ends_with("engine aborted 1"),
            "rank {r}: {line}; log {:?}",
            ranks.log
        );
    }
    assert!(took < Duration::from_secs(10), "{took:?}");
}
