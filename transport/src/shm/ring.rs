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
//! own: `salt` (the creator's, see below), `tail` (bytes read, the
//! consumer's), `asleep` (the consumer's I/O thread waits for a doorbell),
//! `callers` (threads of the consumer's process are reading the ring
//! themselves: no doorbell needed), `wanted` (per lane kind, threads of the
//! consumer's process parked waiting for such a message) and `waiting`
//! (the producer waits for room) and `copy` (the state of the message the
//! producer offered for a single copy, `copy.rs`). The data follows,
//! `capacity` bytes (a power of two).
//!
//! A doorbell is rung only when someone needs it: a frame of a lane kind
//! a parked thread waits for, a frame the consumer must act on at once
//! (control frames, frames it relays), or a producer out of room. A
//! message nobody waits for yet stays in the ring, and the thread that
//! comes for it reads it there: no system call on either side.
//!
//! The peer can write anything into the segment at any time: every word
//! read from it is checked (a `head` that runs more than `capacity` ahead
//! of the reader's own `tail`, or behind it, is [`Corrupt`]), each side
//! keeps its own position in its own memory, and bytes are copied out
//! before anything is decoded from them.

use super::region::{self, Kind, Locator};
use std::io;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Identifies a meshwork ring segment (and its layout version).
const MAGIC: u64 = u64::from_le_bytes(*b"mwshrng3");
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
pub(crate) const KINDS: usize = 4;

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
    /// bytes read meanwhile, never `false` for bytes there before it
    /// asked).
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

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: &[u8] = b"a link's ring key";

    /// Read, then give the room back.
    fn take(a: &Segment, cur: &mut Cursor, dst: &mut [u8]) -> Result<usize, Corrupt> {
        let n = a.read(cur, dst)?;
        a.free(cur);
        Ok(n)
    }

    /// A segment, and the peer's mapping of it.
    fn pair() -> (Segment, Segment) {
        let a = Segment::create(MIN_CAPACITY, BOUND).expect("create");
        let b = Segment::open(a.locator().expect("offered"), MIN_CAPACITY, BOUND).expect("open");
        (a, b)
    }

    #[test]
    fn bytes_wrap_around_the_end_of_the_ring() {
        let (mut a, b) = pair();
        a.withdraw();
        let (mut head, mut cur) = (0u64, Cursor::default());
        // Step through every offset class of a wrap: records of a prime
        // length never line up with the end, and are read in pieces of
        // another prime.
        let msg: Vec<u8> = (0..7919u32).map(|i| (i * 31 % 251) as u8).collect();
        for round in 0..100 {
            let n = b.write(&mut head, &msg).expect("write");
            assert_eq!(n, msg.len(), "room in round {round}");
            b.publish(head, None);
            let mut got = vec![0u8; msg.len()];
            let mut have = 0;
            while have < got.len() {
                let end = (have + 997).min(got.len());
                let n = take(&a, &mut cur, &mut got[have..end]).expect("read");
                assert!(n > 0, "round {round}: published bytes unread");
                have += n;
            }
            assert_eq!(got, msg, "round {round}");
        }
        assert_eq!(a.has_unread(), Ok(false));
        assert_eq!(a.read(&mut cur, &mut [0u8; 8]), Ok(0));
    }

    #[test]
    fn a_read_runs_on_across_records_and_stops_at_one_unpublished() {
        let (a, b) = pair();
        let (mut head, mut cur) = (0u64, Cursor::default());
        for piece in [&b"one"[..], b"two", b"three"] {
            b.write(&mut head, piece).expect("write");
            b.publish(head, None);
        }
        // Written, not published: not there yet.
        b.write(&mut head, b"four").expect("write");
        let mut got = [0u8; 64];
        assert_eq!(a.read(&mut cur, &mut got), Ok(11));
        assert_eq!(&got[..11], b"onetwothree");
        assert_eq!(a.has_unread(), Ok(false));
        b.publish(head, None);
        assert_eq!(a.has_unread(), Ok(true));
        assert_eq!(a.read(&mut cur, &mut got[..2]), Ok(2));
        assert_eq!(a.has_unread(), Ok(true), "inside a record");
        assert_eq!(a.read(&mut cur, &mut got[2..]), Ok(2));
        assert_eq!(&got[..4], b"four");
    }

    #[test]
    fn a_small_frame_is_one_cache_line() {
        let (a, b) = pair();
        let mut head = 0;
        // A 40-byte header and an 8-byte payload: mark, length and bytes
        // fill the line, and the next record starts on the next.
        b.write(&mut head, &[1u8; 40]).expect("header");
        b.write(&mut head, &[2u8; 8]).expect("payload");
        b.publish(head, None);
        assert_eq!(head, LINE);
        b.write(&mut head, &[3u8; 1]).expect("next");
        assert_eq!(head, LINE + RECORD + 1);
        b.publish(head, None);
        let mut got = [0u8; 49];
        assert_eq!(a.read(&mut Cursor::default(), &mut got), Ok(49));
        assert_eq!(got[48], 3);
    }

    #[test]
    fn a_full_ring_takes_nothing_until_read() {
        let (a, b) = pair();
        let mut head = 0;
        let big = vec![7u8; MIN_CAPACITY + 10];
        let first = MIN_CAPACITY - RECORD as usize;
        assert_eq!(b.write(&mut head, &big), Ok(first));
        assert_eq!(b.write(&mut head, &big), Ok(0));
        assert_eq!(b.want_room(head), Ok(0), "the producer waits");
        b.publish(head, None);
        let mut cur = Cursor::default();
        let mut out = vec![0u8; 100];
        assert_eq!(a.read(&mut cur, &mut out), Ok(100));
        assert_eq!(b.room(head), Ok(0), "read, not yet given back");
        assert!(a.free(&cur), "room given back: wake the producer");
        assert!(!a.free(&cur), "woken once per wait");
        // Freed: the record's words and 100 bytes; the next record's
        // words go where the first's were.
        assert_eq!(b.room(head), Ok(100));
        // The producer's own idea of the room (from the tail it saw when
        // the ring filled) was none: it looks again, and takes exactly the
        // room freed, no more.
        assert_eq!(b.write(&mut head, &[9u8; 150]), Ok(100));
        assert_eq!(b.write(&mut head, &[9u8; 1]), Ok(0));
        b.publish(head, None);
        let mut rest = vec![0u8; MIN_CAPACITY];
        assert_eq!(take(&a, &mut cur, &mut rest), Ok(first));
        assert!(rest[..first - 100].iter().all(|&x| x == 7));
        assert!(rest[first - 100..first].iter().all(|&x| x == 9));
    }

    #[test]
    fn room_the_producer_saw_is_used_without_looking_again() {
        let (a, b) = pair();
        let (mut head, mut cur) = (0u64, Cursor::default());
        assert_eq!(b.write(&mut head, &[1u8; 64]), Ok(64));
        b.publish(head, None);
        let mut out = [0u8; 64];
        assert_eq!(take(&a, &mut cur, &mut out), Ok(64));
        // A consumer word that lies is not looked at while the room the
        // producer knows of suffices; once it does not, the lie is seen.
        a.control().tail.0.store(head + 1000, Ordering::SeqCst);
        assert_eq!(b.write(&mut head, &[2u8; 64]), Ok(64));
        assert_eq!(b.write(&mut head, &vec![3u8; MIN_CAPACITY]), Err(Corrupt));
    }

    #[test]
    fn a_record_longer_than_the_ring_or_empty_is_corrupt() {
        let (a, b) = pair();
        // A hostile producer marks a record at the consumer's next line
        // and claims more than the ring holds, or nothing.
        let mut out = [0u8; 8];
        b.word(0).store(b.mark(0), Ordering::SeqCst);
        b.word(8).store(MIN_CAPACITY as u64, Ordering::SeqCst);
        assert_eq!(a.has_unread(), Err(Corrupt));
        assert_eq!(a.read(&mut Cursor::default(), &mut out), Err(Corrupt));
        b.word(8).store(0, Ordering::SeqCst);
        assert_eq!(a.read(&mut Cursor::default(), &mut out), Err(Corrupt));
        // A mark for another position (an old lap's) is no record.
        b.word(0)
            .store(b.mark(MIN_CAPACITY as u64), Ordering::SeqCst);
        b.word(8).store(5, Ordering::SeqCst);
        assert_eq!(a.has_unread(), Ok(false));
        assert_eq!(a.read(&mut Cursor::default(), &mut out), Ok(0));
    }

    #[test]
    fn whatever_a_hostile_producer_writes_the_consumer_reads_bytes_or_refuses() {
        let (a, b) = pair();
        // xorshift64, fixed seed: reproducible.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let cap = MIN_CAPACITY as u64;
        let (mut reads, mut refusals) = (0, 0);
        for round in 0..2000 {
            let mut cur = Cursor::default();
            // Garbage over the first lines, some of it well-formed marks
            // (the producer knows the salt) with lengths of any size.
            for w in 0..64u64 {
                let at = w * 8;
                let v = match next() % 4 {
                    0 => b.mark(at),
                    1 => next() % (cap * 2),
                    _ => next(),
                };
                b.word(at).store(v, Ordering::Relaxed);
            }
            a.control().tail.0.store(next(), Ordering::Relaxed);
            let mut out = vec![0u8; (next() % 4096) as usize + 1];
            let mut total = 0u64;
            for _ in 0..8 {
                match (a.has_unread(), a.read(&mut cur, &mut out)) {
                    (_, Err(Corrupt)) => {
                        refusals += 1;
                        break;
                    }
                    (_, Ok(n)) => {
                        assert!(n <= out.len(), "round {round}");
                        reads += usize::from(n > 0);
                        total += n as u64;
                    }
                }
                a.free(&cur);
            }
            // Never more than the ring holds per record read, whatever the
            // words claim.
            assert!(total <= 8 * cap, "round {round}: {total}");
        }
        // Both ways were taken, many times.
        assert!(
            reads > 100 && refusals > 100,
            "{reads} reads, {refusals} refusals"
        );
    }

    #[test]
    fn a_bell_is_asked_for_only_while_the_reader_sleeps_and_no_caller_reads() {
        let (a, b) = pair();
        let mut head = 0;
        b.write(&mut head, b"x").expect("write");
        assert!(!b.publish(head, None), "the reader is awake");
        let mut cur = Cursor::default();
        let mut one = [0u8; 1];
        a.read(&mut cur, &mut one).expect("read");
        assert!(!a.set_asleep(true), "nothing to read");
        b.write(&mut head, b"y").expect("write");
        assert!(b.publish(head, None), "asleep: ring");
        assert!(!b.publish(head, None), "rung once per sleep");
        assert!(a.set_asleep(true), "something to read: do not sleep");
        a.caller_reads(true);
        assert!(!b.publish(head, None), "a caller reads");
        assert!(a.caller_reads(false), "left unread: the caller reads it");
    }

    #[test]
    fn a_message_rings_only_if_a_thread_waits_for_its_kind() {
        let (a, b) = pair();
        let mut head = 0;
        assert!(!a.set_asleep(true));
        b.write(&mut head, b"p2p").expect("write");
        assert!(
            !b.publish(head, Some(1)),
            "nobody waits: it stays in the ring"
        );
        assert!(
            a.want(0, true),
            "parking with bytes unread: read them first"
        );
        assert!(!b.publish(head, Some(1)), "a wait for another kind");
        assert!(b.publish(head, Some(0)), "a wait for this kind: ring");
        assert!(!a.want(0, false));
        assert!(!a.set_asleep(false));
        assert!(a.set_asleep(true), "still unread");
        assert!(b.publish(head, None), "urgent: rings whoever waits");
    }

    #[test]
    fn a_segment_not_private_sealed_or_bound_to_this_link_is_refused() {
        // A binding of this test's own: a descriptor number freed here and
        // reused by another test's segment is never this one's.
        const BOUND: &[u8] = b"the refusals test's ring key";
        let a = Segment::create(MIN_CAPACITY, BOUND).expect("create");
        let at = a.locator().expect("offered");
        let fd = at.1 as libc::c_int;
        // SAFETY: this test's own open descriptor.
        assert_eq!(unsafe { libc::fchmod(fd, 0o644) }, 0);
        let e = Segment::open(at, MIN_CAPACITY, BOUND).expect_err("0644 is refused");
        assert!(e.to_string().contains("private"), "{e}");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fchmod(fd, 0o600) }, 0);
        let e = Segment::open(at, MIN_CAPACITY * 2, BOUND).expect_err("wrong size");
        assert!(e.to_string().contains("size"), "{e}");
        let e = Segment::open(at, MIN_CAPACITY, b"another link").expect_err("another key");
        assert!(e.to_string().contains("not bound"), "{e}");
        // A heap region is not a ring, whatever its binding.
        let heap = crate::SharedRegion::create((DATA_AT + MIN_CAPACITY) / 8, BOUND).expect("heap");
        let e = Segment::open(heap.locator().expect("offered"), MIN_CAPACITY, BOUND)
            .expect_err("a heap");
        assert!(e.to_string().contains("not bound"), "{e}");
        assert!(Segment::open(at, MIN_CAPACITY, BOUND).is_ok());
        let mut a = a;
        a.withdraw();
        assert!(Segment::open(at, MIN_CAPACITY, BOUND).is_err(), "withdrawn");
    }
}
