//! Status codes, element types and operators: C integer types with named
//! constants (values from C are validated, never transmuted).

use std::ffi::{c_int, CStr};

/// What a call returned: `MW_OK` (0) or one code per `meshwork::Error`
/// variant; `mw_last_error()` holds the message of a failure.
pub type mw_status = c_int;

/// Success.
pub const MW_OK: mw_status = 0;
/// Bad arguments (NULL pointer with a non-zero count, unknown dtype or op, count overflow, wrong length, root out of range); nothing was sent and the group stays usable.
pub const MW_INVALID_ARGUMENT: mw_status = 1;
/// The peers made no progress for the group's deadline (`Error::Timeout`).
pub const MW_TIMEOUT: mw_status = 2;
/// A rank went away; the group cannot continue (`Error::PeerDisconnected`).
pub const MW_PEER_DISCONNECTED: mw_status = 3;
/// Two processes asked for the same rank (`Error::RankConflict`).
pub const MW_RANK_CONFLICT: mw_status = 4;
/// A peer holds another cluster token (`Error::ClusterTokenMismatch`).
pub const MW_CLUSTER_TOKEN_MISMATCH: mw_status = 5;
/// A cluster token is required off loopback (`Error::TokenRequired`).
pub const MW_TOKEN_REQUIRED: mw_status = 6;
/// The cluster token is under 16 bytes (`Error::TokenTooShort`).
pub const MW_TOKEN_TOO_SHORT: mw_status = 7;
/// A peer speaks another wire protocol version (`Error::ProtocolMismatch`).
pub const MW_PROTOCOL_MISMATCH: mw_status = 8;
/// A peer was started with another world size (`Error::WorldMismatch`).
pub const MW_WORLD_MISMATCH: mw_status = 9;
/// Not every rank joined before the formation deadline (`Error::FormationTimeout`).
pub const MW_FORMATION_TIMEOUT: mw_status = 10;
/// A link to a rank could not be set up (`Error::ConnectionFailed`).
pub const MW_CONNECTION_FAILED: mw_status = 11;
/// Ranks issued different collectives or arguments (`Error::CollectiveMismatch`).
pub const MW_COLLECTIVE_MISMATCH: mw_status = 12;
/// A message exceeds the size cap (`Error::MessageTooLarge`).
pub const MW_MESSAGE_TOO_LARGE: mw_status = 13;
/// No RPC handler under that id (`Error::RpcUnknown`).
pub const MW_RPC_UNKNOWN: mw_status = 14;
/// An RPC handler failed (`Error::RpcFailed`).
pub const MW_RPC_FAILED: mw_status = 15;
/// Shutdown could not be confirmed with every rank (`Error::ShutdownIncomplete`).
pub const MW_SHUTDOWN_INCOMPLETE: mw_status = 16;
/// The group was shut down (`Error::ShutDown`).
pub const MW_SHUT_DOWN: mw_status = 17;
/// An operating-system I/O error (`Error::Io`).
pub const MW_IO: mw_status = 18;
/// A panic inside meshwork, or an error this library version does not know; the message says which.
pub const MW_INTERNAL: mw_status = 19;
/// The group was revoked, by a member's `mw_revoke`-equivalent or after a
/// failure under `RECOVERY=abort` (`Error::Revoked`).
pub const MW_REVOKED: mw_status = 20;
/// `RECOVERY=shrink`: the call met a failure and the group now holds the
/// survivors; retry (`Error::GroupShrunk`).
pub const MW_GROUP_SHRUNK: mw_status = 21;
/// Recovery needs a quorum this rank's side does not hold (a cut network,
/// too many failures); the group is stale and fails every call
/// (`Error::NoQuorum`).
pub const MW_NO_QUORUM: mw_status = 22;
/// This rank cannot go on in its group: the others went on without it, or
/// a recovery it took part in was cut short; the group is stale for good
/// and fails every call (`Error::Expelled`).
pub const MW_EXPELLED: mw_status = 23;

/// The status of `e`: one code per variant.
pub(crate) fn status_of(e: &mw::Error) -> mw_status {
    use mw::Error as E;
    match e {
        E::InvalidArgument(_) => MW_INVALID_ARGUMENT,
        E::Timeout { .. } => MW_TIMEOUT,
        E::PeerDisconnected { .. } => MW_PEER_DISCONNECTED,
        E::RankConflict { .. } => MW_RANK_CONFLICT,
        E::ClusterTokenMismatch => MW_CLUSTER_TOKEN_MISMATCH,
        E::TokenRequired => MW_TOKEN_REQUIRED,
        E::TokenTooShort { .. } => MW_TOKEN_TOO_SHORT,
        E::ProtocolMismatch { .. } => MW_PROTOCOL_MISMATCH,
        E::WorldMismatch { .. } => MW_WORLD_MISMATCH,
        E::FormationTimeout { .. } => MW_FORMATION_TIMEOUT,
        E::ConnectionFailed { .. } => MW_CONNECTION_FAILED,
        E::CollectiveMismatch { .. } => MW_COLLECTIVE_MISMATCH,
        E::MessageTooLarge { .. } => MW_MESSAGE_TOO_LARGE,
        E::RpcUnknown { .. } => MW_RPC_UNKNOWN,
        E::RpcFailed { .. } => MW_RPC_FAILED,
        E::ShutdownIncomplete { .. } => MW_SHUTDOWN_INCOMPLETE,
        E::ShutDown => MW_SHUT_DOWN,
        E::Io(_) => MW_IO,
        E::Revoked => MW_REVOKED,
        E::GroupShrunk { .. } => MW_GROUP_SHRUNK,
        E::NoQuorum { .. } => MW_NO_QUORUM,
        E::Expelled { .. } => MW_EXPELLED,
        // A variant added after this library was written.
        _ => MW_INTERNAL,
    }
}

