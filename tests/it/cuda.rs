//! `--features cuda` on whatever machine runs the suite: a device that is
//! not there, or an NCCL that is not, is a typed error naming it, never a
//! panic. (The staging pipeline itself is tested on host memory in
//! `src/staging.rs`; on a GPU, `benches/cuda/device-check.sh`.)

use meshwork::cuda::{nccl_version, Device, MIN_NCCL};
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

/// NCCL is there and new enough, or its absence is named.
#[test]
fn nccl_is_found_and_new_enough_or_named_missing() {
    match nccl_version() {
        Ok(v) => assert!(v >= MIN_NCCL, "{v}"),
        Err(Error::DeviceUnavailable { what }) => assert!(what.contains("libnccl.so.2"), "{what}"),
        Err(other) => panic!("{other:?}"),
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
