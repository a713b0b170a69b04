//! The receive half of a link: a resumable frame assembler that any thread
//! may drive without blocking — the link's reader thread when `poll(2)`
//! says the socket is readable, or an application thread that is waiting
//! for a message from this peer and reads it itself (caller-driven
//! progress: no hand-off between threads on a small message's path).
//! One lock serialises the drivers; nobody blocks while holding it.

use super::frame::{FrameType, Header, HEADER_LEN};
use super::link::{relay, Shared};
use super::seal::{Opener, SEAL_OVERHEAD};
use crate::{LaneKey, LaneKind, Payload};
use std::io::ErrorKind;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct State {
    header: [u8; HEADER_LEN],
    header_len: usize,
    /// A data frame being read: its header, its buffer, bytes read.
    body: Option<(Header, Vec<u8>, usize)>,
    last_byte: Instant,
    silent: bool,
    ended: bool,
    /// `ENCRYPT_BULK`: opens data payloads.
    opener: Option<Opener>,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Rx {
    peer: u32,
    stream: TcpStream,
    state: Mutex<State>,
}

/// One non-blocking read; `Ok(0)` is end of stream.
fn read_now(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is an initialised, exclusively borrowed slice of
    // `buf.len()` bytes; recv(2) writes at most that many into it.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_void>(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Wait until `stream` is readable (or closed), at most `timeout`.
fn wait_readable(stream: &TcpStream, timeout: Duration) -> bool {
    // Ready, or an error that the next read will report.
    super::poll_readable(&[stream.as_raw_fd()], timeout).is_none_or(|r| r[0])
}

/// What a link does after a frame's header.
pub(crate) enum Next {
    Continue,
    /// A data frame: read its body next.
    Body(Header),
    End,
}

/// Act on a header from `peer`'s link (TCP or QUIC): control frames at
/// once; a data frame's body is the caller's to read.
pub(crate) fn on_header(shared: &Shared, peer: u32, h: Header, on_quic: bool) -> Next {
    match h.ftype {
        FrameType::Heartbeat => Next::Continue,
        FrameType::Bye => Next::End,
        FrameType::PeerGone => {
            // On QUIC it comes once on every stream, behind what was
            // relayed on that stream.
            let last = match (&shared.quic, on_quic) {
                (Some(q), true) => q.gone_mark(h.src),
                _ => true,
            };
            if last {
                shared.inbox.set_gone(h.src);
            }
            Next::Continue
        }
        FrameType::Credit if h.dst == shared.rank => {
            if let Some(b) = shared.flow.get(h.src as usize) {
                b.release(usize::try_from(h.len).unwrap_or(usize::MAX));
            }
            let key = LaneKey {
                comm: h.comm,
                kind: h.kind,
                tag: h.tag,
            };
            shared.release_lane(h.src, key, h.aux);
            Next::Continue
        }
        FrameType::Credit => {
            if shared.star && shared.rank == 0 {
                relay(shared, h, Payload::default());
            }
            Next::Continue
        }
        FrameType::Data
            if h.kind == LaneKind::Collective && !shared.inbox.in_window(h.comm, h.tag) =>
        {
            tracing::error!(
                peer,
                seq = h.tag,
                "a collective message far beyond this rank's sequence window; closing the link"
            );
            Next::End
        }
        FrameType::Data => Next::Body(h),
    }
}

/// A complete message from `peer`'s link: to this rank's inbox, or
/// relayed. `false`: a protocol error (the link must close).
pub(crate) fn on_data(shared: &Shared, peer: u32, h: Header, payload: Payload) -> bool {
    if h.dst == shared.rank {
        let key = LaneKey {
            comm: h.comm,
            kind: h.kind,
            tag: h.tag,
        };
        shared.inbox.deliver(h.src, key, payload);
        true
    } else if shared.star && shared.rank == 0 {
        relay(shared, h, payload);
        true
    } else {
        tracing::error!(
            peer,
            dst = h.dst,
            "a frame for another rank on a direct link; closing it"
        );
        false
    }
}

impl Rx {
    pub(crate) fn new(peer: u32, stream: TcpStream, opener: Option<Opener>) -> Rx {
        Rx {
            peer,
            stream,
            state: Mutex::new(State {
                header: [0; HEADER_LEN],
                header_len: 0,
                body: None,
                last_byte: Instant::now(),
                silent: false,
                ended: false,
                opener,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read and process what has arrived, if no other thread is doing so.
    /// Returns whether the link has ended.
    pub(crate) fn try_pump(&self, shared: &Shared) -> bool {
        match self.state.try_lock() {
            Ok(mut st) => self.pump(&mut st, shared),
            Err(_) => false,
        }
    }

    fn end(&self, st: &mut State, shared: &Shared) -> bool {
        if !st.ended {
            st.ended = true;
            shared.link_lost(self.peer);
        }
        true
    }

    /// Process every complete frame that can be read without blocking.
    fn pump(&self, st: &mut State, shared: &Shared) -> bool {
        loop {
            if st.ended {
                return true;
            }
            if matches!(&st.body, Some((_, buf, read)) if *read == buf.len()) {
                if let Some((h, buf, _)) = st.body.take() {
                    if !self.deliver(h, buf, st.opener.as_mut(), shared) {
                        return self.end(st, shared);
                    }
                }
                continue;
            }
            let got = match st.body.as_mut() {
                Some((_, buf, read)) => read_now(&self.stream, &mut buf[*read..]),
                None => {
                    let from = st.header_len;
                    read_now(&self.stream, &mut st.header[from..])
                }
            };
            match got {
                Ok(0) => return self.end(st, shared),
                Ok(n) => {
                    st.last_byte = Instant::now();
                    if st.silent {
                        st.silent = false;
                        for r in shared.served_by(self.peer) {
                            shared.inbox.set_silent(r, false);
                        }
                    }
                    if let Some((h, _, read)) = st.body.as_mut() {
                        *read += n;
                        shared.inbox.progress(h.src);
                        continue;
                    }
                    st.header_len += n;
                    if st.header_len < HEADER_LEN {
                        continue;
                    }
                    st.header_len = 0;
                    let sealed = st.opener.is_some();
                    match self.header(&st.header, sealed, shared) {
                        Next::Continue => {}
                        Next::End => return self.end(st, shared),
                        // The length was checked against the cap before
                        // this allocation.
                        Next::Body(h) => {
                            st.body = Some((h, shared.pool.take_filled(h.len as usize), 0))
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(_) => return self.end(st, shared),
            }
        }
    }

    /// Decode and act on a complete header.
    fn header(&self, raw: &[u8; HEADER_LEN], sealed: bool, shared: &Shared) -> Next {
        let cap = shared.max_message_bytes + if sealed { SEAL_OVERHEAD as u64 } else { 0 };
        let next = match Header::decode(raw, shared.world, cap) {
            Ok(h) => on_header(shared, self.peer, h, false),
            Err(e) => {
                tracing::error!(
                    peer = self.peer,
                    "protocol error on the link: {e}; closing it"
                );
                Next::End
            }
        };
        if matches!(next, Next::End) {
            let _ = self.stream.shutdown(Shutdown::Both);
        }
        next
    }

    /// A complete data frame: on QUIC, a sidecar payload, delivered in its
    /// lane's order; otherwise to the inbox or relayed.
    fn deliver(
        &self,
        mut h: Header,
        mut buf: Vec<u8>,
        opener: Option<&mut Opener>,
        shared: &Shared,
    ) -> bool {
        if let Some(o) = opener {
            match o.open(&mut h, &buf, &shared.pool) {
                Ok(plain) => {
                    shared.pool.give(std::mem::replace(&mut buf, plain));
                }
                Err(e) => {
                    tracing::error!(peer = self.peer, "{e}; closing the link");
                    let _ = self.stream.shutdown(Shutdown::Both);
                    return false;
                }
            }
        }
        let payload = Payload::from_vec_in(buf, Some(&shared.pool));
        let ok = match &shared.quic {
            Some(q) => q.bulk_arrived(shared, self.peer, h, payload),
            None => on_data(shared, self.peer, h, payload),
        };
        if !ok {
            let _ = self.stream.shutdown(Shutdown::Both);
        }
        ok
    }
}

/// The link's reader thread: wait for the socket to become readable, then
/// drive the assembler (unless an application thread already is); notice a
/// link that stays silent for a whole deadline.
pub(crate) fn reader(shared: std::sync::Arc<Shared>, rx: std::sync::Arc<Rx>) {
    let hb = super::link::heartbeat_interval(shared.timeout());
    loop {
        let readable = wait_readable(&rx.stream, hb);
        let mut st = rx.lock();
        if readable && rx.pump(&mut st, &shared) {
            return;
        }
        if shared.closing.load(Ordering::Acquire) && !readable {
            return;
        }
        if !st.silent && st.last_byte.elapsed() >= shared.timeout() {
            st.silent = true;
            tracing::warn!(peer = rx.peer, "link silent for {:?}", shared.timeout());
            for r in shared.served_by(rx.peer) {
                shared.inbox.set_silent(r, true);
            }
        }
    }
}
