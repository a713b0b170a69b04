//! A segment of memory shared with one peer process, holding one
//! single-producer, single-consumer byte ring.
//!
//! Each rank creates the segment of the ring it reads from a peer (a
//! sealed memfd bound to the link, `region.rs`; its descriptor closed once
//! the peer has mapped it) and maps the peer's for the ring it writes. The ring is a byte stream like
//! a socket: frames go in whole (header, then payload), a large one in
//! pieces as room frees, and the reader runs them through the frame
//! assembler.
//!
//! The first page holds the control words, each on a cache line of its
//! own: `salt` (the creator's, see below), `tail` (bytes whose room the
//! consumer has given back), `asleep` (the consumer's I/O thread waits for a doorbell),
//! `callers` (threads of the consumer's process are reading the ring
//! themselves: no doorbell needed), `wanted` (per lane kind, threads of the
//! consumer's process parked waiting for such a message) and `waiting`
//! (the producer waits for room) and `copy` (the state of the message the
//! producer offered for a single copy, `copy.rs`). The data follows,
//! `capacity` bytes (a power of two).
//!
//! The bytes go in as records, each published at once: on a cache line's
//! start, a mark word, a length word, then the bytes. The mark is the
//! record's position mixed with the ring's salt, stored after the rest,
//! so the consumer learns that a record has come, and how long it is, by
//! reading the line that holds it: a small frame (a 40-byte header and up
//! to 8 bytes of payload) moves between cores as one cache line, where a
//! separate `head` word made it two, one after the other (the consumer
//! read the bytes only once it had seen the head move). Stale bytes where
//! a record will go never pass for its mark: an old record's mark names
//! an older position, and bytes the producer only relays (another rank's
//! payload) would have to guess the salt, a random number of the
//! consumer's (the producer itself knows it, and can write anything
//! anyway).
//!
//! A doorbell is rung only when someone needs it: a frame of a lane kind
//! a parked thread waits for, a frame the consumer must act on at once
//! (control frames, frames it relays), or a producer out of room. A
//! message nobody waits for yet stays in the ring, and the thread that
//! comes for it reads it there: no system call on either side.
//!
//! The peer can write anything into the segment at any time: every word
//! read from it is checked (a record whose length is 0 or more than the
//! capacity less its 16-byte header, and a `tail` more than `capacity`
//! behind the producer's own position or ahead of it, are [`Corrupt`]),
//! each side keeps its own position in its own memory, and bytes are
//! copied out before anything is decoded from them.

use super::region::{self, Kind, Locator};
use std::io;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Identifies a meshwork ring segment (and its layout version).
const MAGIC: u64 = u64::from_le_bytes(*b"mwshrng4");
/// Where the data starts: the control words' page.
const DATA_AT: usize = 4096;
/// Smallest and largest ring this side accepts from a peer.
pub(crate) const MIN_CAPACITY: usize = 64 << 10;
pub(crate) const MAX_CAPACITY: usize = 64 << 20;

/// A control word alone on its cache line (no false sharing between the
/// producer's and the consumer's words).
#[repr(C, align(128))]
struct Line<T>(T);

#[repr(C)]
struct Control {
    magic: Line<AtomicU64>,
    capacity: Line<AtomicU64>,
    salt: Line<AtomicU64>,
    tail: Line<AtomicU64>,
    asleep: Line<AtomicU32>,
    callers: Line<AtomicU32>,
    wanted: Line<[AtomicU32; KINDS]>,
    waiting: Line<AtomicU32>,
    copy: Line<AtomicU64>,
}

/// Lane kinds a consumer may wait for (`LaneKind as u8` indexes them).
pub(crate) const KINDS: usize = 5;

/// Where records start: a cache line each, so that a small one is one.
const LINE: u64 = 64;
/// A record's mark and length words, before its bytes.
const RECORD: u64 = 16;
/// No record open (the producer's), or the consumer is inside one (its
/// hint).
const NONE: u64 = u64::MAX;

fn line_up(at: u64) -> u64 {
    at.wrapping_add(LINE - 1) & !(LINE - 1)
}

/// The consumer's place in the ring: the next byte it reads (its own
/// count, never the peer's word), and how many bytes of the record that
/// byte lies in are left (0: the next record starts at the next line).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    at: u64,
    left: u64,
}

