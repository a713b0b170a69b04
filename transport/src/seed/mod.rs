//! Seed bootstrap: one known address hands out ranks, the peer table and
//! TLS identities.
//!
//! ```text
//! joiner → seed   Join   (80 B): "MWSEED01", version, world, wanted rank
//!                                (u32::MAX: any), flags (star), nonce_j
//! seed → joiner   Reply  (76 B): "MWSEED01", status, rank (the seed's
//!                                protocol version if that differs), world, nonce_s,
//!                                proof_s = HMAC(key, "seed" ‖ join ‖ reply[..44])
//! joiner → seed   Proof  (50 B): HMAC(key, "joiner" ‖ reply[..44] ‖ join),
//!                                advertised port, advertised IP (16 B;
//!                                unspecified: the seed uses the one it sees)
//! seed → joiner   1 B: 1 admitted, 0 token mismatch; then
//!                 Welcome: CA cert, leaf cert (DER), leaf key sealed with
//!                 AES-256-GCM under HMAC(key, "welcome" ‖ nonce_j ‖ nonce_s)
//! … once every rank has joined (or the deadline passed) …
//! seed → joiner   Peers: status (0 ok / 1 timeout), n, then n addresses in
//!                 rank order (18 B each), or the n ranks that never joined
//! joiner → seed   1 B: its links are up (1) or not (0)
//! seed → joiner   1 B: everyone's are (1) or not (0) — the ready barrier
//! ```
//!
//! `key` is the token-derived key of the link handshake, so both sides
//! prove the token to each other (a joiner never hands anything to a seed
//! that cannot prove it holds the token), and the leaf key never crosses
//! the wire in the clear. The CA is the seed's own, random: only ranks
//! admitted by this seed hold leaves from it.

use crate::auth::handshake::{derive_key, proof, verify, PROTOCOL_VERSION};
use crate::auth::seal::{open_record, seal_record};
use crate::auth::tls::{ClusterCa, RankIdentity};
use crate::form::{poll_readable, Backoff, FormationError};
use crate::wire::codec::put_addr;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod wire;

pub(crate) use wire::{
    encode_table, encode_welcome, get_addr, read_table, read_welcome, JoinMsg, ReplyMsg, Table,
    TableError, WelcomeError, WELCOME_PART_MAX,
};
use wire::{JOIN_LEN, REPLY_LEN};

const PROOF_LEN: usize = 50;
const ANY: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Status {
    Ok = 0,
    Protocol = 1,
    World = 2,
    RankConflict = 3,
    Topology = 4,
}

/// What a seed serves.
#[derive(Clone, Debug)]
pub struct SeedConfig {
    pub world: u32,
    pub star: bool,
    pub token: Option<String>,
    /// How long the seed waits for every rank to join, and for each step.
    pub timeout: Duration,
    /// A rank only a joiner asking for it by number gets (the hosting
    /// rank 0's): joiners without a rank take the lowest other free one.
    pub reserved: Option<u32>,
}

/// A running seed (its thread). Dropping it stops it.
#[derive(Debug)]
pub struct Seed {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), FormationError>>>,
}

