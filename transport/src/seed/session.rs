//! One join's cryptography, without sockets: the seed key, both proofs,
//! the ephemeral key exchange and the sealed records that follow the
//! reply (see `mod.rs` for the exchange).

use super::wire::{JOIN_LEN, SHARE_LEN};
use crate::auth::handshake::{proof_of, verify_of};
pub(crate) use crate::auth::seal::TAG_LEN;
use crate::auth::seal::{open_record, seal_record};
use boring::bn::BigNumContext;
use boring::derive::Deriver;
use boring::ec::{EcGroup, EcKey, EcPoint, PointConversionForm};
use boring::error::ErrorStack;
use boring::nid::Nid;
use boring::pkey::{PKey, Private};
use sha2::{Digest, Sha256};

/// The seed's key for `token` (through the slow
/// KDF, a label of its own), or a public one without a token (loopback
/// only: it then authenticates nobody).
pub(crate) fn seed_key(token: Option<&str>) -> [u8; 32] {
    match token {
        Some(t) => crate::auth::kdf::subkey(t, "seed bootstrap"),
        None => Sha256::digest(b"meshwork unauthenticated seed\0").into(),
    }
}

/// The joiner's proof: over its Join, the seed's Challenge and its claim
/// (`wire::encode_claim`: the address it advertises, so nobody can
/// redirect its peers, and the membership it claims).
pub(crate) fn joiner_proof(
    key: &[u8; 32],
    join: &[u8],
    challenge: &[u8],
    claim: &[u8],
) -> [u8; 32] {
    proof_of(key, b"seed joiner", &[join, challenge, claim])
}

pub(crate) fn joiner_proof_ok(
    key: &[u8; 32],
    join: &[u8],
    challenge: &[u8],
    claim: &[u8],
    tag: &[u8],
) -> bool {
    verify_of(key, b"seed joiner", &[join, challenge, claim], tag)
}

/// The secret of `rank` in the group the seed formed as its
/// `generation`-th (its first formation 0, each growth the next): only
/// the seed, which keeps `member_key` (random, its own), and the process
/// it sealed it to know it.
pub(crate) fn member_secret(member_key: &[u8; 32], generation: u64, rank: u32) -> [u8; 32] {
    proof_of(
        member_key,
        b"seed member secret",
        &[&generation.to_le_bytes(), &rank.to_le_bytes()],
    )
}

/// A member's tag over this join (its Join, the seed's fresh Challenge,
/// its advertised address) and the rank it claims: the proof that the
/// growth's claim comes from the process that holds that rank's secret,
/// good for this join only.
fn member_tag(
    secret: &[u8; 32],
    join: &[u8],
    challenge: &[u8],
    advertise: &[u8],
    rank: u32,
) -> [u8; 32] {
    proof_of(
        secret,
        b"seed member",
        &[join, challenge, advertise, &rank.to_le_bytes()],
    )
}

pub(crate) fn member_tag_ok(
    secret: &[u8; 32],
    join: &[u8],
    challenge: &[u8],
    advertise: &[u8],
    rank: u32,
    tag: &[u8],
) -> bool {
    verify_of(
        secret,
        b"seed member",
        &[join, challenge, advertise, &rank.to_le_bytes()],
        tag,
    )
}

/// A process's membership in the group a seed formed (at formation or a
/// growth): its rank there and the secret the seed sealed to it in the
/// welcome. A member growing the job hands it back
/// (`JoinRequest::member`) to prove that its claim is its own; the seed
/// takes only the memberships of the group it formed last. Its `Debug`
/// shows the rank, never the secret.
#[derive(Clone)]
pub struct Membership {
    rank: u32,
    secret: [u8; 32],
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("rank", &self.rank)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl Membership {
    pub(crate) fn new(rank: u32, secret: [u8; 32]) -> Membership {
        Membership { rank, secret }
    }

    /// This process's rank in the group whose membership this is (its
    /// rank in a group shrunk or split since may be another).
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The tag over one growth's join (see `member_tag`).
    pub(crate) fn tag(&self, join: &[u8], challenge: &[u8], advertise: &[u8]) -> [u8; 32] {
        member_tag(&self.secret, join, challenge, advertise, self.rank)
    }
}

/// The seed's proof: over everything before it and its verdict.
pub(crate) fn seed_proof(
    key: &[u8; 32],
    join: &[u8],
    challenge: &[u8],
    proof: &[u8],
    reply: &[u8],
) -> [u8; 32] {
    proof_of(key, b"seed reply", &[join, challenge, proof, reply])
}

pub(crate) fn seed_proof_ok(
    key: &[u8; 32],
    join: &[u8],
    challenge: &[u8],
    proof: &[u8],
    reply: &[u8],
    tag: &[u8],
) -> bool {
    verify_of(key, b"seed reply", &[join, challenge, proof, reply], tag)
}

fn p256() -> Result<EcGroup, ErrorStack> {
    EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)
}

