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
//! Every datagram carries a job id (derived from the token and the job's
//! parameters, so two jobs on one LAN never mix) and an HMAC-SHA256 of its
//! contents under the cluster token, so a stranger cannot inject an
//! address:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | `MWDISC01` (announcement) or `MWQUERY1` (query) |
//! | 8 | 8 | job id |
//! | 16 | 4 | world size |
//! | 20 | 4 | sender's rank |
//! | 24 | 4 | data address, IPv4 (0 in a query) |
//! | 28 | 2 | data port (0 in a query) |
//! | 30 | 2 | zero |
//! | 32 | 32 | HMAC-SHA256 of bytes 0..32 |

use crate::error::{Error, Result};
use crate::iface::Iface;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

pub(crate) const ANNOUNCE: &[u8; 8] = b"MWDISC01";
pub(crate) const QUERY: &[u8; 8] = b"MWQUERY1";
pub(crate) const LEN: usize = 64;
/// How often a node repeats itself.
const PERIOD: Duration = Duration::from_millis(50);
/// How long a node keeps announcing after it has heard everyone.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// What identifies one job and authenticates its members.
#[derive(Clone)]
pub(crate) struct Job {
    id: u64,
    key: [u8; 32],
    world: u32,
}

impl Job {
    pub(crate) fn new(token: &str, world: u32, disc_port: u16, data_base: u16) -> Job {
        let mut h = Sha256::new();
        h.update(b"meshwork job\0");
        h.update(token.as_bytes());
        h.update(world.to_le_bytes());
        h.update(disc_port.to_le_bytes());
        h.update(data_base.to_le_bytes());
        let digest: [u8; 32] = h.finalize().into();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        let key: [u8; 32] = Sha256::new()
            .chain_update(b"meshwork discovery\0")
            .chain_update(token.as_bytes())
            .finalize()
            .into();
        Job {
            id: u64::from_le_bytes(id),
            key,
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

    pub(crate) fn encode(
        &self,
        magic: &[u8; 8],
        rank: u32,
        addr: Option<SocketAddrV4>,
    ) -> [u8; LEN] {
        let mut d = [0u8; LEN];
        d[..8].copy_from_slice(magic);
        d[8..16].copy_from_slice(&self.id.to_le_bytes());
        d[16..20].copy_from_slice(&self.world.to_le_bytes());
        d[20..24].copy_from_slice(&rank.to_le_bytes());
        if let Some(a) = addr {
            d[24..28].copy_from_slice(&a.ip().octets());
            d[28..30].copy_from_slice(&a.port().to_le_bytes());
        }
        let tag = self.mac(&d[..32]).finalize().into_bytes();
        d[32..].copy_from_slice(&tag);
        d
    }

    /// A datagram of this job, authentic: (kind, rank, address). A pure
    /// function (fuzzed).
    pub(crate) fn decode(&self, d: &[u8]) -> Option<(&'static [u8; 8], u32, SocketAddrV4)> {
        if d.len() != LEN {
            return None;
        }
        let magic: &'static [u8; 8] = match &d[..8] {
            m if m == ANNOUNCE => ANNOUNCE,
            m if m == QUERY => QUERY,
            _ => return None,
        };
        if d[8..16] != self.id.to_le_bytes() || d[16..20] != self.world.to_le_bytes() {
            return None;
        }
        self.mac(&d[..32]).verify_slice(&d[32..]).ok()?;
        let rank = u32::from_le_bytes([d[20], d[21], d[22], d[23]]);
        if rank >= self.world {
            return None;
        }
        let ip = Ipv4Addr::new(d[24], d[25], d[26], d[27]);
        let port = u16::from_le_bytes([d[28], d[29]]);
        Some((magic, rank, SocketAddrV4::new(ip, port)))
    }
}

/// A UDP socket on `port` that shares it (several jobs or ranks per host)
/// and may broadcast. A port held by a program that does not share it is
/// an error naming it.
fn bind_shared(port: u16, rank: u32) -> Result<UdpSocket> {
    let busy = |e: std::io::Error| Error::ConnectionFailed {
        rank,
        reason: format!("discovery port {port} is not available: {e}"),
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(busy)?;
    s.set_reuse_address(true).map_err(busy)?;
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
    let hello = job.encode(ANNOUNCE, rank, Some(me));
    let mut known: BTreeMap<u32, SocketAddrV4> = BTreeMap::from([(rank, me)]);
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
            sock.send_to(&hello, (to, disc_port))?;
            next_send = now + PERIOD;
        }
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            if let Some((kind, r, addr)) = job.decode(&buf[..n]) {
                if kind == ANNOUNCE && r != rank {
                    known.insert(r, addr);
                }
            }
        }
    }
    // Keep announcing a while so that ranks still looking hear us.
    std::thread::spawn(move || {
        let until = Instant::now() + LINGER;
        let mut next_send = Instant::now();
        while Instant::now() < until {
            if Instant::now() >= next_send {
                let _ = sock.send_to(&hello, (to, disc_port));
                next_send = Instant::now() + PERIOD;
            }
            // Paces the loop: returns within one period.
            let _ = sock.recv_from(&mut buf);
        }
    });
    Ok(known.into_values().map(SocketAddr::V4).collect())
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
    let reply = job.encode(ANNOUNCE, 0, Some(data));
    std::thread::spawn(move || {
        let _keep = keep;
        let mut buf = [0u8; 256];
        while Instant::now() < until {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                if matches!(job.decode(&buf[..n]), Some((kind, _, _)) if kind == QUERY) {
                    let _ = sock.send_to(&reply, from);
                }
            }
        }
    });
    Ok(())
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
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    sock.set_read_timeout(Some(PERIOD))?;
    let ask = job.encode(QUERY, rank, None);
    let mut buf = [0u8; 256];
    tracing::info!(%target, "asking the coordinator for its address");
    while Instant::now() < deadline {
        sock.send_to(&ask, target)?;
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            if let Some((kind, 0, addr)) = job.decode(&buf[..n]) {
                if kind == ANNOUNCE {
                    return Ok(SocketAddr::V4(addr));
                }
            }
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
