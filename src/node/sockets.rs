//! Listening sockets handed down by a launcher: `meshrun` binds every
//! rank's port (TCP, and UDP on the same number for QUIC) and passes each
//! child its own two sockets, open across `exec`, named in
//! `MESHRUN_SOCKETS=<tcp fd>,<udp fd>`. Formation then listens on them
//! instead of binding, so no other program can take a rank's port between
//! the launcher's choice and the rank's start.

use meshwork_transport::BoundSockets;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the sockets were taken: a second `Node::from_env` in the
/// same process must not own the same descriptors again.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The sockets named by `MESHRUN_SOCKETS`, once per process; `None` if it
/// is unset, already taken, or does not name sockets of the right kinds
/// (then formation binds as usual, and says why in the log).
pub(crate) fn from_launcher() -> Option<BoundSockets> {
    let value = std::env::var("MESHRUN_SOCKETS").ok()?;
    if TAKEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    let fds: Vec<RawFd> = value
        .split(',')
        .map(|f| f.trim().parse::<RawFd>())
        .collect::<Result<_, _>>()
        .ok()?;
    let [tcp, udp] = fds[..] else {
        tracing::warn!(
            value,
            "MESHRUN_SOCKETS: expected two descriptors; binding instead"
        );
        return None;
    };
    if !is_socket(tcp, libc::SOCK_STREAM, true) || !is_socket(udp, libc::SOCK_DGRAM, false) {
        tracing::warn!(
            value,
            "MESHRUN_SOCKETS: not a listening TCP and a UDP socket; binding instead"
        );
        return None;
    }
    // SAFETY: both descriptors are open sockets of the kinds checked above,
    // passed to this process by its launcher for it to own; `TAKEN` makes
    // sure they are wrapped (and later closed) once only.
    let (tcp, udp) = unsafe { (TcpListener::from_raw_fd(tcp), UdpSocket::from_raw_fd(udp)) };
    Some(BoundSockets::new(tcp, Some(udp)))
}

/// Whether `fd` is an open socket of type `kind` (and, with `listening`,
/// one that accepts connections).
fn is_socket(fd: RawFd, kind: libc::c_int, listening: bool) -> bool {
    if fd <= 2 {
        return false;
    }
    let opt = |name: libc::c_int| -> Option<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for writes of an int and its
        // length; getsockopt reports an error for a descriptor that is not
        // an open socket.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    opt(libc::SO_TYPE) == Some(kind) && (!listening || opt(libc::SO_ACCEPTCONN) == Some(1))
}
