//! Point-to-point messages and requests.
//!
//! Every message of a communicator travels on its matched meshwork lane
//! (`ProcessGroup::matched`) behind its envelope (`[tag: i32 LE][id: u32 LE]`,
//! [`ENVELOPE`]), so a receive can match any tag. The envelope is the
//! lane's word, which meshwork carries in the frame header: a message of
//! up to 8 bytes is one cache line in shared memory, as it is for the
//! Rust API.
//! Matching follows MPI: a message goes to the first posted receive (in
//! the order they were posted) whose source and tag match, wildcards
//! included, or waits as *unexpected* for a later one; messages from one
//! sender arrive in the order sent. Receives are posted at once and
//! completed by whoever pulls the matching message off the lane — the
//! wait of this receive or of any other (one puller at a time).
//!
//! Sends are eager: meshwork buffers them at the receiver up to its
//! budget. Sends that would wait for room there go to a sender thread
//! ([`Sender`]), so that two ranks that each post many large `MPI_Isend`s
//! before waiting (a bidirectional bandwidth test) never block each other,
//! and a waiter on such a send keeps this rank's receives matching; one
//! that finds the thread idle sends inline. A synchronous send
//! (`MPI_Ssend`) carries its id with [`SYNC`] in its tag, and the receive
//! that takes it acknowledges it on a lane of its own.

use crate::consts::*;
use crate::datatype::{predefined_type, type_of, with_type, Type};
use crate::state::{comm, entry, mpi, raise, with_comm, Comm, Fail, Mpi, Result};
use crate::{put, Handle, Status};
use crossbeam_channel::{unbounded, Receiver};
use mw::Payload;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod greq;
pub(crate) mod more;

/// `MPI_BYTE`.
const MPI_BYTE: Handle = 0x247;

/// The bit of a message's tag that asks for an acknowledgement when a
/// receive takes it (`MPI_Ssend`; the id follows the tag). Tags go up to
/// `MPI_TAG_UB`, 2^30 − 1.
pub(crate) const SYNC: c_int = 1 << 30;
/// The meshwork tag of the acknowledgements of synchronous sends.
const ACK_LANE: u64 = 0x4d50_4920_6163_6b00;

/// Sends of up to this many bytes go inline when the sender thread is idle.
const INLINE: usize = 256 << 10;
/// How long one pull waits before the waiter looks again (at its
/// deadline, at a failed peer, at whether another puller served it).
const SLICE: Duration = Duration::from_millis(50);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------ matching

/// A receive's datatype: a predefined one borrowed (no count to take
/// and give back on every message), a derived one counted.
pub(crate) enum TypeRef {
    Predefined(&'static Type),
    Made(Arc<Type>),
}

impl TypeRef {
    /// The type `h` names.
    pub(crate) fn of(h: Handle) -> Result<TypeRef> {
        match predefined_type(h) {
            Some(t) => Ok(TypeRef::Predefined(t)),
            None => type_of(h).map(TypeRef::Made),
        }
    }
}

impl std::ops::Deref for TypeRef {
    type Target = Type;
    fn deref(&self) -> &Type {
        match self {
            TypeRef::Predefined(t) => t,
            TypeRef::Made(t) => t,
        }
    }
}

/// The communicator of a receive request: `MPI_COMM_WORLD` and
/// `MPI_COMM_SELF` borrowed (no count taken and given back on every
/// message), another counted.
#[derive(Clone)]
pub(crate) enum CommRef {
    Builtin(&'static Arc<Comm>),
    Counted(Arc<Comm>),
}

impl std::ops::Deref for CommRef {
    type Target = Arc<Comm>;
    fn deref(&self) -> &Arc<Comm> {
        match self {
            CommRef::Builtin(c) => c,
            CommRef::Counted(c) => c,
        }
    }
}

/// A posted receive.
pub(crate) struct Slot {
    src: c_int,
    tag: c_int,
    buf: usize,
    count: usize,
    ty: TypeRef,
    done: Mutex<Option<std::result::Result<Status, Fail>>>,
    /// `done` holds the result: read with no lock by the waits that ask
    /// after every message.
    complete: AtomicBool,
}

/// Slots kept for the next receives of this thread: a window of
/// `MPI_Irecv`s waited for over and over takes its slots from here, not
/// from the allocator (whose per-thread cache holds 7 of a size).
const SPARE_SLOTS: usize = 256;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Arc<Slot>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Slot {
    fn new(src: c_int, tag: c_int, buf: usize, count: usize, ty: TypeRef) -> Slot {
        Slot {
            src,
            tag,
            buf,
            count,
            ty,
            done: Mutex::new(None),
            complete: AtomicBool::new(false),
        }
    }

    /// A slot for a new receive: a spare one of this thread's, if any.
    fn shared(src: c_int, tag: c_int, buf: usize, count: usize, ty: TypeRef) -> Arc<Slot> {
        let spare = SPARE.try_with(|s| s.borrow_mut().pop()).ok().flatten();
        if let Some(mut slot) = spare {
            if let Some(s) = Arc::get_mut(&mut slot) {
                *s = Slot::new(src, tag, buf, count, ty);
                return slot;
            }
        }
        Arc::new(Slot::new(src, tag, buf, count, ty))
    }

    /// Keep `slot`, complete and no longer posted, for a later receive
    /// (if nothing else holds it).
    fn recycle(slot: Arc<Slot>) {
        if Arc::strong_count(&slot) == 1 {
            let _ = SPARE.try_with(|s| {
                let mut s = s.borrow_mut();
                if s.len() < SPARE_SLOTS {
                    s.push(slot);
                }
            });
        }
    }

    /// Complete it with `r`, unless it is complete already.
    fn complete(&self, r: std::result::Result<Status, Fail>) {
        let mut done = lock(&self.done);
        if done.is_none() {
            *done = Some(r);
            self.complete.store(true, Ordering::Release);
        }
    }

    fn matches(&self, src: u32, tag: c_int) -> bool {
        (self.src == ANY_SOURCE || self.src == src as c_int)
            && (self.tag == ANY_TAG || self.tag == tag)
    }

    fn is_done(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    /// Take message `data` from `src` under `tag` into this receive.
    fn fill(&self, src: u32, tag: c_int, data: &[u8]) {
        let cap = self.count * self.ty.size;
        let result = if data.len() > cap {
            Err(Fail::new(
                ERR_TRUNCATE,
                format!(
                    "a message of {} bytes from rank {src} (tag {tag}) does not fit the receive buffer of {} × {} ({cap} bytes)",
                    data.len(),
                    self.count,
                    self.ty.name
                ),
            ))
        } else {
            Ok(Status::new(src as c_int, tag, data.len()))
        };
        // SAFETY: the receive's buffer holds `count` elements until it
        // completes (MPI's contract), and the data is cut to fit.
        unsafe {
            self.ty.unpack(
                &data[..data.len().min(cap)],
                self.buf as *mut u8,
                self.count,
            )
        };
        self.complete(result);
    }
}

struct Unexpected {
    src: u32,
    tag: c_int,
    msg: Payload,
}

/// A receive posted, numbered in the order of posting.
struct Posted {
    seq: u64,
    slot: Arc<Slot>,
}

#[derive(Default)]
struct Queues {
    unexpected: VecDeque<Unexpected>,
    posted: VecDeque<Posted>,
    /// The number of the next receive posted.
    next: u64,
}

impl Queues {
    /// The first receive posted that a message from `src` could match.
    fn first_for(&self, src: u32) -> Option<usize> {
        self.posted
            .iter()
            .position(|p| p.slot.src == ANY_SOURCE || p.slot.src == src as c_int)
    }
}

/// A communicator's matching: the queues, and the right to pull from
/// the lane.
#[derive(Default)]
pub(crate) struct Matcher {
    queues: Mutex<Queues>,
    /// Whether a receive is posted or a message waits unexpected: set
    /// as the queues' lock is let go ([`QueuesGuard`]), so that a
    /// receive finds them empty with no lock taken.
    busy: AtomicBool,
    pull: Mutex<()>,
    /// Synchronous sends of this rank whose receive has taken them, by id.
    acked: Mutex<std::collections::HashSet<u64>>,
    ack_pull: Mutex<()>,
}

/// Every message's envelope: `[tag: i32 LE][id: u32 LE]`, the id that of
/// a synchronous send (with [`SYNC`] in the tag), else 0. One length for
/// both kinds, so a receive read straight into its buffer never takes a
/// synchronous send's id for data. It is the matched lane's word.
pub(crate) const ENVELOPE: usize = mw::MATCHED_WORD;

/// A message's tag, the id of a synchronous send, and its data.
fn split(msg: &Payload) -> Option<(c_int, Option<u64>, &[u8])> {
    let m = msg.as_ref();
    let (tag, sync) = envelope(m.get(..ENVELOPE)?.try_into().ok()?);
    Some((tag, sync, &m[ENVELOPE..]))
}

/// An envelope's tag and, for a synchronous send, its id.
fn envelope(head: &[u8; ENVELOPE]) -> (c_int, Option<u64>) {
    let word = u64::from_le_bytes(*head);
    let (tag, id) = (word as u32 as c_int, (word >> 32) as u32);
    if tag & SYNC == 0 {
        (tag, None)
    } else {
        (tag & !SYNC, Some(u64::from(id)))
    }
}

/// A synchronous send's acknowledgement owed to `src`: (its rank, its id).
pub(crate) type Ack = Option<(u32, u64)>;

/// Tell `src` that its synchronous send `id` was received (an
/// acknowledgement to this rank itself is noted at once). A sender gone
/// meanwhile needs none.
#[inline]
pub(crate) fn ack(c: &Comm, owed: Ack) {
    if let Some((src, id)) = owed {
        send_ack(c, src, id);
    }
}

#[cold]
fn send_ack(c: &Comm, src: u32, id: u64) {
    if src == c.rank() {
        lock(&c.matcher.acked).insert(id);
        return;
    }
    let _ = c.group.send_parts(&[&id.to_le_bytes()], src, ACK_LANE);
}

/// The queues, locked; dropping it notes whether they are empty.
struct QueuesGuard<'a> {
    q: MutexGuard<'a, Queues>,
    busy: &'a AtomicBool,
}

impl std::ops::Deref for QueuesGuard<'_> {
    type Target = Queues;
    fn deref(&self) -> &Queues {
        &self.q
    }
}

impl std::ops::DerefMut for QueuesGuard<'_> {
    fn deref_mut(&mut self) -> &mut Queues {
        &mut self.q
    }
}

