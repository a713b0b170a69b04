//! The MPI-5.0 standard ABI over meshwork: `libmpi_abi.so`, whose header
//! is `include/mpi.h` and whose compiler wrapper is `bin/mpicc`. A C
//! program written against MPI builds unmodified and runs under
//! `meshrun -n 4 -- ./prog` (or srun, torchrun, Kubernetes, or
//! `RANK`/`WORLD`/`PEERS`): `MPI_Init` forms the world as
//! `Node::from_env()` does.
//!
//! This crate is a front end, not a second MPI: every collective goes
//! through meshwork's one call entry (`ProcessGroup::call_bytes`, or
//! `call_nb` for the `MPI_I…` forms); point-to-point messages carry their
//! MPI tag in an 8-byte envelope on each communicator's matched lane
//! (meshwork carries it in the frame header), and are matched here (`p2p.rs`) by source and tag, wildcards included,
//! in the order MPI requires. What meshwork does not do returns
//! `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler
//! (`unsupported.rs`), never a missing symbol.
//!
//! Layout: `state.rs` (initialisation, communicators, error handlers and
//! codes), `datatype.rs` (types and their layouts), `p2p.rs` (messages
//! and requests), `coll.rs` (collectives), `fold.rs` (the reductions
//! meshwork's collectives lack, `MPI_Op_create`), `env.rs` (the environment
//! calls), `large.rs` (the `MPI_Count` forms), `unsupported.rs`.

#![allow(
    non_snake_case,
    reason = "the exported names are the MPI standard's (MPI_Comm_rank)"
)]
#![allow(
    clippy::missing_safety_doc,
    reason = "each function's contract is the MPI standard's, as include/mpi.h declares it"
)]

mod attrs;
mod coll;
mod datatype;
mod decode;
mod env;
mod errcodes;
mod external;
mod fold;
mod large;
mod p2p;
mod pack;
mod state;
mod topo;
mod unsupported;

use std::ffi::c_int;

/// An MPI handle as the ABI passes it: a pointer-sized value, either a
/// predefined constant from the standard's tables or one this library
/// handed out.
pub type Handle = usize;

/// `MPI_Status`, as the ABI lays it out. `internal[0..2]` hold the byte
/// count of the message received (low and high halves), `internal[2]`
/// whether the request was cancelled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub internal: [c_int; 5],
}

impl Status {
    fn new(source: c_int, tag: c_int, bytes: usize) -> Status {
        let bytes = bytes as u64;
        Status {
            source,
            tag,
            error: 0,
            internal: [
                bytes as u32 as c_int,
                (bytes >> 32) as u32 as c_int,
                0,
                0,
                0,
            ],
        }
    }

    fn bytes(&self) -> u64 {
        u64::from(self.internal[0] as u32) | (u64::from(self.internal[1] as u32) << 32)
    }
}

/// The standard's constants this library reads or writes (include/mpi.h
/// has them all).
pub mod consts {
    use super::Handle;
    use std::ffi::c_int;

    pub const SUCCESS: c_int = 0;
    pub const ERR_BUFFER: c_int = 1;
    pub const ERR_COUNT: c_int = 2;
    pub const ERR_TYPE: c_int = 3;
    pub const ERR_TAG: c_int = 4;
    pub const ERR_COMM: c_int = 5;
    pub const ERR_RANK: c_int = 6;
    pub const ERR_REQUEST: c_int = 7;
    pub const ERR_ROOT: c_int = 8;
    pub const ERR_GROUP: c_int = 9;
    pub const ERR_OP: c_int = 10;
    pub const ERR_TOPOLOGY: c_int = 11;
    pub const ERR_DIMS: c_int = 12;
    pub const ERR_ARG: c_int = 13;
    pub const ERR_TRUNCATE: c_int = 15;
    pub const ERR_OTHER: c_int = 16;
    pub const ERR_INTERN: c_int = 17;
    pub const ERR_IN_STATUS: c_int = 19;
    pub const ERR_INFO_KEY: c_int = 31;
    pub const ERR_INFO_NOKEY: c_int = 32;
    pub const ERR_INFO: c_int = 34;
    pub const ERR_NO_MEM: c_int = 39;
    pub const ERR_UNSUPPORTED_OPERATION: c_int = 55;
    pub const ERR_PROC_ABORTED: c_int = 58;
    pub const ERR_LASTCODE: c_int = 16383;

