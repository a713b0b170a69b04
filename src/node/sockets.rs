//! Listening sockets bound before formation: a launcher (`meshrun`) binds
//! every rank's port (TCP, and UDP on the same number for QUIC) and passes
//! each child its own two sockets, open across `exec`, named in
//! `MESHRUN_SOCKETS=<tcp fd>,<udp fd>`; a program that places ranks itself
//! hands them over with [`Node::listen_on`](crate::Node::listen_on); a
//! seed job's rank holds the port it announces. Formation then listens on
//! them instead of binding, so no other program can take a rank's port
//! between its choice and the rank's start.

use meshwork_transport::BoundSockets;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
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
    for fd in [tcp, udp] {
        // Ours from here on: not inherited by whatever this rank runs.
        // SAFETY: fcntl(2) on a descriptor just checked to be an open
        // socket; it changes only its close-on-exec flag.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
            tracing::warn!("MESHRUN_SOCKETS: cannot mark fd {fd} close-on-exec");
        }
    }
    // SAFETY: both descriptors are open sockets of the kinds checked above,
    // passed to this process by its launcher for it to own; `TAKEN` makes
    // sure they are wrapped (and later closed) once only.
    let (tcp, udp) = unsafe { (TcpListener::from_raw_fd(tcp), UdpSocket::from_raw_fd(udp)) };
    Some(BoundSockets::new(tcp, Some(udp)))
}

/// A rank's listening sockets on a free port of `ip`, bound as formation
/// binds them: a TCP listener, and a UDP socket on the same number that
/// shares it (`SO_REUSEPORT`: QUIC gives each accepted peer a socket of its
/// own on that port). Hand them to [`Node::listen_on`](crate::Node::listen_on)
/// (or to a child process, as `meshrun` does) and the port is the rank's
/// from this moment on.
///
/// # Errors
///
/// The bind's error; no port free for both protocols after 64 tries.
pub fn bind_rank_sockets(ip: IpAddr) -> std::io::Result<(TcpListener, UdpSocket)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let any = SocketAddr::new(ip, 0);
    for _ in 0..64 {
        let tcp = Socket::new(Domain::for_address(any), Type::STREAM, Some(Protocol::TCP))?;
        tcp.set_reuse_address(true)?;
        tcp.bind(&any.into())?;
        tcp.listen(1024)?;
        let tcp: TcpListener = tcp.into();
        let udp = Socket::new(Domain::for_address(any), Type::DGRAM, Some(Protocol::UDP))?;
        udp.set_reuse_port(true)?;
        match udp.bind(&tcp.local_addr()?.into()) {
            Ok(()) => return Ok((tcp, udp.into())),
            // The number is taken for UDP: another one.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no port free for both TCP and UDP"))
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
