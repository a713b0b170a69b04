//! The seed against honest joiners, and against strangers who dribble,
//! idle, guess the proof or alter what travels.

use super::joiner::{open_table, open_welcome};
use super::session::{joiner_proof, seed_key, Ephemeral, Record, Session};
use super::wire::{
    encode_claim, encode_proof, CHALLENGE_LEN, NOT_A_MEMBER, REPLY_LEN, SEED_VERSION,
};
use super::*;
use crate::auth::tls::ClusterCa;
use crate::form::{poll_readable, FormationError};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(super) const TOKEN: &str = "seed unit test token";
const WRONG: &str = "another seed test token";
pub(super) const LONG: Duration = Duration::from_secs(10);

fn start(world: u32, timeout: Duration) -> Seed {
    start_with(world, timeout, false)
}

/// A seed on loopback for a mesh of `world` under `TOKEN`.
pub(super) fn start_with(world: u32, timeout: Duration, elastic: bool) -> Seed {
    Seed::start(
        "127.0.0.1:0".parse().unwrap(),
        SeedConfig {
            world,
            star: false,
            token: Some(TOKEN.into()),
            timeout,
            reserved: None,
            elastic,
        },
    )
    .unwrap()
}

pub(super) fn req(
    world: u32,
    rank: Option<u32>,
    token: &str,
    timeout: Duration,
    port: u16,
) -> JoinRequest {
    JoinRequest {
        world,
        rank,
        star: false,
        grow: 0,
        member: None,
        token: Some(token.into()),
        timeout,
        advertise: SocketAddr::from(([0, 0, 0, 0], port)),
    }
}

#[allow(clippy::disallowed_methods, reason = "an attacker's pacing")]
fn pace(d: Duration) {
    std::thread::sleep(d);
}

/// A connection to `to` from the loopback address `ip` (an attacker on
/// another source address than the honest joiners' 127.0.0.1).
pub(super) fn connect_from(ip: [u8; 4], to: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((ip, 0)).into()).unwrap();
    s.connect_timeout(&to.into(), Duration::from_secs(5))
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.into()
}

/// Four joiners (one asks for rank 3, the others for any: the lowest
/// free) form a job
/// through the seed at `at`: each gets its rank's identity and the same
/// table, and the ready barrier passes. How long it took, and the ranks'
/// memberships in rank order.
pub(super) fn four_form(at: SocketAddr) -> (Duration, Vec<Membership>) {
    let started = std::time::Instant::now();
    let joined: Vec<(u16, Joined)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u16)
            .map(|i| {
                s.spawn(move || {
                    let want = (i == 0).then_some(3);
                    (
                        4000 + i,
                        join(at, &req(4, want, TOKEN, LONG, 4000 + i)).unwrap(),
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ranks: Vec<u32> = joined.iter().map(|(_, j)| j.rank).collect();
    assert_eq!(joined[0].1.rank, 3);
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1, 2, 3]);
    let table = joined[0].1.peers.clone();
    for (port, j) in &joined {
        assert_eq!(j.peers, table);
        assert_eq!(j.identity.rank(), j.rank);
        // Unspecified advertised IPs became the one the seed saw.
        assert_eq!(
            table[j.rank as usize],
            SocketAddr::from(([127, 0, 0, 1], *port))
        );
    }
    let mut members: Vec<Membership> = joined.iter().map(|(_, j)| j.membership()).collect();
    members.sort_by_key(Membership::rank);
    std::thread::scope(|s| {
        for (_, j) in joined {
            s.spawn(move || j.ready(true, LONG).unwrap());
        }
    });
    (started.elapsed(), members)
}

/// Formation with a stranger at work (`attack` says when it is under
/// way, and ends once `stop` is set): long before the deadline (10 s), as
/// if the stranger were not there.
fn forms_despite(attack: impl FnOnce(SocketAddr, &AtomicBool, &dyn Fn()) + Send) {
    let seed = start(4, LONG);
    let at = seed.local_addr();
    let stop = AtomicBool::new(false);
    let (started_tx, started_rx) = crossbeam_channel::bounded(1);
    let took = std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            attack(at, stop, &|| {
                let _ = started_tx.send(());
            })
        });
        // The attack is under way before the first joiner comes.
        started_rx.recv().unwrap();
        let (took, _) = four_form(at);
        stop.store(true, Ordering::Release);
        took
    });
    // About 50 ms here; a seed that let the stranger hold it up would
    // take at least one admission deadline (1 s).
    assert!(took < Duration::from_millis(750), "formed in {took:?}");
    seed.wait().unwrap();
}

