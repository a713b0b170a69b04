//! Single copy for large messages: the receiving process copies the
//! payload straight out of the sender's memory (`process_vm_readv`, Linux's
//! cross-memory attach) instead of both sides copying it through the ring.
//!
//! A message of at least the link's threshold goes into the ring as its
//! header (marked in `seq`, which only QUIC uses) and a [`Descriptor`]: a
//! ticket and the addresses and lengths of the sender's buffers. The
//! reader copies from there into the posted receive's buffers, or into a
//! pooled buffer for the inbox, and the sender's `send` returns once the
//! copy is done: the ring's `copy` word ([`CopyState`]) says so.
//!
//! Either side may stop waiting. The sender withdraws the message at its
//! deadline (or when the link ends) and the reader, whose move to `Done`
//! then fails, drops what it read: a buffer the sender's caller has
//! reused is never delivered. A reader whose sender died meanwhile (its
//! pidfd says so) drops it too: no other process that was given the
//! same pid is ever read from.
//!
//! Formation decides per direction whether this works: the kernel may
//! forbid it (Yama's ptrace scope, a seccomp profile, another pid
//! namespace). Each rank publishes the address of a random value of its
//! own; the peer that reads it back, through a pidfd opened first, may
//! take single copies from it (`setup.rs`).

use super::ring::CopyState;
use super::{Rx, ShmLink, Tx, SPIN};
use crate::link::{Core, Next, Posted};
use crate::wire::{FrameType, Header};
use crate::{LinkKind, Payload, TransportError};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Instant;

/// Sender's buffers a descriptor can name.
pub(crate) const MAX_PARTS: usize = 4;
/// Bytes of a descriptor in the ring: ticket, count, (address, length)s.
pub(crate) const DESC_LEN: usize = 8 + 8 + MAX_PARTS * 16;
/// `Header::seq` of a frame whose body is a descriptor.
pub(crate) const MARK: u16 = 0x5343;
/// Messages at least this long go by single copy (`SHM_SINGLE_COPY`; 0:
/// none). Off by default: on the machines measured so far the pipelined
/// copy through a ring that stays in cache moves large messages 2–3×
/// faster than `process_vm_readv`, which runs at about 60 % of `memcpy`
/// (docs/benchmarks.md).
pub const DEFAULT_THRESHOLD: usize = 0;
/// What a single copy into a buffer of its own reads before that buffer
/// grows; it then doubles as the bytes come. The sender's claim (up to
/// `MAX_MESSAGE_BYTES`) is never allocated on its word: a lie about its
/// buffers fails at the first byte that is not there, having cost this
/// side what it read.
const FIRST_READ: usize = 1 << 20;

/// The sender's side of one single-copy message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Descriptor {
    pub ticket: u64,
    pub parts: Vec<(u64, u64)>,
}

impl Descriptor {
    /// The descriptor of `parts` (at most [`MAX_PARTS`]).
    fn of(ticket: u64, parts: &[&[u8]]) -> Descriptor {
        Descriptor {
            ticket,
            parts: parts
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| (p.as_ptr() as u64, p.len() as u64))
                .collect(),
        }
    }

    pub(crate) fn encode(&self) -> [u8; DESC_LEN] {
        let mut m = [0u8; DESC_LEN];
        m[..8].copy_from_slice(&self.ticket.to_le_bytes());
        m[8..16].copy_from_slice(&(self.parts.len() as u64).to_le_bytes());
        for (i, (addr, len)) in self.parts.iter().enumerate() {
            let at = 16 + i * 16;
            m[at..at + 8].copy_from_slice(&addr.to_le_bytes());
            m[at + 8..at + 16].copy_from_slice(&len.to_le_bytes());
        }
        m
    }

    /// A descriptor of exactly `len` payload bytes; `None` for anything
    /// else (too many parts, lengths that do not add up).
    pub(crate) fn decode(m: &[u8], len: u64) -> Option<Descriptor> {
        let word = |at: usize| Some(u64::from_le_bytes(m.get(at..at + 8)?.try_into().ok()?));
        let n = usize::try_from(word(8)?).ok()?;
        if n > MAX_PARTS {
            return None;
        }
        let parts: Vec<(u64, u64)> = (0..n)
            .map(|i| Some((word(16 + i * 16)?, word(24 + i * 16)?)))
            .collect::<Option<_>>()?;
        let total = parts.iter().try_fold(0u64, |sum, &(addr, l)| {
            addr.checked_add(l)?;
            sum.checked_add(l)
        })?;
        (total == len).then_some(Descriptor {
            ticket: word(0)?,
            parts,
        })
    }
}

