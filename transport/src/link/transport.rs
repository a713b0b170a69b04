//! The [`Transport`] impl, written once over the core: sends go to the
//! link of the destination's hop; receives wait on the inbox, reading
//! their peer's link themselves for a moment first (caller-driven
//! progress: a prompt reply needs no thread hand-off).

use super::{Core, Link, Posted};
use crate::inbox::Cores;
use crate::wire::{FrameType, Header};
use crate::{LaneKey, LaneKind, LinkKind, Payload, PeerStats, Transport, TransportError};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a receiving thread reads its peer's link itself before it
/// parks and leaves the link to the link's own thread.
pub(super) const CALLER_POLL: Duration = Duration::from_micros(60);

/// How long a receiving thread reads its link itself for a message of
/// `len` bytes: [`CALLER_POLL`], and for a large message as long again as
/// its bytes take to come at 1 GB/s (at most about 34 ms) — the sender is
/// often still busy with the previous one, and a receive that is waiting
/// when they come reads them straight into its buffer (no copy, no
/// hand-off).
fn poll_for(patience: Duration, len: Option<usize>) -> Duration {
    let bytes = len.unwrap_or(0) as u64;
    patience + Duration::from_nanos(bytes.min(32 << 20))
}

/// What formation leaves running beside the links (threads answering
/// latecomers on the listening sockets): each stops its own work when
/// dropped, which closing the endpoint does.
pub(crate) type Background = Box<dyn std::fmt::Debug + Send>;

/// One rank's endpoint of a group formed over network links ([`connect`]
/// makes one). Dropping it closes it.
///
/// [`connect`]: crate::connect
#[derive(Debug)]
pub struct LinkTransport {
    core: Arc<Core>,
    /// What formation left running (see [`Background`]).
    background: Mutex<Vec<Background>>,
}

impl LinkTransport {
    /// Start every link's threads (the links are in the core's table) and
    /// wrap the core.
    pub(crate) fn start(core: Arc<Core>, background: Vec<Background>) -> LinkTransport {
        for (_, link) in core.links() {
            Arc::clone(link).start(&core);
        }
        LinkTransport {
            core,
            background: Mutex::new(background),
        }
    }
}

impl LinkTransport {
    /// A receive: the message, or `None` when it was read straight into
    /// `posted`'s buffers.
    fn receive(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
        mut posted: Option<&mut Posted<'_>>,
    ) -> Result<Option<Payload>, TransportError> {
        let core = &self.core;
        let taken = |msg: Result<Payload, TransportError>| {
            let msg = msg?;
            core.credit(src, key);
            Ok(Some(msg))
        };
        if let Some(link) = core.link(core.inbound(src)) {
            // One read of the link, into the posted buffers if any;
            // whether the link ended, and whether the buffers were filled.
            let poll = |posted: &mut Option<&mut Posted<'_>>| match posted {
                Some(p) => (link.poll_into(core, p), p.filled),
                None => (link.poll(core, want_len), false),
            };
            // What has already arrived needs no change of who watches the
            // socket (that costs a system call each way).
            if let Some(msg) = core.inbox.try_take(src, key, want_len) {
                return taken(msg);
            }
            let (mut ended, mut filled) = poll(&mut posted);
            // Queues change only with a delivery: the loop below looks
            // at them (a lock) only when one happened since.
            let mut seen = core.inbox.deliveries();
            if !filled {
                if let Some(msg) = core.inbox.try_take(src, key, want_len) {
                    return taken(msg);
                }
            }
            // A crowded host parks at once (`Cores::Crowded`).
            if !filled && !ended && core.cores != Cores::Crowded {
                link.caller_polls(core, true, want_len);
                let _done = Stop(core, &**link, want_len);
                // The clock is first read after a few turns: a message
                // that comes within them costs no clock read.
                let patience = poll_for(link.patience(), want_len).min(timeout);
                let mut until: Option<Instant> = None;
                let mut turns = 0u32;
                loop {
                    if core.cores == Cores::Own {
                        std::hint::spin_loop();
                    } else {
                        // More ranks than cores here: the peer we wait for
                        // may need this core.
                        std::thread::yield_now();
                    }
                    (ended, filled) = poll(&mut posted);
                    if filled {
                        break;
                    }
                    let now = core.inbox.deliveries();
                    if now != seen {
                        seen = now;
                        if let Some(msg) = core.inbox.try_take(src, key, want_len) {
                            return taken(msg);
                        }
                    }
                    turns = turns.wrapping_add(1);
                    // The clock every few turns: a turn costs about one
                    // non-blocking read, less than reading the clock.
                    if ended {
                        break;
                    }
                    if turns.is_multiple_of(8) {
                        let now = Instant::now();
                        if now >= *until.get_or_insert(now + patience) {
                            break;
                        }
                    }
                }
            }
            if filled {
                core.credit(src, key);
                return Ok(None);
            }
            // Parking: the link must wake its thread for this message.
            let _wanted = Want::new(core, &**link, key.kind);
            return taken(core.inbox.recv(src, key, timeout, want_len));
        }
        taken(core.inbox.recv(src, key, timeout, want_len))
    }
}

