//! NCCL, opened by meshwork itself (`dlopen` of `libnccl.so.2`), and the
//! release it reports.

use super::unavailable;
use crate::Result;
use std::fmt;

/// The oldest NCCL meshwork accepts: 2.18.
pub const MIN_NCCL: NcclVersion = NcclVersion {
    major: 2,
    minor: 18,
    patch: 0,
};

/// An NCCL release, as `ncclGetVersion` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    /// Major release (2).
    pub major: u32,
    /// Minor release.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl NcclVersion {
    /// The release `ncclGetVersion` encodes as `code`: `X*10000 + Y*100 + Z`
    /// from 2.9 on, `X*1000 + Y*100 + Z` before. `None` for a code no
    /// release has (negative, or 0).
    pub fn from_code(code: i32) -> Option<NcclVersion> {
        let code = u32::try_from(code).ok().filter(|&c| c > 0)?;
        let (major, rest) = if code >= 10_000 {
            (code / 10_000, code % 10_000)
        } else {
            (code / 1_000, code % 1_000)
        };
        Some(NcclVersion {
            major,
            minor: rest / 100,
            patch: rest % 100,
        })
    }

    /// `Ok` when this release is [`MIN_NCCL`] or newer; else
    /// `DeviceUnavailable` naming both.
    pub fn check(self) -> Result<NcclVersion> {
        if self >= MIN_NCCL {
            Ok(self)
        } else {
            Err(unavailable(format!(
                "NCCL {self} (libnccl.so.2) is older than {MIN_NCCL}, the oldest meshwork accepts"
            )))
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// NCCL's library names, in the order tried: `libnccl.so.2` is what
/// NVIDIA's `libnccl2` package and the `nvidia-nccl-cu12`/`-cu13` wheels
/// (torch's) install; the bare `libnccl.so` only comes with the
/// development package. (cudarc's own loader tries `libnccl.so` and
/// numbered names that NCCL never had, not `libnccl.so.2`, so meshwork
/// opens NCCL itself.)
const NCCL_NAMES: [&std::ffi::CStr; 2] = [c"libnccl.so.2", c"libnccl.so"];

/// NCCL, opened once for the process (`dlopen`, kept open).
pub(super) struct Nccl {
    pub(super) handle: *mut libc::c_void,
}

// SAFETY: a `dlopen` handle may be used from any thread (dlsym is
// thread-safe); it is never closed.
unsafe impl Send for Nccl {}
// SAFETY: as above; nothing in it is mutated after it is made.
unsafe impl Sync for Nccl {}

pub(super) fn library() -> Result<&'static Nccl> {
    static NCCL: std::sync::OnceLock<Option<Nccl>> = std::sync::OnceLock::new();
    NCCL.get_or_init(|| {
        NCCL_NAMES.iter().find_map(|name| {
            // SAFETY: `name` is a NUL-terminated library name; dlopen runs
            // the library's initialisers, which NCCL's are fit for.
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            (!handle.is_null()).then_some(Nccl { handle })
        })
    })
    .as_ref()
    .ok_or_else(|| {
        unavailable(
            "NCCL (libnccl.so.2): not found on the loader's path (LD_LIBRARY_PATH, ldconfig); \
             NVIDIA's libnccl2 package and the nvidia-nccl-cu12/cu13 wheels ship it",
        )
    })
}

/// The NCCL this process loads, checked against [`MIN_NCCL`]:
/// `DeviceUnavailable` when `libnccl.so.2` is not on the loader's path,
/// lacks `ncclGetVersion`, or is older. Needs no GPU.
pub fn nccl_version() -> Result<NcclVersion> {
    // SAFETY: `ncclResult_t ncclGetVersion(int *version)`, NCCL's stable
    // signature since 2.3; `ncclResult_t` is a C enum (an `int`).
    let get: unsafe extern "C" fn(*mut libc::c_int) -> libc::c_int =
        unsafe { symbol(library()?.handle, c"ncclGetVersion")? };
    let mut code: libc::c_int = 0;
    // SAFETY: `code` is a valid `int` to write.
    let status = unsafe { get(&mut code) };
    if status != 0 {
        return Err(unavailable(format!(
            "NCCL (libnccl.so.2): ncclGetVersion failed (ncclResult {status})"
        )));
    }
    NcclVersion::from_code(code)
        .ok_or_else(|| unavailable(format!("NCCL (libnccl.so.2) reports version code {code}")))?
        .check()
}

/// Looks `name` up in NCCL (opened by [`library`]) and takes it as `F`:
/// `DeviceUnavailable` naming it when the library lacks it.
///
/// # Safety
/// `F` must be the function pointer type of `name`'s C signature.
pub(super) unsafe fn symbol<F: Copy>(
    handle: *mut libc::c_void,
    name: &std::ffi::CStr,
) -> Result<F> {
    // SAFETY: a symbol lookup in a library that stays open.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if sym.is_null() {
        return Err(unavailable(format!(
            "NCCL (libnccl.so.2): it has no {}",
            name.to_string_lossy()
        )));
    }
    debug_assert_eq!(
        std::mem::size_of::<F>(),
        std::mem::size_of::<*mut libc::c_void>()
    );
    // SAFETY: `F` is a function pointer of `name`'s signature (the
    // caller's promise), the same size as the address dlsym returned.
    Ok(unsafe { std::mem::transmute_copy::<*mut libc::c_void, F>(&sym) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn nccl_version_codes_decode_both_ways_nccl_has_written_them() {
        let v = |major, minor, patch| NcclVersion {
            major,
            minor,
            patch,
        };
        assert_eq!(NcclVersion::from_code(21_803), Some(v(2, 18, 3)));
        assert_eq!(NcclVersion::from_code(22_203), Some(v(2, 22, 3)));
        assert_eq!(NcclVersion::from_code(2_804), Some(v(2, 8, 4)));
        assert_eq!(NcclVersion::from_code(0), None);
        assert_eq!(NcclVersion::from_code(-1), None);
        assert_eq!(v(2, 18, 3).to_string(), "2.18.3");
    }

    #[test]
    fn an_nccl_older_than_the_floor_is_refused_by_name() {
        let old = NcclVersion::from_code(21_705).unwrap();
        match old.check() {
            Err(Error::DeviceUnavailable { what }) => {
                assert!(what.contains("2.17.5") && what.contains("2.18.0"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        let ok = NcclVersion::from_code(21_800).unwrap();
        assert_eq!(ok.check().unwrap(), ok);
        assert!(NcclVersion::from_code(30_000).unwrap().check().is_ok());
    }
}