/// The value whose address this process publishes at formation.
fn probe_value() -> &'static [u8; 16] {
    static PROBE: OnceLock<[u8; 16]> = OnceLock::new();
    PROBE.get_or_init(|| {
        let mut b = [0u8; 16];
        if getrandom::getrandom(&mut b).is_err() {
            // Without randomness no peer can tell this process apart from
            // another with its pid: all zero never matches (see `open`).
            b = [0; 16];
        }
        b
    })
}

/// This process's pid, the probe's address and its value (the offer).
pub(crate) fn probe() -> (u32, u64, [u8; 16]) {
    let v = probe_value();
    (std::process::id(), v.as_ptr() as u64, *v)
}

/// Why this process cannot read a peer's memory (it then takes no single
/// copies from that peer).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SourceError {
    /// The peer offered no probe value (it had no randomness to make one).
    #[error("the peer has no probe")]
    NoProbe,
    /// The offered pid is not a pid here.
    #[error("pid {0} out of range")]
    PidRange(u32),
    /// The kernel gave no pidfd for the pid (no such process, no
    /// `pidfd_open` in this kernel, or no permission).
    #[error("pidfd_open: {0}")]
    PidfdOpen(io::Error),
    /// The kernel returned a descriptor that is not one.
    #[error("pidfd {0} out of range")]
    PidfdRange(libc::c_long),
    /// Reading the probe failed (ptrace permission: Yama, a container's
    /// seccomp profile, another user).
    #[error("process_vm_readv: {0}")]
    Read(io::Error),
    /// The probe read back another value, or the process is gone.
    #[error("the pid names another process (another pid namespace?)")]
    AnotherProcess,
}

/// A peer process this one may copy from.
#[derive(Debug)]
pub(crate) struct Source {
    pid: libc::pid_t,
    pidfd: OwnedFd,
}

