//! Finding the peers without static addresses.
//!
//! * **Broadcast** (mesh, `Node::discover`, `DISCOVER=1`): every node
//!   broadcasts an announcement of its rank and data address to
//!   `255.255.255.255:disc_port` every 50 ms until it has heard every rank,
//!   then keeps announcing for a while so that late joiners hear it too.
//! * **Unicast query** (star, `Node::discover_via`, `DISCOVER_HOST`): a
//!   worker asks the coordinator's host directly — through NAT, into
//!   containers — and the coordinator answers with its data address.
//!
//! Every datagram carries a job id (so two jobs on one LAN never mix) and
//! an HMAC-SHA256 of its contents, so a stranger cannot inject an address.
//! Both come from the token through the Argon2id master key
//! (`meshwork_transport::kdf`): the id is public, but checking a guessed
//! token against it costs the KDF, like every other oracle.
//!
//! Every datagram is stamped with its sender's clock and refused more than
//! [`FRESH_MS`] (30 s) from the receiver's, so an announcement recorded in
//! one run cannot steer a later one (hosts' clocks must agree within that;
//! NTP does). A star worker's query carries a random nonce, and it takes
//! only a reply echoing it: a reply recorded for another query is refused
//! even within the window.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | `MWDISC02` (announcement) or `MWQUERY2` (query) |
//! | 8 | 8 | job id |
//! | 16 | 4 | world size |
//! | 20 | 4 | sender's rank |
//! | 24 | 4 | data address, IPv4 (0 in a query) |
//! | 28 | 2 | data port (0 in a query) |
//! | 30 | 2 | zero |
//! | 32 | 8 | sent at: Unix time in milliseconds, sender's clock |
//! | 40 | 16 | nonce: a query's random one, echoed by the reply to it; zero in a broadcast announcement |
//! | 56 | 32 | HMAC-SHA256 of bytes 0..56 |

use super::iface::Iface;
use crate::error::{Error, Result};
use hmac::{Hmac, Mac};
use meshwork_transport::kdf;
use sha2::Sha256;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[cfg(test)]
mod tests;

pub(crate) const ANNOUNCE: &[u8; 8] = b"MWDISC02";
pub(crate) const QUERY: &[u8; 8] = b"MWQUERY2";
pub(crate) const LEN: usize = 88;
/// The bytes the MAC covers.
const BODY: usize = 56;
/// How far a datagram's stamp may be from the receiver's clock.
pub(crate) const FRESH_MS: u64 = 30_000;
/// How often a node repeats itself.
const PERIOD: Duration = Duration::from_millis(50);
/// How long a node keeps announcing after it has heard everyone.
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// Hosts a star worker asks at most (mDNS may turn up strangers' too).
const MAX_HOSTS: usize = 256;
const NO_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);

/// Now, as the datagrams' stamps count: Unix time in milliseconds.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One discovery datagram's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Datagram {
    /// [`ANNOUNCE`] or [`QUERY`] (anything else never decodes).
    pub kind: [u8; 8],
    pub rank: u32,
    /// The sender's data address (`0.0.0.0:0` in a query).
    pub addr: SocketAddrV4,
    /// When it was sent: Unix time in milliseconds.
    pub sent_ms: u64,
    /// A query's nonce, or the one a reply echoes; zero in a broadcast.
    pub nonce: [u8; 16],
}

/// What identifies one job and authenticates its members.
#[derive(Clone)]
pub(crate) struct Job {
    id: u64,
    key: [u8; 32],
    world: u32,
}

