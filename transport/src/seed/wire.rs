//! The seed's messages as pure functions (fuzzed): the socket code in
//! `mod.rs` reads bytes and hands them to these (see its docs for the
//! exchange).

use crate::wire::codec::{put_addr, ADDR_LEN};
use crate::wire::Reader;
use std::io::Read;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

const MAGIC: &[u8; 8] = b"MWSEED01";
pub(crate) const JOIN_LEN: usize = 80;
pub(crate) const REPLY_LEN: usize = 76;
const FLAG_STAR: u32 = 1;

/// The little-endian `u32` at `i` (zero past the end: every caller
/// has checked the length first).
fn u32_at(b: &[u8], i: usize) -> u32 {
    Reader::new(b.get(i..).unwrap_or_default())
        .u32()
        .unwrap_or(0)
}

/// The address at the start of `b` (the unspecified one if `b` is short).
pub(crate) fn get_addr(b: &[u8]) -> SocketAddr {
    Reader::new(b)
        .addr()
        .unwrap_or_else(|| SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0))
}

/// A Join's fields (all but the joiner's nonce).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JoinMsg {
    pub version: u32,
    pub world: u32,
    /// The rank wanted; `ANY`: the lowest free one.
    pub want: u32,
    pub star: bool,
}

impl JoinMsg {
    pub(crate) fn encode(&self, nonce: &[u8; 24]) -> [u8; JOIN_LEN] {
        let mut join = [0u8; JOIN_LEN];
        join[..8].copy_from_slice(MAGIC);
        join[8..12].copy_from_slice(&self.version.to_le_bytes());
        join[12..16].copy_from_slice(&self.world.to_le_bytes());
        join[16..20].copy_from_slice(&self.want.to_le_bytes());
        join[20..24].copy_from_slice(&(if self.star { FLAG_STAR } else { 0 }).to_le_bytes());
        join[32..56].copy_from_slice(nonce);
        join
    }

    /// `None`: not a meshwork joiner (another magic, or too short).
    pub(crate) fn decode(join: &[u8]) -> Option<JoinMsg> {
        if join.len() < JOIN_LEN || &join[..8] != MAGIC {
            return None;
        }
        Some(JoinMsg {
            version: u32_at(join, 8),
            world: u32_at(join, 12),
            want: u32_at(join, 16),
            star: u32_at(join, 20) & FLAG_STAR != 0,
        })
    }
}

/// A seed's Reply's fields (all but its nonce and proof).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyMsg {
    pub status: u32,
    /// The rank admitted (or refused; the seed's protocol version when the
    /// status is `Protocol`).
    pub rank: u32,
    pub world: u32,
}

impl ReplyMsg {
    /// The reply with its proof zero (the seed computes it over the
    /// first 44 bytes and writes it at 44).
    pub(crate) fn encode(&self, nonce: &[u8; 24]) -> [u8; REPLY_LEN] {
        let mut reply = [0u8; REPLY_LEN];
        reply[..8].copy_from_slice(MAGIC);
        reply[8..12].copy_from_slice(&self.status.to_le_bytes());
        reply[12..16].copy_from_slice(&self.rank.to_le_bytes());
        reply[16..20].copy_from_slice(&self.world.to_le_bytes());
        reply[20..44].copy_from_slice(nonce);
        reply
    }

    /// `None`: not a meshwork seed (another magic, or too short).
    pub(crate) fn decode(reply: &[u8]) -> Option<ReplyMsg> {
        if reply.len() < REPLY_LEN || &reply[..8] != MAGIC {
            return None;
        }
        Some(ReplyMsg {
            status: u32_at(reply, 8),
            rank: u32_at(reply, 12),
            world: u32_at(reply, 16),
        })
    }
}

/// Most bytes one part of the welcome may have.
pub(crate) const WELCOME_PART_MAX: usize = 64 << 10;

/// The welcome's parts (CA cert, leaf cert, sealed leaf key), each after
/// its length.
pub(crate) fn encode_welcome(parts: [&[u8]; 3]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        out.extend_from_slice(&(part.len() as u32).to_le_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// Why a welcome could not be read.
#[derive(Debug)]
pub(crate) enum WelcomeError {
    Io(std::io::Error),
    /// A part claimed more than `WELCOME_PART_MAX` bytes.
    TooLong(usize),
}

/// Read the welcome's three parts off `r` (the seed's stream, or a slice).
pub(crate) fn read_welcome(r: &mut impl Read) -> Result<[Vec<u8>; 3], WelcomeError> {
    let mut part = || {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(WelcomeError::Io)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > WELCOME_PART_MAX {
            return Err(WelcomeError::TooLong(len));
        }
        let mut part = vec![0u8; len];
        r.read_exact(&mut part).map_err(WelcomeError::Io)?;
        Ok(part)
    };
    Ok([part()?, part()?, part()?])
}

/// The seed's table: every rank's address, or the ranks that never joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    Peers(Vec<SocketAddr>),
    Missing(Vec<u32>),
}

/// Why a table could not be read.
#[derive(Debug)]
pub(crate) enum TableError {
    /// Reading its first 8 bytes failed (a timeout here: the job did not
    /// form in time).
    Head(std::io::Error),
    /// Reading the rest failed.
    Body(std::io::Error),
    /// A table this joiner cannot use.
    Bad(&'static str),
}

/// Status (0 ok / 1 some ranks missing), count, then the addresses or the
/// missing ranks.
pub(crate) fn encode_table(table: &Table) -> Vec<u8> {
    let mut out = Vec::new();
    match table {
        Table::Peers(peers) => {
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&(peers.len() as u32).to_le_bytes());
            for a in peers {
                put_addr(&mut out, *a);
            }
        }
        Table::Missing(missing) => {
            out.extend_from_slice(&1u32.to_le_bytes());
            out.extend_from_slice(&(missing.len() as u32).to_le_bytes());
            for r in missing {
                out.extend_from_slice(&r.to_le_bytes());
            }
        }
    }
    out
}

/// Read a table for a world of `world` ranks off `r` (nothing is
/// allocated for more than `world` entries).
pub(crate) fn read_table(r: &mut impl Read, world: u32) -> Result<Table, TableError> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).map_err(TableError::Head)?;
    let (status, n) = (u32_at(&head, 0), u32_at(&head, 4));
    if n > world {
        return Err(TableError::Bad("larger than the world"));
    }
    if status != 0 {
        let mut raw = vec![0u8; 4 * n as usize];
        r.read_exact(&mut raw).map_err(TableError::Body)?;
        return Ok(Table::Missing(
            raw.chunks(4).map(|c| u32_at(c, 0)).collect(),
        ));
    }
    if n != world {
        return Err(TableError::Bad("not one address per rank"));
    }
    let mut raw = vec![0u8; ADDR_LEN * n as usize];
    r.read_exact(&mut raw).map_err(TableError::Body)?;
    Ok(Table::Peers(raw.chunks(ADDR_LEN).map(get_addr).collect()))
}
