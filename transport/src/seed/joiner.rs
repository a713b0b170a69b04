//! The joiner's side: dial the seed until admitted (or refused by a
//! holder of the token), then the table and the ready barrier (see
//! `mod.rs`).

use super::session::{
    joiner_proof, seed_key, seed_proof_ok, Ephemeral, Membership, Record, Session,
};
use super::wire::{
    decode_table, decode_welcome, encode_claim, encode_proof, version_of, ChallengeMsg, JoinMsg,
    ReplyMsg, Table, TableError, CHALLENGE_LEN, HEAD_LEN, NOT_A_MEMBER, RECORD_MAX, REPLY_LEN,
    SEED_VERSION,
};
use super::{read_record, table_record_max, write_by, Status, ANY, FLAG_RECORD_LEN, GROW_MAX};
use crate::auth::handshake::read_by;
use crate::auth::tls::RankIdentity;
use crate::form::{handshake_time, Addresses, Backoff, FormationError};
use crate::wire::codec::ADDR_LEN;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The seed, in errors that name a rank.
const SEED_RANK: u32 = 0;

/// What a joiner asks for. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct JoinRequest {
    /// The job's size; 0: a new process for a running elastic job, which
    /// waits (within its deadline) for the members to grow the job and
    /// learns the new size from the seed.
    pub world: u32,
    /// The rank wanted; `None`: the lowest free one.
    pub rank: Option<u32>,
    pub star: bool,
    /// A member growing the running job: how many new processes the new
    /// group admits (0: not growing; at most [`GROW_MAX`]).
    pub grow: u32,
    /// A member growing the running job: its membership of the group the
    /// seed formed last ([`Joined::membership`]), which proves its claim
    /// is its own. The seed refuses a growth's member without one.
    pub member: Option<Membership>,
    pub token: Option<String>,
    /// Deadline of the whole bootstrap.
    pub timeout: Duration,
    /// The data address to announce; an unspecified IP means "the one the
    /// seed sees" (NAT, containers); port 0 means this rank has none (a
    /// star worker).
    pub advertise: SocketAddr,
}

impl std::fmt::Debug for JoinRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field named: one added must be added here too.
        let JoinRequest {
            world,
            rank,
            star,
            grow,
            member,
            token,
            timeout,
            advertise,
        } = self;
        f.debug_struct("JoinRequest")
            .field("world", world)
            .field("rank", rank)
            .field("star", star)
            .field("grow", grow)
            .field("member", member)
            .field("token", &token.as_ref().map(|_| "<redacted>"))
            .field("timeout", timeout)
            .field("advertise", advertise)
            .finish()
    }
}

/// A rank the seed admitted: who it is, whom it links to, its identity.
#[derive(Debug)]
pub struct Joined {
    pub rank: u32,
    /// The group's size (the seed's, for a new process of a running job).
    pub world: u32,
    /// Every rank's data address, in rank order.
    pub peers: Vec<SocketAddr>,
    pub identity: RankIdentity,
    membership: Membership,
    link: SeedLink,
}

/// The connection to the seed after admission, and its sealed records.
#[derive(Debug)]
struct SeedLink {
    at: SocketAddr,
    stream: TcpStream,
    session: Session,
}

impl SeedLink {
    fn tampered(&self, what: &'static str) -> FormationError {
        FormationError::SeedTampered {
            seed: self.at,
            what,
        }
    }

    fn gone(&self, e: impl std::fmt::Display) -> FormationError {
        FormationError::ConnectionFailed {
            rank: SEED_RANK,
            reason: format!("the seed at {} went away: {e}", self.at),
        }
    }
}

impl Joined {
    /// This rank's membership of the group now forming: what it hands
    /// back (`JoinRequest::member`) to grow the job once it runs.
    pub fn membership(&self) -> Membership {
        self.membership.clone()
    }

    /// The ready barrier: report whether this rank's links are up, and
    /// learn whether everyone's are.
    pub fn ready(self, ok: bool, timeout: Duration) -> Result<(), FormationError> {
        let mut link = self.link;
        let by = Instant::now() + timeout * 2;
        let sealed = link
            .session
            .seal(Record::Ready, &[u8::from(ok)])
            .map_err(|e| link.gone(e))?;
        write_by(&mut link.stream, &sealed, by).map_err(|e| link.gone(e))?;
        let verdict =
            read_record(&mut link.stream, FLAG_RECORD_LEN, by).map_err(|e| link.gone(e))?;
        match link.session.open(Record::Verdict, &verdict).as_deref() {
            Ok([1]) => Ok(()),
            Ok(_) => Err(FormationError::ConnectionFailed {
                rank: SEED_RANK,
                reason: "another rank could not link to its peers".into(),
            }),
            Err(_) => Err(link.tampered("a ready verdict that does not authenticate")),
        }
    }
}