/// One side's ephemeral P-256 key for one join: the shared secret it
/// gives goes into the records' key, so a holder of the token who only
/// recorded a join cannot open its welcome (and take that rank's leaf key).
pub(crate) struct Ephemeral {
    key: PKey<Private>,
    share: [u8; SHARE_LEN],
}

impl std::fmt::Debug for Ephemeral {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ephemeral(..)")
    }
}

impl Ephemeral {
    pub(crate) fn new() -> Result<Ephemeral, ErrorStack> {
        let group = p256()?;
        let ec = EcKey::generate(&group)?;
        let mut ctx = BigNumContext::new()?;
        let bytes = ec
            .public_key()
            .to_bytes(&group, PointConversionForm::COMPRESSED, &mut ctx)?;
        let mut share = [0u8; SHARE_LEN];
        if bytes.len() != SHARE_LEN {
            return Err(ErrorStack::get());
        }
        share.copy_from_slice(&bytes);
        Ok(Ephemeral {
            key: PKey::from_ec_key(ec)?,
            share,
        })
    }

    /// The public half, as it travels.
    pub(crate) fn share(&self) -> [u8; SHARE_LEN] {
        self.share
    }

    /// The secret shared with whoever holds `theirs`' private half; `None`
    /// if `theirs` is not a point of the curve.
    pub(crate) fn agree(&self, theirs: &[u8; SHARE_LEN]) -> Option<[u8; 32]> {
        let group = p256().ok()?;
        let mut ctx = BigNumContext::new().ok()?;
        let point = EcPoint::from_bytes(&group, theirs, &mut ctx).ok()?;
        let peer = PKey::from_ec_key(EcKey::from_public_key(&group, &point).ok()?).ok()?;
        let mut d = Deriver::new(&self.key).ok()?;
        d.set_peer(&peer).ok()?;
        let secret = d.derive_to_vec().ok()?;
        Some(Sha256::digest(&secret).into())
    }
}

/// The records after an admission, in the one order both sides follow;
/// each one's number is its AES-GCM nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Record {
    /// seed → joiner: CA certificate, leaf certificate, leaf key.
    Welcome = 0,
    /// seed → joiner: every rank's address, or the ranks missing.
    Table = 1,
    /// joiner → seed: its links are up (1) or not (0).
    Ready = 2,
    /// seed → joiner: everyone's are (1) or not (0).
    Verdict = 3,
}

/// Why a record was not sealed or opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error("a record out of order (the {0:?} was not the next one)")]
    Order(Record),
    #[error("a record that does not authenticate")]
    Forged,
    #[error("{0}")]
    Seal(crate::auth::seal::SealError),
}

/// The sealed records of one join (`auth::seal::seal_record`: AES-256-GCM)
/// under a key from the seed key, both messages that opened the join and
/// the ephemeral exchange; nonces 0, 1, 2, 3 in the order of [`Record`],
/// whichever side seals, so no nonce is used twice and no record can be
/// replayed, dropped or swapped for another.
pub(crate) struct Session {
    key: [u8; 32],
    next: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session(next {})", self.next)
    }
}

/// A record's associated data: what it is.
const AAD: &[u8] = b"meshwork seed record";

impl Session {
    pub(crate) fn new(
        key: &[u8; 32],
        join: &[u8; JOIN_LEN],
        challenge: &[u8],
        proof: &[u8],
        shared: &[u8; 32],
    ) -> Session {
        Session {
            key: proof_of(key, b"seed records", &[join, challenge, proof, shared]),
            next: 0,
        }
    }

    /// `what`'s nonce, if it is the next record.
    fn take(&mut self, what: Record) -> Result<u64, RecordError> {
        if what as u64 != self.next {
            return Err(RecordError::Order(what));
        }
        self.next += 1;
        Ok(what as u64)
    }

    /// `what` sealed, as it travels: its length (4 B), ciphertext, tag.
    pub(crate) fn seal(&mut self, what: Record, plain: &[u8]) -> Result<Vec<u8>, RecordError> {
        let nonce = self.take(what)?;
        let body = seal_record(&self.key, nonce, AAD, plain).map_err(RecordError::Seal)?;
        let mut out = Vec::with_capacity(4 + body.len());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Open `what` from its bytes after the length.
    pub(crate) fn open(&mut self, what: Record, sealed: &[u8]) -> Result<Vec<u8>, RecordError> {
        let nonce = self.take(what)?;
        open_record(&self.key, nonce, AAD, sealed).map_err(|_| RecordError::Forged)
    }
}
