//! Seed bootstrap: one known address hands out ranks, the peer table and
//! TLS identities.
//!
//! ```text
//! joiner → seed   Join      (81 B): "MWSEED02", version (3), world (0: a
//!                                   new process for a running job), wanted
//!                                   rank (u32::MAX: any), flags (bit 0 star;
//!                                   bits 8.. a growth's number of new
//!                                   processes), nonce_j, share_j (an
//!                                   ephemeral P-256 key, 33 B)
//! seed → joiner   Challenge (69 B): "MWSEED02", version, nonce_s, share_s
//! joiner → seed   Proof     (86 B): claim = advertised address (18 B;
//!                                   unspecified IP: the one the seed sees),
//!                                   member m (u32; u32::MAX: none), tag_m
//!                                   (32 B; zeros for none), then
//!                                   HMAC(key, "seed joiner" ‖ join ‖ challenge ‖ claim)
//!                 tag_m = HMAC(secret_m, "seed member" ‖ join ‖ challenge ‖ address ‖ m)
//!                 … a proof that does not verify: the seed closes, silent …
//! seed → joiner   Reply     (44 B): status, rank, world, then
//!                                   HMAC(key, "seed reply" ‖ join ‖ challenge ‖ proof ‖ those 12 B)
//! then, if admitted, records sealed under
//!   K = HMAC(key, "seed records" ‖ join ‖ challenge ‖ proof ‖ SHA-256(ECDH(share_j, share_s))):
//! seed → joiner   record 0, Welcome: CA cert, leaf cert, leaf key (DER,
//!                 each after its length), then secret_r (32 B)
//! … once every rank has joined (or the seed's deadline passed) …
//! seed → joiner   record 1, Table: status (0 ok / 1 missing), n, then n
//!                 addresses in rank order (18 B each) or the n ranks missing
//! joiner → seed   record 2, Ready: its links are up (1) or not (0)
//! seed → joiner   record 3, Verdict: everyone's are (1) or not (0)
//! ```
//!
//! A record is its length (u32), AES-256-GCM ciphertext and tag; its
//! number is its nonce and, with a label, its associated data, so records
//! cannot be altered, replayed, reordered or dropped unnoticed.
//!
//! `key` comes from the token through the slow KDF (`auth::kdf`, label
//! "seed bootstrap"). The joiner proves the token first, over the seed's
//! fresh nonce, and the seed says nothing about the job — no status, no
//! proof to guess the token against — until that proof verifies: a
//! stranger learns the protocol version, a nonce and an ephemeral key. A
//! joiner trusts a verdict (another world or topology, a taken rank) only
//! under the seed's proof, and reports it at once; what cannot be
//! authenticated (a silent close after its proof, a proof that does not
//! verify, another protocol version) it retries until its deadline and
//! then reports (`TokenMismatch`, `ProtocolMismatch`). Everything after
//! the reply is sealed, and the joiner checks that its leaf chains to the
//! CA it received: a welcome or table altered in transit is
//! `SeedTampered`, never accepted. The ephemeral exchange keeps the leaf
//! key from a token holder who only recorded the join (one who relays the
//! join actively can still read it: the token is the job's only secret).
//! The CA is the seed's own, random: only ranks admitted by this seed hold
//! leaves from it.
//!
//! The seed runs every admission on its own thread under one deadline
//! (about a second: `form::handshake_time`); until a joiner has proved the
//! token its admission counts against bounds per source address and in
//! all (`form::InFlight`: a newcomer over a bound evicts the oldest it
//! competes with), so a stranger who is silent, dribbles bytes or fails
//! the proof costs its own connection and nothing else.
//! Without a token the key is public: such a seed must listen on loopback
//! only (the caller's rule; see `meshwork::Node::seed`).
//!
//! An elastic seed (`SeedConfig::elastic`) goes on once its job has
//! formed, serving growths: a member of the running job joins again for
//! its own rank in a larger world, with the growth's number of new
//! processes in its flags; the first such join opens the growth, and the
//! others must ask for the same. A new process (world 0) is kept, once
//! it has proved the token, until a growth has a rank for it: the seed
//! answers it then, with the growth's world in the reply. The table,
//! ready barrier and verdict follow as at formation; then the seed waits
//! for the next growth.
//!
//! Holding the token does not make a process a member. Every welcome
//! carries its rank's secret in the group being formed,
//! `secret_r = HMAC(member_key, generation ‖ r)` (`member_key` random,
//! the seed's own; `generation` counts the groups it has formed), and a
//! member's growth claim names its rank `m` in the group the seed formed
//! last and proves it with `tag_m`, over this join's fresh challenge.
//! The seed checks, before it keeps or allocates anything for the claim:
//! the tag (else `NotMember`); that each membership claims one rank per
//! growth; that the growth adds between 1 and [`GROW_MAX`] new processes
//! and keeps at most as many members as the running group has (a group
//! shrunk since keeps fewer). Which rank a member takes is its group's
//! business — a shrink or a split renumbers ranks without the seed — so
//! a member of the last group can take another member's rank in place of
//! its own (one rank, not two); a process that never was one cannot take
//! any but a new process's.

