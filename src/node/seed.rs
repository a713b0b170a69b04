//! Bootstrap through a seed (`Node::seed`): host it or join it, listen
//! where the token allows, form, and pass the seed's ready barrier.

use super::{from_formation, token_rule, Elastic, Node};
use crate::error::{Error, Result};
use crate::group::ProcessGroup;
use meshwork_collectives::Topology;
use meshwork_transport::mem::MemHub;
use meshwork_transport::BoundSockets;
use meshwork_transport::Transport;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

impl Node {
    /// `connect` through a seed (see `Node::seed`).
    pub(super) fn connect_via_seed(self, seed_addr: SocketAddr) -> Result<Arc<ProcessGroup>> {
        self.join_seed(seed_addr, None)
    }

    /// Join through the seed: to form the job, as a new process for it
    /// (`running`), or as a member growing it (`grow`, with the job's
    /// elastic state).
    pub(super) fn join_seed(
        mut self,
        seed_addr: SocketAddr,
        elastic: Option<Arc<Elastic>>,
    ) -> Result<Arc<ProcessGroup>> {
        use meshwork_transport::seed::{self, JoinRequest, Seed, SeedConfig};
        let world = self.world;
        let wanted = (!self.join_any).then_some(self.rank);
        if (world == 0 && !self.running) || wanted.is_some_and(|r| r >= world) {
            return Err(Error::InvalidArgument(format!(
                "rank {} is not in a world of {world}",
                self.rank
            )));
        }
        // The IP to announce: the one given, else IFNAME's, else (none)
        // the one the seed sees.
        let chosen = self.chosen_interface()?;
        let announced = self
            .advertise
            .map(|a| a.ip())
            .or(chosen.map(|i| i.addr.into()));
        // The seed's addresses: its name may resolve to several.
        let seeds: Vec<SocketAddr> = std::iter::once(seed_addr)
            .chain(self.seed_also.iter().copied())
            .collect();
        let off_loopback = seeds.iter().find(|a| !a.ip().is_loopback());
        let listen_ip = seed_listen_ip(
            *off_loopback.unwrap_or(&seed_addr),
            announced,
            self.token.is_some(),
            self.encrypt_bulk,
        )?;
        let star = self.topology == Topology::Star;
        // Rank 0 hosts the seed as the job forms, unless the address is
        // another process's; it serves the job's growths while the job runs.
        let hosted = match wanted {
            Some(0) if elastic.is_none() && !self.running => Seed::start(
                seed_bind(&seeds, self.token.is_some()),
                SeedConfig {
                    world,
                    star,
                    token: self.token.clone(),
                    timeout: self.timeout,
                    // This process joins as rank 0 after starting the seed:
                    // joiners without a rank must not take it first.
                    reserved: Some(0),
                    elastic: true,
                },
            )
            .map_err(|e| tracing::info!("not hosting the seed ({e}); joining it"))
            .ok(),
            _ => None,
        };
        // This rank's data port: the advertised one, else a free one,
        // bound here and listened on by formation (no moment in which
        // another program could take it).
        let (port, held) = match self.advertise.map(|a| a.port()).filter(|&p| p != 0) {
            Some(p) => (p, None),
            None => {
                let (tcp, udp) = super::bind_rank_sockets(listen_ip).map_err(Error::Io)?;
                let port = tcp.local_addr().map_err(Error::Io)?.port();
                (port, Some(BoundSockets::new(tcp, Some(udp))))
            }
        };
        let unspecified: std::net::IpAddr = if seed_addr.is_ipv6() {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        };
        let advertise = SocketAddr::new(announced.unwrap_or(unspecified), port);
        let joined = seed::join_at(
            &seeds,
            &JoinRequest {
                world,
                rank: wanted,
                star,
                grow: self.grow,
                // A growth's member proves its rank with its membership
                // (a rank rejoining comes as a new process).
                member: elastic
                    .as_ref()
                    .filter(|_| !self.running)
                    .and_then(|e| e.membership()),
                token: self.token.clone(),
                timeout: self.timeout,
                advertise,
            },
        )
        .map_err(from_formation)?;
        let rank = joined.rank;
        // A new process learns the group's size from the seed.
        self.world = joined.world;
        let world = self.world;
        tracing::info!(rank, world, %advertise, peers = ?joined.peers, "the seed admitted this rank");
        let bind = SocketAddr::new(listen_ip, port);
        let formed = if world == 1 {
            Ok(Arc::new(MemHub::world(1).remove(0)) as Arc<dyn Transport>)
        } else {
            self.form(
                rank,
                joined.peers.clone(),
                alternates_on_seed_host(&seeds, &joined.peers),
                Some(bind),
                Some(joined.identity.clone()),
                held,
            )
        };
        let membership = joined.membership();
        let ready = joined
            .ready(formed.is_ok(), self.timeout)
            .map_err(from_formation);
        let transport = formed?;
        ready?;
        let elastic = elastic.unwrap_or_else(|| Elastic::new(&self, seed_addr, hosted));
        elastic.formed(membership);
        let group = self.group(rank, transport)?;
        group.set_elastic(elastic);
        Ok(group)
    }
}