#[test]
fn ranks_tables_and_identities_are_handed_out_and_latecomers_refused() {
    let wrong = seed_key(Some(WRONG));
    let seed = start(4, LONG);
    let at = seed.local_addr();
    four_form(at);
    // While the seed lingers: a holder of the token is told every rank is
    // taken, a stranger nothing.
    let e = join(at, &req(4, None, TOKEN, LONG, 9)).unwrap_err();
    assert!(matches!(e, FormationError::RankConflict { .. }), "{e}");
    assert_eq!(guess(at, &wrong), b"");
    seed.wait().unwrap();
}

#[test]
fn a_connection_dribbling_a_join_holds_up_nobody() {
    forms_despite(|at, stop, started| {
        let join = JoinMsg {
            version: SEED_VERSION,
            world: 4,
            want: ANY,
            star: false,
            grow: 0,
            nonce: [1; 24],
            share: Ephemeral::new().unwrap().share(),
        }
        .encode();
        let mut connections = 0;
        // A byte every 200 ms, again on a new connection when cut off.
        'attack: while !stop.load(Ordering::Acquire) {
            let mut c = connect_from([127, 0, 0, 2], at);
            connections += 1;
            let mut sent = 0;
            if connections == 1 {
                c.write_all(&join[..1]).unwrap();
                sent = 1;
                started();
            }
            for &b in &join[sent..] {
                if stop.load(Ordering::Acquire) {
                    break 'attack;
                }
                if c.write_all(&[b]).is_err() {
                    break;
                }
                pace(Duration::from_millis(200));
            }
        }
        assert!(connections >= 1);
    });
}

#[test]
fn fifty_idle_connections_hold_up_nobody_and_learn_nothing() {
    let mut idle = Vec::new();
    forms_despite(|at, _stop, started| {
        // From seven source addresses: every one is under the per-source
        // bound, so all fifty are admissions under way at once.
        idle = (0..50u8)
            .map(|i| connect_from([127, 0, 0, 2 + i % 7], at))
            .collect::<Vec<_>>();
        started();
    });
    for mut c in idle {
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        assert!(
            got.is_empty(),
            "an idle stranger was sent {} bytes",
            got.len()
        );
    }
}

/// A stranger with a well-formed Join and a proof under another token:
/// the challenge, then silence.
fn guess(at: SocketAddr, wrong_key: &[u8; 32]) -> Vec<u8> {
    let mut c = connect_from([127, 0, 0, 3], at);
    let join = JoinMsg {
        version: SEED_VERSION,
        world: 4,
        want: 0,
        star: false,
        grow: 0,
        nonce: [5; 24],
        share: Ephemeral::new().unwrap().share(),
    }
    .encode();
    c.write_all(&join).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    c.read_exact(&mut challenge).unwrap();
    let advertise: SocketAddr = "10.9.9.9:7".parse().unwrap();
    let claim = encode_claim(advertise, NOT_A_MEMBER, &[0; 32]);
    let proof = joiner_proof(wrong_key, &join, &challenge, &claim);
    c.write_all(&encode_proof(&claim, &proof)).unwrap();
    let mut after = Vec::new();
    let _ = c.read_to_end(&mut after);
    after
}

#[test]
fn a_stranger_with_a_wrong_proof_holds_up_nobody_and_learns_nothing() {
    let wrong = seed_key(Some(WRONG));
    forms_despite(|at, stop, started| {
        let mut tries = 0;
        while !stop.load(Ordering::Acquire) {
            assert_eq!(guess(at, &wrong), b"", "the seed answered a wrong proof");
            tries += 1;
            if tries == 1 {
                started();
            }
        }
        assert!(tries >= 1);
    });
}