impl Source {
    /// The peer that offered `pid` and a probe at `addr` holding `value`,
    /// if this process can read its memory; why not otherwise.
    pub(crate) fn open(pid: u32, addr: u64, value: [u8; 16]) -> Result<Source, SourceError> {
        if value == [0; 16] {
            return Err(SourceError::NoProbe);
        }
        let pid = libc::pid_t::try_from(pid).map_err(|_| SourceError::PidRange(pid))?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new
        // descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(SourceError::PidfdOpen(io::Error::last_os_error()));
        }
        let fd = i32::try_from(fd).map_err(|_| SourceError::PidfdRange(fd))?;
        // SAFETY: the descriptor was just returned to this process.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
        let src = Source { pid, pidfd };
        let mut got = [0u8; 16];
        src.read(&[(addr, 16)], &mut [&mut got[..]])
            .map_err(SourceError::Read)?;
        // The pidfd was opened before the read: if the process is still
        // alive, the pid named it throughout.
        if got != value || !src.alive() {
            return Err(SourceError::AnotherProcess);
        }
        Ok(src)
    }

    /// Whether the process has not exited.
    pub(crate) fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r == 0
    }

    /// Whether the process is stopped (by a signal, or a debugger): it
    /// runs none of its threads, its I/O threads included.
    pub(crate) fn stopped(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return false;
        };
        // The state follows the command name, which is in parentheses and
        // may hold anything, parentheses included.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next());
        // Still the same process: the pidfd says it has not exited.
        matches!(state, Some("T" | "t")) && self.alive()
    }

    /// Copy the peer's `remote` ranges into `local`, in order (equal
    /// totals).
    pub(crate) fn read(&self, remote: &[(u64, u64)], local: &mut [&mut [u8]]) -> io::Result<()> {
        let total: u64 = remote.iter().map(|r| r.1).sum();
        let mut done: u64 = 0;
        while done < total {
            let mut lparts: Vec<(u64, u64)> = Vec::with_capacity(local.len());
            for p in local.iter_mut() {
                lparts.push((p.as_mut_ptr() as u64, p.len() as u64));
            }
            let liov = ranges_from(&lparts, done, |(a, l)| libc::iovec {
                iov_base: a as *mut libc::c_void,
                iov_len: l as usize,
            });
            // SAFETY: every local iovec lies inside one of `local`'s
            // slices, which this call borrows mutably.
            done += unsafe { self.read_once(remote, done, &liov) }? as u64;
        }
        Ok(())
    }

    /// Copy the peer's `remote` ranges (`total` bytes) into `buf` after
    /// `front` zero bytes (`buf` emptied first), which grows as the bytes
    /// come (see [`FIRST_READ`]).
    pub(crate) fn read_growing(
        &self,
        remote: &[(u64, u64)],
        front: usize,
        total: usize,
        mut buf: Vec<u8>,
    ) -> io::Result<Vec<u8>> {
        buf.clear();
        buf.resize(front, 0);
        let total = front.saturating_add(total);
        while buf.len() < total {
            let done = buf.len();
            if buf.capacity() == done {
                let more = done.max(FIRST_READ).min(total - done);
                buf.try_reserve_exact(more)
                    .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
            }
            let room = (buf.capacity() - done).min(total - done);
            let spare = &mut buf.spare_capacity_mut()[..room];
            let liov = [libc::iovec {
                iov_base: spare.as_mut_ptr().cast(),
                iov_len: room,
            }];
            // SAFETY: the one local iovec is `buf`'s spare capacity,
            // borrowed mutably until `read_once` returns.
            let n = unsafe { self.read_once(remote, (done - front) as u64, &liov) }?;
            // SAFETY: the kernel wrote `n` bytes (at most `room`) at the
            // start of the spare capacity: they are initialised.
            unsafe { buf.set_len(done + n.min(room)) };
        }
        Ok(buf)
    }

    /// One `process_vm_readv` of the peer's `remote` ranges from byte
    /// `from` on into `local`; how many bytes (never 0: the end of what
    /// the peer named is an error).
    ///
    /// # Safety
    ///
    /// Every iovec of `local` is memory of this process, writable, that
    /// nothing else reads or writes until this returns.
    unsafe fn read_once(
        &self,
        remote: &[(u64, u64)],
        from: u64,
        local: &[libc::iovec],
    ) -> io::Result<usize> {
        let riov = ranges_from(remote, from, |(a, l)| libc::iovec {
            iov_base: a as *mut libc::c_void,
            iov_len: l as usize,
        });
        loop {
            // SAFETY: the local iovecs are writable memory of this process
            // (the caller's contract); the remote ones are the peer's, and
            // the kernel checks them (a range the peer does not have mapped
            // is EFAULT, never a fault here).
            let n = unsafe {
                libc::process_vm_readv(
                    self.pid,
                    local.as_ptr(),
                    local.len() as libc::c_ulong,
                    riov.as_ptr(),
                    riov.len() as libc::c_ulong,
                    0,
                )
            };
            match n {
                n if n > 0 => return Ok(n as usize),
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// `parts` from byte `from` on, as `make` builds them (empty ones left
/// out).
fn ranges_from<T>(parts: &[(u64, u64)], from: u64, make: impl Fn((u64, u64)) -> T) -> Vec<T> {
    let mut skip = from;
    let mut out = Vec::with_capacity(parts.len());
    for &(addr, len) in parts {
        if skip >= len {
            skip -= len;
            continue;
        }
        out.push(make((addr + skip, len - skip)));
        skip = 0;
    }
    out
}

/// A descriptor being read out of the ring.
#[derive(Debug)]
pub(super) struct Pending {
    header: Header,
    desc: [u8; DESC_LEN],
    have: usize,
}

impl Pending {
    pub(super) fn new(header: Header) -> Pending {
        Pending {
            header,
            desc: [0; DESC_LEN],
            have: 0,
        }
    }
}

/// What reading a single-copy message came to.
pub(super) enum Took {
    /// To the inbox (or relayed).
    Delivered,
    /// Into the posted receive's buffers.
    Filled,
    /// The link ended.
    Ended,
}

impl ShmLink {
    /// Whether a message of these parts goes by single copy.
    pub(super) fn single_copy(&self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.single_copy_from > 0
            && len >= self.single_copy_from
            && parts.iter().filter(|p| !p.is_empty()).count() <= MAX_PARTS
    }

    /// Offer the message for a single copy and wait until the peer has
    /// copied it (or withdraw it).
    pub(super) fn send_single(
        &self,
        tx: &mut Tx,
        core: &Core,
        mut header: Header,
        parts: &[&[u8]],
        dst: u32,
    ) -> Result<(), TransportError> {
        tx.ticket += 1;
        let ticket = tx.ticket;
        let desc = Descriptor::of(ticket, parts).encode();
        header.seq = MARK;
        self.out.offer_copy(ticket);
        // The reader must come now, whatever lane it waits on: this
        // sender waits for it.
        if let Err(e) = self.write_all(tx, &header.encode(), &[&desc], None, core, dst) {
            self.withdraw(ticket);
            return Err(e);
        }
        self.wait_copied(core, tx.head, ticket, dst)?;
        self.single_copies.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Take message `ticket` back; whether it was (not yet copied).
    fn withdraw(&self, ticket: u64) -> bool {
        self.out
            .move_copy(ticket, CopyState::Offered, CopyState::Withdrawn)
            || self
                .out
                .move_copy(ticket, CopyState::Reading, CopyState::Withdrawn)
    }

    fn wait_copied(
        &self,
        core: &Core,
        head: u64,
        ticket: u64,
        dst: u32,
    ) -> Result<(), TransportError> {
        let started = Instant::now();
        let deadline = started + core.timeout();
        loop {
            match self.out.copy_state(ticket) {
                Some(CopyState::Done) => return Ok(()),
                Some(CopyState::Offered | CopyState::Reading) => {}
                _ => return Err(self.corrupt(core, dst)),
            }
            let ended = self.ended.load(Ordering::Acquire);
            let now = Instant::now();
            if ended || now >= deadline {
                if !self.withdraw(ticket) {
                    // Copied meanwhile.
                    continue;
                }
                if ended {
                    return Err(TransportError::PeerDisconnected { rank: dst });
                }
                // The stream has a message in it the peer never took: it
                // cannot go on past it.
                tracing::warn!(
                    peer = self.peer,
                    "the peer took no single-copy message for a whole deadline; closing the link"
                );
                core.silent(self.peer);
                self.fail(core);
                return Err(TransportError::Timeout { waiting_on: dst });
            }
            // Meanwhile, read what same-host peers send this rank: ranks
            // that all send large messages at once (a ring's step, a
            // pairwise exchange) copy each other's, none waiting for a
            // link's thread to wake.
            for (_, l) in core.links() {
                if l.kind() == LinkKind::SharedMemory {
                    l.poll(core, None);
                }
            }
            if now < started + SPIN {
                self.pause();
                continue;
            }
            // Asleep until the reader rings (it does once it is done, if
            // asked first). Counted as waiting before asking: the bell's
            // wake-up cannot pass between the last look and the sleep.
            self.sleep_for_bell(deadline, || {
                let _ = self.out.want_room(head);
                self.out.copy_state(ticket) != Some(CopyState::Done)
            });
        }
    }

    /// Read the rest of a pending descriptor out of the ring, then its
    /// message; `None` while the descriptor is not whole.
    pub(super) fn read_pending(
        &self,
        rx: &mut Rx,
        core: &Core,
        posted: Option<&mut Posted<'_>>,
    ) -> Result<Option<Took>, super::ring::Corrupt> {
        let Some(p) = rx.pending.as_mut() else {
            return Ok(None);
        };
        let n = self.inn.read(&mut rx.cursor, &mut p.desc[p.have..])?;
        if n > 0 {
            self.freed_some(&rx.cursor);
        }
        p.have += n;
        if p.have < DESC_LEN {
            return Ok(None);
        }
        let Some(p) = rx.pending.take() else {
            return Ok(None);
        };
        Ok(Some(self.take_single(rx, core, p, posted)))
    }

    fn take_single(
        &self,
        rx: &mut Rx,
        core: &Core,
        p: Pending,
        posted: Option<&mut Posted<'_>>,
    ) -> Took {
        let refuse = |rx: &mut Rx, why: &str| {
            tracing::error!(peer = self.peer, "protocol error: {why}; closing the link");
            self.refuse(rx, core);
            Took::Ended
        };
        let (Some(src), Some(d)) = (
            self.source.as_ref(),
            Descriptor::decode(&p.desc, p.header.len),
        ) else {
            return refuse(rx, "a single-copy descriptor this side cannot take");
        };
        if !self
            .inn
            .move_copy(d.ticket, CopyState::Offered, CopyState::Reading)
        {
            // Withdrawn: the sender is ending the link.
            return refuse(rx, "a single-copy message not on offer");
        }
        let h = Header { seq: 0, ..p.header };
        let h = match core.on_header(self.peer, h) {
            Next::Body(h) => h,
            Next::Continue | Next::End => {
                return refuse(rx, "a single-copy message that is not data")
            }
        };
        core.progress(self.peer, h.src, h.kind);
        match posted {
            Some(p) if p.wants(core, &h) => {
                let read = src.read(&d.parts, &mut [&mut *p.head, &mut *p.body]);
                if !self.copied(rx, core, src, d.ticket, read) {
                    return Took::Ended;
                }
                p.took(core, &h);
                p.filled = true;
                Took::Filled
            }
            _ => {
                // `h.len` is under the cap (the header decoded), and the
                // buffer grows only as the bytes come.
                let len = usize::try_from(h.len).unwrap_or(usize::MAX);
                let front = h.front();
                let buf = core
                    .pool
                    .take_reusing(front.saturating_add(len), FIRST_READ);
                let (buf, read) = match src.read_growing(&d.parts, front, len, buf) {
                    Ok(buf) => (buf, Ok(())),
                    Err(e) => (Vec::new(), Err(e)),
                };
                if !self.copied(rx, core, src, d.ticket, read) {
                    return Took::Ended;
                }
                let mut payload = Payload::from_vec_in(buf, Some(&core.pool));
                payload.advance(front);
                if !core.on_data(self.peer, h, payload) {
                    self.refuse(rx, core);
                    return Took::Ended;
                }
                Took::Delivered
            }
        }
    }

    /// After the copy of message `ticket`: whether what was read stands
    /// (the sender was alive and still waiting when it ended). The sender
    /// is told either way.
    fn copied(
        &self,
        rx: &mut Rx,
        core: &Core,
        src: &Source,
        ticket: u64,
        read: io::Result<()>,
    ) -> bool {
        let stands = match read {
            Ok(()) if src.alive() => {
                self.inn
                    .move_copy(ticket, CopyState::Reading, CopyState::Done)
            }
            Ok(()) => false,
            Err(e) => {
                if src.alive() {
                    tracing::error!(
                        peer = self.peer,
                        "single copy from rank {} failed ({e}): the memory it named cannot be read; closing the link",
                        self.peer
                    );
                }
                false
            }
        };
        if self.inn.producer_waits() {
            self.ring_bell();
        }
        if !stands {
            self.refuse(rx, core);
        }
        stands
    }
}

/// Whether a header read from the ring announces a single-copy message.
pub(super) fn marked(h: &Header) -> bool {
    h.seq == MARK && h.ftype == FrameType::Data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_must_add_up() {
        let a = vec![1u8; 100];
        let b = vec![2u8; 28];
        let d = Descriptor::of(7, &[&a, &[], &b]);
        assert_eq!(d.parts.len(), 2, "empty parts are left out");
        let m = d.encode();
        assert_eq!(Descriptor::decode(&m, 128), Some(d.clone()));
        assert_eq!(Descriptor::decode(&m, 127), None, "lengths must add up");
        let mut many = m;
        many[8] = (MAX_PARTS + 1) as u8;
        assert_eq!(Descriptor::decode(&many, 128), None);
        let mut wraps = m;
        wraps[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            Descriptor::decode(&wraps, 128),
            None,
            "a range past the end"
        );
        assert_eq!(Descriptor::decode(&m[..20], 128), None, "short");
    }

    #[test]
    fn a_process_reads_its_own_probe_and_not_a_wrong_value() {
        let (pid, addr, value) = probe();
        let src = Source::open(pid, addr, value).expect("this process reads itself");
        let mut other = value;
        other[0] ^= 1;
        assert!(
            Source::open(pid, addr, other).is_err(),
            "a value that differs"
        );
        assert!(Source::open(pid, addr, [0; 16]).is_err(), "no probe");
        // Gathering into two buffers from three ranges.
        let data: Vec<u8> = (0..=255).collect();
        let base = data.as_ptr() as u64;
        let (mut x, mut y) = (vec![0u8; 100], vec![0u8; 56]);
        src.read(
            &[(base, 50), (base + 100, 6), (base + 156, 100)],
            &mut [&mut x[..], &mut y[..]],
        )
        .expect("read");
        let want: Vec<u8> = (0..50).chain(100..106).chain(156..=255).collect();
        assert_eq!([x, y].concat(), want);
    }

    #[test]
    fn a_stopped_process_is_seen_stopped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn");
        let pid = child.id();
        // SAFETY: pidfd_open takes a pid and flags.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        assert!(fd >= 0);
        let src = Source {
            pid: pid as libc::pid_t,
            // SAFETY: the descriptor was just returned.
            pidfd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
        };
        assert!(!src.stopped(), "running");
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        let until = Instant::now() + std::time::Duration::from_secs(10);
        while !src.stopped() && Instant::now() < until {
            std::thread::yield_now();
        }
        assert!(src.stopped(), "stopped");
        let _ = child.kill();
        child.wait().expect("reap");
        assert!(!src.stopped(), "exited: not stopped, gone");
    }

    #[test]
    fn a_dead_process_is_not_a_source() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("reap");
        assert!(Source::open(pid, 4096, [1; 16]).is_err());
    }
}