/// Run a seed as its own process (what `meshrun seed` does): serve the
/// bootstrap of one job of `world` ranks on `bind` — every rank joins with
/// `SEED` — and return once the job has formed (every rank ready), or with
/// `FormationTimeout` naming the ranks that never joined. `elastic`: then
/// go on serving the job's growths ([`ProcessGroup::grow`],
/// [`Node::join_running`]) until the process is stopped.
pub fn serve_seed(
    bind: SocketAddr,
    world: u32,
    topology: Topology,
    token: Option<String>,
    timeout: Duration,
    elastic: bool,
) -> Result<()> {
    token_rule(token.as_deref(), !bind.ip().is_loopback(), false)?;
    meshwork_transport::seed::Seed::start(
        bind,
        meshwork_transport::seed::SeedConfig {
            world,
            star: topology == Topology::Star,
            token,
            timeout,
            reserved: None,
            elastic,
        },
    )
    .and_then(meshwork_transport::seed::Seed::wait)
    .map_err(from_formation)
}

/// Where rank 0 hosts the seed: on its address; but when the seed's name
/// gives several and this host holds one of them, on every address (with
/// a token), since which of them the others reach cannot be told here —
/// a dead bridge's may be listed first.
fn seed_bind(seeds: &[SocketAddr], token: bool) -> SocketAddr {
    let first = seeds[0];
    let local = |a: &SocketAddr| std::net::UdpSocket::bind(SocketAddr::new(a.ip(), 0)).is_ok();
    if seeds.len() > 1 && token && seeds.iter().any(local) {
        SocketAddr::new(super::unspecified_like(first), first.port())
    } else {
        first
    }
}

/// The other addresses of each rank on the seed's host, in rank order:
/// a rank whose table address is one of the seed's name's addresses is on
/// the host that name denotes, so its other addresses are that rank's
/// too (on its port): dialled in turn, they reach it when the one the
/// seed saw is a dead bridge's (rank 0, joining its own seed, is seen at
/// whichever of its addresses it dialled).
fn alternates_on_seed_host(seeds: &[SocketAddr], peers: &[SocketAddr]) -> Vec<Vec<SocketAddr>> {
    if seeds.len() < 2 {
        return Vec::new();
    }
    peers
        .iter()
        .map(|p| match seeds.iter().any(|s| s.ip() == p.ip()) {
            true => seeds
                .iter()
                .filter(|s| s.ip() != p.ip())
                .map(|s| SocketAddr::new(s.ip(), p.port()))
                .collect(),
            false => Vec::new(),
        })
        .collect()
}

/// Where a seed-bootstrapped rank listens. With a token, every address.
/// Without one the handshake key is public, so nothing may be reachable
/// from elsewhere: the seed and any address announced (`ADVERTISE`, or
/// the one `IFNAME` chose) must be on loopback, else `TokenRequired`, and
/// the rank listens on the loopback address of the seed's IP family.
fn seed_listen_ip(
    seed: SocketAddr,
    announced: Option<std::net::IpAddr>,
    token: bool,
    encrypt_bulk: bool,
) -> Result<std::net::IpAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let (any, loopback) = if seed.is_ipv6() {
        (Ipv6Addr::UNSPECIFIED.into(), Ipv6Addr::LOCALHOST.into())
    } else {
        (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::LOCALHOST.into())
    };
    if token {
        return Ok(any);
    }
    let off_host = !seed.ip().is_loopback() || announced.is_some_and(|ip| !ip.is_loopback());
    token_rule(None, off_host, encrypt_bulk)?;
    Ok(loopback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn without_a_token_a_seed_job_listens_on_loopback_and_announces_nothing_else() {
        let v4: SocketAddr = "127.0.0.1:29400".parse().unwrap();
        let v6: SocketAddr = "[::1]:29400".parse().unwrap();
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let listen = |seed, announced, token| seed_listen_ip(seed, announced, token, false);
        assert_eq!(listen(v4, None, false).unwrap(), ip("127.0.0.1").unwrap());
        assert_eq!(listen(v6, None, false).unwrap(), ip("::1").unwrap());
        assert_eq!(
            listen(v4, ip("127.0.0.9"), false).unwrap(),
            ip("127.0.0.1").unwrap()
        );
        // An address off loopback, given (ADVERTISE) or chosen (IFNAME),
        // a seed off loopback, sealing with no key: the token is needed.
        for (seed, announced) in [
            (v4, ip("10.77.0.3")),
            (v4, ip("0.0.0.0")),
            ("10.77.0.1:29400".parse().unwrap(), None),
        ] {
            let e = listen(seed, announced, false).unwrap_err();
            assert!(
                matches!(e, Error::TokenRequired),
                "{seed} {announced:?}: {e:?}"
            );
        }
        assert!(matches!(
            seed_listen_ip(v4, None, false, true),
            Err(Error::TokenRequired)
        ));
        // With one, every address.
        assert_eq!(
            listen(v4, ip("10.77.0.3"), true).unwrap(),
            ip("0.0.0.0").unwrap()
        );
        assert_eq!(listen(v6, None, true).unwrap(), ip("::").unwrap());
        // The port held for the rank is held on that address.
        let (tcp, _) = super::super::bind_rank_sockets(listen(v4, None, false).unwrap()).unwrap();
        let held = tcp.local_addr().unwrap();
        assert!(held.ip().is_loopback(), "{held}");
    }
}