    pub const ANY_SOURCE: c_int = -1;
    pub const ANY_TAG: c_int = -2;
    pub const PROC_NULL: c_int = -3;
    pub const UNDEFINED: c_int = -32766;

    pub const THREAD_SINGLE: c_int = 0;
    pub const THREAD_FUNNELED: c_int = 1024;
    pub const THREAD_SERIALIZED: c_int = 2048;
    pub const THREAD_MULTIPLE: c_int = 4096;

    pub const ORDER_C: c_int = 12;
    pub const ORDER_FORTRAN: c_int = 15;

    pub const COMBINER_NAMED: c_int = 101;
    pub const COMBINER_DUP: c_int = 102;
    pub const COMBINER_CONTIGUOUS: c_int = 103;
    pub const COMBINER_VECTOR: c_int = 104;
    pub const COMBINER_HVECTOR: c_int = 105;
    pub const COMBINER_INDEXED: c_int = 106;
    pub const COMBINER_HINDEXED: c_int = 107;
    pub const COMBINER_INDEXED_BLOCK: c_int = 108;
    pub const COMBINER_HINDEXED_BLOCK: c_int = 109;
    pub const COMBINER_STRUCT: c_int = 110;
    pub const COMBINER_SUBARRAY: c_int = 111;
    pub const COMBINER_F90_REAL: c_int = 113;
    pub const COMBINER_F90_COMPLEX: c_int = 114;
    pub const COMBINER_F90_INTEGER: c_int = 115;
    pub const COMBINER_RESIZED: c_int = 116;

    pub const IDENT: c_int = 201;
    pub const CONGRUENT: c_int = 202;
    pub const SIMILAR: c_int = 203;
    pub const UNEQUAL: c_int = 204;

    pub const CART: c_int = 211;
    pub const GRAPH: c_int = 212;
    pub const DIST_GRAPH: c_int = 213;

    pub const COMM_TYPE_SHARED: c_int = 221;
    pub const COMM_TYPE_HW_UNGUIDED: c_int = 222;
    pub const COMM_TYPE_HW_GUIDED: c_int = 223;
    pub const COMM_TYPE_RESOURCE_GUIDED: c_int = 224;

    pub const COMM_NULL: Handle = 0x100;
    pub const COMM_WORLD: Handle = 0x101;
    pub const COMM_SELF: Handle = 0x102;
    pub const INFO_NULL: Handle = 0x130;
    pub const INFO_ENV: Handle = 0x131;
    pub const ERRHANDLER_NULL: Handle = 0x140;
    pub const ERRORS_ARE_FATAL: Handle = 0x141;
    pub const ERRORS_ABORT: Handle = 0x142;
    pub const ERRORS_RETURN: Handle = 0x143;
    pub const REQUEST_NULL: Handle = 0x180;
    pub const DATATYPE_NULL: Handle = 0x200;

    pub const IN_PLACE: usize = 1;
    pub const MAX_ERROR_STRING: usize = 512;
    pub const MAX_LIBRARY_VERSION_STRING: usize = 8192;
    pub const MAX_OBJECT_NAME: usize = 128;
    pub const MAX_PROCESSOR_NAME: usize = 256;
    pub const MAX_INFO_KEY: usize = 256;
}

/// Copy `s` into the C buffer `out` of `cap` bytes (NUL-terminated,
/// cut to fit) and its length into `len`.
///
/// # Safety
/// `out` is NULL or valid for `cap` bytes; `len` is NULL or valid.
unsafe fn write_string(s: &str, out: *mut std::ffi::c_char, cap: usize, len: *mut c_int) {
    let n = s.len().min(cap.saturating_sub(1));
    if !out.is_null() && cap > 0 {
        // SAFETY: `out` holds `cap` bytes (the contract); `n + 1 <= cap`.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
            *out.add(n) = 0;
        }
    }
    if !len.is_null() {
        // SAFETY: valid (the contract).
        unsafe { *len = n as c_int };
    }
}

/// Store `v` at `out` when it is not NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: valid (the contract).
        unsafe { out.write(v) };
    }
}
