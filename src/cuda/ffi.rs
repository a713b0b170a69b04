//! NCCL's C API, resolved from the library meshwork opened (`dlsym`): the
//! calls the in-node path makes, with NCCL's types. Signatures are NCCL's
//! `nccl.h` (stable since 2.18, the oldest meshwork accepts).

use super::nccl::{library, symbol};
use super::unavailable;
use crate::{Error, ReduceOp, Result};
use meshwork_collectives::DType;
use std::ffi::{c_char, c_int, c_void, CStr};

/// `ncclResult_t`.
pub(crate) type NcclResult = c_int;
pub(crate) const SUCCESS: NcclResult = 0;
pub(crate) const IN_PROGRESS: NcclResult = 7;

/// `ncclComm_t`.
pub(crate) type RawComm = *mut c_void;
/// `cudaStream_t`, the driver's `CUstream`.
pub(crate) type RawStream = cudarc::driver::sys::CUstream;

/// `ncclUniqueId`: 128 opaque bytes, made by one rank and given to all.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct UniqueId {
    pub(crate) internal: [c_char; 128],
}

/// `ncclConfig_t` as of 2.18 (`NCCL_CONFIG_INITIALIZER`, `version`
/// 2.18.0): newer NCCLs read it by its `size` and `version`.
#[repr(C)]
pub(crate) struct Config {
    size: usize,
    magic: u32,
    version: u32,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

impl Config {
    /// NCCL's defaults, but non-blocking: calls return `ncclInProgress`
    /// and are polled, so a peer that never comes is a deadline, not a
    /// hang.
    pub(crate) fn non_blocking() -> Config {
        const UNDEF: c_int = c_int::MIN;
        Config {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 21_800,
            blocking: 0,
            cga_cluster_size: UNDEF,
            min_ctas: UNDEF,
            max_ctas: UNDEF,
            net_name: std::ptr::null(),
            split_share: UNDEF,
        }
    }
}

type Elementwise = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> NcclResult;

/// The NCCL calls meshwork makes.
pub(crate) struct Api {
    pub(crate) get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    pub(crate) comm_init_rank_config:
        unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int, *mut Config) -> NcclResult,
    pub(crate) comm_get_async_error: unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult,
    pub(crate) comm_abort: unsafe extern "C" fn(RawComm) -> NcclResult,
    pub(crate) comm_finalize: unsafe extern "C" fn(RawComm) -> NcclResult,
    pub(crate) comm_destroy: unsafe extern "C" fn(RawComm) -> NcclResult,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    get_last_error: unsafe extern "C" fn(RawComm) -> *const c_char,
    /// `ncclAllReduce(send, recv, count, type, op, comm, stream)`.
    pub(crate) all_reduce: Elementwise,
    /// `ncclBroadcast(send, recv, count, type, root, comm, stream)`.
    pub(crate) broadcast: Elementwise,
    /// `ncclReduceScatter(send, recv, recv_count, type, op, comm, stream)`.
    pub(crate) reduce_scatter: Elementwise,
    pub(crate) reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        RawComm,
        RawStream,
    ) -> NcclResult,
    pub(crate) all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        RawComm,
        RawStream,
    ) -> NcclResult,
    pub(crate) send:
        unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult,
    pub(crate) recv:
        unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> NcclResult,
    pub(crate) group_start: unsafe extern "C" fn() -> NcclResult,
    pub(crate) group_end: unsafe extern "C" fn() -> NcclResult,
}

/// NCCL's calls, resolved once: `DeviceUnavailable` without NCCL or with
/// one lacking any of them.
pub(crate) fn api() -> Result<&'static Api> {
    // What is missing, kept as said: `Error` is not `Clone`.
    static API: std::sync::OnceLock<std::result::Result<Api, String>> = std::sync::OnceLock::new();
    let missing = |e: Error| match e {
        Error::DeviceUnavailable { what } => what,
        other => other.to_string(),
    };
    let api = API.get_or_init(|| {
        let h = library().map_err(missing)?.handle;
        // SAFETY: each type below is the named function's C signature in
        // nccl.h.
        let api = unsafe {
            (|| {
                Ok::<Api, Error>(Api {
                    get_unique_id: symbol(h, c"ncclGetUniqueId")?,
                    comm_init_rank_config: symbol(h, c"ncclCommInitRankConfig")?,
                    comm_get_async_error: symbol(h, c"ncclCommGetAsyncError")?,
                    comm_abort: symbol(h, c"ncclCommAbort")?,
                    comm_finalize: symbol(h, c"ncclCommFinalize")?,
                    comm_destroy: symbol(h, c"ncclCommDestroy")?,
                    get_error_string: symbol(h, c"ncclGetErrorString")?,
                    get_last_error: symbol(h, c"ncclGetLastError")?,
                    all_reduce: symbol(h, c"ncclAllReduce")?,
                    broadcast: symbol(h, c"ncclBroadcast")?,
                    reduce_scatter: symbol(h, c"ncclReduceScatter")?,
                    reduce: symbol(h, c"ncclReduce")?,
                    all_gather: symbol(h, c"ncclAllGather")?,
                    send: symbol(h, c"ncclSend")?,
                    recv: symbol(h, c"ncclRecv")?,
                    group_start: symbol(h, c"ncclGroupStart")?,
                    group_end: symbol(h, c"ncclGroupEnd")?,
                })
            })()
        };
        api.map_err(missing)
    });
    api.as_ref().map_err(|what| unavailable(what.clone()))
}

