//! The receive half of a TCP link: the link core's frame reader
//! (`link::Reader`) fed off the socket, through the read stage
//! (`stage.rs`), without blocking, by whichever thread gets there first —
//! the link's I/O thread when mio says the socket is readable, or an
//! application thread waiting for a message from this peer
//! (caller-driven progress: no hand-off between threads on a small
//! message's path). One lock serialises the drivers; nobody blocks while
//! holding it.

use super::stage::{read_pieces_now, Stage};
use crate::auth::seal::{Opener, TAG_LEN};
use crate::inbox::Cores;
use crate::link::{
    heartbeat_interval, Carried, Core, Fed, Posted, ProtocolError, ReadError, Reader, Sink,
};
use crate::wire::{Header, HEADER_LEN};
use std::io::ErrorKind;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a direct read into a waiting caller's buffers goes on
/// without a byte before the assembler takes over (it also gives way,
/// bytes or not, after half a heartbeat period). Handing over costs the
/// message two copies (what was read, into the assembler's buffer; the
/// whole, out of it into the caller's), so a sender that pauses for a
/// moment — descheduled on a busy host — is waited for: handing over
/// after 200 µs made a 64 MiB ping-pong over TCP 53 ms one way here
/// (median of 7 runs); waiting up to 10 ms, 28–36 ms.
const DIRECT_STALL: Duration = Duration::from_millis(10);

/// How long a direct read spins (or yields) on an empty socket before it
/// sleeps in `poll(2)` until bytes come (the sender may need this core);
/// spinning longer measured no better, sleeping sooner worse.
const DIRECT_SPIN: Duration = Duration::from_millis(1);

/// A direct read from a peer on this host with at least this much left
/// to come sleeps until this much is in (`SO_RCVLOWAT`), not spinning on
/// the socket. Asking an empty socket again and again takes its lock,
/// which the sender's side needs to queue the bytes (on loopback the
/// sender's system call runs the receiving stack); over a 16 MiB
/// ping-pong the receiver asked about 20 000 times per message. Not
/// across a network: there the contention is not (the receiving stack
/// runs where the card's interrupt does), a batch takes milliseconds to
/// come (2.2 ms at 1 Gbit/s), and Linux may clamp the receive window to
/// the mark while it grows the buffer for it. Setting the mark back to 1 signals a
/// socket already readable (Linux's `tcp_set_rcvlowat`), so the link's
/// thread, which mio polls edge-triggered, misses nothing.
const PACED: usize = 256 << 10;

/// The socket's low-water mark for readiness (`SO_RCVLOWAT`) while a
/// direct read sleeps for batches; back to 1 (the default) when dropped.
struct Pacing<'a> {
    stream: &'a TcpStream,
    mark: usize,
}

impl Pacing<'_> {
    fn set(&mut self, bytes: usize) {
        if bytes == self.mark {
            return;
        }
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: a socket this link holds open, an int option of its size.
        let rc = unsafe {
            libc::setsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            self.mark = bytes;
        }
    }
}

impl Drop for Pacing<'_> {
    fn drop(&mut self) {
        self.set(1);
    }
}

/// Where a direct read stopped.
enum Read {
    Full,
    /// After this many bytes, none came for a while.
    Stalled(usize),
    Ended,
}

/// Where acting on a header left the pump.
enum Took {
    /// Reading goes on.
    Going,
    /// The posted message is in its buffers.
    Filled,
    /// The stream ended.
    Ended,
}

/// Where checking an envelope in a posted receive's buffers stopped.
enum Checked {
    /// Read whole; this is the frame's header, authentic.
    Authentic(Header),
    /// The bytes stopped coming after this many, or it is not the posted
    /// message (all of it read): the reader assembles it from them.
    Partly(usize),
    /// The stream ended.
    Ended,
}

