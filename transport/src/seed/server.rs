//! The seed's side: a loop that accepts connections and waits for its
//! members, and one short-lived thread per admission (see `mod.rs`).

use super::session::{
    joiner_proof_ok, member_secret, member_tag_ok, seed_key, seed_proof, Ephemeral, Record,
    RecordError, Session,
};
use super::slots::{Claim, Hello, Member, Running, Slot, Slots, Waiting, WAITING_MAX};
use super::wire::{
    encode_table, encode_welcome, member_claim, version_of, ChallengeMsg, JoinMsg, ReplyMsg, Table,
    CLAIM_LEN, HEAD_LEN, JOIN_LEN, NOT_A_MEMBER, PROOF_LEN, REPLY_LEN, SEED_VERSION,
};
use super::{io_fail, read_record, table_addr, write_by, Status, ANY, FLAG_RECORD_LEN};
use crate::auth::handshake::read_by;
use crate::auth::tls::ClusterCa;
use crate::form::{
    handshake_time, poll_readable, Doorway, FormationError, Handshake, PENDING_PER_SOURCE,
};
use crate::wire::codec::ADDR_LEN;
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a seed serves. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct SeedConfig {
    pub world: u32,
    pub star: bool,
    pub token: Option<String>,
    /// How long the seed waits for every rank to join, and then for the
    /// ready barrier.
    pub timeout: Duration,
    /// A rank only a joiner asking for it by number gets (the hosting
    /// rank 0's): joiners without a rank take the lowest other free one.
    pub reserved: Option<u32>,
    /// Whether the seed goes on serving once its job has formed: members
    /// growing the job (`JoinRequest::grow`) and new processes for it
    /// (`JoinRequest::world` 0), until the seed is dropped.
    pub elastic: bool,
}

impl std::fmt::Debug for SeedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field named: one added must be added here too.
        let SeedConfig {
            world,
            star,
            token,
            timeout,
            reserved,
            elastic,
        } = self;
        f.debug_struct("SeedConfig")
            .field("world", world)
            .field("star", star)
            .field("token", &token.as_ref().map(|_| "<redacted>"))
            .field("timeout", timeout)
            .field("reserved", reserved)
            .field("elastic", elastic)
            .finish()
    }
}

/// A running seed (its thread). Dropping it stops it.
#[derive(Debug)]
pub struct Seed {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    bell: Arc<Bell>,
    thread: Option<JoinHandle<Result<(), FormationError>>>,
}