/// A rank the seed has admitted, before the table.
#[derive(Debug)]
pub struct Admitted {
    pub rank: u32,
    pub world: u32,
    pub identity: RankIdentity,
    membership: Membership,
    link: SeedLink,
    /// When the table is late: the seed sends it once everyone has joined
    /// or at its own deadline, which need not be ours.
    table_by: Instant,
}

/// Join through the seed at `seed` (retrying until it answers, within the
/// deadline): admission, then the table once every rank has joined.
pub fn join(seed: SocketAddr, req: &JoinRequest) -> Result<Joined, FormationError> {
    join_at(&[seed], req)
}

/// [`join`] through a seed known by several addresses (its name resolves
/// to several): each is dialled in turn on every attempt, until one
/// admits this rank.
pub fn join_at(seeds: &[SocketAddr], req: &JoinRequest) -> Result<Joined, FormationError> {
    admit_me_at(seeds, req)?.table()
}

/// How one attempt at admission failed.
enum Failed {
    /// A holder of the token said no, or what it sent after proving the
    /// token did not hold up: reported at once.
    Final(FormationError),
    /// Nothing could be authenticated: try again, and report it at the
    /// deadline if nothing better came.
    Suspect(FormationError),
    /// The connection ended before the seed said anything (not up yet,
    /// too busy): try again.
    Again(std::io::Error),
}

/// The first half of `join`: be admitted (a rank and an identity).
pub fn admit_me(seed: SocketAddr, req: &JoinRequest) -> Result<Admitted, FormationError> {
    admit_me_at(&[seed], req)
}

/// [`admit_me`] through a seed known by several addresses (see
/// [`join_at`]).
pub fn admit_me_at(seeds: &[SocketAddr], req: &JoinRequest) -> Result<Admitted, FormationError> {
    if req.grow > GROW_MAX {
        // The flags could not carry it, and the seed would refuse it.
        return Err(FormationError::ConnectionFailed {
            rank: SEED_RANK,
            reason: format!("a growth by {} new processes: at most {GROW_MAX}", req.grow),
        });
    }
    let deadline = Instant::now() + req.timeout;
    // The slow KDF runs before any connection, not on the seed's clock.
    let key = seed_key(req.token.as_deref());
    let attempt_time = 2 * handshake_time(req.timeout);
    let mut backoff = Backoff::new();
    let mut suspect = None;
    let mut addrs = Addresses::new(seeds.to_vec());
    loop {
        for seed in addrs.round() {
            let now = Instant::now();
            if now >= deadline {
                return Err(suspect.unwrap_or(FormationError::Timeout {
                    missing: vec![SEED_RANK],
                }));
            }
            match addrs.connect(seed, deadline - now) {
                Ok(mut s) => {
                    let by = (Instant::now() + attempt_time).min(deadline);
                    // A new process for a running job is answered only once
                    // the members grow it.
                    let reply_by = if req.world == 0 { deadline } else { by };
                    match attempt(&mut s, seed, req, &key, by, reply_by) {
                        Ok((rank, world, identity, membership, session)) => {
                            return Ok(Admitted {
                                rank,
                                world,
                                identity,
                                membership,
                                link: SeedLink {
                                    at: seed,
                                    stream: s,
                                    session,
                                },
                                // A running job's new process was answered
                                // only when the growth began: its table may
                                // take the members' whole formation from now.
                                table_by: deadline.max(Instant::now() + req.timeout)
                                    + req
                                        .timeout
                                        .clamp(Duration::from_millis(100), Duration::from_secs(5)),
                            });
                        }
                        Err(Failed::Final(e)) => return Err(e),
                        Err(Failed::Suspect(e)) => {
                            tracing::debug!(%seed, "admission did not complete: {e}; retrying");
                            suspect = Some(e);
                        }
                        Err(Failed::Again(e)) => tracing::trace!(%seed, "the seed hung up: {e}"),
                    }
                }
                Err(e) => tracing::trace!(%seed, "dial the seed: {e}"),
            }
        }
        backoff.pause(deadline);
    }
}

