//! The seed's messages as pure functions (fuzzed): the socket code in
//! `server.rs` and `joiner.rs` reads bytes and hands them to these (see
//! `mod.rs` for the exchange).

use crate::wire::codec::{put_addr, ADDR_LEN};
use crate::wire::Reader;
use std::io::Read;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Every message that opens a direction starts with this, then the
/// version: the layout of magic and version since version 2 (version 1,
/// `MWSEED01`, proved nothing before it answered and sent its welcome in
/// the clear).
const MAGIC: &[u8; 8] = b"MWSEED02";
/// What the messages of the first version began with.
const MAGIC_V1: &[u8; 8] = b"MWSEED01";
/// The seed protocol's version, in the Join and the Challenge: 3 since a
/// growth's member proves its membership (version 2 took any holder of
/// the token at its word).
pub const SEED_VERSION: u32 = 3;

/// Magic and version: what either side reads first.
pub(crate) const HEAD_LEN: usize = 12;
/// An ephemeral P-256 public key, compressed.
pub(crate) const SHARE_LEN: usize = 33;
pub(crate) const JOIN_LEN: usize = HEAD_LEN + 12 + 24 + SHARE_LEN;
pub(crate) const CHALLENGE_LEN: usize = HEAD_LEN + 24 + SHARE_LEN;
/// A membership claim: a rank of the running group (`NOT_A_MEMBER`:
/// none) and the tag that proves it.
pub(crate) const CLAIM_LEN: usize = 4 + 32;
/// Advertised address, membership claim, proof of the token.
pub(crate) const PROOF_LEN: usize = ADDR_LEN + CLAIM_LEN + 32;
/// The membership claim of a joiner that claims none.
pub(crate) const NOT_A_MEMBER: u32 = u32::MAX;
/// The secret a member proves its membership with.
pub(crate) const MEMBER_SECRET_LEN: usize = 32;
pub(crate) const REPLY_LEN: usize = 12 + 32;
const FLAG_STAR: u32 = 1;
/// The flags' bits that say how many joiners a growing member admits.
const GROW_SHIFT: u32 = 8;

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

/// The seed protocol version a message's first 12 bytes announce: `None`
/// if they are not a seed's message at all (1 for the first version,
/// whose version field meant something else).
pub(crate) fn version_of(head: &[u8]) -> Option<u32> {
    match head.get(..8)? {
        m if m == MAGIC && head.len() >= HEAD_LEN => Some(u32_at(head, 8)),
        m if m == MAGIC_V1 => Some(1),
        _ => None,
    }
}

fn head(version: u32) -> [u8; HEAD_LEN] {
    let mut h = [0u8; HEAD_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&version.to_le_bytes());
    h
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = b.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

/// A joiner's first message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JoinMsg {
    pub version: u32,
    pub world: u32,
    /// The rank wanted; `ANY`: the lowest free one.
    pub want: u32,
    pub star: bool,
    /// A member of a running job growing it (`grow`): how many new
    /// processes the new group admits (the flags carry at most 2^24 - 1,
    /// the seed takes at most `GROW_MAX`); 0: a rank of a job that forms,
    /// or (`world` 0) a new process for a running one.
    pub grow: u32,
    pub nonce: [u8; 24],
    /// The joiner's ephemeral key share.
    pub share: [u8; SHARE_LEN],
}

impl JoinMsg {
    pub(crate) fn encode(&self) -> [u8; JOIN_LEN] {
        let mut join = [0u8; JOIN_LEN];
        join[..HEAD_LEN].copy_from_slice(&head(self.version));
        join[12..16].copy_from_slice(&self.world.to_le_bytes());
        join[16..20].copy_from_slice(&self.want.to_le_bytes());
        let flags = (u32::from(self.star) * FLAG_STAR) | (self.grow << GROW_SHIFT);
        join[20..24].copy_from_slice(&flags.to_le_bytes());
        join[24..48].copy_from_slice(&self.nonce);
        join[48..].copy_from_slice(&self.share);
        join
    }

    /// `None`: not a Join of this version (another magic, or too short).
    pub(crate) fn decode(join: &[u8]) -> Option<JoinMsg> {
        if join.len() < JOIN_LEN || join[..8] != *MAGIC {
            return None;
        }
        Some(JoinMsg {
            version: u32_at(join, 8),
            world: u32_at(join, 12),
            want: u32_at(join, 16),
            star: u32_at(join, 20) & FLAG_STAR != 0,
            grow: u32_at(join, 20) >> GROW_SHIFT,
            nonce: array(join, 24),
            share: array(join, 48),
        })
    }
}

/// The seed's answer to a Join: its version, a fresh nonce and its own
/// ephemeral key share; nothing about the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChallengeMsg {
    pub version: u32,
    pub nonce: [u8; 24],
    pub share: [u8; SHARE_LEN],
}

impl ChallengeMsg {
    pub(crate) fn encode(&self) -> [u8; CHALLENGE_LEN] {
        let mut c = [0u8; CHALLENGE_LEN];
        c[..HEAD_LEN].copy_from_slice(&head(self.version));
        c[12..36].copy_from_slice(&self.nonce);
        c[36..].copy_from_slice(&self.share);
        c
    }

    /// `None`: not a Challenge of this version's layout.
    pub(crate) fn decode(c: &[u8]) -> Option<ChallengeMsg> {
        if c.len() < CHALLENGE_LEN || c[..8] != *MAGIC {
            return None;
        }
        Some(ChallengeMsg {
            version: u32_at(c, 8),
            nonce: array(c, 12),
            share: array(c, 36),
        })
    }
}