impl Job {
    /// The job of `token` with these parameters: its MAC key and its id,
    /// each a sub-key of the token's Argon2id master key (the id mixed
    /// with the world size and ports, so two jobs of one token differ).
    pub(crate) fn new(token: &str, world: u32, disc_port: u16, data_base: u16) -> Job {
        let mut id = <Hmac<Sha256> as Mac>::new_from_slice(&kdf::subkey(token, "discovery job id"))
            .expect("HMAC takes any key length");
        id.update(&world.to_le_bytes());
        id.update(&disc_port.to_le_bytes());
        id.update(&data_base.to_le_bytes());
        let id = id.finalize().into_bytes();
        Job {
            id: u64::from_le_bytes([id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7]]),
            key: kdf::subkey(token, "discovery mac"),
            world,
        }
    }

    /// The job's id: public (it names the job on the LAN), not secret.
    #[cfg_attr(not(feature = "mdns"), allow(dead_code, reason = "used by mDNS"))]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(body);
        mac
    }

    pub(crate) fn encode(&self, g: &Datagram) -> [u8; LEN] {
        let mut d = [0u8; LEN];
        d[..8].copy_from_slice(&g.kind);
        d[8..16].copy_from_slice(&self.id.to_le_bytes());
        d[16..20].copy_from_slice(&self.world.to_le_bytes());
        d[20..24].copy_from_slice(&g.rank.to_le_bytes());
        d[24..28].copy_from_slice(&g.addr.ip().octets());
        d[28..30].copy_from_slice(&g.addr.port().to_le_bytes());
        d[32..40].copy_from_slice(&g.sent_ms.to_le_bytes());
        d[40..56].copy_from_slice(&g.nonce);
        let tag = self.mac(&d[..BODY]).finalize().into_bytes();
        d[BODY..].copy_from_slice(&tag);
        d
    }

    /// A datagram of this job, authentic, and stamped within
    /// [`FRESH_MS`] of `now_ms`. A pure function (fuzzed).
    pub(crate) fn decode(&self, d: &[u8], now_ms: u64) -> Option<Datagram> {
        if d.len() != LEN {
            return None;
        }
        let kind: [u8; 8] = d[..8].try_into().ok()?;
        if (&kind != ANNOUNCE && &kind != QUERY)
            || d[8..16] != self.id.to_le_bytes()
            || d[16..20] != self.world.to_le_bytes()
            || d[30..32] != [0, 0]
        {
            return None;
        }
        self.mac(&d[..BODY]).verify_slice(&d[BODY..]).ok()?;
        let rank = u32::from_le_bytes(d[20..24].try_into().ok()?);
        let sent_ms = u64::from_le_bytes(d[32..40].try_into().ok()?);
        if rank >= self.world || sent_ms.abs_diff(now_ms) > FRESH_MS {
            return None;
        }
        let ip = Ipv4Addr::new(d[24], d[25], d[26], d[27]);
        let port = u16::from_le_bytes([d[28], d[29]]);
        Some(Datagram {
            kind,
            rank,
            addr: SocketAddrV4::new(ip, port),
            sent_ms,
            nonce: d[40..56].try_into().ok()?,
        })
    }

    /// `rank`'s announcement of `addr`, stamped now.
    fn announcement(&self, rank: u32, addr: SocketAddrV4, nonce: [u8; 16]) -> [u8; LEN] {
        self.encode(&Datagram {
            kind: *ANNOUNCE,
            rank,
            addr,
            sent_ms: unix_ms(),
            nonce,
        })
    }
}

/// A UDP socket on `port` that ranks of this user on this host share
/// (`SO_REUSEPORT`: the kernel lets only the same user join, and every
/// socket hears a broadcast) and that may broadcast. Not `SO_REUSEADDR`,
/// which would let another user bind the port beside it. A port held by a
/// program that does not share it is an error naming it.
fn bind_shared(port: u16, rank: u32) -> Result<UdpSocket> {
    let busy = |e: std::io::Error| Error::ConnectionFailed {
        rank,
        reason: format!("discovery port {port} is not available: {e}"),
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(busy)?;
    s.set_reuse_port(true).map_err(busy)?;
    s.set_broadcast(true).map_err(busy)?;
    s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into())
        .map_err(busy)?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(PERIOD)).map_err(busy)?;
    Ok(s)
}

/// This host's address towards the LAN: the source address the kernel
/// picks for a broadcast (the default route's interface).
pub(crate) fn lan_address(port: u16) -> Result<Ipv4Addr> {
    let probe = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    probe.set_broadcast(true)?;
    probe.connect((Ipv4Addr::BROADCAST, port))?;
    match probe.local_addr()? {
        SocketAddr::V4(a) if !a.ip().is_unspecified() => Ok(*a.ip()),
        other => Err(Error::ConnectionFailed {
            rank: 0,
            reason: format!("no IPv4 address towards the LAN (got {other})"),
        }),
    }
}