#[cfg(test)]
impl Cursor {
    /// A cursor at `at`: what a consumer that lies about how much it read
    /// would give back with [`Segment::free`].
    pub(crate) fn at(at: u64) -> Cursor {
        Cursor { at, left: 0 }
    }
}

const _: () = assert!(std::mem::size_of::<Control>() <= DATA_AT);

/// The peer wrote control words no honest producer or consumer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// A mapped ring segment; unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Segment {
    base: NonNull<u8>,
    len: usize,
    capacity: usize,
    /// Its descriptor while the peer may still open it (this side
    /// created it).
    offered: Option<OwnedFd>,
    /// The consumer's `tail` as the producer last loaded it (this
    /// process's own word, not in the mapping): room known from it needs
    /// no look at the line the consumer writes on every read, which would
    /// move that line between cores once per message.
    seen_tail: AtomicU64,
    /// What marks mix with positions: the creator's (the consumer's) own
    /// copy, or the producer's copy of the control word, read once.
    salt: u64,
    /// The producer's: where the record being written starts ([`NONE`]:
    /// none is).
    open: AtomicU64,
    /// The consumer's, for threads without the reader: where the next
    /// record starts, or [`NONE`] while the reader is inside one.
    hint: AtomicU64,
    /// The consumer's: the `tail` it last stored (its own copy).
    freed: AtomicU64,
}

// SAFETY: the mapping is plain shared memory; every access to it goes
// through atomics or raw copies, whichever thread makes it.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` methods never hand out references into the
// mapping, only copies.
unsafe impl Sync for Segment {}

/// The ring capacity a rank with `peers_here` same-host peers gives each
/// inbound ring: shared memory (memfds) grows with the square of the ranks
/// on a host, so rings shrink as they multiply.
pub(crate) fn capacity_for(peers_here: usize) -> usize {
    match peers_here {
        0..=7 => 1 << 20,
        8..=31 => 256 << 10,
        _ => MIN_CAPACITY,
    }
}