impl Drop for QueuesGuard<'_> {
    fn drop(&mut self) {
        let busy = !self.q.posted.is_empty() || !self.q.unexpected.is_empty();
        self.busy.store(busy, Ordering::Release);
    }
}

impl Matcher {
    fn queues(&self) -> QueuesGuard<'_> {
        QueuesGuard {
            q: lock(&self.queues),
            busy: &self.busy,
        }
    }

    /// Post a receive: served at once from an unexpected message, or
    /// queued for one.
    fn post(&self, slot: Arc<Slot>) -> Ack {
        let mut q = self.queues();
        let hit = q.unexpected.iter().position(|u| slot.matches(u.src, u.tag));
        match hit.and_then(|i| q.unexpected.remove(i)) {
            Some(u) => {
                drop(q);
                let (_, sync, data) = split(&u.msg).unwrap_or((0, None, &[]));
                slot.fill(u.src, u.tag, data);
                sync.map(|id| (u.src, id))
            }
            None => {
                let seq = q.next;
                q.next += 1;
                q.posted.push_back(Posted { seq, slot });
                None
            }
        }
    }

    /// A message arrived: to its receive, or to the unexpected queue.
    fn arrive(&self, src: u32, msg: Payload) -> Ack {
        let (tag, sync) = match split(&msg) {
            Some((tag, sync, _)) => (tag, sync),
            None => return None,
        };
        let mut q = self.queues();
        let hit = q.posted.iter().position(|p| p.slot.matches(src, tag));
        match hit.and_then(|i| q.posted.remove(i)) {
            Some(Posted { slot, .. }) => {
                drop(q);
                let (_, _, data) = split(&msg).unwrap_or((0, None, &[]));
                slot.fill(src, tag, data);
                sync.map(|id| (src, id))
            }
            None => {
                q.unexpected.push_back(Unexpected { src, tag, msg });
                None
            }
        }
    }

    /// Whether `slot` is the first receive posted that a message from
    /// `src` could match: the next message from `src` with its tag is
    /// then its own.
    fn first_for(&self, src: u32, slot: &Arc<Slot>) -> bool {
        let q = self.queues();
        q.first_for(src)
            .is_some_and(|i| Arc::ptr_eq(&q.posted[i].slot, slot))
    }

    /// Take `slot` off the posted receives if it is the first a message
    /// from `src` could match, to read that message into it: its number,
    /// for [`Matcher::unclaim`] if the message is not its own. One lock
    /// for [`Matcher::first_for`] and [`Matcher::cancel`] together; only
    /// the puller claims, so no message can match it meanwhile.
    fn claim(&self, src: u32, slot: &Arc<Slot>) -> Option<u64> {
        let mut q = self.queues();
        // Most often the first of all.
        if q.posted.front().is_some_and(|p| Arc::ptr_eq(&p.slot, slot)) {
            return q.posted.pop_front().map(|p| p.seq);
        }
        let i = q
            .first_for(src)
            .filter(|&i| Arc::ptr_eq(&q.posted[i].slot, slot))?;
        q.posted.remove(i).map(|p| p.seq)
    }

    /// Put back a receive claimed as number `seq`, where it was among
    /// those posted.
    fn unclaim(&self, seq: u64, slot: &Arc<Slot>) {
        let mut q = self.queues();
        let at = q
            .posted
            .iter()
            .position(|p| p.seq > seq)
            .unwrap_or(q.posted.len());
        q.posted.insert(
            at,
            Posted {
                seq,
                slot: slot.clone(),
            },
        );
    }

    /// Take `slot` off the posted receives (it is one at most once; most
    /// often the first, as a receive read in place is).
    fn cancel(&self, slot: &Arc<Slot>) {
        let mut q = self.queues();
        if let Some(i) = q.posted.iter().position(|p| Arc::ptr_eq(&p.slot, slot)) {
            q.posted.remove(i);
        }
    }

    /// The first unexpected message matching `src` and `tag`: its status.
    fn peek(&self, src: c_int, tag: c_int) -> Option<Status> {
        let q = self.queues();
        q.unexpected
            .iter()
            .find(|u| {
                (src == ANY_SOURCE || src == u.src as c_int) && (tag == ANY_TAG || tag == u.tag)
            })
            .map(|u| {
                Status::new(
                    u.src as c_int,
                    u.tag,
                    split(&u.msg).map_or(0, |m| m.2.len()),
                )
            })
    }
}

/// What a pull is for: a message from `src` (`ANY_SOURCE` for any), and
/// the receive it completes, if any.
#[derive(Clone, Copy)]
struct Want<'a> {
    src: c_int,
    slot: Option<&'a Arc<Slot>>,
}

/// Pull messages off `c`'s lane, up to `wait`, until `done` says so (at
/// most one message if `wait` is zero). `Ok(false)` when the wait ended.
/// A wait for one sender reads that sender's link from this thread; a
/// receive of a contiguous type that is the first posted for that sender
/// is read straight into its buffer.
fn pull(c: &Comm, want: Want<'_>, wait: Duration, done: impl Fn() -> bool) -> Result<bool> {
    let _puller = (!mpi()?.serial()).then(|| lock(&c.matcher.pull));
    if done() {
        return Ok(true);
    }
    // The clock is read only once a message came that was not enough:
    // the wait goes on from there (at most one more `wait`).
    let mut until = None;
    let mut left = wait;
    loop {
        let got = if want.src < 0 {
            c.group.matched().recv_any_message(left)?
        } else {
            let src = want.src as u32;
            match want.slot.filter(|s| c.matcher.first_for(src, s)) {
                Some(slot) if slot.ty.is_flat() => match direct(c, src, slot, left)? {
                    Direct::Filled(s) => {
                        c.matcher.cancel(slot);
                        slot.complete(Ok(s));
                        return Ok(true);
                    }
                    Direct::Other(msg) => Some((src, msg)),
                    Direct::Length => c.group.matched().recv_message(src, left)?.map(|m| (src, m)),
                    Direct::Nothing => None,
                },
                _ => c.group.matched().recv_message(src, left)?.map(|m| (src, m)),
            }
        };
        match got {
            Some((src, msg)) => ack(c, c.matcher.arrive(src, msg)),
            None => return Ok(false),
        }
        if done() {
            return Ok(true);
        }
        if left.is_zero() {
            return Ok(false);
        }
        let until = *until.get_or_insert_with(|| Instant::now() + wait);
        left = until.saturating_duration_since(Instant::now());
    }
}

/// What reading `src`'s next message into a receive's buffer gave.
enum Direct {
    /// The receive took it, with this status (its caller takes it off
    /// the posted receives and completes it).
    Filled(Status),
    /// The message was for another tag: here it is, as received.
    Other(Payload),
    /// The next message is of another length: still queued.
    Length,
    /// Nothing came in time.
    Nothing,
}