impl Api {
    /// What NCCL says of `result` (and of `comm`'s last failure, if any).
    pub(crate) fn describe(&self, result: NcclResult, comm: RawComm) -> String {
        // SAFETY: a NUL-terminated string NCCL owns (static), read at once.
        let name = unsafe { text((self.get_error_string)(result)) };
        // SAFETY: as above, kept until the next call on `comm` (null:
        // the process's last error), read at once.
        let last = unsafe { text((self.get_last_error)(comm)) };
        if last.is_empty() {
            format!("{name} (ncclResult {result})")
        } else {
            format!("{name} (ncclResult {result}): {last}")
        }
    }

    /// A 128-byte id for a new communicator; needs no GPU.
    pub(crate) fn unique_id(&self) -> Result<UniqueId> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: `id` is a valid `ncclUniqueId` to write.
        let r = unsafe { (self.get_unique_id)(&mut id) };
        if r == SUCCESS {
            Ok(id)
        } else {
            Err(unavailable(format!(
                "NCCL: ncclGetUniqueId failed: {}",
                self.describe(r, std::ptr::null_mut())
            )))
        }
    }
}

/// What [`DeviceGroup::connect`](super::DeviceGroup::connect) needs of
/// NCCL before it touches a GPU: the release ([`nccl_version`](super::nccl_version)),
/// every call meshwork makes present in the library, and a unique id
/// made (`ncclGetUniqueId` needs no GPU). `meshrun devices` prints it.
pub fn nccl_check() -> Result<super::NcclVersion> {
    let v = super::nccl_version()?;
    api()?.unique_id()?;
    Ok(v)
}

/// # Safety
/// `p` is null or a NUL-terminated string valid for this call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's promise.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// NCCL's `ncclDataType_t` for `t`; NCCL has no 16-bit integers.
pub(crate) fn data_type(t: DType) -> Option<c_int> {
    Some(match t {
        DType::I8 => 0,
        DType::U8 => 1,
        DType::I32 => 2,
        DType::U32 => 3,
        DType::I64 => 4,
        DType::U64 => 5,
        DType::F16 => 6,
        DType::F32 => 7,
        DType::F64 => 8,
        DType::BF16 => 9,
        DType::I16 | DType::U16 => return None,
    })
}

/// [`data_type`], or why NCCL cannot take `t` (the device group stages
/// such types through the host before it gets here).
pub(crate) fn nccl_type(t: DType, op: &str) -> Result<c_int, crate::Error> {
    data_type(t).ok_or_else(|| {
        crate::Error::InvalidArgument(format!("{op}: NCCL has no {} type", t.name()))
    })
}

/// NCCL's `ncclRedOp_t` for `op` (`ncclAvg` since 2.10).
pub(crate) fn red_op(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
        ReduceOp::Avg => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL's numbering (nccl.h): a wrong one reduces the wrong type or
    /// with the wrong operator, silently.
    #[test]
    fn types_and_operators_have_ncclh_numbers() {
        let mut numbers: Vec<c_int> = DType::ALL.iter().filter_map(|&t| data_type(t)).collect();
        numbers.sort();
        assert_eq!(numbers, (0..10).collect::<Vec<_>>());
        assert_eq!(data_type(DType::F32), Some(7));
        assert_eq!(data_type(DType::BF16), Some(9));
        assert_eq!(data_type(DType::U64), Some(5));
        assert_eq!(data_type(DType::I16), None);
        assert_eq!(red_op(ReduceOp::Max), 2);
        assert_eq!(red_op(ReduceOp::Min), 3);
        assert_eq!(red_op(ReduceOp::Avg), 4);
    }

    /// The 2.18 layout: 8 + 4 + 4 + 4·4 + 8 + 4, padded to 48 bytes.
    #[test]
    fn the_config_has_the_2_18_layout() {
        assert_eq!(std::mem::size_of::<Config>(), 48);
        assert_eq!(std::mem::offset_of!(Config, blocking), 16);
        assert_eq!(std::mem::offset_of!(Config, net_name), 32);
        assert_eq!(std::mem::offset_of!(Config, split_share), 40);
        assert_eq!(std::mem::size_of::<UniqueId>(), 128);
    }
}