/// What an admission hands the joiner.
type Admission = (u32, u32, RankIdentity, Membership, Session);

/// One admission exchange on a connected `s`, all before `by` but the
/// seed's reply, which may come until `reply_by`: the rank, the world,
/// the identity, the membership and the sealed session.
fn attempt(
    s: &mut TcpStream,
    at: SocketAddr,
    req: &JoinRequest,
    key: &[u8; 32],
    by: Instant,
    reply_by: Instant,
) -> Result<Admission, Failed> {
    let not_seed = || {
        Failed::Suspect(FormationError::ConnectionFailed {
            rank: SEED_RANK,
            reason: format!("{at} is not a meshwork seed"),
        })
    };
    let broken = |e: &dyn std::fmt::Display| {
        Failed::Final(FormationError::ConnectionFailed {
            rank: SEED_RANK,
            reason: e.to_string(),
        })
    };
    let ephemeral = Ephemeral::new().map_err(|e| broken(&e))?;
    let mut nonce = [0u8; 24];
    boring::rand::rand_bytes(&mut nonce).map_err(|e| broken(&e))?;
    let join = JoinMsg {
        version: SEED_VERSION,
        world: req.world,
        want: req.rank.unwrap_or(ANY),
        star: req.star,
        grow: req.grow,
        nonce,
        share: ephemeral.share(),
    }
    .encode();
    write_by(s, &join, by).map_err(Failed::Again)?;
    let mut challenge = [0u8; CHALLENGE_LEN];
    read_by(s, &mut challenge[..HEAD_LEN], by).map_err(Failed::Again)?;
    match version_of(&challenge[..HEAD_LEN]) {
        None => return Err(not_seed()),
        // Unauthenticated, like everything before the reply.
        Some(v) if v != SEED_VERSION => {
            return Err(Failed::Suspect(FormationError::ProtocolMismatch {
                rank: SEED_RANK,
                ours: SEED_VERSION,
                theirs: v,
            }))
        }
        Some(_) => {}
    }
    read_by(s, &mut challenge[HEAD_LEN..], by).map_err(Failed::Again)?;
    let theirs = ChallengeMsg::decode(&challenge).ok_or_else(not_seed)?;
    let shared = ephemeral.agree(&theirs.share).ok_or_else(not_seed)?;
    let mut advertised = Vec::with_capacity(ADDR_LEN);
    crate::wire::codec::put_addr(&mut advertised, req.advertise);
    // Only a growth's member claims its membership.
    let claim = match req.member.as_ref().filter(|_| req.grow > 0) {
        Some(m) => encode_claim(
            req.advertise,
            m.rank(),
            &m.tag(&join, &challenge, &advertised),
        ),
        None => encode_claim(req.advertise, NOT_A_MEMBER, &[0; 32]),
    };
    let proof = encode_proof(&claim, &joiner_proof(key, &join, &challenge, &claim));
    write_by(s, &proof, by).map_err(Failed::Again)?;
    let mut reply = [0u8; REPLY_LEN];
    match read_by(s, &mut reply, reply_by) {
        Ok(()) => {}
        // The seed closes without a word when our proof fails.
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
            ) =>
        {
            return Err(Failed::Suspect(FormationError::TokenMismatch {
                rank: SEED_RANK,
            }))
        }
        Err(e) => return Err(Failed::Again(e)),
    }
    let (body, tag) = reply.split_at(12);
    if !seed_proof_ok(key, &join, &challenge, &proof, body, tag) {
        return Err(Failed::Suspect(FormationError::TokenMismatch {
            rank: SEED_RANK,
        }));
    }
    let verdict = ReplyMsg::decode(body).ok_or_else(not_seed)?;
    let refused = match verdict.status {
        s if s == Status::Ok as u32 => None,
        s if s == Status::World as u32 => Some(FormationError::WorldMismatch {
            rank: SEED_RANK,
            ours: req.world,
            theirs: verdict.world,
        }),
        s if s == Status::Topology as u32 => {
            Some(FormationError::TopologyMismatch { rank: SEED_RANK })
        }
        s if s == Status::RankConflict as u32 => {
            Some(FormationError::RankConflict { rank: verdict.rank })
        }
        s if s == Status::Full as u32 => Some(FormationError::ConnectionFailed {
            rank: SEED_RANK,
            reason: format!(
                "the seed at {at} has as many new processes waiting for the job to grow as it keeps"
            ),
        }),
        s if s == Status::NotMember as u32 => Some(FormationError::ConnectionFailed {
            rank: SEED_RANK,
            reason: format!(
                "the seed at {at} does not take this process for a member of the group it formed last (or its membership already claimed a rank of this growth): only members grow a job; a new process joins it with Node::join_running"
            ),
        }),
        s if s == Status::NotElastic as u32 => Some(FormationError::ConnectionFailed {
            rank: SEED_RANK,
            reason: format!(
                "the seed at {at} serves no running job to grow (it is not elastic, or its job is still forming)"
            ),
        }),
        _ => Some(FormationError::SeedTampered {
            seed: at,
            what: "a status this joiner does not know",
        }),
    };
    if let Some(e) = refused {
        return Err(Failed::Final(e));
    }
    // Admitted: the seed has proved the token, so from here on every
    // failure is final.
    let mut session = Session::new(key, &join, &challenge, &proof, &shared);
    let by = by.max(Instant::now() + handshake_time(req.timeout));
    let sealed = read_record(s, RECORD_MAX, by).map_err(|e| {
        broken(&format!(
            "the seed at {at} went away during the welcome: {e}"
        ))
    })?;
    let (identity, secret) = open_welcome(&mut session, &sealed, verdict.rank)
        .map_err(|what| Failed::Final(FormationError::SeedTampered { seed: at, what }))?;
    if verdict.rank >= verdict.world || (req.world != 0 && verdict.world != req.world) {
        return Err(Failed::Final(FormationError::SeedTampered {
            seed: at,
            what: "a rank or world other than the one asked for",
        }));
    }
    let membership = Membership::new(verdict.rank, secret);
    Ok((verdict.rank, verdict.world, identity, membership, session))
}