#[test]
fn a_taken_rank_is_refused_at_once_a_wrong_token_at_the_deadline() {
    let seed = start(2, LONG);
    let at = seed.local_addr();
    let first = admit_me(at, &req(2, Some(1), TOKEN, LONG, 1)).unwrap();
    assert_eq!(first.rank, 1);
    let started = std::time::Instant::now();
    let e = join(at, &req(2, Some(1), TOKEN, LONG, 2)).unwrap_err();
    assert!(matches!(e, FormationError::RankConflict { rank: 1 }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // Nothing authenticates a wrong token's refusal: the joiner retries,
    // and says so at its deadline.
    let started = std::time::Instant::now();
    let e = join(at, &req(2, Some(0), WRONG, Duration::from_secs(2), 3)).unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(e, FormationError::TokenMismatch { rank: 0 }),
        "{e}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(3500),
        "{took:?}"
    );
    // The group still forms: rank 0 joins, both get the table.
    let zero = std::thread::spawn(move || join(at, &req(2, None, TOKEN, LONG, 4)));
    let one = first.table().unwrap();
    let zero = zero.join().unwrap().unwrap();
    assert_eq!((zero.rank, one.peers.len()), (0, 2));
    assert_eq!(zero.peers, one.peers);
}

#[test]
fn a_joiner_of_the_first_protocol_gets_our_version_and_nothing_else() {
    let seed = start(2, LONG);
    let mut c = connect_from([127, 0, 0, 4], seed.local_addr());
    let mut old = [0u8; 80];
    old[..8].copy_from_slice(b"MWSEED01");
    old[8..12].copy_from_slice(&3u32.to_le_bytes());
    c.write_all(&old).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert_eq!(got.len(), CHALLENGE_LEN);
    assert_eq!(wire::version_of(&got), Some(SEED_VERSION));
}

/// A seed's side of one admitted join's records, and the joiner's.
fn sessions() -> (Session, Session) {
    let key = seed_key(Some(TOKEN));
    let join = [3u8; JOIN_LEN];
    let new = || Session::new(&key, &join, b"challenge", b"proof", &[9; 32]);
    (new(), new())
}

#[test]
fn a_welcome_or_table_with_one_flipped_byte_is_refused() {
    let ca = ClusterCa::random().unwrap();
    let [ca_der, cert, key] = ca.issue(0).unwrap().to_der().unwrap();
    let with_secret = |parts: [&[u8]; 3]| {
        let mut plain = encode_welcome(parts);
        plain.extend_from_slice(&[0x5e; 32]);
        plain
    };
    let plain = with_secret([&ca_der, &cert, &key]);
    let table = encode_table(&Table::Peers(vec!["10.0.0.1:5".parse().unwrap()]));
    let (mut seed, mut joiner) = sessions();
    let welcome = seed.seal(Record::Welcome, &plain).unwrap();
    let sealed_table = seed.seal(Record::Table, &table).unwrap();
    // On the wire: a byte of the CA certificate, of the leaf key, of the
    // table, of a tag.
    for at in [4 + 4 + 20, welcome.len() - 40, welcome.len() - 1] {
        let mut bad = welcome.clone();
        bad[at] ^= 1;
        let e = open_welcome(&mut sessions().1, &bad[4..], 0).unwrap_err();
        assert!(e.contains("does not authenticate"), "{at}: {e}");
    }
    for at in [4 + 2, sealed_table.len() - 1] {
        let mut bad = sealed_table.clone();
        bad[at] ^= 1;
        let mut j = sessions().1;
        open_welcome(&mut j, &welcome[4..], 0).unwrap();
        assert!(open_table(&mut j, &bad[4..], 1).is_err(), "{at}");
    }
    // The records in order open; out of order (a replayed welcome), not.
    let (identity, secret) = open_welcome(&mut joiner, &welcome[4..], 0).unwrap();
    assert_eq!((identity.rank(), secret), (0, [0x5e; 32]));
    assert!(open_table(&mut joiner, &welcome[4..], 1).is_err());
    // A seed that seals a CA its leaf does not chain to: refused too.
    let mut forged = ca_der.clone();
    let subject = forged
        .windows(19)
        .rposition(|w| w == b"meshwork cluster CA")
        .unwrap();
    forged[subject + 3] ^= 1;
    let (mut seed, mut joiner) = sessions();
    let sealed = seed
        .seal(Record::Welcome, &with_secret([&forged, &cert, &key]))
        .unwrap();
    let e = open_welcome(&mut joiner, &sealed[4..], 0).unwrap_err();
    assert!(e.contains("does not chain"), "{e}");
    // A welcome without the member's secret, or with more after it.
    for plain in [encode_welcome([&ca_der, &cert, &key]), {
        let mut p = plain.clone();
        p.push(0);
        p
    }] {
        let (mut seed, mut joiner) = sessions();
        let sealed = seed.seal(Record::Welcome, &plain).unwrap();
        let e = open_welcome(&mut joiner, &sealed[4..], 0).unwrap_err();
        assert!(e.contains("another shape"), "{e}");
    }
}

/// A relay to `to` that flips one byte of every connection it carries:
/// the joiner's byte `up`, or the seed's at the index `down` finds in the
/// bytes so far.
struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Flip = fn(&[u8]) -> Option<usize>;

fn pump(mut from: TcpStream, mut to: TcpStream, flip: Flip) {
    let (mut seen, mut flipped, mut buf) = (Vec::new(), false, [0u8; 4096]);
    while let Ok(n @ 1..) = from.read(&mut buf) {
        let start = seen.len();
        seen.extend_from_slice(&buf[..n]);
        match flip(&seen) {
            Some(i) if !flipped && (start..seen.len()).contains(&i) => {
                buf[i - start] ^= 1;
                flipped = true;
            }
            _ => {}
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Relay {
    fn start(to: SocketAddr, up: Flip, down: Flip) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut pumps = Vec::new();
            while !flag.load(Ordering::Acquire) {
                if !poll_readable(&[listener.as_raw_fd()], Duration::from_millis(50))
                    .is_some_and(|r| r[0])
                {
                    continue;
                }
                let (joiner, _) = listener.accept().unwrap();
                let seed = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                for s in [&joiner, &seed] {
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                }
                let (j2, s2) = (joiner.try_clone().unwrap(), seed.try_clone().unwrap());
                pumps.push(std::thread::spawn(move || pump(joiner, seed, up)));
                pumps.push(std::thread::spawn(move || pump(s2, j2, down)));
            }
            for p in pumps {
                p.join().unwrap();
            }
        });
        Relay {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

const WELCOME_AT: usize = CHALLENGE_LEN + REPLY_LEN;

#[test]
fn an_altered_welcome_or_table_on_the_wire_is_seed_tampered() {
    // A byte of the CA certificate, inside the sealed welcome.
    let seed = start(1, Duration::from_secs(3));
    let relay = Relay::start(
        seed.local_addr(),
        |_| None,
        |_| Some(WELCOME_AT + 4 + 4 + 20),
    );
    let started = std::time::Instant::now();
    let e = admit_me(relay.addr, &req(1, None, TOKEN, LONG, 1)).unwrap_err();
    assert!(
        matches!(e, FormationError::SeedTampered { seed, .. } if seed == relay.addr),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    drop((seed, relay));
    // A byte of the table, which follows the welcome.
    let seed = start(1, Duration::from_secs(3));
    let relay = Relay::start(
        seed.local_addr(),
        |_| None,
        |seen| {
            let len = seen.get(WELCOME_AT..WELCOME_AT + 4)?;
            let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
            Some(WELCOME_AT + 4 + len + 4 + 2)
        },
    );
    let admitted = admit_me(relay.addr, &req(1, None, TOKEN, LONG, 1)).unwrap();
    let e = admitted.table().unwrap_err();
    assert!(matches!(e, FormationError::SeedTampered { .. }), "{e}");
    drop((seed, relay));
}

#[test]
fn an_altered_advertised_address_is_refused_like_a_wrong_token() {
    let seed = start(1, Duration::from_secs(2));
    let relay = Relay::start(seed.local_addr(), |_| Some(JOIN_LEN + 5), |_| None);
    let e = admit_me(
        relay.addr,
        &req(1, None, TOKEN, Duration::from_millis(1500), 1),
    )
    .unwrap_err();
    assert!(
        matches!(e, FormationError::TokenMismatch { rank: 0 }),
        "{e}"
    );
    let e = seed.wait().unwrap_err();
    assert!(
        matches!(&e, FormationError::Timeout { missing } if missing == &[0]),
        "{e}"
    );
    drop(relay);
}

#[test]
fn debug_never_shows_the_token_or_a_members_secret() {
    const SECRET: &str = "a cluster token nobody may print";
    let spec = crate::Spec {
        token: Some(SECRET.into()),
        ..crate::Spec::new(1, 4, vec!["127.0.0.1:9".parse().unwrap()])
    };
    let mut join = req(4, Some(1), SECRET, LONG, 9);
    join.grow = 2;
    join.member = Some(Membership::new(3, [0xab; 32]));
    let config = SeedConfig {
        world: 4,
        star: false,
        token: Some(SECRET.into()),
        timeout: LONG,
        reserved: Some(0),
        elastic: true,
    };
    let shown = [
        format!("{spec:?}"),
        format!("{spec:#?}"),
        format!("{join:?}"),
        format!("{config:?}"),
    ];
    for shown in &shown {
        assert!(!shown.contains(SECRET), "{shown}");
        assert!(!shown.contains("nobody"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        // The rest is still there to debug with.
        assert!(shown.contains("world: 4"), "{shown}");
    }
    // A member's secret is as good as its rank's claim in a growth.
    assert!(!shown[2].contains("171"), "{}", shown[2]);
    assert!(shown[2].contains("rank: 3"), "{}", shown[2]);
}