/// Broadcast discovery for a mesh: returns every rank's data address in
/// rank order (this rank's is `own_ip:data_base + rank`).
/// With `iface` (`IFNAME`), its address is announced and the broadcasts go
/// to its subnet (out through it); else the default route's interface.
pub(crate) fn broadcast(
    job: &Job,
    rank: u32,
    disc_port: u16,
    data_base: u16,
    deadline: Instant,
    iface: Option<&Iface>,
) -> Result<Vec<SocketAddr>> {
    let sock = bind_shared(disc_port, rank)?;
    let (ip, to) = match iface {
        Some(i) => (i.addr, i.broadcast),
        None => (lan_address(disc_port)?, Ipv4Addr::BROADCAST),
    };
    let port = u16::try_from(u32::from(data_base) + rank).map_err(|_| {
        Error::InvalidArgument(format!("DATA_PORT {data_base} + rank {rank} exceeds 65535"))
    })?;
    let me = SocketAddrV4::new(ip, port);
    tracing::info!(%me, disc_port, "announcing by UDP broadcast");
    let to = SocketAddrV4::new(to, disc_port);
    let found = gather(job, &sock, rank, me, to, deadline)?;
    // Keep announcing a while so that ranks still looking hear us.
    let job = job.clone();
    std::thread::spawn(move || {
        let until = Instant::now() + LINGER;
        let mut next_send = Instant::now();
        let mut buf = [0u8; 256];
        while Instant::now() < until {
            if Instant::now() >= next_send {
                let _ = sock.send_to(&job.announcement(rank, me, [0; 16]), to);
                next_send = Instant::now() + PERIOD;
            }
            // Paces the loop: returns within one period.
            let _ = sock.recv_from(&mut buf);
        }
    });
    Ok(found)
}

/// Announce `me` to `to` every period and listen on `sock` until every
/// rank is heard. A rank's address is the one it announced last by its
/// own clock, so an older announcement replayed within the window does
/// not displace what the rank says now.
fn gather(
    job: &Job,
    sock: &UdpSocket,
    rank: u32,
    me: SocketAddrV4,
    to: SocketAddrV4,
    deadline: Instant,
) -> Result<Vec<SocketAddr>> {
    let mut known: BTreeMap<u32, (SocketAddrV4, u64)> = BTreeMap::from([(rank, (me, u64::MAX))]);
    let mut next_send = Instant::now();
    let mut buf = [0u8; 256];
    while known.len() < job.world as usize {
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::FormationTimeout {
                missing: (0..job.world).filter(|r| !known.contains_key(r)).collect(),
            });
        }
        if now >= next_send {
            sock.send_to(&job.announcement(rank, me, [0; 16]), to)?;
            next_send = now + PERIOD;
        }
        let Ok((n, _)) = sock.recv_from(&mut buf) else {
            continue;
        };
        match job.decode(&buf[..n], unix_ms()) {
            Some(d) if &d.kind == ANNOUNCE && d.rank != rank => {
                let heard = known.entry(d.rank).or_insert((d.addr, d.sent_ms));
                if d.sent_ms >= heard.1 {
                    *heard = (d.addr, d.sent_ms);
                }
            }
            _ => {}
        }
    }
    Ok(known
        .into_values()
        .map(|(a, _)| SocketAddr::V4(a))
        .collect())
}

/// A star coordinator: answer unicast queries with `data` until `until`,
/// holding `keep` (an mDNS publication) as long.
pub(crate) fn answer_queries(
    job: Job,
    disc_port: u16,
    data: SocketAddrV4,
    until: Instant,
    keep: impl Send + 'static,
) -> Result<()> {
    let sock = bind_shared(disc_port, 0)?;
    drop(serve_queries(job, sock, data, until, keep));
    Ok(())
}

/// `answer_queries` on a bound socket: each fresh, authentic query is
/// answered with `data`, stamped now and echoing the query's nonce.
fn serve_queries(
    job: Job,
    sock: UdpSocket,
    data: SocketAddrV4,
    until: Instant,
    keep: impl Send + 'static,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let _keep = keep;
        let mut buf = [0u8; 256];
        while Instant::now() < until {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            match job.decode(&buf[..n], unix_ms()) {
                Some(q) if &q.kind == QUERY => {
                    let _ = sock.send_to(&job.announcement(0, data, q.nonce), from);
                }
                _ => {}
            }
        }
    })
}

/// A star worker's questions to the coordinator: one socket and one
/// random nonce, which the coordinator's reply must echo.
pub(crate) struct Asker<'a> {
    job: &'a Job,
    rank: u32,
    sock: UdpSocket,
    nonce: [u8; 16],
}