fn direct(c: &Comm, src: u32, slot: &Arc<Slot>, wait: Duration) -> Result<Direct> {
    let mut head = [0u8; ENVELOPE];
    let len = slot.count * slot.ty.size;
    let body: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: the receive's buffer, `count` contiguous elements, is
        // the receive's until it completes (MPI's contract); only the
        // puller (this thread) writes it.
        unsafe { std::slice::from_raw_parts_mut(slot.buf as *mut u8, len) }
    };
    match c
        .group
        .matched()
        .recv_message_into(src, wait, &mut head, body)?
    {
        None => Ok(Direct::Nothing),
        Some(false) => Ok(Direct::Length),
        Some(true) => {
            let (tag, sync) = envelope(&head);
            if !slot.matches(src, tag) {
                // Another receive's: it goes the general way. (This
                // receive's buffer holds its bytes until its own message
                // comes: a shorter one leaves them past its end.)
                return Ok(Direct::Other(Payload::from_parts(&[&head, body])));
            }
            ack(c, sync.map(|id| (src, id)));
            Ok(Direct::Filled(Status::new(src as c_int, tag, len)))
        }
    }
}

/// A receive waited for, read straight from its sender's next message
/// when that is its own and comes within a slice: its status, with no
/// completion to note and read back. `None` when it goes the general way
/// (a wildcard source, this rank itself, a derived type, another receive
/// first for that sender, complete already, or another message next).
fn read_in_place(c: &Comm, slot: &Arc<Slot>) -> Result<Option<Status>> {
    // A message from this rank itself never takes the lane: it arrives
    // from its send (any thread's, or the sender thread's), which must
    // find the receive posted.
    if slot.src < 0 || slot.src as u32 == c.rank() || !slot.ty.is_flat() || slot.is_done() {
        return Ok(None);
    }
    let src = slot.src as u32;
    let _puller = (!mpi()?.serial()).then(|| lock(&c.matcher.pull));
    if slot.is_done() {
        return Ok(None);
    }
    let Some(seq) = c.matcher.claim(src, slot) else {
        return Ok(None);
    };
    let read = direct(c, src, slot, SLICE);
    if let Ok(Direct::Filled(s)) = read {
        return Ok(Some(s));
    }
    c.matcher.unclaim(seq, slot);
    match read? {
        Direct::Other(msg) => ack(c, c.matcher.arrive(src, msg)),
        Direct::Filled(_) | Direct::Length | Direct::Nothing => {}
    }
    Ok(None)
}

/// Wait until `done`, pulling messages: fails once the sender wanted (a
/// rank, if the wait is for one) has failed with nothing more from it,
/// or after the group's deadline.
fn wait_until(c: &Comm, want: Want<'_>, done: impl Fn() -> bool) -> Result<()> {
    let src = want.src;
    // Read once the first slice went by with nothing (most waits end in
    // it): the deadline counts from there.
    let mut start = None;
    loop {
        if pull(c, want, SLICE, &done)? || done() {
            return Ok(());
        }
        let start = *start.get_or_insert_with(Instant::now);
        let deadline = c.group.timeout();
        if src >= 0
            && c.group.failed().contains(&(src as u32))
            && !pull(c, want, Duration::ZERO, &done)?
        {
            return Err(Fail::new(
                ERR_PROC_ABORTED,
                format!("rank {src} failed before its message came"),
            ));
        }
        if start.elapsed() >= deadline {
            let from = if src >= 0 {
                format!("rank {src}")
            } else {
                "any rank".to_string()
            };
            return Err(Fail::new(
                ERR_OTHER,
                format!(
                    "no message from {from} within the deadline of {deadline:?} (meshwork's TIMEOUT_S)"
                ),
            ));
        }
    }
}

// ------------------------------------------------------------ sending

/// One send handed to the sender thread.
struct Job {
    comm: Arc<Comm>,
    dst: u32,
    head: Head,
    data: Data,
    done: Arc<Done>,
}

/// What goes before a message's data: its envelope ([`ENVELOPE`]).
#[derive(Clone, Copy)]
struct Head {
    bytes: [u8; ENVELOPE],
}

impl Head {
    fn new(tag: c_int, sync: Option<u64>) -> Head {
        let mut bytes = [0u8; ENVELOPE];
        // Synchronous sends' ids are 32-bit (`start_ssend`).
        let (tag, id) = match sync {
            None => (tag, 0),
            Some(id) => (tag | SYNC, id as u32),
        };
        bytes[..4].copy_from_slice(&tag.to_le_bytes());
        bytes[4..].copy_from_slice(&id.to_le_bytes());
        Head { bytes }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes
    }
}

/// What a send reads: the caller's memory (MPI keeps it unchanged until
/// the request completes) or a packed copy.
enum Data {
    Borrowed { at: usize, len: usize },
    Owned(Vec<u8>),
}

// SAFETY: `Borrowed` memory belongs to the request until it completes, and
// only the sender thread reads it meanwhile.
unsafe impl Send for Data {}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            // SAFETY: valid until the request completes (MPI's contract).
            Data::Borrowed { at, len } => unsafe {
                std::slice::from_raw_parts(*at as *const u8, *len)
            },
            Data::Owned(v) => v,
        }
    }
}

/// A send's completion.
#[derive(Default)]
pub(crate) struct Done {
    result: Mutex<Option<std::result::Result<(), Fail>>>,
    cv: Condvar,
    /// The communicator a waiter keeps progressing meanwhile: a send
    /// that waits for room at its receiver may wait on this rank's own
    /// receives (each of two ranks sending the other more than its
    /// budget before either waits on a receive).
    comm: Option<Arc<Comm>>,
}

impl Done {
    fn finish(&self, r: std::result::Result<(), Fail>) {
        *lock(&self.result) = Some(r);
        self.cv.notify_all();
    }

    fn is_done(&self) -> bool {
        lock(&self.result).is_some()
    }

    fn for_comm(c: &Arc<Comm>) -> Arc<Done> {
        Arc::new(Done {
            comm: Some(c.clone()),
            ..Done::default()
        })
    }

