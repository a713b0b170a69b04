//! A bounds-checked little-endian reader: the one place the wire's
//! integers are parsed (hello, seed messages, discovery datagrams,
//! frame headers). Reading past the end yields `None`, never a panic.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Reads fields off a byte slice, front to back.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    /// One byte.
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }

    /// A socket address in the 18-byte form [`put_addr`] writes.
    pub fn addr(&mut self) -> Option<SocketAddr> {
        let port = self.u16()?;
        let v6 = Ipv6Addr::from(self.array::<16>()?);
        let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
        Some(SocketAddr::new(ip, port))
    }

    /// Bytes not read yet.
    #[cfg(test)]
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }
}

/// Bytes of an address written by [`put_addr`].
pub const ADDR_LEN: usize = 18;

/// Append `a` as port, then 16 address bytes (IPv4 as IPv4-mapped IPv6).
pub fn put_addr(out: &mut Vec<u8>, a: SocketAddr) {
    out.extend_from_slice(&a.port().to_le_bytes());
    let v6 = match a.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    out.extend_from_slice(&v6.octets());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_order_and_stops_at_the_end() {
        let mut b = vec![7u8];
        b.extend_from_slice(&0x0102u16.to_le_bytes());
        b.extend_from_slice(&0xdead_beefu32.to_le_bytes());
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut r = Reader::new(&b);
        assert_eq!(r.u8(), Some(7));
        assert_eq!(r.u16(), Some(0x0102));
        assert_eq!(r.u32(), Some(0xdead_beef));
        assert_eq!(r.u64(), Some(u64::MAX));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.u8(), None);
        let mut short = Reader::new(&[1, 2, 3]);
        assert_eq!(short.u32(), None);
        assert_eq!(short.remaining(), 3, "a failed read consumes nothing");
    }

    #[test]
    fn addresses_round_trip() {
        for a in ["10.1.2.3:29500", "[fe80::1]:7", "[::1]:65535"] {
            let a: SocketAddr = a.parse().unwrap();
            let mut out = Vec::new();
            put_addr(&mut out, a);
            assert_eq!(out.len(), ADDR_LEN);
            assert_eq!(Reader::new(&out).addr(), Some(a));
        }
        assert_eq!(Reader::new(&[0; ADDR_LEN - 1]).addr(), None);
    }
}