impl<'a> Asker<'a> {
    pub(crate) fn new(job: &'a Job, rank: u32) -> Result<Asker<'a>> {
        let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        let mut nonce = [0u8; 16];
        getrandom::getrandom(&mut nonce).map_err(|e| Error::ConnectionFailed {
            rank,
            reason: format!("no randomness for the discovery query: {e}"),
        })?;
        Ok(Asker {
            job,
            rank,
            sock,
            nonce,
        })
    }

    /// Send the query, stamped now, to each of `targets`; an error only
    /// if it reached none.
    pub(crate) fn ask(&self, targets: &[SocketAddr]) -> Result<()> {
        let ask = self.job.encode(&Datagram {
            kind: *QUERY,
            rank: self.rank,
            addr: NO_ADDR,
            sent_ms: unix_ms(),
            nonce: self.nonce,
        });
        let mut last = None;
        let mut sent = false;
        for t in targets {
            match self.sock.send_to(&ask, t) {
                Ok(_) => sent = true,
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) if !sent => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// The coordinator's data address, if its reply to this asker comes
    /// within one period (and by `deadline`); anything else is ignored.
    pub(crate) fn answer(&self, deadline: Instant) -> Option<SocketAddrV4> {
        let until = (Instant::now() + PERIOD).min(deadline);
        let mut buf = [0u8; 256];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.sock.set_read_timeout(Some(left)).ok()?;
            let (n, _) = self.sock.recv_from(&mut buf).ok()?;
            match self.job.decode(&buf[..n], unix_ms()) {
                Some(d) if &d.kind == ANNOUNCE && d.rank == 0 && d.nonce == self.nonce => {
                    return Some(d.addr)
                }
                _ => {}
            }
        }
    }
}

/// The coordinator's data address, for `host:disc_port` this rank queries.
pub(crate) fn query(
    job: &Job,
    rank: u32,
    host: &str,
    disc_port: u16,
    deadline: Instant,
) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let target = (host, disc_port)
        .to_socket_addrs()
        .map_err(|e| Error::InvalidArgument(format!("DISCOVER_HOST {host:?}: {e}")))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| {
            Error::InvalidArgument(format!("DISCOVER_HOST {host:?} has no IPv4 address"))
        })?;
    let asker = Asker::new(job, rank)?;
    tracing::info!(%target, "asking the coordinator for its address");
    while Instant::now() < deadline {
        asker.ask(&[target])?;
        if let Some(addr) = asker.answer(deadline) {
            return Ok(SocketAddr::V4(addr));
        }
    }
    Err(Error::FormationTimeout { missing: vec![0] })
}

/// A star worker's search among hosts that may be the coordinator (mDNS
/// turns them up while it browses): every period, `found` gives the hosts
/// newly found, and each host found so far is asked at `disc_port`. The
/// first authentic reply to this worker wins, whichever host sent it; a
/// host that does not answer delays nobody. A timeout only at `deadline`.
#[cfg_attr(not(feature = "mdns"), allow(dead_code, reason = "used by mDNS"))]
pub(crate) fn ask_each(
    job: &Job,
    rank: u32,
    disc_port: u16,
    mut found: impl FnMut() -> Vec<Ipv4Addr>,
    deadline: Instant,
) -> Result<SocketAddrV4> {
    let asker = Asker::new(job, rank)?;
    let mut hosts: Vec<SocketAddr> = Vec::new();
    while Instant::now() < deadline {
        for ip in found() {
            let host = SocketAddr::from((ip, disc_port));
            if hosts.len() < MAX_HOSTS && !hosts.contains(&host) {
                tracing::info!(%host, "asking a host found for the coordinator");
                hosts.push(host);
            }
        }
        if let Err(e) = asker.ask(&hosts) {
            tracing::debug!("discovery query: {e}");
        }
        // Also paces the loop while no host is known yet.
        if let Some(addr) = asker.answer(deadline) {
            return Ok(addr);
        }
    }
    Err(Error::FormationTimeout { missing: vec![0] })
}

/// The coordinator's own data address: its LAN address (`iface`'s, if
/// chosen) and `data_base`.
pub(crate) fn coordinator_address(
    disc_port: u16,
    data_base: u16,
    iface: Option<&Iface>,
) -> Result<SocketAddrV4> {
    let ip = match iface {
        Some(i) => i.addr,
        None => lan_address(disc_port)?,
    };
    Ok(SocketAddrV4::new(ip, data_base))
}