    fn wait(&self) -> Result<()> {
        let mut r = lock(&self.result);
        loop {
            if let Some(r) = r.take() {
                return r;
            }
            let Some(c) = &self.comm else {
                r = self.cv.wait(r).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            drop(r);
            progress_once(c)?;
            r = lock(&self.result);
            if r.is_none() {
                r = self
                    .cv
                    .wait_timeout(r, Duration::from_millis(1))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

/// The sender thread, and how many sends it has not finished.
pub(crate) struct Sender {
    jobs: crossbeam_channel::Sender<Job>,
    pending: Arc<AtomicUsize>,
}

impl Sender {
    pub fn start() -> Sender {
        let (jobs, rx) = unbounded::<Job>();
        let pending = Arc::new(AtomicUsize::new(0));
        let left = pending.clone();
        std::thread::Builder::new()
            .name("mpi-sender".into())
            .spawn(move || sender_thread(rx, left))
            .expect("spawning the MPI sender thread");
        Sender { jobs, pending }
    }

    /// Hand a send to the sender thread, behind what it holds.
    fn hand_over(&self, c: &Arc<Comm>, dst: u32, head: Head, data: Data) -> Result<Sent> {
        let done = Done::for_comm(c);
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.jobs
            .send(Job {
                comm: c.clone(),
                dst,
                head,
                data,
                done: done.clone(),
            })
            .map_err(|_| Fail::new(ERR_INTERN, "the sender thread is gone"))?;
        Ok(Sent::Later(done))
    }

    /// Wait until every send handed over has finished.
    pub fn drain(&self) {
        let done = Arc::new(Done::default());
        if self.pending.load(Ordering::Acquire) == 0 {
            return;
        }
        // A marker job: finished after every job before it.
        let world = mpi().map(|m| m.world.clone());
        if let Ok(world) = world {
            self.pending.fetch_add(1, Ordering::AcqRel);
            let _ = self.jobs.send(Job {
                comm: world,
                dst: u32::MAX,
                head: Head::new(0, None),
                data: Data::Owned(Vec::new()),
                done: done.clone(),
            });
            let _ = done.wait();
        }
    }
}

fn sender_thread(rx: Receiver<Job>, pending: Arc<AtomicUsize>) {
    for job in rx {
        let r = if job.dst == u32::MAX {
            Ok(())
        } else {
            send_now(&job.comm, job.dst, job.head, job.data.bytes())
        };
        pending.fetch_sub(1, Ordering::AcqRel);
        job.done.finish(r);
    }
}

fn send_now(c: &Comm, dst: u32, head: Head, data: &[u8]) -> Result<()> {
    if dst == c.rank() {
        let msg = Payload::from_parts(&[head.as_slice(), data]);
        ack(c, c.matcher.arrive(dst, msg));
        return Ok(());
    }
    c.group
        .matched()
        .send_parts(&[head.as_slice(), data], dst)
        .map_err(Fail::from)
}

/// Checked arguments of a send.
fn send_args(c: &Comm, dest: c_int, tag: c_int) -> Result<Option<u32>> {
    if dest == PROC_NULL {
        return Ok(None);
    }
    if !(0..SYNC).contains(&tag) {
        return Err(Fail::new(
            ERR_TAG,
            format!("tag {tag} is not in 0..=MPI_TAG_UB ({})", SYNC - 1),
        ));
    }
    c.peer(dest, "destination").map(Some)
}

/// A send started: complete already (inline), or on the sender thread.
enum Sent {
    Now,
    Later(Arc<Done>),
}

impl Sent {
    fn wait(self) -> Result<()> {
        match self {
            Sent::Now => Ok(()),
            Sent::Later(d) => d.wait(),
        }
    }

    /// It as a request.
    fn request(self) -> Request {
        match self {
            Sent::Now => Request::Done(empty_status()),
            Sent::Later(d) => Request::Send(d),
        }
    }

    /// Its request handle: a send complete already needs no entry.
    fn handle(self) -> Result<Handle> {
        match self {
            Sent::Now => Ok(SENT),
            Sent::Later(d) => add_request(Request::Send(d)),
        }
    }
}

/// Start a send: inline if the sender thread is idle and the message is
/// small, else on the thread.
fn start_send(
    c: &Arc<Comm>,
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    blocking: bool,
) -> Result<Sent> {
    start_send_as(c, buf, count, dt, dest, tag, blocking, None)
}

/// Send `data` (this rank's own copy) to `dst`: inline if the sender
/// thread is idle, else behind what it holds, in order.
fn send_owned(c: &Arc<Comm>, dst: u32, head: Head, data: Vec<u8>) -> Result<Sent> {
    let m = mpi()?;
    let sender = &m.sender;
    if sender.pending.load(Ordering::Acquire) == 0 && data.len() <= INLINE {
        send_now(c, dst, head, &data)?;
        return Ok(Sent::Now);
    }
    sender.hand_over(c, dst, head, Data::Owned(data))
}

/// [`start_send`], as synchronous send `sync` if given.
#[allow(
    clippy::too_many_arguments,
    reason = "a send's arguments, as MPI gives them, and its kind"
)]
fn start_send_as(
    c: &Arc<Comm>,
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    blocking: bool,
    sync: Option<u64>,
) -> Result<Sent> {
    let Some(dst) = send_args(c, dest, tag)? else {
        return Ok(Sent::Now);
    };
    let head = Head::new(tag, sync);
    let count = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
    // SAFETY: `buf` holds `count` elements (MPI's contract).
    let packed = with_type(dt, |ty| unsafe { ty.pack(buf, count) })?;
    let m = mpi()?;
    let sender = &m.sender;
    if sender.pending.load(Ordering::Acquire) == 0 && (blocking || packed.len() <= INLINE) {
        send_now(c, dst, head, &packed)?;
        return Ok(Sent::Now);
    }
    let data = match packed {
        std::borrow::Cow::Borrowed(b) => Data::Borrowed {
            at: b.as_ptr() as usize,
            len: b.len(),
        },
        std::borrow::Cow::Owned(v) => Data::Owned(v),
    };
    sender.hand_over(c, dst, head, data)
}

// ------------------------------------------------------------ requests

/// A collective in flight (`coll.rs`).
pub(crate) trait Pending: Send {
    fn is_complete(&self) -> bool;
    fn finish(self: Box<Self>) -> Result<()>;
}

pub(crate) enum Request {
    Send(Arc<Done>),
    Recv(CommRef, Arc<Slot>),
    Coll(Box<dyn Pending>),
    /// Complete already (a receive from `MPI_PROC_NULL`).
    Done(Status),
    /// A send and a receive (`MPI_Isendrecv`): complete when both are,
    /// with the receive's status.
    Pair(Box<Request>, Box<Request>),
    /// A persistent request (`MPI_Send_init`, `MPI_Recv_init`): what
    /// `MPI_Start` starts, and the operation started, if any.
    Persistent(Arc<more::Persist>, Option<Box<Request>>),
    /// A synchronous send to a rank, by id: complete once sent (the
    /// sender thread's part, if it has one) and acknowledged.
    Sync(Arc<Comm>, u32, u64, Option<Arc<Done>>),
    /// A generalized request (`MPI_Grequest_start`): complete when the
    /// program says so.
    Gen(Arc<greq::Greq>),
}

/// The requests in flight.
static REQUESTS: Mutex<Table> = Mutex::new(Table::new());

/// Requests by handle: a slab whose entries are used again, newest freed
/// first, so that a window of requests posted and waited for over and
/// over touches the same few entries and allocates nothing. A handle
/// carries its entry's generation: one kept after its request completed
/// is refused, not taken for the entry's next request (until the entry
/// has served [`GENERATIONS`] more).
pub(crate) struct Table {
    entries: Vec<Entry>,
    free: Vec<u32>,
}

struct Entry {
    generation: u32,
    request: Option<Request>,
}

/// A request's handle is a positive `int`, as every handle of this
/// library (the ABI's `MPI_Request_toint` gives an `int`, which mpi4py
/// widens with its sign): this bit, the entry's generation
/// ([`GENERATIONS`]) in bits 24–29, its index ([`ENTRIES`]) in bits 4–23.
/// Other handles ([`crate::state::new_handle`]) count up from 2^16, far
/// below.
const REQUEST_BIT: u32 = 1 << 30;
const GENERATIONS: u32 = 1 << 6;
/// Requests in flight at once, at most.
pub(crate) const ENTRIES: usize = 1 << 20;

impl Table {
    const fn new() -> Table {
        Table {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    fn handle(index: u32, generation: u32) -> Handle {
        (REQUEST_BIT | generation << 24 | index << 4) as Handle
    }

    /// A request handle's entry index and generation.
    fn parts(h: Handle) -> Option<(usize, u32)> {
        let h = u32::try_from(h).ok()?;
        if h & !(REQUEST_BIT | (GENERATIONS - 1) << 24 | (ENTRIES as u32 - 1) << 4) != 0
            || h & REQUEST_BIT == 0
        {
            return None;
        }
        Some((
            (h >> 4) as usize & (ENTRIES - 1),
            (h >> 24) & (GENERATIONS - 1),
        ))
    }

    /// The entry `h` names, if it is a request's handle of this
    /// generation that holds its request (`stored`) or is held for one
    /// taken out (not `stored`).
    fn entry_of(&self, h: Handle, stored: bool) -> Option<usize> {
        let (index, generation) = Table::parts(h)?;
        self.entries
            .get(index)
            .filter(|e| e.generation == generation && e.request.is_some() == stored)
            .map(|_| index)
    }

    /// Store `r`: its handle, or `r` back when [`ENTRIES`] are in use.
    fn add(&mut self, r: Request) -> std::result::Result<Handle, Request> {
        let index = match self.free.pop() {
            Some(i) => i,
            None if self.entries.len() < ENTRIES => {
                self.entries.push(Entry {
                    generation: 0,
                    request: None,
                });
                (self.entries.len() - 1) as u32
            }
            None => return Err(r),
        };
        let e = &mut self.entries[index as usize];
        e.request = Some(r);
        Ok(Table::handle(index, e.generation))
    }

    pub(crate) fn get(&self, h: Handle) -> Option<&Request> {
        self.entry_of(h, true)
            .and_then(|i| self.entries[i].request.as_ref())
    }

    /// Take `h`'s request out. Its entry is freed, unless the request is
    /// persistent or generalized: that entry is held for it, to be put
    /// back ([`put`]) or let go ([`release`]). (A generalized request's
    /// handle must name it until `MPI_Grequest_complete`, however long a
    /// wait on it has it out.)
    ///
    /// [`put`]: Table::put
    /// [`release`]: Table::release
    fn take(&mut self, h: Handle) -> Option<Request> {
        let i = self.entry_of(h, true)?;
        let r = self.entries[i].request.take();
        if !matches!(r, Some(Request::Persistent(..) | Request::Gen(..))) {
            self.free_at(i);
        }
        r
    }

    fn free_at(&mut self, i: usize) {
        let e = &mut self.entries[i];
        e.generation = (e.generation + 1) % GENERATIONS;
        self.free.push(i as u32);
    }

    /// Put `r` back under `h`, a persistent request's handle.
    fn put(&mut self, h: Handle, r: Request) {
        if let Some(i) = self.entry_of(h, false) {
            self.entries[i].request = Some(r);
        }
    }

    /// Let go of `h`'s held entry.
    pub(crate) fn release(&mut self, h: Handle) {
        if let Some(i) = self.entry_of(h, false) {
            self.free_at(i);
        }
    }
}

/// The handle of every send that completed when it was started: no
/// entry, nothing to wait for (below this library's own handles, above
/// the ABI's reserved ones).
const SENT: Handle = 0xfff0;

/// Store request `r`: its handle. With [`ENTRIES`] in flight already,
/// `MPI_ERR_NO_MEM`, and a receive of `r` is withdrawn.
pub(crate) fn add_request(r: Request) -> Result<Handle> {
    let added = lock(&REQUESTS).add(r);
    added.map_err(|r| {
        r.withdraw();
        Fail::new(
            ERR_NO_MEM,
            format!("{ENTRIES} requests are in flight already: wait for some first"),
        )
    })
}

fn take_request(h: Handle) -> Result<Request> {
    if h == SENT {
        return Ok(Request::Done(empty_status()));
    }
    lock(&REQUESTS)
        .take(h)
        .ok_or_else(|| Fail::new(ERR_REQUEST, format!("{h:#x} is not an active request")))
}

fn put_request(h: Handle, r: Request) {
    lock(&REQUESTS).put(h, r);
}

/// MPI's empty status: what a wait on a null or inactive request, or
/// on a send, gives.
fn empty_status() -> Status {
    Status::new(ANY_SOURCE, ANY_TAG, 0)
}

/// The status of a receive or probe from `MPI_PROC_NULL`.
pub(crate) fn proc_null_status() -> Status {
    Status::new(PROC_NULL, ANY_TAG, 0)
}

impl Request {
    /// Take its receives off the posted ones: it is not kept.
    fn withdraw(&self) {
        match self {
            Request::Recv(c, slot) => c.matcher.cancel(slot),
            Request::Pair(a, b) => {
                a.withdraw();
                b.withdraw();
            }
            _ => {}
        }
    }
}

/// What telling whether a request is complete needs, taken under the
/// table's lock and looked at after it.
enum Look {
    Known(bool),
    Recv(CommRef, Arc<Slot>),
    Both(Box<Look>, Box<Look>),
    Sync(Arc<Comm>, u32, u64),
}

impl Look {
    fn of(r: &Request) -> Look {
        match r {
            Request::Send(d) => Look::Known(d.is_done()),
            Request::Done(_) => Look::Known(true),
            Request::Coll(p) => Look::Known(p.is_complete()),
            Request::Gen(g) => Look::Known(g.is_complete()),
            Request::Recv(c, slot) => Look::Recv(c.clone(), slot.clone()),
            Request::Pair(a, b) => Look::Both(Box::new(Look::of(a)), Box::new(Look::of(b))),
            Request::Persistent(_, None) => Look::Known(true),
            Request::Persistent(_, Some(r)) => Look::of(r),
            Request::Sync(c, dst, id, sent) => Look::Both(
                Box::new(Look::Known(sent.as_ref().is_none_or(|d| d.is_done()))),
                Box::new(Look::Sync(c.clone(), *dst, *id)),
            ),
        }
    }

    /// Whether it is complete, pulling at most what is there now.
    fn ready(self) -> Result<bool> {
        match self {
            Look::Known(k) => Ok(k),
            Look::Both(a, b) => Ok(a.ready()? && b.ready()?),
            Look::Sync(c, dst, id) => {
                progress_once(&c)?;
                if dst != c.rank() {
                    pull_acks(&c, dst, Duration::ZERO)?;
                }
                Ok(lock(&c.matcher.acked).contains(&id))
            }
            Look::Recv(c, slot) => {
                if slot.is_done() {
                    return Ok(true);
                }
                let want = Want {
                    src: slot.src,
                    slot: Some(&slot),
                };
                pull(&c, want, Duration::ZERO, || slot.is_done())
            }
        }
    }
}

/// Whether `h` is a null request or an inactive persistent one, which
/// the `any` and `some` waits pass over.
fn inactive(h: Handle) -> bool {
    h == REQUEST_NULL || matches!(lock(&REQUESTS).get(h), Some(Request::Persistent(_, None)))
}

/// Whether request `h` is complete, pulling at most what is there now.
fn ready(h: Handle) -> Result<bool> {
    if h == SENT {
        return Ok(true);
    }
    let look = {
        let guard = lock(&REQUESTS);
        let r = guard
            .get(h)
            .ok_or_else(|| Fail::new(ERR_REQUEST, format!("{h:#x} is not an active request")))?;
        Look::of(r)
    };
    look.ready()
}

/// Complete request `h`, waiting for it: its status, and whether the
/// handle stays (a persistent request, inactive again).
fn complete(h: Handle) -> Result<(Status, bool)> {
    settle(h, take_request(h)?)
}

/// Complete `r`, taken out of handle `h`, as [`complete`] does.
fn settle(h: Handle, r: Request) -> Result<(Status, bool)> {
    match r {
        // Its entry is let go once it completes (a wait that times out
        // leaves that to `MPI_Grequest_complete`).
        Request::Gen(g) => {
            let (got, done) = g.finish();
            if done {
                lock(&REQUESTS).release(h);
            }
            got.map(|s| (s, false))
        }
        Request::Persistent(p, active) => {
            put_request(h, Request::Persistent(p, None));
            match active {
                Some(r) => finish(*r).map(|s| (s, true)),
                None => Ok((empty_status(), true)),
            }
        }
        r => finish(r).map(|s| (s, false)),
    }
}

/// Complete `r`, waiting for it: its status.
fn finish(r: Request) -> Result<Status> {
    match r {
        Request::Done(s) => Ok(s),
        Request::Send(d) => d.wait().map(|()| empty_status()),
        Request::Coll(p) => p.finish().map(|()| empty_status()),
        // Only ever settled (above); here its entry would stay held.
        Request::Gen(g) => g.finish().0,
        Request::Pair(send, recv) => {
            let got = finish(*recv);
            finish(*send)?;
            got
        }
        Request::Persistent(_, active) => active.map_or(Ok(empty_status()), |r| finish(*r)),
        Request::Sync(c, dst, id, sent) => {
            if let Some(d) = sent {
                d.wait()?;
            }
            await_ack(&c, dst, id).map(|()| empty_status())
        }
        Request::Recv(c, slot) => {
            match read_in_place(&c, &slot) {
                Ok(Some(s)) => {
                    Slot::recycle(slot);
                    return Ok(s);
                }
                Ok(None) => {}
                // Off the posted receives, as a failed wait below: its
                // buffer is no longer the library's.
                Err(e) => {
                    c.matcher.cancel(&slot);
                    return Err(e);
                }
            }
            let want = Want {
                src: slot.src,
                slot: Some(&slot),
            };
            let waited = wait_until(&c, want, || slot.is_done());
            if let Err(e) = waited {
                c.matcher.cancel(&slot);
                return Err(e);
            }
            let got = lock(&slot.done)
                .take()
                .unwrap_or_else(|| Err(Fail::new(ERR_INTERN, "a receive completed twice")));
            Slot::recycle(slot);
            got
        }
    }
}

/// Take one message off `c`'s lane if one is there and no other thread
/// is pulling: a wait that is not for a message still lets the receives
/// posted here match (and acknowledge what asks for it).
fn progress_once(c: &Comm) -> Result<()> {
    let Ok(_puller) = c.matcher.pull.try_lock() else {
        return Ok(());
    };
    if let Some((src, msg)) = c.group.matched().recv_any_message(Duration::ZERO)? {
        ack(c, c.matcher.arrive(src, msg));
    }
    Ok(())
}

/// Note the acknowledgements `dst` sent, waiting up to `wait` for one.
fn pull_acks(c: &Comm, dst: u32, wait: Duration) -> Result<()> {
    let _puller = lock(&c.matcher.ack_pull);
    let mut wait = wait;
    while let Some(msg) = c.group.recv_message(dst, ACK_LANE, wait)? {
        if let Some(id) = msg.as_ref().get(..8).and_then(|b| b.try_into().ok()) {
            lock(&c.matcher.acked).insert(u64::from_le_bytes(id));
        }
        wait = Duration::ZERO;
    }
    Ok(())
}

/// Wait until a receive at `dst` took synchronous send `id`, progressing
/// this rank's receives meanwhile; fails once `dst` has failed, or after
/// the group's deadline.
fn await_ack(c: &Comm, dst: u32, id: u64) -> Result<()> {
    let start = Instant::now();
    let deadline = c.group.timeout();
    loop {
        if lock(&c.matcher.acked).remove(&id) {
            return Ok(());
        }
        progress_once(c)?;
        if dst != c.rank() {
            pull_acks(c, dst, Duration::from_millis(1))?;
        } else {
            std::thread::yield_now();
        }
        if lock(&c.matcher.acked).remove(&id) {
            return Ok(());
        }
        if dst != c.rank() && c.group.failed().contains(&dst) {
            return Err(Fail::new(
                ERR_PROC_ABORTED,
                format!("rank {dst} failed before it received the synchronous send"),
            ));
        }
        if start.elapsed() >= deadline {
            return Err(Fail::new(
                ERR_OTHER,
                format!("rank {dst} did not receive the synchronous send within the deadline of {deadline:?} (meshwork's TIMEOUT_S)"),
            ));
        }
    }
}

/// Start a synchronous send (`MPI_Ssend`, `MPI_Issend`): the message asks
/// its receive for an acknowledgement, and the request completes with it.
fn start_ssend(
    c: &Arc<Comm>,
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
) -> Result<Request> {
    // 32 bits, as the envelope carries them: an id comes back after
    // 2^32 more synchronous sends, long after its acknowledgement.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let Some(dst) = send_args(c, dest, tag)? else {
        return Ok(Request::Done(empty_status()));
    };
    let id = u64::from(NEXT.fetch_add(1, Ordering::Relaxed));
    let sent = match start_send_as(c, buf, count, dt, dest, tag, false, Some(id))? {
        Sent::Now => None,
        Sent::Later(d) => Some(d),
    };
    Ok(Request::Sync(c.clone(), dst, id, sent))
}

// ------------------------------------------------------------ the calls

/// Post a receive on `c`.
fn post_recv(
    c: &Arc<Comm>,
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    source: c_int,
    tag: c_int,
) -> Result<Request> {
    if source == PROC_NULL {
        return Ok(Request::Done(proc_null_status()));
    }
    if source != ANY_SOURCE {
        c.peer(source, "source")?;
    }
    if tag < 0 && tag != ANY_TAG {
        return Err(Fail::new(ERR_TAG, format!("tag {tag} is negative")));
    }
    let ty = TypeRef::of(dt)?;
    let count = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
    if buf.is_null() && count > 0 && ty.size > 0 {
        return Err(Fail::new(ERR_BUFFER, "buffer is NULL with a nonzero count"));
    }
    Ok(posted(
        CommRef::Counted(c.clone()),
        source,
        tag,
        buf,
        count,
        ty,
    ))
}

/// A receive posted on `c`: matched at once against the messages
/// waiting unexpected, or queued; its request.
fn posted(
    c: CommRef,
    source: c_int,
    tag: c_int,
    buf: *mut u8,
    count: usize,
    ty: TypeRef,
) -> Request {
    let slot = Slot::shared(source, tag, buf as usize, count, ty);
    ack(&c, c.matcher.post(slot.clone()));
    Request::Recv(c, slot)
}

/// A receive of a predefined type posted on `MPI_COMM_WORLD` or
/// `MPI_COMM_SELF` with nothing checked twice: its request's handle.
/// `None` when it must go the general way (which also names what is
/// wrong with its arguments).
#[inline]
fn post_at_once(
    c: &'static Arc<Comm>,
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    source: c_int,
    tag: c_int,
) -> Option<Handle> {
    let known = source == ANY_SOURCE || c.peer(source, "source").is_ok();
    if !known || (tag < 0 && tag != ANY_TAG) {
        return None;
    }
    let (ty, n) = (predefined_type(dt)?, usize::try_from(count).ok()?);
    if buf.is_null() && ty.bytes_of(n)? > 0 {
        return None;
    }
    let r = posted(
        CommRef::Builtin(c),
        source,
        tag,
        buf,
        n,
        TypeRef::Predefined(ty),
    );
    add_request(r).ok()
}

/// A blocking receive from one sender into a contiguous buffer, when no
/// receive is posted and nothing is waiting unexpected on `c`: the
/// sender's next message read straight into the buffer, with nothing
/// queued or allocated. `None` when the receive must go the general way
/// (wildcard source, a derived type, other receives or messages about, a
/// message of another tag or length — kept for the general way).
///
/// # Safety
/// `buf` holds `count` elements of `dt`, writable.
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "MPI_Recv's arguments, and the library they go to"
)]
unsafe fn recv_at_once(
    m: &Mpi,
    c: &Comm,
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    source: c_int,
    tag: c_int,
    status: *mut Status,
) -> Result<bool> {
    // From itself a message never takes the lane. (A rank outside the
    // communicator is refused by meshwork below, and the general way then
    // names it.)
    if source < 0 || source as u32 == c.rank() {
        return Ok(false);
    }
    if tag < 0 && tag != ANY_TAG {
        return Ok(false);
    }
    let (Some(ty), Ok(n)) = (predefined_type(dt), usize::try_from(count)) else {
        return Ok(false);
    };
    let Some(len) = ty.bytes_of(n) else {
        return Ok(false);
    };
    if len > 0 && buf.is_null() {
        return Ok(false);
    }
    let body: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: the caller's buffer (the contract).
        unsafe { std::slice::from_raw_parts_mut(buf, len) }
    };
    // Another thread pulling, or a wait longer than a slice: the general
    // way, which shares the lane. (A serial program takes no lock: two
    // copies of the rest, so that it drops none either.)
    if m.serial() {
        // SAFETY: NULL or valid (the contract).
        unsafe { take_at_once(c, source as u32, tag, body, status) }
    } else {
        let Ok(_puller) = c.matcher.pull.try_lock() else {
            return Ok(false);
        };
        // SAFETY: as above.
        unsafe { take_at_once(c, source as u32, tag, body, status) }
    }
}

/// [`recv_at_once`] once its arguments pass and its thread may pull:
/// the message of `src` read into `body` if nothing else is about.
///
/// # Safety
/// `status` is NULL or valid.
#[inline(always)]
unsafe fn take_at_once(
    c: &Comm,
    src: u32,
    tag: c_int,
    body: &mut [u8],
    status: *mut Status,
) -> Result<bool> {
    if c.matcher.busy.load(Ordering::Acquire) {
        return Ok(false);
    }
    let mut head = [0u8; ENVELOPE];
    let got = match c
        .group
        .matched()
        .recv_message_into(src, SLICE, &mut head, body)
    {
        Err(mw::Error::InvalidArgument(_)) if src >= c.size() => return Ok(false),
        got => got?,
    };
    match got {
        Some(true) => {
            let (got, sync) = envelope(&head);
            if tag == ANY_TAG || got == tag {
                ack(c, sync.map(|id| (src, id)));
                // SAFETY: NULL or valid (the contract).
                unsafe { set_status(status, Status::new(src as c_int, got, body.len())) };
                return Ok(true);
            }
            // Another receive's: the general way takes it.
            ack(
                c,
                c.matcher.arrive(src, Payload::from_parts(&[&head, body])),
            );
            Ok(false)
        }
        // Another length, or nothing within a slice: the general way
        // waits on (and shares the lane with any other thread).
        Some(false) | None => Ok(false),
    }
}

/// A send of at most `limit` bytes of a predefined type to another rank
/// while the sender thread is idle: straight onto the lane, complete on
/// return, with nothing checked twice. `None` when the send must go the
/// general way (which also names what is wrong with its arguments).
///
/// # Safety
/// `buf` holds `count` elements of `dt`.
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "a send's arguments, as MPI gives them, the library and the limit"
)]
unsafe fn send_at_once(
    m: &Mpi,
    c: &Comm,
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    limit: usize,
) -> Option<Result<()>> {
    // A rank outside the communicator is refused by meshwork below, and
    // the general way then names it (MPI_ERR_RANK).
    let dst = u32::try_from(dest).ok().filter(|&d| d != c.rank())?;
    if !(0..SYNC).contains(&tag) || m.sender.pending.load(Ordering::Acquire) != 0 {
        return None;
    }
    let (ty, n) = (predefined_type(dt)?, usize::try_from(count).ok()?);
    let len = ty.bytes_of(n).filter(|&l| l <= limit)?;
    let data: &[u8] = match len {
        0 => &[],
        _ if buf.is_null() => return None,
        // SAFETY: `count` elements of a contiguous type (the contract).
        _ => unsafe { std::slice::from_raw_parts(buf, len) },
    };
    let head = Head::new(tag, None);
    match c.group.matched().send_parts(&[head.as_slice(), data], dst) {
        Ok(()) => Some(Ok(())),
        Err(mw::Error::InvalidArgument(_)) if dst >= c.size() => None,
        Err(e) => Some(Err(e.into())),
    }
}