/// What the joiner's proof covers after the Join and the Challenge: its
/// advertised address, the rank of the running group it claims to be
/// (`NOT_A_MEMBER`: none) and that membership's tag (zeros for none).
pub(crate) fn encode_claim(
    advertise: SocketAddr,
    member: u32,
    tag: &[u8; 32],
) -> [u8; ADDR_LEN + CLAIM_LEN] {
    let mut out = Vec::with_capacity(ADDR_LEN + CLAIM_LEN);
    put_addr(&mut out, advertise);
    out.extend_from_slice(&member.to_le_bytes());
    out.extend_from_slice(tag);
    array(&out, 0)
}

/// The membership claim in a proof message's first bytes: the rank
/// claimed (`NOT_A_MEMBER`: none) and its tag.
pub(crate) fn member_claim(proof: &[u8]) -> (u32, [u8; 32]) {
    (u32_at(proof, ADDR_LEN), array(proof, ADDR_LEN + 4))
}

/// The joiner's proof message: its claim (`encode_claim`), then the
/// proof of the token (which covers the claim).
pub(crate) fn encode_proof(
    claim: &[u8; ADDR_LEN + CLAIM_LEN],
    proof: &[u8; 32],
) -> [u8; PROOF_LEN] {
    let mut out = [0u8; PROOF_LEN];
    out[..ADDR_LEN + CLAIM_LEN].copy_from_slice(claim);
    out[ADDR_LEN + CLAIM_LEN..].copy_from_slice(proof);
    out
}

/// The seed's verdict on an authenticated joiner (its proof follows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyMsg {
    pub status: u32,
    /// The rank admitted (or refused).
    pub rank: u32,
    pub world: u32,
}

impl ReplyMsg {
    /// The reply's first 12 bytes (the seed's proof follows).
    pub(crate) fn encode(&self) -> [u8; 12] {
        let mut r = [0u8; 12];
        r[..4].copy_from_slice(&self.status.to_le_bytes());
        r[4..8].copy_from_slice(&self.rank.to_le_bytes());
        r[8..].copy_from_slice(&self.world.to_le_bytes());
        r
    }

    /// `None`: shorter than 12 bytes.
    pub(crate) fn decode(r: &[u8]) -> Option<ReplyMsg> {
        (r.len() >= 12).then(|| ReplyMsg {
            status: u32_at(r, 0),
            rank: u32_at(r, 4),
            world: u32_at(r, 8),
        })
    }
}

/// Most bytes one part of the welcome may have.
pub(crate) const WELCOME_PART_MAX: usize = 64 << 10;
/// Most bytes a sealed record's body may have (a welcome of three parts
/// at most and a member's secret, and its tag).
pub(crate) const RECORD_MAX: usize = 3 * (4 + WELCOME_PART_MAX) + MEMBER_SECRET_LEN + 16;

/// The welcome's parts (CA cert, leaf cert, leaf key), each after its
/// length: the plaintext of the welcome record, which the member's
/// secret (`MEMBER_SECRET_LEN` bytes) follows.
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
    /// The bytes ended before the parts did.
    Short,
    /// A part claimed more than `WELCOME_PART_MAX` bytes.
    TooLong(usize),
}

/// Read the welcome's three parts off `r` (a record's plaintext).
pub(crate) fn read_welcome(r: &mut impl Read) -> Result<[Vec<u8>; 3], WelcomeError> {
    let mut part = || {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(|_| WelcomeError::Short)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > WELCOME_PART_MAX {
            return Err(WelcomeError::TooLong(len));
        }
        let mut part = vec![0u8; len];
        r.read_exact(&mut part).map_err(|_| WelcomeError::Short)?;
        Ok(part)
    };
    Ok([part()?, part()?, part()?])
}

/// The three parts of a welcome record's plaintext and the member's
/// secret after them, if it is exactly that.
pub(crate) fn decode_welcome(mut plain: &[u8]) -> Option<([Vec<u8>; 3], [u8; MEMBER_SECRET_LEN])> {
    let parts = match read_welcome(&mut plain) {
        Ok(parts) => parts,
        Err(WelcomeError::TooLong(n)) => {
            tracing::warn!("a welcome part claims {n} bytes, over {WELCOME_PART_MAX}; refused");
            return None;
        }
        Err(WelcomeError::Short) => return None,
    };
    (plain.len() == MEMBER_SECRET_LEN).then(|| (parts, array(plain, 0)))
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
    /// The bytes ended before the table did.
    Short,
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

/// Read a table for a world of `world` ranks off `r` (a record's
/// plaintext; nothing is allocated for more than `world` entries).
pub(crate) fn read_table(r: &mut impl Read, world: u32) -> Result<Table, TableError> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).map_err(|_| TableError::Short)?;
    let (status, n) = (u32_at(&head, 0), u32_at(&head, 4));
    if n > world {
        return Err(TableError::Bad("larger than the world"));
    }
    if status != 0 {
        let mut raw = vec![0u8; 4 * n as usize];
        r.read_exact(&mut raw).map_err(|_| TableError::Short)?;
        return Ok(Table::Missing(
            raw.chunks(4).map(|c| u32_at(c, 0)).collect(),
        ));
    }
    if n != world {
        return Err(TableError::Bad("not one address per rank"));
    }
    let mut raw = vec![0u8; ADDR_LEN * n as usize];
    r.read_exact(&mut raw).map_err(|_| TableError::Short)?;
    Ok(Table::Peers(raw.chunks(ADDR_LEN).map(get_addr).collect()))
}

/// The table in a table record's plaintext, if it is exactly one.
pub(crate) fn decode_table(mut plain: &[u8], world: u32) -> Result<Table, TableError> {
    let table = read_table(&mut plain, world)?;
    if !plain.is_empty() {
        return Err(TableError::Bad("bytes after the table"));
    }
    Ok(table)
}