impl Segment {
    /// Create the segment of a ring of `capacity` bytes, bound to
    /// `binding` (`region.rs`), and map it.
    pub(crate) fn create(capacity: usize, binding: &[u8]) -> io::Result<Segment> {
        assert!(capacity.is_power_of_two() && capacity >= MIN_CAPACITY);
        let len = DATA_AT + capacity;
        let fd = region::create_region(Kind::Ring, len, binding)?;
        let mut salt = [0u8; 8];
        getrandom::getrandom(&mut salt).map_err(|e| io::Error::other(e.to_string()))?;
        let mut seg = map(&fd, len, capacity, u64::from_le_bytes(salt))?;
        seg.offered = Some(fd);
        seg.control().salt.0.store(seg.salt, Ordering::Relaxed);
        seg.control()
            .capacity
            .0
            .store(capacity as u64, Ordering::Relaxed);
        seg.control().magic.0.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Map the peer's segment at `owner`, which must be a region bound to
    /// `binding`, sized for a ring of `capacity` bytes, and marked as a
    /// ring of that capacity.
    pub(crate) fn open(owner: Locator, capacity: usize, binding: &[u8]) -> io::Result<Segment> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
        if !(capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)) {
            return Err(bad("the announced ring capacity is out of range"));
        }
        let len = DATA_AT + capacity;
        let fd = region::open_region(owner, Kind::Ring, len, binding)?;
        let mut seg = map(&fd, len, capacity, 0)?;
        let c = seg.control();
        if c.magic.0.load(Ordering::Acquire) != MAGIC
            || c.capacity.0.load(Ordering::Relaxed) != capacity as u64
        {
            return Err(bad("not a meshwork ring of the announced capacity"));
        }
        seg.salt = c.salt.0.load(Ordering::Relaxed);
        Ok(seg)
    }

    /// Where the peer opens it, until it is withdrawn.
    pub(crate) fn locator(&self) -> Option<Locator> {
        self.offered.as_ref().and_then(region::locator_of)
    }

    /// Close the segment's descriptor (the mapping stays); once both sides
    /// have mapped it, nothing else can open it by its locator.
    pub(crate) fn withdraw(&mut self) {
        self.offered = None;
    }

    fn control(&self) -> &Control {
        // SAFETY: the mapping is at least `DATA_AT` bytes, page-aligned,
        // lives as long as `self`, and `Control` is atomics only (any bit
        // pattern is valid, and concurrent writers are expected).
        unsafe { &*self.base.as_ptr().cast::<Control>() }
    }

    /// The word at `at` (a multiple of 8) of the data area.
    fn word(&self, at: u64) -> &AtomicU64 {
        let off = (at as usize) & (self.capacity - 1);
        // SAFETY: `off` is a multiple of 8 below `capacity` (itself a
        // multiple of 64), so the word lies inside the data area, which
        // starts on a page; an atomic accepts any bit pattern, and the
        // peer's concurrent writes are expected.
        unsafe { &*self.data().add(off).cast::<AtomicU64>() }
    }

    fn mark(&self, at: u64) -> u64 {
        self.salt ^ at
    }

    /// The length of the record starting at `at` (a line's start), or
    /// `None` if none has been published there yet.
    fn record_at(&self, at: u64) -> Result<Option<u64>, Corrupt> {
        if self.word(at).load(Ordering::SeqCst) != self.mark(at) {
            return Ok(None);
        }
        let len = self.word(at + 8).load(Ordering::Relaxed);
        if len == 0 || len > self.capacity as u64 - RECORD {
            return Err(Corrupt);
        }
        Ok(Some(len))
    }

    /// Whether anything is published that the consumer has not read (for
    /// threads that do not hold the reader: it may answer `true` for
    /// bytes read meanwhile, and `false` for bytes there before it asked
    /// only if the reader ran a whole lap of the ring between its two
    /// loads, when a reader is active and looks again anyway).
    pub(crate) fn has_unread(&self) -> Result<bool, Corrupt> {
        match self.hint.load(Ordering::SeqCst) {
            NONE => Ok(true),
            next => self.record_at(next).map(|r| r.is_some()),
        }
    }

    /// Copy up to `dst.len()` published bytes at `cur` out of the ring;
    /// how many. Their room is the producer's again at the next
    /// [`free`](Self::free).
    pub(crate) fn read(&self, cur: &mut Cursor, dst: &mut [u8]) -> Result<usize, Corrupt> {
        let mut n = 0;
        while n < dst.len() {
            if cur.left == 0 {
                let at = line_up(cur.at);
                let Some(len) = self.record_at(at)? else {
                    break;
                };
                cur.at = at + RECORD;
                cur.left = len;
            }
            let take = (cur.left as usize).min(dst.len() - n);
            self.copy_out(cur.at, &mut dst[n..n + take]);
            cur.at = cur.at.wrapping_add(take as u64);
            cur.left -= take as u64;
            n += take;
        }
        if n > 0 {
            // The hint moves before the room is freed: the producer cannot
            // reuse the line it names before it names the next.
            let next = if cur.left > 0 { NONE } else { line_up(cur.at) };
            self.hint.store(next, Ordering::Release);
        }
        Ok(n)
    }

    /// Bytes read up to `cur` whose room the producer has not been given.
    pub(crate) fn unfreed(&self, cur: &Cursor) -> u64 {
        cur.at.wrapping_sub(self.freed.load(Ordering::Relaxed))
    }

    /// Give the producer the room of everything read up to `cur`; whether
    /// it waits for room (and must be woken; asked once per wait). A
    /// small frame's header and body, read in two calls, are freed in one.
    pub(crate) fn free(&self, cur: &Cursor) -> bool {
        if self.freed.load(Ordering::Relaxed) != cur.at {
            self.freed.store(cur.at, Ordering::Relaxed);
            self.control().tail.0.store(cur.at, Ordering::SeqCst);
        }
        self.producer_waits()
    }

    /// The end of the room the consumer has freed (its `tail` plus the
    /// capacity), looked up again only if `need` bytes from `from` do not
    /// fit in what the producer already knows of.
    fn limit(&self, head: u64, from: u64, need: u64) -> Result<u64, Corrupt> {
        let cap = self.capacity as u64;
        let known = self.seen_tail.load(Ordering::Relaxed).wrapping_add(cap);
        if known.wrapping_sub(from) >= need && known.wrapping_sub(from) <= cap {
            return Ok(known);
        }
        let tail = self.control().tail.0.load(Ordering::Acquire);
        if head.wrapping_sub(tail) > cap {
            return Err(Corrupt);
        }
        self.seen_tail.store(tail, Ordering::Relaxed);
        Ok(tail.wrapping_add(cap))
    }

    /// Where the producer's next byte goes: after `head` in the record it
    /// writes, or after the words of a new record on the next line.
    fn next_byte(&self, head: u64) -> u64 {
        if self.open.load(Ordering::Relaxed) == NONE {
            line_up(head) + RECORD
        } else {
            head
        }
    }

    /// Bytes the producer can write at its own `head` now.
    pub(crate) fn room(&self, head: u64) -> Result<usize, Corrupt> {
        let from = self.next_byte(head);
        let limit = self.limit(head, from, u64::MAX)?;
        Ok(usize::try_from(limit.saturating_sub(from)).unwrap_or(usize::MAX))
    }

    /// Copy as much of `src` as there is room for at `*head`; how much.
    /// Not visible to the consumer before [`publish`](Self::publish).
    /// Only the producer writes (one thread at a time).
    pub(crate) fn write(&self, head: &mut u64, src: &[u8]) -> Result<usize, Corrupt> {
        if src.is_empty() {
            return Ok(0);
        }
        let from = self.next_byte(*head);
        // Room the consumer had freed when last looked at is still there
        // (it only grows); the consumer's word is read again only when that
        // is not enough.
        let limit = self.limit(*head, from, src.len() as u64)?;
        let n = usize::try_from(limit.saturating_sub(from))
            .unwrap_or(usize::MAX)
            .min(src.len());
        if n == 0 {
            return Ok(0);
        }
        if self.open.load(Ordering::Relaxed) == NONE {
            self.open.store(from - RECORD, Ordering::Relaxed);
        }
        self.copy_in(from, &src[..n]);
        *head = from + n as u64;
        Ok(n)
    }

    /// Make what was written up to `head` readable (the record open, if
    /// any, is closed: its length, then its mark). Returns whether the
    /// consumer must be woken: its I/O thread sleeps, none of its threads
    /// reads the ring, and the bytes are `urgent` (`None`) or of a lane
    /// kind a thread of its waits for (`Some(kind)`).
    pub(crate) fn publish(&self, head: u64, kind: Option<usize>) -> bool {
        // Only the producer's one writer touches `open`: no
        // read-modify-write needed.
        let open = self.open.load(Ordering::Relaxed);
        if open == NONE {
            // Nothing new: the last record's mark was stored before this
            // looks at who sleeps.
            std::sync::atomic::fence(Ordering::SeqCst);
        } else {
            self.open.store(NONE, Ordering::Relaxed);
            self.word(open + 8)
                .store(head - open - RECORD, Ordering::Relaxed);
            self.word(open).store(self.mark(open), Ordering::SeqCst);
        }
        let c = self.control();
        let needed = match kind {
            None => true,
            Some(k) => c
                .wanted
                .0
                .get(k)
                .is_some_and(|w| w.load(Ordering::SeqCst) != 0),
        };
        needed
            && c.asleep.0.load(Ordering::SeqCst) != 0
            && c.callers.0.load(Ordering::SeqCst) == 0
            && c.asleep.0.swap(0, Ordering::SeqCst) != 0
    }

    /// A thread of the consumer's process parks waiting for a message of
    /// lane kind `kind` (`true`), or is done waiting. Parking, returns
    /// whether there is something to read first (a producer that saw
    /// nobody waiting rang no bell).
    pub(crate) fn want(&self, kind: usize, on: bool) -> bool {
        let Some(w) = self.control().wanted.0.get(kind) else {
            return false;
        };
        if on {
            w.fetch_add(1, Ordering::SeqCst);
            return self.has_unread().unwrap_or(true);
        }
        let _ = w.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        false
    }

    /// The producer waits for room: the consumer is to ring once it frees
    /// some. Returns the room there is now (after asking).
    pub(crate) fn want_room(&self, head: u64) -> Result<usize, Corrupt> {
        self.control().waiting.0.store(1, Ordering::SeqCst);
        self.room(head)
    }

    /// Whether the producer waits for room (and must be woken; asked once
    /// per wait).
    pub(crate) fn producer_waits(&self) -> bool {
        let w = &self.control().waiting.0;
        w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::SeqCst) != 0
    }

    /// The consumer's I/O thread is about to sleep (`true`) or woke.
    /// Going to sleep, returns whether there is something to read after
    /// all (then it must not sleep).
    pub(crate) fn set_asleep(&self, on: bool) -> bool {
        self.control()
            .asleep
            .0
            .store(u32::from(on), Ordering::SeqCst);
        on && self.has_unread().unwrap_or(true)
    }

    /// A thread of the consumer's process starts (`true`) or stops reading
    /// the ring itself. Stopping, returns whether there is something to
    /// read (a producer that saw it reading rang no bell).
    pub(crate) fn caller_reads(&self, on: bool) -> bool {
        let c = &self.control().callers.0;
        if on {
            c.fetch_add(1, Ordering::SeqCst);
            return false;
        }
        // Never below zero, whatever the peer wrote.
        let _ = c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        self.has_unread().unwrap_or(true)
    }

    /// The producer offers message `ticket` for a single copy (before it
    /// publishes the descriptor).
    pub(crate) fn offer_copy(&self, ticket: u64) {
        self.control()
            .copy
            .0
            .store(copy_word(ticket, CopyState::Offered), Ordering::SeqCst);
    }

    /// Where the copy of message `ticket` stands (`None`: the word is not
    /// about that message).
    pub(crate) fn copy_state(&self, ticket: u64) -> Option<CopyState> {
        let w = self.control().copy.0.load(Ordering::SeqCst);
        (w >> 2 == ticket & (u64::MAX >> 2)).then(|| CopyState::from_bits(w))
    }

    /// Move message `ticket`'s copy from `from` to `to`; whether it was in
    /// `from` (only then it moves).
    pub(crate) fn move_copy(&self, ticket: u64, from: CopyState, to: CopyState) -> bool {
        self.control()
            .copy
            .0
            .compare_exchange(
                copy_word(ticket, from),
                copy_word(ticket, to),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the mapping is `DATA_AT + capacity` bytes long.
        unsafe { self.base.as_ptr().add(DATA_AT) }
    }

    fn copy_out(&self, at: u64, dst: &mut [u8]) {
        let off = (at as usize) & (self.capacity - 1);
        let first = dst.len().min(self.capacity - off);
        // SAFETY: `off + first <= capacity` and `dst.len() - first <=
        // capacity`: both ranges lie inside the data area; `dst` is this
        // process's own memory, never inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data().add(off), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                self.data(),
                dst.as_mut_ptr().add(first),
                dst.len() - first,
            );
        }
    }

    fn copy_in(&self, at: u64, src: &[u8]) {
        let off = (at as usize) & (self.capacity - 1);
        let first = src.len().min(self.capacity - off);
        // SAFETY: as in `copy_out`, with the directions swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data().add(off), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data(), src.len() - first);
        }
    }
}

