//! mDNS for star discovery on a LAN (`DISCOVER=1`, `TOPOLOGY=star`, no
//! `DISCOVER_HOST`): the coordinator publishes `_meshwork._udp.local.`
//! with its job's id; a worker browses for the instance with its job's id
//! and then asks that host by the authenticated unicast query (mDNS only
//! says where to ask; the token still decides who is answered). Both
//! bind to the chosen interface only (`IFNAME`, else the default route's).

use crate::error::{Error, Result};
use mdns_sd::{IfKind, ServiceDaemon, ServiceEvent, ServiceInfo};
use std::net::Ipv4Addr;
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

/// The host publishing job `job`, browsing from `on` until `deadline`.
pub(crate) fn find(job: u64, on: Ipv4Addr, deadline: Instant) -> Result<Ipv4Addr> {
    let daemon = daemon(on)?;
    let events = daemon.browse(SERVICE).map_err(fail)?;
    let id = format!("{job:016x}");
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break None;
        }
        match events.recv_timeout(left) {
            Ok(ServiceEvent::ServiceResolved(s)) if s.get_property_val_str("job") == Some(&id) => {
                if let Some(ip) = s.get_addresses_v4().into_iter().next() {
                    break Some(ip);
                }
            }
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    let _ = daemon.shutdown();
    let ip = found.ok_or(Error::FormationTimeout { missing: vec![0] })?;
    tracing::info!(%ip, "found the coordinator by mDNS");
    Ok(ip)
}
