//! The receive half of a TCP link: the frame assembler (`wire::Assembler`)
//! driven off the socket without blocking, by whichever thread gets there
//! first — the link's I/O thread when mio says the socket is readable, or
//! an application thread waiting for a message from this peer (caller-driven progress: no hand-off between threads on a small
//! message's path). One lock serialises the drivers; nobody blocks while
//! holding it.

use crate::auth::seal::{Opener, SEAL_OVERHEAD};
use crate::link::{Core, Next, Sink};
use crate::wire::Assembler;
use crate::wire::FrameType;
use crate::Payload;
use std::io::ErrorKind;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct State {
    asm: Assembler,
    last_byte: Instant,
    silent: bool,
    ended: bool,
    /// With a token: opens every frame's envelope (`auth/seal.rs`).
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

impl Rx {
    pub(crate) fn new(peer: u32, stream: TcpStream, opener: Option<Opener>, core: &Core) -> Rx {
        let overhead = if opener.is_some() {
            SEAL_OVERHEAD as u64
        } else {
            0
        };
        Rx {
            peer,
            stream,
            state: Mutex::new(State {
                asm: Assembler::new(core.world, core.max_message_bytes.saturating_add(overhead)),
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
    pub(crate) fn try_pump(&self, core: &Core, sink: &dyn Sink) -> bool {
        match self.state.try_lock() {
            Ok(mut st) => self.pump(&mut st, core, sink),
            Err(_) => false,
        }
    }

    fn end(&self, st: &mut State, core: &Core, sink: &dyn Sink) -> bool {
        if !st.ended {
            st.ended = true;
            st.asm.discard(&core.pool);
            sink.ended(core, self.peer);
        }
        true
    }

    /// A protocol error: cut the connection and end the link.
    fn refuse(&self, st: &mut State, core: &Core, sink: &dyn Sink) -> bool {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.end(st, core, sink)
    }

    /// Process every complete frame that can be read without blocking.
    fn pump(&self, st: &mut State, core: &Core, sink: &dyn Sink) -> bool {
        loop {
            if st.ended {
                return true;
            }
            if let Some((h, buf)) = st.asm.take_frame() {
                let delivered = match st.opener.as_mut() {
                    Some(o) => self.open(o, buf, core, sink),
                    None => sink.data(
                        core,
                        self.peer,
                        h,
                        Payload::from_vec_in(buf, Some(&core.pool)),
                    ),
                };
                if !delivered {
                    return self.refuse(st, core, sink);
                }
                continue;
            }
            match read_now(&self.stream, st.asm.space()) {
                Ok(0) => return self.end(st, core, sink),
                Ok(n) => {
                    st.last_byte = Instant::now();
                    if st.silent {
                        st.silent = false;
                        core.heard(self.peer);
                    }
                    if let Some(h) = st.asm.body_header() {
                        core.inbox.progress(h.src);
                    }
                    match st.asm.advance(n) {
                        Ok(None) => {}
                        // An envelope: read it whole; nothing in it counts
                        // before it opens.
                        Ok(Some(h)) if st.opener.is_some() => {
                            if h.ftype != FrameType::Data {
                                tracing::error!(
                                    peer = self.peer,
                                    "a frame outside its envelope on an authenticated link; closing the link"
                                );
                                return self.refuse(st, core, sink);
                            }
                            st.asm.start_body(h, &core.pool);
                        }
                        Ok(Some(h)) => match core.on_header(self.peer, h) {
                            Next::Continue => {}
                            Next::Body(h) => st.asm.start_body(h, &core.pool),
                            Next::End => return self.refuse(st, core, sink),
                        },
                        Err(e) => {
                            tracing::error!(
                                peer = self.peer,
                                "protocol error: {e}; closing the link"
                            );
                            return self.refuse(st, core, sink);
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(_) => return self.end(st, core, sink),
            }
        }
    }

    /// A complete envelope: opened, then acted on as any frame read
    /// off an unauthenticated link would be. `false`: the link must close.
    fn open(&self, o: &mut Opener, body: Vec<u8>, core: &Core, sink: &dyn Sink) -> bool {
        let (h, payload) = match o.open(body, core.world, core.max_message_bytes, &core.pool) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(
                    peer = self.peer,
                    "{e} on the link to rank {}; closing the link",
                    self.peer
                );
                return false;
            }
        };
        match core.on_header(self.peer, h) {
            Next::Continue => true,
            Next::End => false,
            Next::Body(h) => sink.data(core, self.peer, h, payload),
        }
    }

    /// Read and process what has arrived, waiting for the lock if another
    /// thread is reading (it never blocks while holding it): the link's
    /// I/O thread after a readiness event, which must not be lost.
    /// Returns whether the link has ended.
    pub(crate) fn pump_now(&self, core: &Core, sink: &dyn Sink) -> bool {
        let mut st = self.lock();
        self.pump(&mut st, core, sink)
    }

    /// The connection failed (a write did): cut it and end the link.
    pub(crate) fn fail(&self, core: &Core, sink: &dyn Sink) {
        let mut st = self.lock();
        self.refuse(&mut st, core, sink);
    }

    /// `None` if the link has ended. Otherwise: mark the link's ranks
    /// silent if nothing, not even a heartbeat, came for a whole deadline,
    /// and say how long until that check is due.
    pub(crate) fn check_silence(&self, core: &Core) -> Option<Duration> {
        let mut st = self.lock();
        if st.ended {
            return None;
        }
        let quiet = st.last_byte.elapsed();
        if !st.silent && quiet >= core.timeout() {
            st.silent = true;
            core.silent(self.peer);
        }
        Some(
            core.timeout()
                .saturating_sub(quiet)
                .max(Duration::from_millis(1)),
        )
    }

    /// Cut the connection (both directions): the reader sees its end.
    pub(crate) fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}