/// Where a message offered for a single copy stands. The consumer moves it
/// `Offered` → `Reading` → `Done`; the producer, giving up, moves it from
/// `Offered` or `Reading` to `Withdrawn`, after which the consumer's move
/// to `Done` fails and what it read is dropped. Whoever moves first wins:
/// a message is delivered only if its producer was still waiting, with
/// its buffer unchanged, when the copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyState {
    Offered = 0,
    Reading = 1,
    Done = 2,
    Withdrawn = 3,
}

impl CopyState {
    fn from_bits(w: u64) -> CopyState {
        match w & 3 {
            0 => CopyState::Offered,
            1 => CopyState::Reading,
            2 => CopyState::Done,
            _ => CopyState::Withdrawn,
        }
    }
}

fn copy_word(ticket: u64, state: CopyState) -> u64 {
    ticket << 2 | state as u64
}

fn map(fd: &OwnedFd, len: usize, capacity: usize, salt: u64) -> io::Result<Segment> {
    Ok(Segment {
        base: super::region::map_shared(fd, len)?,
        len,
        capacity,
        offered: None,
        seen_tail: AtomicU64::new(0),
        salt,
        open: AtomicU64::new(NONE),
        hint: AtomicU64::new(0),
        freed: AtomicU64::new(0),
    })
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(any(test, feature = "fuzzing"))]
mod fuzz;
#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use fuzz::fuzz_ring;
