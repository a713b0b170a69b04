//! Choosing the network interface on a multi-homed host (`IFNAME`).
//!
//! `IFNAME` names an interface exactly (`eth1`), by prefix (`eth`, `enp`),
//! or by a CIDR its address falls in (`10.77.0.0/16`). The chosen
//! interface's IPv4 address is what discovery announces and what a rank
//! advertises to a seed; discovery broadcasts to its subnet's broadcast
//! address, so the datagrams leave through it rather than through the
//! default route's interface.

use crate::error::{Error, Result};
use std::net::Ipv4Addr;

/// An interface's IPv4 address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Iface {
    pub name: String,
    pub addr: Ipv4Addr,
    /// Its subnet's broadcast address.
    pub broadcast: Ipv4Addr,
}

/// Every IPv4 address of this host's interfaces that are up.
fn interfaces() -> std::io::Result<Vec<Iface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid
        // until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() || !up {
            continue;
        }
        // SAFETY: a non-null sockaddr of the list; read its family first.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) != libc::AF_INET {
            continue;
        }
        let v4 = |sa: *const libc::sockaddr| -> Option<Ipv4Addr> {
            if sa.is_null() {
                return None;
            }
            // SAFETY: an AF_INET entry's addresses are sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
            Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
        };
        let Some(addr) = v4(ifa.ifa_addr) else {
            continue;
        };
        let mask = v4(ifa.ifa_netmask).unwrap_or(Ipv4Addr::BROADCAST);
        // SAFETY: a NUL-terminated name owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let broadcast = Ipv4Addr::from(u32::from(addr) | !u32::from(mask));
        out.push(Iface {
            name,
            addr,
            broadcast,
        });
    }
    // SAFETY: the list from getifaddrs, freed once, not used after.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Whether `addr` falls in `cidr` (`a.b.c.d/len`).
fn in_cidr(addr: Ipv4Addr, cidr: &str) -> Option<bool> {
    let (net, len) = cidr.split_once('/')?;
    let net: Ipv4Addr = net.trim().parse().ok()?;
    let len: u32 = len.trim().parse().ok().filter(|&l| l <= 32)?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some(u32::from(addr) & mask == u32::from(net) & mask)
}

/// The interface `spec` (`IFNAME`) selects: by exact name, else by name
/// prefix, else by CIDR; an error naming the spec and the interfaces there
/// are when none matches.
pub(crate) fn select(spec: &str) -> Result<Iface> {
    let all = interfaces().map_err(Error::Io)?;
    pick(&all, spec).ok_or_else(|| {
        let there: Vec<String> = all
            .iter()
            .map(|i| format!("{} {}", i.name, i.addr))
            .collect();
        Error::InvalidArgument(format!(
            "IFNAME {spec:?} matches no interface that is up with an IPv4 address (there are: {})",
            there.join(", ")
        ))
    })
}

fn pick(all: &[Iface], spec: &str) -> Option<Iface> {
    let spec = spec.trim();
    if spec.contains('/') {
        return all
            .iter()
            .find(|i| in_cidr(i.addr, spec) == Some(true))
            .cloned();
    }
    all.iter()
        .find(|i| i.name == spec)
        .or_else(|| {
            let mut prefixed: Vec<&Iface> =
                all.iter().filter(|i| i.name.starts_with(spec)).collect();
            prefixed.sort_by(|a, b| a.name.cmp(&b.name));
            prefixed.into_iter().next()
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, addr: [u8; 4]) -> Iface {
        Iface {
            name: name.into(),
            addr: addr.into(),
            broadcast: Ipv4Addr::BROADCAST,
        }
    }

    #[test]
    fn by_name_prefix_or_cidr() {
        let all = [
            iface("lo", [127, 0, 0, 1]),
            iface("eth1", [10, 77, 3, 12]),
            iface("eth0", [192, 168, 1, 5]),
        ];
        assert_eq!(pick(&all, "eth1").unwrap().name, "eth1");
        assert_eq!(pick(&all, "eth").unwrap().name, "eth0", "first by name");
        assert_eq!(pick(&all, "10.77.0.0/16").unwrap().name, "eth1");
        assert_eq!(pick(&all, "192.168.1.0/24").unwrap().name, "eth0");
        assert!(pick(&all, "wlan").is_none());
        assert!(pick(&all, "10.0.0.0/99").is_none());
        assert_eq!(in_cidr([1, 2, 3, 4].into(), "0.0.0.0/0"), Some(true));
    }

    #[test]
    fn this_host_has_loopback() {
        let lo = select("lo").unwrap();
        assert_eq!(lo.addr, Ipv4Addr::LOCALHOST);
        assert!(select("no-such-interface").is_err());
    }
}
