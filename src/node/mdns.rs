//! mDNS for star discovery on a LAN (`DISCOVER=1`, `TOPOLOGY=star`, no
//! `DISCOVER_HOST`): the coordinator publishes `_meshwork._udp.local.`
//! with its job's id; a worker browses for instances with its job's id
//! and asks each of their hosts by the authenticated unicast query (mDNS
//! only says where to ask; the token still decides who is answered, and
//! the first authentic answer wins). Both
//! bind to the chosen interface only (`IFNAME`, else the default route's).

use super::discovery::Job;
use crate::error::{Error, Result};
use mdns_sd::{IfKind, ServiceDaemon, ServiceEvent, ServiceInfo};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

const SERVICE: &str = "_meshwork._udp.local.";

fn fail(e: mdns_sd::Error) -> Error {
    Error::ConnectionFailed {
        rank: 0,
        reason: format!("mDNS: {e}"),
    }
}

fn daemon(on: Ipv4Addr) -> Result<ServiceDaemon> {
    let d = ServiceDaemon::new().map_err(fail)?;
    d.disable_interface(IfKind::All).map_err(fail)?;
    d.enable_interface(IfKind::Addr(on.into())).map_err(fail)?;
    Ok(d)
}

/// A published service; withdrawn when dropped.
pub(crate) struct Advert {
    daemon: ServiceDaemon,
}

impl Drop for Advert {
    fn drop(&mut self) {
        let _ = self.daemon.shutdown();
    }
}

/// Publish job `job` at `ip`, answering queries on `disc_port`.
pub(crate) fn publish(job: u64, ip: Ipv4Addr, disc_port: u16) -> Result<Advert> {
    let daemon = daemon(ip)?;
    let id = format!("{job:016x}");
    let info = ServiceInfo::new(
        SERVICE,
        &format!("meshwork-{id}"),
        &format!("meshwork-{id}.local."),
        std::net::IpAddr::from(ip),
        disc_port,
        &[("job", id.as_str())][..],
    )
    .map_err(fail)?;
    daemon.register(info).map_err(fail)?;
    tracing::info!(%ip, disc_port, "published the job by mDNS ({SERVICE})");
    Ok(Advert { daemon })
}

/// The coordinator of `job`, found by browsing from `on` until
/// `deadline`: every instance whose TXT record carries the job's id (a
/// public value: a stranger can publish one too) is a candidate, and each
/// of its addresses is asked by the authenticated unicast query at
/// `disc_port`; the first authentic reply wins. A stranger's instance
/// costs nothing but a query; only the deadline ends the search.
pub(crate) fn find(
    job: &Job,
    rank: u32,
    on: Ipv4Addr,
    disc_port: u16,
    deadline: Instant,
) -> Result<SocketAddrV4> {
    let daemon = daemon(on)?;
    let events = daemon.browse(SERVICE).map_err(fail)?;
    let id = format!("{:016x}", job.id());
    let found = super::discovery::ask_each(
        job,
        rank,
        disc_port,
        || {
            let mut hosts = Vec::new();
            while let Ok(event) = events.try_recv() {
                if let ServiceEvent::ServiceResolved(s) = event {
                    if s.get_property_val_str("job") == Some(&id) {
                        hosts.extend(s.get_addresses_v4());
                    }
                }
            }
            hosts
        },
        deadline,
    );
    let _ = daemon.shutdown();
    let addr = found?;
    tracing::info!(%addr, "found the coordinator by mDNS");
    Ok(addr)
}