impl Seed {
    /// Listen on `bind` and serve one job's bootstrap in a thread.
    pub fn start(bind: SocketAddr, cfg: SeedConfig) -> Result<Seed, FormationError> {
        let listener = TcpListener::bind(bind).map_err(|e| FormationError::ConnectionFailed {
            rank: 0,
            reason: format!("the seed cannot listen on {bind}: {e}"),
        })?;
        let addr = listener.local_addr().map_err(|e| io_fail(0, e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("meshwork-seed".into())
            .spawn(move || serve(listener, &cfg, &flag))
            .map_err(|e| io_fail(0, e))?;
        tracing::info!(%addr, "seed listening");
        Ok(Seed {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Let the seed finish on its own (it refuses latecomers for a while
    /// after its job has formed), without waiting for it.
    pub fn detach(mut self) {
        drop(self.thread.take());
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
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn io_fail(rank: u32, e: std::io::Error) -> FormationError {
    FormationError::ConnectionFailed {
        rank,
        reason: e.to_string(),
    }
}

/// Which of `fds` are readable, waiting at most `timeout` (none if the
/// wait itself failed: the caller's loop tries again).
fn ready(fds: &[std::os::fd::RawFd], timeout: Duration) -> Vec<bool> {
    poll_readable(fds, timeout).unwrap_or_else(|| vec![false; fds.len()])
}

/// Wait until `fd` is readable, at most `timeout`.
fn readable(fd: &impl AsRawFd, timeout: Duration) -> bool {
    ready(&[fd.as_raw_fd()], timeout)[0]
}

/// How long a seed goes on refusing latecomers once its job has formed.
const LINGER: Duration = Duration::from_secs(2);

fn welcome_key(key: &[u8; 32], join: &[u8], reply: &[u8]) -> [u8; 32] {
    proof(key, b"welcome", &join[32..56], &reply[20..44])
}

/// A joiner admitted by the seed, waiting for the others.
struct Member {
    stream: TcpStream,
    addr: SocketAddr,
}

/// The seed's thread: admit `world` ranks, send the table, run the ready
/// barrier.
fn serve(listener: TcpListener, cfg: &SeedConfig, stop: &AtomicBool) -> Result<(), FormationError> {
    let key = derive_key(cfg.token.as_deref(), cfg.world);
    let ca = ClusterCa::random().map_err(|e| FormationError::ConnectionFailed {
        rank: 0,
        reason: format!("the seed cannot make a CA: {e}"),
    })?;
    let deadline = Instant::now() + cfg.timeout;
    let step = cfg
        .timeout
        .clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut members: Vec<Option<Member>> = (0..cfg.world).map(|_| None).collect();
    listener.set_nonblocking(true).map_err(|e| io_fail(0, e))?;
    while members.iter().any(Option::is_none) {
        if stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if !readable(&listener, (deadline - now).min(Duration::from_millis(100))) {
            continue;
        }
        accept_one(&listener, cfg, &key, &ca, &mut members, step);
    }
    let missing: Vec<u32> = (0..cfg.world)
        .filter(|&r| members[r as usize].is_none())
        .collect();
    let table = encode_table(&if missing.is_empty() {
        Table::Peers(members.iter().flatten().map(|m| m.addr).collect())
    } else {
        Table::Missing(missing.clone())
    });
    for m in members.iter_mut().flatten() {
        let _ = m.stream.write_all(&table);
    }
    if !missing.is_empty() {
        return Err(FormationError::Timeout { missing });
    }
    // The ready barrier: every rank reports its links, then hears whether
    // all are up (a rank's formation has its own deadline). Latecomers are
    // refused meanwhile, and for a while after.
    let barrier_end = Instant::now() + cfg.timeout + step;
    let mut heard: Vec<Option<bool>> = vec![None; members.len()];
    while heard.iter().any(Option::is_none) && Instant::now() < barrier_end {
        let mut fds = vec![listener.as_raw_fd()];
        fds.extend(members.iter().flatten().map(|m| m.stream.as_raw_fd()));
        let ready = ready(&fds, Duration::from_millis(100));
        if ready[0] {
            accept_one(&listener, cfg, &key, &ca, &mut members, step);
        }
        for (i, m) in members.iter_mut().enumerate() {
            if let (Some(m), true, None) = (m, ready.get(i + 1) == Some(&true), heard[i]) {
                let mut b = [0u8; 1];
                heard[i] = Some(m.stream.read_exact(&mut b).is_ok() && b[0] == 1);
            }
        }
    }
    let all = heard.iter().all(|h| *h == Some(true));
    for m in members.iter_mut().flatten() {
        let _ = m.stream.write_all(&[u8::from(all)]);
    }
    let linger_end = Instant::now() + LINGER;
    while !stop.load(Ordering::Acquire) && Instant::now() < linger_end {
        if readable(&listener, Duration::from_millis(100)) {
            accept_one(&listener, cfg, &key, &ca, &mut members, step);
        }
    }
    if all {
        Ok(())
    } else {
        Err(FormationError::ConnectionFailed {
            rank: 0,
            reason: "not every rank could link to its peers".into(),
        })
    }
}

/// Accept one connection and run its admission (a joiner that asks for a
/// taken rank, or comes when all are taken, is refused with
/// `RankConflict`).
fn accept_one(
    listener: &TcpListener,
    cfg: &SeedConfig,
    key: &[u8; 32],
    ca: &ClusterCa,
    members: &mut [Option<Member>],
    step: Duration,
) {
    let (mut s, from) = match listener.accept() {
        Ok(x) => x,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return,
        Err(e) => {
            tracing::warn!("seed accept: {e}");
            return;
        }
    };
    let configured = s
        .set_nonblocking(false)
        .and_then(|()| s.set_read_timeout(Some(step)))
        .and_then(|()| s.set_write_timeout(Some(step)));
    if configured.is_err() {
        return;
    }
    match admit(&mut s, from, cfg, key, ca, members) {
        Ok((rank, addr)) => {
            tracing::info!(rank, %addr, "seed admitted a rank");
            members[rank as usize] = Some(Member { stream: s, addr });
        }
        Err(e) => tracing::warn!(%from, "seed refused a joiner: {e}"),
    }
}

/// Run one joiner's admission; its rank and advertised address.
fn admit(
    s: &mut TcpStream,
    from: SocketAddr,
    cfg: &SeedConfig,
    key: &[u8; 32],
    ca: &ClusterCa,
    members: &[Option<Member>],
) -> Result<(u32, SocketAddr), String> {
    let mut join = [0u8; JOIN_LEN];
    s.read_exact(&mut join).map_err(|e| e.to_string())?;
    let Some(JoinMsg {
        version,
        world,
        want,
        star,
    }) = JoinMsg::decode(&join)
    else {
        return Err("not a meshwork joiner".into());
    };
    let free = |r: u32| r < cfg.world && members[r as usize].is_none();
    let (status, rank) = if version != PROTOCOL_VERSION {
        // The rank field carries the seed's version, for the joiner's error.
        (Status::Protocol, PROTOCOL_VERSION)
    } else if world != cfg.world {
        (Status::World, 0)
    } else if star != cfg.star {
        (Status::Topology, 0)
    } else if want == ANY {
        match (0..cfg.world).find(|&r| free(r) && Some(r) != cfg.reserved) {
            Some(r) => (Status::Ok, r),
            None => (Status::RankConflict, 0),
        }
    } else if free(want) {
        (Status::Ok, want)
    } else {
        (Status::RankConflict, want)
    };
    let mut nonce = [0u8; 24];
    boring::rand::rand_bytes(&mut nonce).map_err(|e| e.to_string())?;
    let mut reply = ReplyMsg {
        status: status as u32,
        rank,
        world: cfg.world,
    }
    .encode(&nonce);
    let p = proof(key, b"seed", &join, &reply[..44]);
    reply[44..76].copy_from_slice(&p);
    s.write_all(&reply).map_err(|e| e.to_string())?;
    if status != Status::Ok {
        return Err(format!("{status:?} (rank {rank})"));
    }
    let mut pr = [0u8; PROOF_LEN];
    s.read_exact(&mut pr).map_err(|e| e.to_string())?;
    if !verify(key, b"joiner", &reply[..44], &join, &pr[..32]) {
        let _ = s.write_all(&[0]);
        return Err("the joiner holds another cluster token".into());
    }
    let mut addr = get_addr(&pr[32..50]);
    if addr.ip().is_unspecified() {
        // NAT, containers: the address the seed sees.
        addr.set_ip(from.ip());
    }
    let identity = ca.issue(rank).map_err(|e| e.to_string())?;
    let [ca_der, cert, leaf_key] = identity.to_der().map_err(|e| e.to_string())?;
    let sealed = seal_record(&welcome_key(key, &join, &reply), 0, b"leaf key", &leaf_key)?;
    let mut out = vec![1u8];
    out.extend_from_slice(&encode_welcome([&ca_der, &cert, &sealed]));
    s.write_all(&out).map_err(|e| e.to_string())?;
    Ok((rank, addr))
}

/// What a joiner asks for.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    pub world: u32,
    /// The rank wanted; `None`: the lowest free one.
    pub rank: Option<u32>,
    pub star: bool,
    pub token: Option<String>,
    /// Deadline of the whole bootstrap.
    pub timeout: Duration,
    /// The data address to announce; an unspecified IP means "the one the
    /// seed sees" (NAT, containers); port 0 means this rank has none (a
    /// star worker).
    pub advertise: SocketAddr,
}

/// A rank the seed admitted: who it is, whom it links to, its identity.
#[derive(Debug)]
pub struct Joined {
    pub rank: u32,
    /// Every rank's data address, in rank order.
    pub peers: Vec<SocketAddr>,
    pub identity: RankIdentity,
    seed: TcpStream,
}

impl Joined {
    /// The ready barrier: report whether this rank's links are up, and
    /// learn whether everyone's are.
    pub fn ready(mut self, ok: bool, timeout: Duration) -> Result<(), FormationError> {
        let fail = |reason: String| FormationError::ConnectionFailed { rank: 0, reason };
        let _ = self.seed.set_read_timeout(Some(timeout * 2));
        self.seed
            .write_all(&[u8::from(ok)])
            .map_err(|e| fail(format!("the seed went away: {e}")))?;
        let mut b = [0u8; 1];
        self.seed
            .read_exact(&mut b)
            .map_err(|e| fail(format!("the seed went away: {e}")))?;
        if b[0] == 1 {
            Ok(())
        } else {
            Err(fail("another rank could not link to its peers".into()))
        }
    }
}

/// A rank the seed has admitted, before the table.
#[derive(Debug)]
pub struct Admitted {
    pub rank: u32,
    pub identity: RankIdentity,
    seed: TcpStream,
    deadline: Instant,
    step: Duration,
}

/// Join through the seed at `seed` (retrying until it answers, within the
/// deadline): admission, then the table once every rank has joined.
pub fn join(seed: SocketAddr, req: &JoinRequest) -> Result<Joined, FormationError> {
    admit_me(seed, req)?.table(req.world)
}

/// The first half of `join`: be admitted (a rank and an identity).
pub fn admit_me(seed: SocketAddr, req: &JoinRequest) -> Result<Admitted, FormationError> {
    let deadline = Instant::now() + req.timeout;
    let key = derive_key(req.token.as_deref(), req.world);
    // The seed may not be up yet: dial with back-off until the deadline.
    let mut backoff = Backoff::new();
    let mut s = loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(FormationError::Timeout { missing: vec![0] });
        }
        match TcpStream::connect_timeout(&seed, (deadline - now).min(Duration::from_secs(2))) {
            Ok(s) => break s,
            Err(e) => tracing::trace!(%seed, "dial the seed: {e}"),
        }
        backoff.pause(deadline);
    };
    let step = req
        .timeout
        .clamp(Duration::from_millis(100), Duration::from_secs(5));
    let seed_rank = 0;
    let fail = |e: std::io::Error| io_fail(seed_rank, e);
    s.set_read_timeout(Some(step)).map_err(fail)?;
    s.set_write_timeout(Some(step)).map_err(fail)?;
    let mut nonce = [0u8; 24];
    boring::rand::rand_bytes(&mut nonce).map_err(|e| FormationError::ConnectionFailed {
        rank: seed_rank,
        reason: e.to_string(),
    })?;
    let join = JoinMsg {
        version: PROTOCOL_VERSION,
        world: req.world,
        want: req.rank.unwrap_or(ANY),
        star: req.star,
    }
    .encode(&nonce);
    s.write_all(&join).map_err(fail)?;
    let mut reply = [0u8; REPLY_LEN];
    s.read_exact(&mut reply).map_err(fail)?;
    let Some(ReplyMsg {
        status,
        rank,
        world,
    }) = ReplyMsg::decode(&reply)
    else {
        return Err(FormationError::ConnectionFailed {
            rank: seed_rank,
            reason: format!("{seed} is not a meshwork seed"),
        });
    };
    // Nothing a seed says counts before it has proved the token.
    if !verify(&key, b"seed", &join, &reply[..44], &reply[44..76]) {
        // Tell the seed at once too; hand it nothing.
        let _ = s.write_all(&[0u8; PROOF_LEN]);
        return Err(FormationError::TokenMismatch { rank: seed_rank });
    }
    match status {
        s if s == Status::Ok as u32 => {}
        s if s == Status::Protocol as u32 => {
            return Err(FormationError::ProtocolMismatch {
                rank: seed_rank,
                ours: PROTOCOL_VERSION,
                theirs: rank,
            })
        }
        s if s == Status::World as u32 => {
            return Err(FormationError::WorldMismatch {
                rank: seed_rank,
                ours: req.world,
                theirs: world,
            })
        }
        s if s == Status::Topology as u32 => {
            return Err(FormationError::TopologyMismatch { rank: seed_rank })
        }
        _ => return Err(FormationError::RankConflict { rank }),
    }
    let mut pr = Vec::with_capacity(PROOF_LEN);
    pr.extend_from_slice(&proof(&key, b"joiner", &reply[..44], &join));
    put_addr(&mut pr, req.advertise);
    s.write_all(&pr).map_err(fail)?;
    let mut admitted = [0u8; 1];
    s.read_exact(&mut admitted).map_err(fail)?;
    if admitted[0] != 1 {
        return Err(FormationError::TokenMismatch { rank: seed_rank });
    }
    let parts = read_welcome(&mut s).map_err(|e| match e {
        WelcomeError::Io(e) => fail(e),
        WelcomeError::TooLong(len) => FormationError::ConnectionFailed {
            rank: seed_rank,
            reason: format!("a welcome part of {len} bytes"),
        },
    })?;
    let bad = |what: &str| FormationError::ConnectionFailed {
        rank: seed_rank,
        reason: format!("the seed's welcome: {what}"),
    };
    let leaf_key = open_record(&welcome_key(&key, &join, &reply), 0, b"leaf key", &parts[2])
        .map_err(|e| bad(&e))?;
    let identity = RankIdentity::from_der(rank, &parts[0], &parts[1], &leaf_key)
        .ok_or_else(|| bad("certificates that do not parse or name another rank"))?;
    Ok(Admitted {
        rank,
        identity,
        seed: s,
        deadline,
        step,
    })
}

impl Admitted {
    /// The second half of `join`: everyone's addresses, once everyone has
    /// joined (or the ranks that never did).
    pub fn table(self, world: u32) -> Result<Joined, FormationError> {
        let Admitted {
            rank,
            identity,
            seed: mut s,
            deadline,
            step,
        } = self;
        let fail = |e: std::io::Error| io_fail(0, e);
        let bad = |what: &str| FormationError::ConnectionFailed {
            rank: 0,
            reason: format!("the seed's table: {what}"),
        };
        s.set_read_timeout(Some(
            deadline.saturating_duration_since(Instant::now()) + step,
        ))
        .map_err(fail)?;
        let peers = match read_table(&mut s, world) {
            Ok(Table::Peers(peers)) => peers,
            Ok(Table::Missing(missing)) => return Err(FormationError::Timeout { missing }),
            Err(TableError::Head(e))
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
            {
                return Err(FormationError::Timeout { missing: vec![] })
            }
            Err(TableError::Head(e) | TableError::Body(e)) => return Err(fail(e)),
            Err(TableError::Bad(what)) => return Err(bad(what)),
        };
        Ok(Joined {
            rank,
            peers,
            identity,
            seed: s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(world: u32, rank: Option<u32>, token: &str) -> JoinRequest {
        JoinRequest {
            world,
            rank,
            star: false,
            token: Some(token.into()),
            timeout: Duration::from_secs(10),
            advertise: "0.0.0.0:4000".parse().unwrap(),
        }
    }

    #[test]
    fn ranks_tables_and_identities_are_handed_out() {
        let seed = Seed::start(
            "127.0.0.1:0".parse().unwrap(),
            SeedConfig {
                world: 3,
                star: false,
                token: Some("t".into()),
                timeout: Duration::from_secs(10),
                reserved: None,
            },
        )
        .unwrap();
        let at = seed.local_addr();
        let hs: Vec<_> = [Some(2), None, None]
            .into_iter()
            .map(|want| std::thread::spawn(move || join(at, &req(3, want, "t"))))
            .collect();
        let joined: Vec<Joined> = hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        let mut ranks: Vec<u32> = joined.iter().map(|j| j.rank).collect();
        assert_eq!(joined[0].rank, 2);
        ranks.sort_unstable();
        assert_eq!(ranks, [0, 1, 2]);
        for j in &joined {
            assert_eq!(j.identity.rank(), j.rank);
            // Unspecified advertised IPs became the one the seed saw.
            assert!(j
                .peers
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 4000));
        }
        let hs: Vec<_> = joined
            .into_iter()
            .map(|j| std::thread::spawn(move || j.ready(true, Duration::from_secs(10))))
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
        seed.wait().unwrap();
    }

    #[test]
    fn a_taken_rank_and_a_wrong_token_are_refused_at_once() {
        let seed = Seed::start(
            "127.0.0.1:0".parse().unwrap(),
            SeedConfig {
                world: 2,
                star: false,
                token: Some("right".into()),
                timeout: Duration::from_secs(10),
                reserved: None,
            },
        )
        .unwrap();
        let at = seed.local_addr();
        let first = admit_me(at, &req(2, Some(1), "right")).unwrap();
        assert_eq!(first.rank, 1);
        let started = Instant::now();
        let e = join(at, &req(2, Some(0), "wrong")).unwrap_err();
        assert!(matches!(e, FormationError::TokenMismatch { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let e = join(at, &req(2, Some(1), "right")).unwrap_err();
        assert!(matches!(e, FormationError::RankConflict { rank: 1 }), "{e}");
        // The group still forms: rank 0 joins, both get the table.
        let zero = std::thread::spawn(move || join(at, &req(2, None, "right")));
        let one = first.table(2).unwrap();
        let zero = zero.join().unwrap().unwrap();
        assert_eq!((zero.rank, one.peers.len()), (0, 2));
    }
}
