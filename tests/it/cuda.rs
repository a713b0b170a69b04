//! `--features cuda` on whatever machine runs the suite: a device that is
//! not there, or an NCCL that is not, is a typed error naming it, never a
//! panic. (The staging pipeline itself is tested on host memory in
//! `src/staging.rs`; on a GPU, `benches/cuda/device-check.sh`.)

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