/// The first `n` bytes of `pieces`, as pieces.
fn prefix<'a>(n: usize, pieces: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let mut left = n;
    pieces
        .iter()
        .map(|p| {
            let take = left.min(p.len());
            left -= take;
            &p[..take]
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// Zero the first `n` bytes of `p`'s buffers (head, then body): bytes
/// read into them that did not turn out to be the posted message, whole
/// and authentic, are not left for the caller to find when its call
/// fails. Only the failure paths pay for it.
fn wipe(p: &mut Posted<'_>, n: usize) {
    let in_head = n.min(p.head.len());
    p.head[..in_head].fill(0);
    let in_body = (n - in_head).min(p.body.len());
    p.body[..in_body].fill(0);
}

/// Show `f` the bytes of `pieces` (one run of bytes across them) in
/// `range`, in order.
fn each_in(pieces: &[&mut [u8]], range: std::ops::Range<usize>, f: &mut dyn FnMut(&[u8])) {
    let mut start = 0;
    for p in pieces {
        let end = start + p.len();
        let (from, to) = (range.start.max(start), range.end.min(end));
        if from < to {
            f(&p[from - start..to - start]);
        }
        start = end;
    }
}

/// What a posted receive reads is data (a collective's or a point-to-point
/// message): its bytes are progress of their sender.
const POSTED: crate::LaneKind = crate::LaneKind::Collective;

#[derive(Debug)]
struct State {
    reader: Reader,
    stage: Stage,
    last_byte: Instant,
    silent: bool,
    ended: bool,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Rx {
    peer: u32,
    stream: TcpStream,
    /// The peer is on this host (a loopback address): its sends run this
    /// socket's receiving stack, so a bulk direct read sleeps for batches
    /// ([`PACED`]).
    loopback: bool,
    state: Mutex<State>,
}

impl Rx {
    pub(crate) fn new(peer: u32, stream: TcpStream, opener: Option<Opener>, core: &Core) -> Rx {
        let loopback = stream
            .peer_addr()
            .is_ok_and(|a| a.ip().to_canonical().is_loopback());
        Rx {
            peer,
            stream,
            loopback,
            state: Mutex::new(State {
                reader: Reader::new(peer, core.world, core.max_message_bytes, opener),
                stage: Stage::new(),
                last_byte: Instant::now(),
                silent: false,
                ended: false,
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
            Ok(mut st) => self.pump(&mut st, core, sink, None),
            Err(_) => false,
        }
    }

    /// [`try_pump`](Self::try_pump) for a caller that posted its buffers
    /// (the link's frames go straight to the core): the awaited message,
    /// if it comes now, is read into them (`posted.filled`).
    pub(crate) fn try_pump_into(
        &self,
        core: &Core,
        sink: &dyn Sink,
        posted: &mut Posted<'_>,
    ) -> bool {
        match self.state.try_lock() {
            Ok(mut st) => self.pump(&mut st, core, sink, Some(posted)),
            Err(_) => false,
        }
    }

    fn end(&self, st: &mut State, core: &Core, sink: &dyn Sink) -> bool {
        if !st.ended {
            st.ended = true;
            st.reader.discard(&core.pool);
            st.stage.clear();
            sink.ended(core, self.peer);
        }
        true
    }

    /// A protocol error: cut the connection and end the link.
    fn refuse(&self, st: &mut State, core: &Core, sink: &dyn Sink) -> bool {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.end(st, core, sink)
    }

    /// The peer broke the protocol (or its goodbye came): say why, cut
    /// the connection and end the link.
    fn refused(&self, st: &mut State, core: &Core, sink: &dyn Sink, e: &ReadError) -> bool {
        e.log(self.peer);
        self.refuse(st, core, sink)
    }

    /// Bytes came: the peer is heard.
    fn heard(&self, st: &mut State, core: &Core) {
        st.last_byte = Instant::now();
        if st.silent {
            st.silent = false;
            core.heard(self.peer);
        }
    }

    /// Process every complete frame that can be read without blocking
    /// (with `posted`: until the posted message is read into its buffers).
    fn pump(
        &self,
        st: &mut State,
        core: &Core,
        sink: &dyn Sink,
        mut posted: Option<&mut Posted<'_>>,
    ) -> bool {
        // Once the posted message is in, the socket is not read again, and
        // what is staged goes to the reader while it holds whole frames:
        // those must not wait where no readiness event announces them. The
        // start of a frame stays staged (its rest is on its way, or in the
        // socket), so that a receive posted for it next reads it straight
        // into its buffers rather than out of the reader's.
        let mut filled = false;
        loop {
            if st.ended {
                return true;
            }
            if st.reader.frame_ready() {
                match st.reader.frame(core) {
                    Ok(Some((h, payload))) => {
                        // The posted message, assembled (its start was
                        // read before it was posted): the caller takes
                        // it from the core, and the socket waits for its
                        // next receive, which reads straight into its
                        // buffers. Read on, the posted receive, behind
                        // this one, could take no frame after it.
                        let answers = posted.as_deref().is_some_and(|p| p.is_for(&h));
                        if !sink.data(core, self.peer, h, payload) {
                            return self.refuse(st, core, sink);
                        }
                        if answers {
                            filled = true;
                            posted = None;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => return self.refused(st, core, sink, &e),
                }
                continue;
            }
            // (A header that will not decode is fed, to be refused now.)
            let keep = filled
                && !st.reader.mid_frame()
                && !st.stage.holds_frame()
                && st.stage.head().is_none_or(|h| st.reader.decodes(h));
            let n = if !st.stage.is_empty() && !keep {
                st.stage.give(st.reader.space())
            } else if filled {
                return false;
            } else {
                // Inside a body its bytes go straight to the reader; at a
                // frame boundary a read takes what has come, up to STAGE.
                let in_body = st.reader.in_body();
                let got = if in_body {
                    read_pieces_now(&self.stream, &mut [st.reader.space()], 0)
                } else {
                    st.stage.read(&self.stream)
                };
                match got {
                    Ok(0) => return self.end(st, core, sink),
                    Ok(n) => {
                        self.heard(st, core);
                        if !in_body {
                            continue;
                        }
                        n
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                    Err(_) => return self.end(st, core, sink),
                }
            };
            let took = match st.reader.fed(core, n) {
                Ok(fed) => self.take(st, core, sink, fed, posted.as_deref_mut()),
                Err(e) => Err(e),
            };
            match took {
                Ok(Took::Going) => {}
                Ok(Took::Filled) => {
                    filled = true;
                    posted = None;
                }
                Ok(Took::Ended) => return self.end(st, core, sink),
                Err(e) => return self.refused(st, core, sink, &e),
            }
        }
    }

    /// Act on what the bytes just read made: a header's body, or an
    /// envelope, is read into `posted`'s buffers if it is the posted
    /// message, else assembled.
    fn take(
        &self,
        st: &mut State,
        core: &Core,
        sink: &dyn Sink,
        fed: Fed,
        posted: Option<&mut Posted<'_>>,
    ) -> Result<Took, ReadError> {
        match fed {
            Fed::More => Ok(Took::Going),
            // An envelope: read it whole; nothing in it counts before it
            // opens.
            Fed::Envelope(outer) => match posted {
                Some(p) => self.envelope_into(st, core, sink, outer, p),
                None => {
                    st.reader.envelope(outer, &core.pool, &[])?;
                    Ok(Took::Going)
                }
            },
            Fed::Header(h) => {
                let Some(h) = st.reader.dispatch(core, h)? else {
                    return Ok(Took::Going);
                };
                let Some(p) = posted.filter(|p| self.takes(core, sink, p, &h)) else {
                    st.reader.body(h, &core.pool);
                    return Ok(Took::Going);
                };
                match self.read_direct(st, core, p.src, &mut [&mut *p.head, &mut *p.body]) {
                    Read::Full => {
                        p.took(core, &h);
                        sink.took_direct(core, self.peer, &h)?;
                        p.filled = true;
                        Ok(Took::Filled)
                    }
                    Read::Ended => Ok(Took::Ended),
                    Read::Stalled(n) => {
                        let got = prefix(n, &[&*p.head, &*p.body]);
                        st.reader.resume(h, &core.pool, &got);
                        Ok(Took::Going)
                    }
                }
            }
        }
    }

    /// Whether the posted receive `p` takes frame `h` straight off the
    /// socket: it is the message waited for, and its turn has come.
    fn takes(&self, core: &Core, sink: &dyn Sink, p: &Posted<'_>, h: &Header) -> bool {
        p.wants(core, h) && sink.direct_now(core, self.peer, h)
    }

    /// Read `pieces` full from the socket for a caller waiting for them,
    /// as long as bytes keep coming; after [`DIRECT_STALL`] without a byte
    /// it stops (the bytes read so far are then handed to the reader).
    /// The bytes are progress from `src` (a rank the header said, once
    /// it is trusted; the link's peer before).
    fn read_direct(&self, st: &mut State, core: &Core, src: u32, pieces: &mut [&mut [u8]]) -> Read {
        self.read_direct_seen(st, core, src, pieces, &mut |_| {})
    }

    /// [`read_direct`](Self::read_direct), showing `seen` the bytes of
    /// each read, in order, as soon as they are in (while they are in
    /// cache).
    fn read_direct_seen(
        &self,
        st: &mut State,
        core: &Core,
        src: u32,
        pieces: &mut [&mut [u8]],
        seen: &mut dyn FnMut(&[u8]),
    ) -> Read {
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        // What the last read took ahead of the reader comes first.
        let mut read = st.stage.give_pieces(pieces);
        if read > 0 {
            each_in(pieces, 0..read, &mut *seen);
            core.progress(self.peer, src, POSTED);
        }
        let started = Instant::now();
        let mut quiet = started;
        let mut turns = 0u32;
        // The link's thread waits for this lock to send its heartbeats and
        // check silence: hold it at most half a heartbeat period.
        let hold = heartbeat_interval(core.liveness()) / 2;
        // Back to the default mark however this ends: the link's thread
        // must hear of every byte.
        let mut paced = Pacing {
            stream: &self.stream,
            mark: 1,
        };
        while read < total {
            if read > 0 && quiet.duration_since(started) >= hold {
                return Read::Stalled(read);
            }
            match read_pieces_now(&self.stream, pieces, read) {
                Ok(0) => return Read::Ended,
                Ok(n) => {
                    each_in(pieces, read..read + n, &mut *seen);
                    read += n;
                    self.heard(st, core);
                    quiet = st.last_byte;
                    core.progress(self.peer, src, POSTED);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    turns = turns.wrapping_add(1);
                    if self.loopback && read > 0 && total - read >= PACED {
                        // A bulk message under way: sleep until a batch of
                        // it is in rather than ask the socket again and
                        // again (each ask takes the socket's lock, which
                        // the sender's side needs to queue the bytes).
                        let left = DIRECT_STALL.saturating_sub(quiet.elapsed()).min(hold);
                        if left.is_zero() {
                            return Read::Stalled(read);
                        }
                        paced.set((total - read).min(PACED));
                        let _ = crate::form::poll_readable(&[self.stream.as_raw_fd()], left);
                        continue;
                    }
                    // A crowded host sleeps in poll(2) at once
                    // (`Cores::Crowded`).
                    if turns.is_multiple_of(8) || core.cores == Cores::Crowded {
                        let waited = quiet.elapsed();
                        if waited >= DIRECT_STALL {
                            return Read::Stalled(read);
                        }
                        if waited >= DIRECT_SPIN || core.cores == Cores::Crowded {
                            let left = (DIRECT_STALL - waited).min(hold);
                            let _ = crate::form::poll_readable(&[self.stream.as_raw_fd()], left);
                            continue;
                        }
                    }
                    if core.cores == Cores::Own {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                Err(_) => return Read::Ended,
            }
        }
        Read::Full
    }

    /// An envelope (outer header `outer`) of the posted message's length:
    /// read whole in one go — its frame header aside, its payload into the
    /// posted buffers, its tag aside — and, if the frame header claims to
    /// be the posted message, its tag is checked where the payload lies.
    /// Otherwise (another message of that length), or if the bytes stop
    /// coming, the reader assembles it with what was read. Either way the
    /// posted buffers hold the message's bytes only once they are the
    /// posted message's, authentic: whatever else was read into them is
    /// zeroed (a tag that fails ends the link, and the call with it, and
    /// the caller's buffers hold none of an on-path attacker's bytes).
    fn envelope_into(
        &self,
        st: &mut State,
        core: &Core,
        sink: &dyn Sink,
        outer: Header,
        p: &mut Posted<'_>,
    ) -> Result<Took, ReadError> {
        let fits = outer.len == (HEADER_LEN + p.len() + TAG_LEN) as u64;
        let opener = if fits && st.reader.in_place() {
            st.reader.take_opener()
        } else {
            None
        };
        let Some(mut opener) = opener else {
            st.reader.envelope(outer, &core.pool, &[])?;
            return Ok(Took::Going);
        };
        let (mut inner, mut tag) = ([0u8; HEADER_LEN], [0u8; TAG_LEN]);
        let checked = self.envelope_checked(st, core, sink, p, &mut opener, &mut inner, &mut tag);
        st.reader.put_opener(opener);
        let h = match checked? {
            Checked::Authentic(h) => h,
            Checked::Ended => return Ok(Took::Ended),
            Checked::Partly(n) => {
                // The check is abandoned; the reader takes over, with a
                // copy of what was read. The posted buffers keep none of
                // it: it is not authentic yet, nor (all read) the posted
                // message, and the call may yet fail.
                let read = prefix(n, &[&inner, &*p.head, &*p.body, &tag]);
                let assembled = st.reader.envelope(outer, &core.pool, &read);
                wipe(p, n.saturating_sub(HEADER_LEN));
                assembled?;
                return Ok(Took::Going);
            }
        };
        match st.reader.dispatch(core, h) {
            Ok(Some(h)) if p.wants(core, &h) => {
                p.took(core, &h);
                sink.took_direct(core, self.peer, &h)?;
                p.filled = true;
                Ok(Took::Filled)
            }
            refused => {
                // Authentic, but refused: the link ends, the call fails.
                wipe(p, p.len());
                refused?;
                Err(ProtocolError::NotCarried(Carried::Frame).into())
            }
        }
    }

    /// `envelope_into`'s reading: the envelope's frame header into
    /// `inner`, its payload into the posted buffers and its tag into
    /// `tag`, the tag checked by `o` (the link's opener, out of the reader
    /// meanwhile) as the bytes arrive. See [`Checked`] for where it stops.
    #[allow(
        clippy::too_many_arguments,
        reason = "the envelope's parts, read in place"
    )]
    fn envelope_checked(
        &self,
        st: &mut State,
        core: &Core,
        sink: &dyn Sink,
        p: &mut Posted<'_>,
        o: &mut Opener,
        inner: &mut [u8; HEADER_LEN],
        tag: &mut [u8; TAG_LEN],
    ) -> Result<Checked, ReadError> {
        let mut check = o.begin()?;
        // Everything but the tag is covered, as it arrives.
        let covered = HEADER_LEN + p.len();
        let mut at = 0;
        let mut failed = None;
        let mut see = |bytes: &[u8]| {
            let take = bytes.len().min(covered.saturating_sub(at));
            at += bytes.len();
            if take > 0 && failed.is_none() {
                failed = check.update(&bytes[..take]).err();
            }
        };
        // Not yet authentic: progress from the link's peer only.
        let got = self.read_direct_seen(
            st,
            core,
            self.peer,
            &mut [&mut inner[..], &mut *p.head, &mut *p.body, &mut tag[..]],
            &mut see,
        );
        // How far into the posted buffers the bytes read reach.
        let written = match got {
            Read::Stalled(n) => n.saturating_sub(HEADER_LEN),
            Read::Full | Read::Ended => p.len(),
        };
        // Not yet authentic: it only decides whether the payload stays.
        let posted = matches!(got, Read::Full)
            && failed.is_none()
            && Header::decode(inner, core.world, core.max_message_bytes)
                .is_ok_and(|c| self.takes(core, sink, p, &c));
        if posted {
            return match check.finish(inner, p.len(), tag, core.world, core.max_message_bytes) {
                Ok(h) => Ok(Checked::Authentic(h)),
                Err(e) => {
                    // Altered on the way: the call fails, and the bytes
                    // that failed the check are not left in its buffers.
                    wipe(p, written);
                    Err(e.into())
                }
            };
        }
        if let Some(e) = failed {
            wipe(p, written);
            return Err(e.into());
        }
        Ok(match got {
            Read::Ended => {
                wipe(p, written);
                Checked::Ended
            }
            Read::Stalled(n) => Checked::Partly(n),
            Read::Full => Checked::Partly(HEADER_LEN + p.len() + TAG_LEN),
        })
    }

    /// Read and process what has arrived, waiting for the lock if another
    /// thread is reading (it never blocks while holding it): the link's
    /// I/O thread after a readiness event, which must not be lost.
    /// Returns whether the link has ended.
    pub(crate) fn pump_now(&self, core: &Core, sink: &dyn Sink) -> bool {
        let mut st = self.lock();
        self.pump(&mut st, core, sink, None)
    }

    /// The connection failed (a write did): cut it and end the link.
    pub(crate) fn fail(&self, core: &Core, sink: &dyn Sink) {
        let mut st = self.lock();
        self.refuse(&mut st, core, sink);
    }

    /// `None` if the link has ended. Otherwise: mark the link's ranks
    /// silent if nothing, not even a heartbeat, came for the liveness
    /// limit (`Core::silence_limit`), and say how long until that check
    /// is due.
    ///
    /// A message that came from the peer another way (over QUIC, beside
    /// this sidecar) is word from it too: it ends the silence in the
    /// inbox, and this link's with it, which falls due again a limit
    /// after the last such word. Otherwise a sidecar still in TCP's
    /// retransmission backoff after a cut healed would hold its peer
    /// silent here for good, and a second cut would go unseen until a
    /// deadline ran out. (The inbox is asked only once the link itself
    /// has been quiet for the limit: this runs on every I/O turn.)
    pub(crate) fn check_silence(&self, core: &Core) -> Option<Duration> {
        let mut st = self.lock();
        if st.ended {
            return None;
        }
        let limit = core.silence_limit(self.peer);
        let mut quiet = st.last_byte.elapsed();
        if quiet >= limit {
            if let Some(word) = core.inbox.last_progress(self.peer) {
                quiet = quiet.min(word.elapsed());
            }
        }
        if st.silent && quiet < limit {
            st.silent = false;
        }
        if !st.silent && quiet >= limit {
            st.silent = true;
            core.silent(self.peer);
        }
        Some(limit.saturating_sub(quiet).max(Duration::from_millis(1)))
    }

    /// The socket's low-water mark for readiness (`SO_RCVLOWAT`).
    #[cfg(test)]
    pub(crate) fn low_water(&self) -> usize {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a socket this link holds open; `v` and `len` sized for
        // an int option.
        let rc = unsafe {
            libc::getsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "getsockopt(SO_RCVLOWAT)");
        v as usize
    }

    /// Cut the connection (both directions): the reader sees its end.
    pub(crate) fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}