/// The identity and the member's secret in a sealed welcome for `rank`:
/// the record must open, hold three parts and the secret, and its leaf
/// must name `rank`, chain to the CA it came with and be its key's. What
/// did not hold up, otherwise.
pub(super) fn open_welcome(
    session: &mut Session,
    sealed: &[u8],
    rank: u32,
) -> Result<(RankIdentity, [u8; 32]), &'static str> {
    let plain = session
        .open(Record::Welcome, sealed)
        .map_err(|_| "a welcome that does not authenticate")?;
    let ([ca, cert, key], secret) = decode_welcome(&plain).ok_or("a welcome of another shape")?;
    let identity = RankIdentity::from_der(rank, &ca, &cert, &key)
        .ok_or("a leaf that does not chain to its CA, names another rank or is not its key's")?;
    Ok((identity, secret))
}

/// The peer table in a sealed table record for a world of `world`.
pub(super) fn open_table(
    session: &mut Session,
    sealed: &[u8],
    world: u32,
) -> Result<Table, &'static str> {
    let plain = session
        .open(Record::Table, sealed)
        .map_err(|_| "a table that does not authenticate")?;
    decode_table(&plain, world).map_err(|e| match e {
        TableError::Bad(what) => what,
        TableError::Short => "a table cut short",
    })
}

impl Admitted {
    /// The second half of `join`: everyone's addresses, once everyone has
    /// joined (or the ranks that never did).
    pub fn table(self) -> Result<Joined, FormationError> {
        let Admitted {
            rank,
            world,
            identity,
            membership,
            mut link,
            table_by,
        } = self;
        let sealed = match read_record(&mut link.stream, table_record_max(world), table_by) {
            Ok(sealed) => sealed,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(FormationError::Timeout { missing: vec![] })
            }
            Err(e) => return Err(link.gone(e)),
        };
        let peers = match open_table(&mut link.session, &sealed, world) {
            Ok(Table::Peers(peers)) => peers,
            Ok(Table::Missing(missing)) => return Err(FormationError::Timeout { missing }),
            Err(what) => {
                tracing::warn!(seed = %link.at, "the seed's table: {what}");
                return Err(link.tampered("a table that does not authenticate or fit the world"));
            }
        };
        Ok(Joined {
            rank,
            world,
            peers,
            identity,
            membership,
            link,
        })
    }
}
