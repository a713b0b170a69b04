//! The shared-memory link's I/O thread: asleep in `poll` on the formation
//! stream until a doorbell, a wake-up or the peer's end; then it reads the
//! ring if no caller does, writes what others queued, and wakes senders
//! waiting for room.

use super::{lock, ShmLink, SOCKET};
use crate::link::Core;
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// When the peer's process was first seen stopped, and when to look
/// again.
#[derive(Debug)]
struct Liveness {
    stopped_since: Option<Instant>,
    next_look: Instant,
}

impl ShmLink {
    /// Read the doorbell's bytes; `false` once the peer has closed it.
    fn drain_bells(&self) -> bool {
        let mut buf = [0u8; 256];
        loop {
            match (&self.sock).read(&mut buf) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// The link's I/O thread: see the module docs.
    pub(super) fn run(&self, core: &Core, mut poll: mio::Poll) {
        let fd = self.sock.as_raw_fd();
        if let Err(e) = poll.registry().register(
            &mut mio::unix::SourceFd(&fd),
            SOCKET,
            mio::Interest::READABLE,
        ) {
            tracing::error!(peer = self.peer, "cannot poll the doorbell: {e}");
            self.fail(core);
            return;
        }
        let mut events = mio::Events::with_capacity(4);
        let mut live = Liveness {
            stopped_since: None,
            next_look: Instant::now(),
        };
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let look_in = self.look_at_peer(core, &mut live);
            let open = self.drain_bells();
            {
                // What it wrote before closing is all in the ring: read
                // it (waiting for a caller that reads) before ending.
                let rx = if open {
                    self.rx.try_lock().ok()
                } else {
                    Some(lock(&self.rx))
                };
                if let Some(mut rx) = rx {
                    let ended = self.pump(&mut rx, core, None);
                    if !open && !ended {
                        self.end(&mut rx, core);
                    }
                }
            }
            if self.ended.load(Ordering::Acquire) {
                self.flushed.set();
                return;
            }
            let all = self.flush_now(core);
            if all && self.flushing.load(Ordering::Acquire) {
                self.flushed.set();
            }
            self.wake_room();
            // Asleep from here: a writer that publishes rings.
            let unread = self.inn.set_asleep(true);
            if unread && self.rx.try_lock().is_ok() {
                self.inn.set_asleep(false);
                continue;
            }
            // Work left to another thread (a reader holding the ring, a
            // writer holding the stream, frames still queued) is looked at
            // again within a millisecond: a hand-off missed by a race this
            // code does not know of costs that, not the deadline. With
            // nothing pending, sleep until a bell or a wake-up.
            let pending = unread || !all || !self.queue.is_empty();
            let wait = match (pending, look_in) {
                (true, _) => Some(Duration::from_millis(1)),
                (false, look) => look,
            };
            if let Err(e) = poll.poll(&mut events, wait) {
                if e.kind() != ErrorKind::Interrupted {
                    tracing::error!(peer = self.peer, "poll: {e}");
                    self.fail(core);
                    return;
                }
            }
            self.inn.set_asleep(false);
        }
    }

    /// The liveness look, when due: whether the peer's process is
    /// stopped, and for how long. Stopped for the liveness limit, its rank
    /// counts as silent (`Core::silent`); running again, it is heard. How
    /// long until the next look (`None`: the peer's process cannot be
    /// looked at, and its stop is found by the deadline only).
    fn look_at_peer(&self, core: &Core, live: &mut Liveness) -> Option<Duration> {
        let source = self.source.as_ref()?;
        let now = Instant::now();
        let every = crate::link::heartbeat_interval(core.liveness());
        if now < live.next_look {
            return Some(live.next_look - now);
        }
        live.next_look = now + every;
        if source.stopped() {
            let since = *live.stopped_since.get_or_insert(now);
            if !self.frozen.load(Ordering::Acquire) && now - since >= core.liveness() {
                tracing::warn!(
                    peer = self.peer,
                    "rank {}'s process has been stopped for {:?}",
                    self.peer,
                    now - since
                );
                self.frozen.store(true, Ordering::Release);
                core.silent(self.peer);
            }
        } else {
            live.stopped_since = None;
            if self.frozen.swap(false, Ordering::AcqRel) {
                tracing::info!(peer = self.peer, "rank {}'s process runs again", self.peer);
                core.heard(self.peer);
            }
        }
        Some(every)
    }
}