/// The start of a non-blocking call: `request` checked, the operation
/// started, its handle stored there.
pub(crate) fn start_request(
    request: *mut Handle,
    start: impl FnOnce() -> Result<Handle>,
) -> Result<()> {
    if request.is_null() {
        return Err(Fail::arg("request is NULL"));
    }
    let h = start()?;
    // SAFETY: non-NULL, valid (the caller's contract, MPI's).
    unsafe { put(request, h) };
    Ok(())
}

/// # Safety
/// `status` is NULL (MPI_STATUS_IGNORE) or valid.
unsafe fn set_status(status: *mut Status, s: Status) {
    // SAFETY: the contract.
    unsafe { put(status, s) };
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Send(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
) -> c_int {
    entry(ch, "MPI_Send", move || {
        let m = mpi()?;
        if let Some(c) = m.builtin(ch) {
            // SAFETY: the same contract.
            if let Some(sent) = unsafe { send_at_once(m, c, buf, count, dt, dest, tag, usize::MAX) }
            {
                return sent;
            }
        }
        with_comm(ch, |c| {
            start_send(c, buf, count, dt, dest, tag, true)?.wait()
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Ssend(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
) -> c_int {
    entry(ch, "MPI_Ssend", || {
        let c = comm(ch)?;
        finish(start_ssend(&c, buf, count, dt, dest, tag)?).map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Rsend(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Send(buf, count, dt, dest, tag, ch) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Isend(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Isend", move || {
        let m = mpi()?;
        if let Some(c) = m.builtin(ch).filter(|_| !request.is_null()) {
            // A small send, inline as `start_send` would send it: complete
            // at once.
            // SAFETY: the same contract.
            if let Some(sent) = unsafe { send_at_once(m, c, buf, count, dt, dest, tag, INLINE) } {
                sent?;
                // SAFETY: non-NULL, valid (the contract).
                unsafe { put(request, SENT) };
                return Ok(());
            }
        }
        start_request(request, || {
            start_send(&comm(ch)?, buf, count, dt, dest, tag, false)?.handle()
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Issend(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Issend", || {
        start_request(request, || {
            add_request(start_ssend(&comm(ch)?, buf, count, dt, dest, tag)?)
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    source: c_int,
    tag: c_int,
    ch: Handle,
    status: *mut Status,
) -> c_int {
    entry(ch, "MPI_Recv", move || {
        let m = mpi()?;
        if let Some(c) = m.builtin(ch) {
            // SAFETY: `buf` holds `count` elements; `status` is NULL or
            // valid (the contract).
            if unsafe { recv_at_once(m, c, buf, count, dt, source, tag, status) }? {
                return Ok(());
            }
        }
        with_comm(ch, |c| {
            let s = finish(post_recv(c, buf, count, dt, source, tag)?)?;
            // SAFETY: NULL or valid (the contract).
            unsafe { set_status(status, s) };
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    source: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Irecv", move || {
        let m = mpi()?;
        if let Some(c) = m.builtin(ch).filter(|_| !request.is_null()) {
            if let Some(h) = post_at_once(c, buf, count, dt, source, tag) {
                // SAFETY: non-NULL, valid (the contract).
                unsafe { put(request, h) };
                return Ok(());
            }
        }
        start_request(request, || {
            add_request(post_recv(&comm(ch)?, buf, count, dt, source, tag)?)
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const u8,
    sendcount: c_int,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut u8,
    recvcount: c_int,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    ch: Handle,
    status: *mut Status,
) -> c_int {
    entry(ch, "MPI_Sendrecv", || {
        let c = comm(ch)?;
        let posted = post_recv(&c, recvbuf, recvcount, recvtype, source, recvtag)?;
        let sent = start_send(&c, sendbuf, sendcount, sendtype, dest, sendtag, false);
        let got = finish(posted);
        sent?.wait()?;
        // SAFETY: NULL or valid (the contract).
        unsafe { set_status(status, got?) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    ch: Handle,
    status: *mut Status,
) -> c_int {
    entry(ch, "MPI_Sendrecv_replace", || {
        let c = comm(ch)?;
        let ty = type_of(dt)?;
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        // SAFETY: `buf` holds `count` elements (the contract).
        let copy = unsafe { ty.pack(buf, n) }?.into_owned();
        let posted = post_recv(&c, buf, count, dt, source, recvtag)?;
        let len = c_int::try_from(copy.len())
            .map_err(|_| Fail::new(ERR_COUNT, "the message is larger than an int of bytes"))?;
        let sent = start_send(&c, copy.as_ptr(), len, MPI_BYTE, dest, sendtag, true);
        let got = finish(posted);
        sent?.wait()?;
        // SAFETY: NULL or valid (the contract).
        unsafe { set_status(status, got?) };
        Ok(())
    })
}

fn probe_args(c: &Comm, source: c_int, tag: c_int) -> Result<()> {
    if source != ANY_SOURCE && source != PROC_NULL {
        c.peer(source, "source")?;
    }
    if tag < 0 && tag != ANY_TAG {
        return Err(Fail::new(ERR_TAG, format!("tag {tag} is negative")));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    ch: Handle,
    status: *mut Status,
) -> c_int {
    entry(ch, "MPI_Probe", || {
        let c = comm(ch)?;
        probe_args(&c, source, tag)?;
        let s = if source == PROC_NULL {
            proc_null_status()
        } else {
            let want = Want {
                src: source,
                slot: None,
            };
            wait_until(&c, want, || c.matcher.peek(source, tag).is_some())?;
            c.matcher
                .peek(source, tag)
                .ok_or_else(|| Fail::new(ERR_INTERN, "a probed message went away"))?
        };
        // SAFETY: NULL or valid (the contract).
        unsafe { set_status(status, s) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    ch: Handle,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    entry(ch, "MPI_Iprobe", || {
        let c = comm(ch)?;
        probe_args(&c, source, tag)?;
        let found = if source == PROC_NULL {
            Some(proc_null_status())
        } else {
            if c.matcher.peek(source, tag).is_none() {
                let want = Want {
                    src: source,
                    slot: None,
                };
                pull(&c, want, Duration::ZERO, || {
                    c.matcher.peek(source, tag).is_some()
                })?;
            }
            c.matcher.peek(source, tag)
        };
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(flag, c_int::from(found.is_some()));
            if let Some(s) = found {
                set_status(status, s);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const Status,
    dt: Handle,
    count: *mut c_int,
) -> c_int {
    entry(COMM_WORLD, "MPI_Get_count", || {
        if status.is_null() {
            return Err(Fail::arg("status is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let bytes = unsafe { *status }.bytes();
        let size = type_of(dt)?.size as u64;
        let n = match size {
            0 => 0,
            s if bytes % s == 0 => c_int::try_from(bytes / s).unwrap_or(UNDEFINED),
            _ => UNDEFINED,
        };
        // SAFETY: NULL or valid (the contract).
        unsafe { put(count, n) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements(
    status: *const Status,
    dt: Handle,
    count: *mut c_int,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Get_count(status, dt, count) }
}

/// Read request `i` of `reqs`.
///
/// # Safety
/// `reqs` holds at least `i + 1` handles.
unsafe fn req_at(reqs: *mut Handle, i: usize) -> Handle {
    // SAFETY: the contract.
    unsafe { *reqs.add(i) }
}

/// Complete `*request` (a null request completes at once, empty).
///
/// # Safety
/// `request` is valid; `status` NULL or valid.
unsafe fn wait_one(request: *mut Handle, status: *mut Status) -> Result<()> {
    // SAFETY: the contract.
    unsafe { wait_taken(request, status, None) }
}

/// [`wait_one`], with `*request`'s request taken out of the table
/// already if `taken` is given.
///
/// # Safety
/// As [`wait_one`].
unsafe fn wait_taken(
    request: *mut Handle,
    status: *mut Status,
    taken: Option<Request>,
) -> Result<()> {
    // SAFETY: the contract.
    let h = unsafe { *request };
    if h == REQUEST_NULL || h == SENT {
        // Nothing, or a send complete when started: an empty status, and
        // no entry to look up.
        // SAFETY: the contract.
        unsafe {
            set_status(status, empty_status());
            *request = REQUEST_NULL;
        }
        return Ok(());
    }
    let r = match taken {
        Some(r) => settle(h, r),
        None => complete(h),
    };
    if !r.as_ref().is_ok_and(|(_, stays)| *stays) {
        // SAFETY: the contract.
        unsafe { *request = REQUEST_NULL };
    }
    let (s, _) = r?;
    // SAFETY: the contract.
    unsafe { set_status(status, s) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(request: *mut Handle, status: *mut Status) -> c_int {
    entry(COMM_WORLD, "MPI_Wait", || {
        if request.is_null() {
            return Err(Fail::arg("request is NULL"));
        }
        // SAFETY: non-NULL; the contract.
        unsafe { wait_one(request, status) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    reqs: *mut Handle,
    statuses: *mut Status,
) -> c_int {
    // SAFETY: the contract.
    entry(COMM_WORLD, "MPI_Waitall", || unsafe {
        waitall(count, reqs, statuses)
    })
}

/// `MPI_Waitall`'s body (`MPI_Testall` runs it too, under its own name
/// and error handler).
///
/// # Safety
/// `count` requests at `reqs`; `statuses` NULL or `count` of them.
unsafe fn waitall(count: c_int, reqs: *mut Handle, statuses: *mut Status) -> Result<()> {
    let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
    if n > 0 && reqs.is_null() {
        return Err(Fail::arg("array_of_requests is NULL"));
    }
    let mut first: Option<Fail> = None;
    // The requests of a run of them are taken out of the table under
    // one lock, then waited for in order.
    const RUN: usize = 32;
    let mut taken: [Option<Request>; RUN] = [const { None }; RUN];
    for run in (0..n).step_by(RUN) {
        let end = n.min(run + RUN);
        {
            let mut table = lock(&REQUESTS);
            for (i, t) in (run..end).zip(taken.iter_mut()) {
                // SAFETY: `count` requests (the contract).
                *t = table.take(unsafe { req_at(reqs, i) });
            }
        }
        for (i, t) in (run..end).zip(taken.iter_mut()) {
            let st = if statuses.is_null() {
                std::ptr::null_mut()
            } else {
                // SAFETY: `count` statuses (the contract).
                unsafe { statuses.add(i) }
            };
            // SAFETY: `count` requests (the contract).
            if let Err(e) = unsafe { wait_taken(reqs.add(i), st, t.take()) } {
                if !st.is_null() {
                    // SAFETY: as above.
                    unsafe { (*st).error = e.class };
                }
                first.get_or_insert(e);
            }
        }
    }
    // An error is in its request's status: the call says so.
    first.map_or(Ok(()), |e| Err(Fail::new(ERR_IN_STATUS, e.into_text())))
}

/// Which of the `n` requests at `reqs` are complete (their indices, at
/// most `limit`), or `None` if none is active (null or an inactive
/// persistent request). With `wait`, looks again until one is, up to the
/// deadline.
///
/// # Safety
/// `reqs` holds `n` handles.
pub(crate) unsafe fn completed(
    reqs: *mut Handle,
    n: usize,
    limit: usize,
    wait: bool,
) -> Result<Option<Vec<usize>>> {
    let start = Instant::now();
    loop {
        let mut active = false;
        let mut found = Vec::new();
        for i in 0..n {
            // SAFETY: `n` requests (the contract).
            let h = unsafe { req_at(reqs, i) };
            if inactive(h) {
                continue;
            }
            active = true;
            if ready(h)? {
                found.push(i);
                if found.len() == limit {
                    break;
                }
            }
        }
        if !active {
            return Ok(None);
        }
        if !found.is_empty() || !wait {
            return Ok(Some(found));
        }
        if start.elapsed() > mpi()?.world.group.timeout() {
            return Err(Fail::new(
                ERR_OTHER,
                "no request completed within the deadline",
            ));
        }
        std::thread::yield_now();
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    reqs: *mut Handle,
    index: *mut c_int,
    status: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Waitany", || {
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        // SAFETY: `count` requests; `index` and `status` as MPI says.
        unsafe {
            match completed(reqs, n, 1, true)?.and_then(|v| v.first().copied()) {
                Some(i) => {
                    put(index, i as c_int);
                    wait_one(reqs.add(i), status)
                }
                None => {
                    put(index, UNDEFINED);
                    set_status(status, empty_status());
                    Ok(())
                }
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Test(
    request: *mut Handle,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Test", || {
        if request.is_null() {
            return Err(Fail::arg("request is NULL"));
        }
        // SAFETY: non-NULL (the contract).
        let h = unsafe { *request };
        let done = h == REQUEST_NULL || ready(h)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(flag, c_int::from(done)) };
        if done {
            // SAFETY: as above.
            unsafe { wait_one(request, status) }?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    reqs: *mut Handle,
    flag: *mut c_int,
    statuses: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Testall", || {
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        let mut all = true;
        for i in 0..n {
            // SAFETY: `count` requests (the contract).
            let h = unsafe { req_at(reqs, i) };
            all &= inactive(h) || ready(h)?;
        }
        // SAFETY: NULL or valid (the contract).
        unsafe { put(flag, c_int::from(all)) };
        if all {
            // SAFETY: the same contract.
            unsafe { waitall(count, reqs, statuses) }?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    reqs: *mut Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Testany", || {
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        // SAFETY: `count` requests; `index`, `flag`, `status` as MPI says.
        unsafe {
            match completed(reqs, n, 1, false)? {
                Some(v) if !v.is_empty() => {
                    put(flag, 1);
                    put(index, v[0] as c_int);
                    wait_one(reqs.add(v[0]), status)
                }
                // None active counts as complete; one active, not yet.
                none => {
                    put(flag, c_int::from(none.is_none()));
                    put(index, UNDEFINED);
                    Ok(())
                }
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Request_free(request: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Request_free", || {
        if request.is_null() {
            return Err(Fail::arg("request is NULL"));
        }
        // SAFETY: non-NULL (the contract).
        let h = unsafe { *request };
        if let Some(freed) = greq::free_request(h) {
            freed?;
            // SAFETY: as above.
            unsafe { *request = REQUEST_NULL };
            return Ok(());
        }
        // A send goes on by itself, a receive stays posted in its
        // communicator's queue (it completes unseen, as MPI says), a
        // collective runs to its end on the group's thread; a persistent
        // request is gone once its operation is.
        match take_request(h)? {
            // The operation owns its scratch and unpacks into the
            // caller's buffer when it ends: it is waited for elsewhere.
            Request::Coll(p) => {
                std::thread::Builder::new()
                    .name("mpi-freed-request".into())
                    .spawn(move || drop(p.finish()))
                    .map_err(|e| {
                        Fail::new(ERR_INTERN, format!("no thread to finish the request: {e}"))
                    })?;
            }
            Request::Persistent(..) => {
                lock(&REQUESTS).release(h);
            }
            r => drop(r),
        }
        // SAFETY: as above.
        unsafe { *request = REQUEST_NULL };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(tag: c_int) -> Request {
        Request::Done(Status::new(0, tag, 0))
    }

    fn tag_of(r: Option<Request>) -> Option<c_int> {
        match r {
            Some(Request::Done(s)) => Some(s.tag),
            _ => None,
        }
    }

    #[test]
    fn a_request_handle_fits_an_int_and_a_kept_one_is_refused_once_its_entry_is_reused() {
        let mut t = Table::new();
        let a = t.add(done(1)).ok().unwrap();
        // MPI_Request_toint and _fromint keep it, also widened with its
        // sign.
        assert!(a as c_int > 0);
        assert_eq!(a as c_int as Handle, a);
        assert!(a & 0xf == 0 && a != SENT && a != REQUEST_NULL);
        assert_eq!(tag_of(t.take(a)), Some(1));
        // The entry serves the next request under another generation.
        let b = t.add(done(2)).ok().unwrap();
        assert_ne!(a, b);
        assert!(t.get(a).is_none() && t.take(a).is_none());
        assert_eq!(tag_of(t.take(b)), Some(2));
        assert!(t.take(b).is_none());
        // Garbage and other handles are no requests.
        for h in [0, SENT, REQUEST_NULL, 0x1_0000, a + 8, usize::MAX, 1 << 40] {
            assert!(t.get(h).is_none(), "{h:#x}");
        }
    }

    #[test]
    fn a_persistent_request_keeps_its_handle_until_it_is_let_go() {
        let mut t = Table::new();
        let group = mw::local(1).unwrap().pop().unwrap();
        let comm = Comm::new(group, "test", ERRORS_RETURN, vec![0]);
        let p = Arc::new(more::Persist::Recv {
            comm,
            buf: 0,
            count: 0,
            dt: MPI_BYTE,
            source: 0,
            tag: 0,
        });
        let h = t.add(Request::Persistent(p.clone(), None)).ok().unwrap();
        assert!(t.take(h).is_some());
        // Held, not free: a new request takes another entry.
        let other = t.add(done(3)).ok().unwrap();
        assert_ne!(other, h);
        t.put(h, Request::Persistent(p, None));
        assert!(matches!(t.get(h), Some(Request::Persistent(..))));
        assert!(t.take(h).is_some());
        t.release(h);
        assert!(t.take(h).is_none());
        let again = t.add(done(4)).ok().unwrap();
        assert_ne!(again, h);
    }

    #[test]
    fn past_the_entries_a_request_is_refused_until_one_completes() {
        let mut t = Table::new();
        let handles: Vec<Handle> = (0..ENTRIES)
            .map(|i| t.add(done(i as c_int)).ok().unwrap())
            .collect();
        let mut sorted = handles.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ENTRIES);
        assert!(handles.iter().all(|&h| h <= c_int::MAX as Handle));
        assert!(t.add(done(-1)).is_err());
        assert_eq!(tag_of(t.take(handles[77])), Some(77));
        assert!(t.add(done(-2)).is_ok());
    }
}