pub(crate) use crate::auth::handshake::write_by;
use crate::form::io_fail;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

mod joiner;
mod server;
mod session;
mod slots;
mod wire;

#[cfg(test)]
mod growth_tests;
#[cfg(test)]
mod tests;

pub use joiner::{admit_me, admit_me_at, join, join_at, Admitted, JoinRequest, Joined};
pub use server::{Seed, SeedConfig};
pub use session::Membership;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use session::{Record, Session};
pub(crate) use wire::get_addr;
#[cfg(test)]
pub(crate) use wire::Table;
pub use wire::SEED_VERSION;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use wire::{
    encode_table, encode_welcome, read_table, read_welcome, ChallengeMsg, JoinMsg, ReplyMsg,
    WelcomeError, JOIN_LEN, WELCOME_PART_MAX,
};

/// A wanted rank meaning "the lowest free one".
const ANY: u32 = u32::MAX;

/// The most new processes one growth may add. The seed keeps a slot for
/// every rank of a growing group and sends every rank a table of them
/// all (18 B a rank), so a member's claim must not size them at will
/// (one claim for a world near 2^32 used to abort rank 0's process, the
/// seed's host, and with it the job). 65 536 keeps a growth's slots and
/// tables to a few MiB, and is far more than one seed admits in a
/// deadline: new processes wait for a growth 64 at a time (`WAITING_MAX`
/// in `slots.rs`), each admission a connection and a thread.
pub const GROW_MAX: u32 = 1 << 16;

/// The seed's verdict on a joiner that proved the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Status {
    Ok = 0,
    World = 2,
    RankConflict = 3,
    Topology = 4,
    /// A growth or a new process for a running job, at a seed that
    /// serves none (not elastic, or its job is still forming).
    NotElastic = 5,
    /// A new process for a running job, at a seed with as many waiting
    /// for a growth as it keeps.
    Full = 6,
    /// A growth's member claim without a membership of the group the seed
    /// formed last (a token holder that is no member, a forged or stale
    /// membership), or with one that already claimed a rank of the growth.
    NotMember = 7,
}

/// Read one sealed record's bytes after its length (at most `max`)
/// before `deadline`.
fn read_record(stream: &mut TcpStream, max: usize, deadline: Instant) -> std::io::Result<Vec<u8>> {
    use crate::auth::handshake::read_by;
    let mut len = [0u8; 4];
    read_by(stream, &mut len, deadline)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("a record of {len} bytes, at most {max} expected"),
        ));
    }
    let mut body = vec![0u8; len];
    read_by(stream, &mut body, deadline)?;
    Ok(body)
}

/// The largest table record for a world of `world` ranks.
fn table_record_max(world: u32) -> usize {
    8 + crate::wire::codec::ADDR_LEN * world as usize + session::TAG_LEN
}

/// A one-byte record's body (ready, verdict).
const FLAG_RECORD_LEN: usize = 1 + session::TAG_LEN;

/// A joiner's address for the table: the advertised one, or with an
/// unspecified IP, the one the seed sees (NAT, containers).
fn table_addr(advertised: SocketAddr, from: SocketAddr) -> SocketAddr {
    let mut addr = advertised;
    if addr.ip().is_unspecified() {
        addr.set_ip(from.ip());
    }
    addr
}