impl Seed {
    /// Listen on `bind` and serve one job's bootstrap in a thread.
    pub fn start(bind: SocketAddr, cfg: SeedConfig) -> Result<Seed, FormationError> {
        let listener = TcpListener::bind(bind).map_err(|e| FormationError::ConnectionFailed {
            rank: 0,
            reason: format!("the seed cannot listen on {bind}: {e}"),
        })?;
        listener.set_nonblocking(true).map_err(|e| io_fail(0, e))?;
        let addr = listener.local_addr().map_err(|e| io_fail(0, e))?;
        let (ring, heard) = UnixStream::pair().map_err(|e| io_fail(0, e))?;
        ring.set_nonblocking(true).map_err(|e| io_fail(0, e))?;
        heard.set_nonblocking(true).map_err(|e| io_fail(0, e))?;
        let bell = Arc::new(Bell(ring));
        let ca = ClusterCa::random().map_err(|e| FormationError::ConnectionFailed {
            rank: 0,
            reason: format!("the seed cannot make a CA: {e}"),
        })?;
        let mut member_key = [0u8; 32];
        boring::rand::rand_bytes(&mut member_key).map_err(|e| {
            FormationError::ConnectionFailed {
                rank: 0,
                reason: format!("the seed cannot draw its member key: {e}"),
            }
        })?;
        let job = Arc::new(Job {
            world: cfg.world,
            star: cfg.star,
            reserved: cfg.reserved,
            elastic: cfg.elastic,
            key: seed_key(cfg.token.as_deref()),
            member_key,
            ca,
            slots: Mutex::new(Slots {
                ranks: (0..cfg.world).map(|_| Slot::Free).collect(),
                open: true,
                world: cfg.world,
                joiners_from: cfg.world,
                generation: 0,
                running: None,
                claimed_by: HashMap::new(),
                waiting: VecDeque::new(),
            }),
            bell: Arc::clone(&bell),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let timeout = cfg.timeout;
        let thread = std::thread::Builder::new()
            .name("meshwork-seed".into())
            .spawn(move || {
                Server {
                    listener,
                    heard,
                    job,
                    stop: flag,
                    admissions: Doorway::new(handshake_time(timeout)),
                }
                .serve(timeout)
            })
            .map_err(|e| io_fail(0, e))?;
        tracing::info!(%addr, "seed listening");
        Ok(Seed {
            addr,
            stop,
            bell,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Wait until the job has formed (everyone ready) or failed.
    pub fn wait(mut self) -> Result<(), FormationError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(FormationError::ConnectionFailed {
                rank: 0,
                reason: "the seed's thread panicked".into(),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.store(true, Ordering::Release);
            self.bell.ring();
            let _ = t.join();
        }
    }
}

/// Wakes the seed's loop from another thread: a byte on a socket whose
/// peer the loop polls (a full socket means a wake is already pending).
#[derive(Debug)]
struct Bell(UnixStream);

impl Bell {
    fn ring(&self) {
        let _ = (&self.0).write(&[1]);
    }
}

/// How long a seed goes on refusing latecomers once its job has formed.
const LINGER: Duration = Duration::from_secs(2);

/// How long an elastic seed's loop waits between growths before it looks
/// again (it is woken at once by a connection, a claim or its drop).
const IDLE_TURN: Duration = Duration::from_secs(60);

/// Whether a waiting process is still there: nothing to read (it only
/// waits for the reply), no end of stream.
fn still_there(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    let _ = s.set_nonblocking(true);
    let there = matches!(s.peek(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock);
    let _ = s.set_nonblocking(false);
    there
}

/// Send `hello`'s joiner the seed's reply: `status`, its rank and the world,
/// under the seed's proof.
fn reply(
    s: &mut TcpStream,
    job: &Job,
    hello: &Hello,
    status: Status,
    rank: u32,
    world: u32,
    deadline: Instant,
) -> std::io::Result<()> {
    let body = ReplyMsg {
        status: status as u32,
        rank,
        world,
    }
    .encode();
    let mut reply = [0u8; REPLY_LEN];
    reply[..12].copy_from_slice(&body);
    let tag = seed_proof(&job.key, &hello.join, &hello.challenge, &hello.proof, &body);
    reply[12..].copy_from_slice(&tag);
    write_by(s, &reply, deadline)
}

/// Admit `hello`'s joiner as `rank` of `world`, the seed's
/// `generation`-th group: the reply, then its identity and its member's
/// secret sealed; the session for the records that follow.
fn welcome(
    s: &mut TcpStream,
    job: &Job,
    hello: &Hello,
    (rank, world, generation): (u32, u32, u64),
    deadline: Instant,
) -> Result<Session, Refused> {
    reply(s, job, hello, Status::Ok, rank, world, deadline)?;
    let mut session = Session::new(
        &job.key,
        &hello.join,
        &hello.challenge,
        &hello.proof,
        &hello.shared,
    );
    let [ca, cert, key] = job.ca.issue(rank)?.to_der()?;
    let mut plain = encode_welcome([&ca, &cert, &key]);
    plain.extend_from_slice(&member_secret(&job.member_key, generation, rank));
    let welcome = session.seal(Record::Welcome, &plain)?;
    write_by(s, &welcome, deadline)?;
    Ok(session)
}

/// A growth's member claim as it came, with the join it is bound to.
struct MemberClaim<'a> {
    /// The rank in the running group it claims (`NOT_A_MEMBER`: none).
    rank: u32,
    tag: [u8; 32],
    join: &'a [u8],
    challenge: &'a [u8],
    advertise: &'a [u8],
}

/// What every admission thread shares with the loop.
struct Job {
    /// The size of the job as it first forms.
    world: u32,
    star: bool,
    reserved: Option<u32>,
    elastic: bool,
    key: [u8; 32],
    /// The key of every member's secret (`member_secret`): random, never
    /// sent.
    member_key: [u8; 32],
    ca: ClusterCa,
    slots: Mutex<Slots>,
    bell: Arc<Bell>,
}

impl Job {
    fn slots(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Which rank of the `running` group `claim` proves to be (`None`:
    /// it claims none, or its tag is not that rank's of that group).
    fn member_of(&self, claim: &MemberClaim<'_>, running: Running) -> Option<u32> {
        let rank = claim.rank;
        if rank == NOT_A_MEMBER || rank >= running.world {
            return None;
        }
        let secret = member_secret(&self.member_key, running.generation, rank);
        member_tag_ok(
            &secret,
            claim.join,
            claim.challenge,
            claim.advertise,
            rank,
            &claim.tag,
        )
        .then_some(rank)
    }

    /// The verdict on a joiner that proved the token (and claims
    /// `member`ship, for a growth); a rank is claimed for it, or it is
    /// refused, or it waits for a growth.
    fn claim(&self, join: &JoinMsg, member: &MemberClaim<'_>) -> Claim {
        if join.star != self.star {
            return Claim::Refused(Status::Topology, 0, self.world);
        }
        let mut slots = self.slots();
        if join.world == 0 || join.grow > 0 {
            // A new process may come while the job still forms; a growth
            // only once it has.
            let running = slots.running;
            if !self.elastic || (join.grow > 0 && running.is_none()) {
                return Claim::Refused(Status::NotElastic, 0, 0);
            }
            let Some(running) = running.filter(|_| join.world != 0) else {
                return Claim::Wait;
            };
            let proved = self.member_of(member, running);
            return slots.claim_member(join, proved, running);
        }
        if join.world != self.world {
            return Claim::Refused(Status::World, 0, self.world);
        }
        let refused = Claim::Refused(
            Status::RankConflict,
            if join.want == ANY { 0 } else { join.want },
            self.world,
        );
        if !slots.open || slots.running.is_some() {
            return refused;
        }
        let free = |r: u32| matches!(slots.ranks.get(r as usize), Some(Slot::Free));
        let rank = match join.want {
            ANY => (0..self.world).find(|&r| free(r) && Some(r) != self.reserved),
            r => free(r).then_some(r),
        };
        match rank {
            Some(r) => {
                slots.ranks[r as usize] = Slot::Claimed;
                Claim::Rank {
                    rank: r,
                    world: slots.world,
                    generation: slots.generation,
                }
            }
            None => refused,
        }
    }

    /// Keep a new process for the running job until a growth takes it
    /// (the oldest first); one over the bound is told so.
    fn wait_for_growth(&self, mut w: Waiting, deadline: Instant) -> Result<(), Refused> {
        let mut slots = self.slots();
        slots.waiting.retain(|w| still_there(&w.stream));
        if slots.waiting.len() >= WAITING_MAX {
            drop(slots);
            let _ = reply(&mut w.stream, self, &w.hello, Status::Full, 0, 0, deadline);
            return Err(Refused::Verdict(Status::Full, 0));
        }
        slots.waiting.push_back(w);
        drop(slots);
        self.bell.ring();
        Ok(())
    }

    /// Give waiting new processes the growth's free ranks for them, in
    /// arrival order (the seed's loop, while a growth forms).
    fn place_waiting(&self, time: Duration) {
        loop {
            let (mut w, rank, world, generation) = {
                let mut slots = self.slots();
                let free = (slots.joiners_from..slots.world)
                    .find(|&r| matches!(slots.ranks.get(r as usize), Some(Slot::Free)));
                let (Some(rank), true) = (free, slots.open) else {
                    return;
                };
                let Some(w) = slots.waiting.pop_front() else {
                    return;
                };
                if !still_there(&w.stream) {
                    continue;
                }
                slots.ranks[rank as usize] = Slot::Claimed;
                (w, rank, slots.world, slots.generation)
            };
            let deadline = Instant::now() + time;
            let admitted = (rank, world, generation);
            let member = welcome(&mut w.stream, self, &w.hello, admitted, deadline);
            match &member {
                Ok(_) => tracing::info!(rank, world, "seed admitted a new process to the job"),
                Err(e) => tracing::warn!(rank, "a new process could not take its rank: {e}"),
            }
            self.settle(
                rank,
                member.ok().map(|session| Member {
                    stream: w.stream,
                    addr: w.hello.addr,
                    session,
                }),
            );
        }
    }

    /// The claimed `rank` becomes `member`'s (`None`: free again, and
    /// the membership that claimed it may claim again).
    fn settle(&self, rank: u32, member: Option<Member>) {
        let mut slots = self.slots();
        if member.is_none() {
            slots.claimed_by.retain(|_, claimed| *claimed != rank);
        }
        if let Some(slot) = slots.ranks.get_mut(rank as usize) {
            *slot = member.map_or(Slot::Free, Slot::Member);
        }
        drop(slots);
        self.bell.ring();
    }
}

/// Why an admission ended without a member (logged only).
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("not a meshwork joiner")]
    Stranger,
    #[error("seed protocol version {0}, ours {SEED_VERSION}")]
    Version(u32),
    #[error("its proof does not verify (another token, or none)")]
    Proof,
    #[error("its key share is not a point of P-256")]
    Share,
    #[error("{0:?} (rank {1})")]
    Verdict(Status, u32),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Crypto(#[from] boring::error::ErrorStack),
    #[error("{0}")]
    Record(#[from] RecordError),
}

/// Start the admission of every connection waiting on `listener`, each
/// on a thread of its own, bounded per source and in all until the
/// joiner has proved the token, as formation's gate is (`Doorway`); the
/// listener is polled level-triggered, so what is left waits for the
/// next turn, after the seed's other work.
fn accept_ready(admissions: &mut Doorway, listener: &TcpListener, job: &Arc<Job>) {
    let job = Arc::clone(job);
    let run: Handshake = Arc::new(move |stream, from, pass| {
        // Once the joiner has proved the token it is no stranger: nobody
        // may evict it any more.
        match admit(stream, from, &job, pass.deadline, || pass.proved()) {
            Ok(Some(rank)) => tracing::info!(rank, %from, "seed admitted a rank"),
            Ok(None) => tracing::info!(%from, "a new process waits for the job to grow"),
            Err(e) => tracing::warn!(%from, "seed refused a joiner: {e}"),
        }
    });
    admissions.accept_ready(
        listener,
        "meshwork-seed-admit",
        |_| PENDING_PER_SOURCE,
        &run,
    );
}

/// One connection's admission, all before `deadline`: its rank once it
/// is a member (`None`: a new process waiting for a growth).
fn admit(
    mut s: TcpStream,
    from: SocketAddr,
    job: &Job,
    deadline: Instant,
    proved: impl FnOnce() -> bool,
) -> Result<Option<u32>, Refused> {
    s.set_nonblocking(false)?;
    let mut join = [0u8; JOIN_LEN];
    read_by(&mut s, &mut join[..HEAD_LEN], deadline)?;
    let theirs = version_of(&join[..HEAD_LEN]).ok_or(Refused::Stranger)?;
    let ephemeral = Ephemeral::new()?;
    let mut nonce = [0u8; 24];
    boring::rand::rand_bytes(&mut nonce)?;
    let challenge = ChallengeMsg {
        version: SEED_VERSION,
        nonce,
        share: ephemeral.share(),
    }
    .encode();
    if theirs != SEED_VERSION {
        // Our version, so that the joiner can say what differs; no more.
        let _ = write_by(&mut s, &challenge, deadline);
        return Err(Refused::Version(theirs));
    }
    read_by(&mut s, &mut join[HEAD_LEN..], deadline)?;
    let msg = JoinMsg::decode(&join).ok_or(Refused::Stranger)?;
    write_by(&mut s, &challenge, deadline)?;
    let mut proof = [0u8; PROOF_LEN];
    read_by(&mut s, &mut proof, deadline)?;
    let (claimed, tag) = proof.split_at(ADDR_LEN + CLAIM_LEN);
    let advertised = &claimed[..ADDR_LEN];
    if !joiner_proof_ok(&job.key, &join, &challenge, claimed, tag) {
        // Closed without a word: a stranger learns nothing of the job.
        return Err(Refused::Proof);
    }
    if !proved() {
        // Evicted by a newcomer a moment ago: the socket is cut.
        return Err(Refused::Io(ErrorKind::ConnectionAborted.into()));
    }
    let hello = Hello {
        join,
        challenge,
        proof,
        shared: ephemeral.agree(&msg.share).ok_or(Refused::Share)?,
        addr: table_addr(super::get_addr(advertised), from),
    };
    let (member, member_tag) = member_claim(&proof);
    let member = MemberClaim {
        rank: member,
        tag: member_tag,
        join: &join,
        challenge: &challenge,
        advertise: advertised,
    };
    let (rank, world, generation) = match job.claim(&msg, &member) {
        Claim::Rank {
            rank,
            world,
            generation,
        } => (rank, world, generation),
        Claim::Wait => {
            job.wait_for_growth(Waiting { stream: s, hello }, deadline)?;
            return Ok(None);
        }
        Claim::Refused(status, rank, world) => {
            let _ = reply(&mut s, job, &hello, status, rank, world, deadline);
            return Err(Refused::Verdict(status, rank));
        }
    };
    match welcome(&mut s, job, &hello, (rank, world, generation), deadline) {
        Ok(session) => {
            let member = Member {
                stream: s,
                addr: hello.addr,
                session,
            };
            job.settle(rank, Some(member));
            Ok(Some(rank))
        }
        Err(e) => {
            job.settle(rank, None);
            Err(e)
        }
    }
}

/// Which of `fds` are readable, waiting at most `timeout` (none if the
/// wait itself failed: the caller's loop tries again).
fn ready(fds: &[RawFd], timeout: Duration) -> Vec<bool> {
    poll_readable(fds, timeout).unwrap_or_else(|| vec![false; fds.len()])
}

/// The seed's thread.
struct Server {
    listener: TcpListener,
    /// The bell's other end.
    heard: UnixStream,
    job: Arc<Job>,
    stop: Arc<AtomicBool>,
    admissions: Doorway,
}

impl Server {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Wait at most `timeout` for the listener, the bell or `more`;
    /// accept what came, and say which of `more` are readable.
    fn turn(&mut self, more: &[RawFd], timeout: Duration) -> Vec<bool> {
        let mut fds = vec![self.listener.as_raw_fd(), self.heard.as_raw_fd()];
        fds.extend_from_slice(more);
        let woke = ready(&fds, timeout);
        if woke[1] {
            let mut sink = [0u8; 64];
            while matches!((&self.heard).read(&mut sink), Ok(n) if n > 0) {}
        }
        if woke[0] {
            accept_ready(&mut self.admissions, &self.listener, &self.job);
        }
        woke[2..].to_vec()
    }

    /// Form the job, then refuse latecomers for a while; or, elastic,
    /// serve its growths until stopped.
    fn serve(mut self, timeout: Duration) -> Result<(), FormationError> {
        let formed = self.form(timeout);
        if !self.job.elastic || formed.is_err() {
            let linger_end = Instant::now() + LINGER;
            while !self.stopped() {
                let now = Instant::now();
                if now >= linger_end {
                    break;
                }
                self.turn(&[], linger_end - now);
            }
            return formed;
        }
        tracing::info!("the job has formed; the seed serves its growths");
        while !self.stopped() {
            if self.job.slots().world == 0 {
                self.turn(&[], IDLE_TURN);
                continue;
            }
            match self.form(timeout) {
                Ok(()) => tracing::info!("the job has grown"),
                Err(e) => tracing::warn!("a growth of the job failed: {e}"),
            }
        }
        Ok(())
    }

    /// Admit the forming group's ranks (the job's, or a growth's: its
    /// members and then new processes), send the table, run the ready
    /// barrier; the seed is then between growths.
    fn form(&mut self, timeout: Duration) -> Result<(), FormationError> {
        let deadline = Instant::now() + timeout;
        let everyone = |slots: &Slots| slots.ranks.iter().all(|s| matches!(s, Slot::Member(_)));
        loop {
            self.job.place_waiting(self.admissions.time());
            if everyone(&self.job.slots()) {
                break;
            }
            let now = Instant::now();
            if self.stopped() {
                return Ok(());
            }
            if now >= deadline {
                break;
            }
            self.turn(&[], deadline - now);
        }
        // No more claims; the ones under way end by their deadline.
        self.job.slots().open = false;
        let settle_by = Instant::now() + self.admissions.time() + Duration::from_millis(100);
        while self
            .job
            .slots()
            .ranks
            .iter()
            .any(|s| matches!(s, Slot::Claimed))
        {
            let now = Instant::now();
            if now >= settle_by || self.stopped() {
                break;
            }
            self.turn(&[], settle_by - now);
        }
        let (generation, mut members): (u64, Vec<Option<Member>>) = {
            let mut slots = self.job.slots();
            let ranks = std::mem::take(&mut slots.ranks);
            // Nothing forms now: the next member's claim opens a growth
            // (a growth only once the job runs: `Job::claim`).
            slots.idle();
            let members = ranks
                .into_iter()
                .map(|s| match s {
                    Slot::Member(m) => Some(m),
                    _ => None,
                })
                .collect();
            (slots.generation, members)
        };
        let missing: Vec<u32> = (0..members.len() as u32)
            .filter(|&r| members[r as usize].is_none())
            .collect();
        let table = encode_table(&if missing.is_empty() {
            Table::Peers(members.iter().flatten().map(|m| m.addr).collect())
        } else {
            Table::Missing(missing.clone())
        });
        self.send_all(&mut members, Record::Table, &table);
        if !missing.is_empty() {
            return Err(FormationError::Timeout { missing });
        }
        let all = self.barrier(&mut members, timeout);
        if all {
            // Before the verdict: a member may grow the job as soon as it
            // has it, with its membership of this group.
            self.job.slots().running = Some(Running {
                world: members.len() as u32,
                generation,
            });
        }
        self.send_all(&mut members, Record::Verdict, &[u8::from(all)]);
        if all {
            Ok(())
        } else {
            Err(FormationError::ConnectionFailed {
                rank: 0,
                reason: "not every rank could link to its peers".into(),
            })
        }
    }

    /// Seal `plain` as `what` for every member and send it (a member that
    /// cannot take it fails the barrier).
    fn send_all(&self, members: &mut [Option<Member>], what: Record, plain: &[u8]) {
        for (rank, m) in members.iter_mut().enumerate() {
            let Some(m) = m else { continue };
            let by = Instant::now() + self.admissions.time();
            let sent = m
                .session
                .seal(what, plain)
                .map_err(|e| e.to_string())
                .and_then(|r| write_by(&mut m.stream, &r, by).map_err(|e| e.to_string()));
            if let Err(e) = sent {
                tracing::warn!(rank, "the seed could not send the {what:?}: {e}");
            }
        }
    }

    /// The ready barrier: every member reports whether its links are up
    /// (within its own formation's deadline); whether all are.
    fn barrier(&mut self, members: &mut [Option<Member>], timeout: Duration) -> bool {
        let end = Instant::now() + timeout + self.admissions.time();
        let mut heard: Vec<Option<bool>> = vec![None; members.len()];
        while !self.stopped() {
            let waiting: Vec<usize> = (0..members.len()).filter(|&r| heard[r].is_none()).collect();
            let now = Instant::now();
            if waiting.is_empty() || now >= end {
                break;
            }
            let polled: Vec<(usize, RawFd)> = waiting
                .iter()
                .filter_map(|&r| members[r].as_ref().map(|m| (r, m.stream.as_raw_fd())))
                .collect();
            let fds: Vec<RawFd> = polled.iter().map(|&(_, fd)| fd).collect();
            let woke = self.turn(&fds, end - now);
            for (&(r, _), _) in polled.iter().zip(&woke).filter(|(_, &w)| w) {
                let Some(m) = &mut members[r] else { continue };
                let by = Instant::now() + self.admissions.time();
                let report = match read_record(&mut m.stream, FLAG_RECORD_LEN, by) {
                    Ok(sealed) => m
                        .session
                        .open(Record::Ready, &sealed)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                heard[r] = Some(match report {
                    Ok(flag) => flag == [1],
                    Err(e) => {
                        tracing::warn!(rank = r, "no ready report from the rank: {e}");
                        false
                    }
                });
            }
            // A member the seed never had cannot report.
            for r in waiting.iter().filter(|&&r| members[r].is_none()) {
                heard[*r] = Some(false);
            }
        }
        heard.iter().all(|h| *h == Some(true))
    }
}