impl Transport for LinkTransport {
    fn rank(&self) -> u32 {
        self.core.rank
    }

    fn world(&self) -> u32 {
        self.core.world
    }

    fn send(&self, dst: u32, key: LaneKey, parts: &[&[u8]]) -> Result<(), TransportError> {
        let core = &self.core;
        if dst >= core.world {
            return Err(TransportError::NoSuchRank {
                rank: dst,
                world: core.world,
            });
        }
        if core.inbox.is_closed() {
            return Err(TransportError::Closed);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len as u64 > core.max_message_bytes {
            return Err(TransportError::MessageTooLarge {
                len: len as u64,
                max: core.max_message_bytes,
            });
        }
        crate::holds_its_word(key.kind, len)?;
        if dst == core.rank {
            core.inbox
                .deliver(dst, key, Payload::from_parts_in(parts, Some(&core.pool)));
            return Ok(());
        }
        if let Some(e) = core.inbox.unreachable(dst) {
            return Err(e);
        }
        // A matched lane's word rides in the header (the room taken is
        // the message's: the receiver counts the word back in).
        let joined;
        let (tag, parts) = match (key.kind, parts) {
            (LaneKind::Matched, [word, rest @ ..]) if word.len() == crate::MATCHED_WORD => {
                let mut w = [0u8; crate::MATCHED_WORD];
                w.copy_from_slice(word);
                (u64::from_le_bytes(w), rest)
            }
            (LaneKind::Matched, _) => {
                let (word, rest) =
                    crate::matched_word(parts).ok_or(TransportError::NoWord { len })?;
                joined = rest;
                (word, &joined[..])
            }
            _ => (key.tag, parts),
        };
        let header = Header {
            ftype: FrameType::Data,
            kind: key.kind,
            src: core.rank,
            dst,
            comm: key.comm,
            tag,
            len: parts.iter().map(|p| p.len() as u64).sum(),
            aux: 0,
            seq: 0,
        };
        core.acquire_room(dst, key, len)?;
        let sent = core.transmit(core.hop(dst), header, parts, dst);
        if sent.is_ok() {
            let (m, b) = &core.sent[dst as usize];
            m.fetch_add(1, Ordering::Relaxed);
            b.fetch_add(len as u64, Ordering::Relaxed);
        }
        sent
    }

    fn recv(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        want_len: Option<usize>,
    ) -> Result<Payload, TransportError> {
        self.receive(src, key, timeout, want_len, None)
            .map(Option::unwrap_or_default)
    }

    fn recv_into(
        &self,
        src: u32,
        key: LaneKey,
        timeout: Duration,
        head: &mut [u8],
        body: &mut [u8],
    ) -> Result<(), TransportError> {
        let want = Some(head.len() + body.len());
        let w = crate::MATCHED_WORD;
        let (word, head) = match key.kind {
            LaneKind::Matched if head.len() >= w => {
                let (word, head) = head.split_at_mut(w);
                (Some(word), head)
            }
            // A word that runs into the body: no reading in place.
            LaneKind::Matched => {
                let msg = self.recv(src, key, timeout, want)?;
                crate::split_into(msg.as_ref(), head, body);
                return Ok(());
            }
            _ => (None, head),
        };
        let mut posted = Posted {
            src,
            key,
            word,
            head,
            body,
            filled: false,
        };
        if let Some(msg) = self.receive(src, key, timeout, want, Some(&mut posted))? {
            // The message whole (a matched lane's word first).
            let mut msg = msg.as_ref();
            if let Some(word) = posted.word {
                let (first, rest) = msg.split_at(word.len());
                word.copy_from_slice(first);
                msg = rest;
            }
            crate::split_into(msg, posted.head, posted.body);
        }
        Ok(())
    }

    fn recv_any(&self, key: LaneKey, timeout: Duration) -> Result<(u32, Payload), TransportError> {
        let core = &self.core;
        // The RPC server's wait for requests stands as long as the group.
        let standing = key.kind == LaneKind::Rpc;
        let _wanted: Vec<Want<'_>> = core
            .links()
            .map(|(_, l)| Want::with(core, &**l, key.kind, standing))
            .collect();
        let (src, msg) = self.core.inbox.recv_any(key, timeout)?;
        self.core.credit(src, key);
        Ok((src, msg))
    }

    fn stats(&self) -> Vec<PeerStats> {
        self.core
            .inbox
            .stats()
            .into_iter()
            .zip(&self.core.sent)
            .enumerate()
            .map(|(r, (s, (m, b)))| PeerStats {
                sent_messages: m.load(Ordering::Relaxed),
                sent_bytes: b.load(Ordering::Relaxed),
                single_copy_messages: self.core.link(r as u32).map_or(0, |l| l.single_copies()),
                ..s
            })
            .collect()
    }

    fn links(&self) -> Vec<LinkKind> {
        let core = &self.core;
        (0..core.world)
            .map(|r| {
                if r == core.rank {
                    LinkKind::Local
                } else if core.hop(r) != r {
                    LinkKind::Relayed
                } else {
                    core.link(r).map_or(LinkKind::Relayed, |l| l.kind())
                }
            })
            .collect()
    }

    fn note_collective(&self, comm: u64, seq: u64) {
        self.core.inbox.note_issued(comm, seq);
    }

    fn set_timeout(&self, timeout: Duration) {
        self.core.set_timeout(timeout);
    }

    fn failed(&self) -> Vec<u32> {
        self.core.failed()
    }

    fn incarnation(&self, peer: u32) -> u64 {
        self.core.incarnation(peer)
    }

    fn liveness(&self) -> Duration {
        self.core.liveness()
    }

    fn failed_in_order(&self) -> Vec<u32> {
        self.core.inbox.failed_in_order()
    }

    fn left(&self) -> Vec<u32> {
        self.core.inbox.left()
    }

    fn queued(&self, src: u32, key: LaneKey) -> bool {
        !self.core.inbox.lane_is_empty(src, key)
    }

    fn revoke(&self, comm: u64) {
        self.core.revoke(comm, None);
    }

    fn collective_members(&self, comm: u64, members: &[u32]) {
        if self.core.inbox.set_members(comm, members.to_vec()) {
            // A peer revoked it before it was made here.
            self.core.revoke(comm, None);
        }
    }

    fn is_revoked(&self, comm: u64) -> bool {
        self.core.inbox.is_revoked(comm)
    }

    fn await_failure(&self, comm: u64, timeout: Duration) -> Vec<u32> {
        let until = Instant::now() + timeout;
        loop {
            let failed = self.core.failed();
            let now = Instant::now();
            if !failed.is_empty() || now >= until || self.core.inbox.is_revoked(comm) {
                return failed;
            }
            // A link ending, a silence or a revocation wakes this; a
            // stopped same-host process is looked for again each slice.
            self.core
                .inbox
                .wait_news((until - now).min(Duration::from_millis(10)));
        }
    }

    fn await_failure_of(&self, rank: u32, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if self.core.failed().contains(&rank) {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            // As `await_failure`: news wakes this; a stopped same-host
            // process is looked for again each slice.
            self.core
                .inbox
                .wait_news((until - now).min(Duration::from_millis(10)));
        }
    }

    fn is_gone(&self, rank: u32) -> bool {
        self.core.inbox.is_gone(rank)
    }

    fn max_message_bytes(&self) -> u64 {
        self.core.max_message_bytes
    }

    fn set_answerer(&self, key: LaneKey, answerer: Arc<dyn crate::Answerer>) -> bool {
        self.core.set_answerer(key, answerer);
        true
    }

    fn forget(&self, comm: u64) {
        self.core.drop_answerers(comm);
        self.core.inbox.forget(comm);
    }

    fn close(&self) {
        let core = &self.core;
        if core.inbox.is_closed() {
            return;
        }
        // Dropped: each stops its thread.
        drop(std::mem::take(
            &mut *self.background.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        let links: Vec<_> = core.links().map(|(_, l)| Arc::clone(l)).collect();
        for l in &links {
            l.close_begin();
        }
        for l in &links {
            l.close_drain();
        }
        core.closing.store(true, Ordering::Release);
        // Writers flush what was queued, say bye and end (a peer that stops
        // reading is given up on after one deadline).
        for l in &links {
            l.close_flush();
        }
        core.inbox.close();
        for l in &links {
            l.close_end();
        }
    }
}

/// A parked thread's wait for messages of one lane kind over one link,
/// ended however the wait ends; `standing`: see [`Link::want_standing`].
pub(super) struct Want<'a> {
    link: &'a dyn Link,
    kind: LaneKind,
    standing: bool,
}

impl<'a> Want<'a> {
    pub(super) fn new(core: &Core, link: &'a dyn Link, kind: LaneKind) -> Want<'a> {
        Want::with(core, link, kind, false)
    }

    fn with(core: &Core, link: &'a dyn Link, kind: LaneKind, standing: bool) -> Want<'a> {
        let want = Want {
            link,
            kind,
            standing,
        };
        if want.set(true) {
            // Bytes that came before the wait was known: read them now.
            link.poll(core, None);
        }
        want
    }

    fn set(&self, on: bool) -> bool {
        if self.standing {
            self.link.want_standing(self.kind, on)
        } else {
            self.link.want(self.kind, on)
        }
    }
}

impl Drop for Want<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// Ends a caller's polling of a link however its loop ends.
struct Stop<'a>(&'a Core, &'a dyn Link, Option<usize>);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.1.caller_polls(self.0, false, self.2);
    }
}

impl Drop for LinkTransport {
    fn drop(&mut self) {
        self.close();
    }
}