/// The name of status `s`.
pub(crate) fn status_name(s: mw_status) -> &'static CStr {
    match s {
        MW_OK => c"MW_OK",
        MW_INVALID_ARGUMENT => c"MW_INVALID_ARGUMENT",
        MW_TIMEOUT => c"MW_TIMEOUT",
        MW_PEER_DISCONNECTED => c"MW_PEER_DISCONNECTED",
        MW_RANK_CONFLICT => c"MW_RANK_CONFLICT",
        MW_CLUSTER_TOKEN_MISMATCH => c"MW_CLUSTER_TOKEN_MISMATCH",
        MW_TOKEN_REQUIRED => c"MW_TOKEN_REQUIRED",
        MW_TOKEN_TOO_SHORT => c"MW_TOKEN_TOO_SHORT",
        MW_PROTOCOL_MISMATCH => c"MW_PROTOCOL_MISMATCH",
        MW_WORLD_MISMATCH => c"MW_WORLD_MISMATCH",
        MW_FORMATION_TIMEOUT => c"MW_FORMATION_TIMEOUT",
        MW_CONNECTION_FAILED => c"MW_CONNECTION_FAILED",
        MW_COLLECTIVE_MISMATCH => c"MW_COLLECTIVE_MISMATCH",
        MW_MESSAGE_TOO_LARGE => c"MW_MESSAGE_TOO_LARGE",
        MW_RPC_UNKNOWN => c"MW_RPC_UNKNOWN",
        MW_RPC_FAILED => c"MW_RPC_FAILED",
        MW_SHUTDOWN_INCOMPLETE => c"MW_SHUTDOWN_INCOMPLETE",
        MW_SHUT_DOWN => c"MW_SHUT_DOWN",
        MW_IO => c"MW_IO",
        MW_INTERNAL => c"MW_INTERNAL",
        MW_REVOKED => c"MW_REVOKED",
        MW_GROUP_SHRUNK => c"MW_GROUP_SHRUNK",
        MW_NO_QUORUM => c"MW_NO_QUORUM",
        MW_EXPELLED => c"MW_EXPELLED",
        _ => c"MW_UNKNOWN_STATUS",
    }
}
/// An element type: `MW_F32` … `MW_U16`. Any other value is
/// `MW_INVALID_ARGUMENT`.
pub type mw_dtype = u32;
/// `float` (IEEE binary32).
pub const MW_F32: mw_dtype = 0;
/// `double` (IEEE binary64).
pub const MW_F64: mw_dtype = 1;
/// IEEE binary16, as 16 bits (`uint16_t` or `_Float16` storage).
pub const MW_F16: mw_dtype = 2;
/// bfloat16, as 16 bits.
pub const MW_BF16: mw_dtype = 3;
/// `int8_t`.
pub const MW_I8: mw_dtype = 4;
/// `int32_t`.
pub const MW_I32: mw_dtype = 5;
/// `int64_t`.
pub const MW_I64: mw_dtype = 6;
/// `uint8_t`.
pub const MW_U8: mw_dtype = 7;
/// `uint32_t`.
pub const MW_U32: mw_dtype = 8;
/// `uint64_t`.
pub const MW_U64: mw_dtype = 9;
/// `int16_t`.
pub const MW_I16: mw_dtype = 10;
/// `uint16_t`.
pub const MW_U16: mw_dtype = 11;

/// A reduction operator: `MW_SUM` … `MW_AVG`. Any other value is
/// `MW_INVALID_ARGUMENT`.
pub type mw_op = u32;
/// Element-wise sum; integers wrap.
pub const MW_SUM: mw_op = 0;
/// Element-wise product; integers wrap.
pub const MW_PROD: mw_op = 1;
/// Element-wise minimum.
pub const MW_MIN: mw_op = 2;
/// Element-wise maximum.
pub const MW_MAX: mw_op = 3;
/// Element-wise mean; float types only.
pub const MW_AVG: mw_op = 4;

/// The operator `op` names, or `MW_INVALID_ARGUMENT`.
pub(crate) fn reduce_op(op: mw_op) -> Result<mw::ReduceOp, crate::Failure> {
    use mw::ReduceOp as R;
    Ok(match op {
        MW_SUM => R::Sum,
        MW_PROD => R::Prod,
        MW_MIN => R::Min,
        MW_MAX => R::Max,
        MW_AVG => R::Avg,
        other => {
            return Err(crate::Failure::invalid(format!(
                "unknown mw_op {other} (MW_SUM..MW_AVG are 0..4)"
            )))
        }
    })
}
