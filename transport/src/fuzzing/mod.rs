//! Entry points of the fuzz targets (`fuzz/` at the repository root), one
//! per decoder of bytes a peer controls: the frame header, the frame
//! assembler, the link hello, the seed's messages, the QUIC order keeper
//! (frames and sidecar payloads with their 16-bit stamps), the link's
//! frame reader on sealed streams (`reader.rs`), the shared-memory ring's
//! records.
//!
//! Each takes arbitrary bytes, must not panic and must not allocate more
//! than a bounded amount, and checks what the codec promises: where there
//! is an encoder, decode ∘ encode is the identity and encode ∘ decode gives
//! back the bytes the decoder read (less fields it ignores). The unit tests
//! below run every entry point over a fixed-seed set of inputs, so CI
//! exercises them without a nightly fuzz build.
//!
//! Not a stable API: hidden from the docs, for `fuzz/` and tests only.

mod reader;

pub use reader::sealed_stream;
#[cfg(test)]
pub(crate) use reader::{data_only, mesh_core, read_all, reader, stream};

use crate::auth::handshake;
use crate::auth::seal::{open_record, seal_record, Opener, Protect, TAG_LEN};
use crate::link::{Core, CoreConfig};
use crate::quic::order::{In, Out, STREAMS};
use crate::seed;
use crate::wire::assembler::RESERVE;
use crate::wire::codec::{put_addr, ADDR_LEN};
use crate::wire::frame::FrameError;
use crate::wire::{Assembler, FrameType, Header, Reader, HEADER_LEN};
use crate::{BufferPool, LaneKey, LaneKind, Payload};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Reads an input front to back; past its end every read is zero, so any
/// input is a complete script.
pub(crate) struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Input<'a> {
        Input { data, at: 0 }
    }

    pub(crate) fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    pub(crate) fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    /// The bytes not read yet.
    fn rest(&self) -> &'a [u8] {
        self.data.get(self.at..).unwrap_or_default()
    }
}

/// xorshift64*: chunk sizes and interleavings drawn from an input's seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const FRAME_TYPES: [FrameType; 7] = [
    FrameType::Data,
    FrameType::Heartbeat,
    FrameType::Bye,
    FrameType::PeerGone,
    FrameType::Credit,
    FrameType::CreditWanted,
    FrameType::Revoke,
];

const LANE_KINDS: [LaneKind; 5] = [
    LaneKind::Collective,
    LaneKind::PointToPoint,
    LaneKind::Rpc,
    LaneKind::Control,
    LaneKind::Matched,
];

/// `Header::decode`: input = world (4 B), cap (8 B), then the header
/// (missing bytes are zero).
pub fn frame_header(data: &[u8]) {
    let mut input = Input::new(data);
    let (world, max_len) = (input.u32(), input.u64());
    let mut raw = [0u8; HEADER_LEN];
    for b in &mut raw {
        *b = input.u8();
    }
    match Header::decode(&raw, world, max_len) {
        Ok(h) => {
            assert_eq!(h.encode(), raw, "encode(decode(b)) != b");
            assert!(h.src < world && h.dst < world);
            assert!(h.ftype != FrameType::Data || h.len <= max_len);
        }
        Err(FrameError::Type(t)) => assert!(t == raw[0] && !(1..=5).contains(&t)),
        Err(FrameError::Kind(k)) => assert!(k == raw[1] && LaneKind::from_u8(k).is_none()),
        Err(FrameError::Rank(r, w)) => assert!(w == world && r >= world),
        Err(FrameError::TooLong(len, cap)) => assert!(cap == max_len && len > cap),
    }
    // And the other way: any header decodes to itself where it is legal.
    let mut r = Input::new(&raw);
    let (t, k) = (r.u8(), r.u8());
    let h = Header {
        ftype: FRAME_TYPES[usize::from(t) % FRAME_TYPES.len()],
        kind: LANE_KINDS[usize::from(k) % LANE_KINDS.len()],
        seq: r.u16(),
        src: r.u32(),
        dst: r.u32(),
        aux: r.u32(),
        comm: r.u64(),
        tag: r.u64(),
        len: r.u64(),
    };
    let legal = h.src < world && h.dst < world && (h.ftype != FrameType::Data || h.len <= max_len);
    assert_eq!(Header::decode(&h.encode(), world, max_len).is_ok(), legal);
    if legal {
        assert_eq!(Header::decode(&h.encode(), world, max_len), Ok(h));
    }
}

/// A frame and its body.
type Frame = (Header, Vec<u8>);

/// What a stream holds, read the simple way: whole frames, then how it
/// ends (a header that does not decode; whether it ends inside a frame).
fn frames_of(stream: &[u8], world: u32, max_len: u64) -> (Vec<Frame>, Option<FrameError>, bool) {
    let mut frames = Vec::new();
    let mut r = Reader::new(stream);
    loop {
        let Some(head) = r.array::<HEADER_LEN>() else {
            let partial = frames_len(&frames) != stream.len();
            return (frames, None, partial);
        };
        let h = match Header::decode(&head, world, max_len) {
            Ok(h) => h,
            Err(e) => return (frames, Some(e), true),
        };
        if h.ftype != FrameType::Data {
            frames.push((h, Vec::new()));
            continue;
        }
        match usize::try_from(h.len).ok().and_then(|n| r.bytes(n)) {
            Some(body) => frames.push((h, body.to_vec())),
            None => return (frames, None, true),
        }
    }
}

fn frames_len(frames: &[Frame]) -> usize {
    frames.iter().map(|(_, b)| HEADER_LEN + b.len()).sum()
}

/// The frame `Assembler`: input = world, cap choice, a seed for the
/// split points, then the byte stream. Frames come out as a plain parse
/// of the stream gives them, however it is split; a bad header is the
/// same error; memory stays within a bounded multiple of the bytes read.
pub fn assembler(data: &[u8]) {
    let mut input = Input::new(data);
    let world = 1 + u32::from(input.u8() % 8);
    let cap = input.u8();
    // Small caps (fuzzing fast), or none at all: a body claiming more than
    // `RESERVE` then reserves `RESERVE`, not the claim.
    let max_len = match cap {
        0 => u64::MAX,
        _ => u64::from(cap) * 67,
    };
    let mut rng = Rng::new(u64::from(input.u16()) << 32 | 0x9E37);
    let stream = input.rest();
    let (want, want_err, partial) = frames_of(stream, world, max_len);

    let pool = BufferPool::new();
    let mut asm = Assembler::new(world, max_len);
    let mut got = Vec::new();
    let mut at = 0;
    let mut body_read = 0usize;
    let mut err = None;
    loop {
        if let Some((h, mut body)) = asm.take_frame() {
            // A matched frame's buffer starts with its word's room.
            body.drain(..h.front());
            got.push((h, body));
            body_read = 0;
            continue;
        }
        if at == stream.len() {
            break;
        }
        let space = asm.space();
        assert!(!space.is_empty(), "no room while a frame is incomplete");
        if asm_in_body(&asm) {
            // Reserved memory follows the bytes, not the claim.
            let reserved = body_read + asm.space().len();
            assert!(
                reserved <= RESERVE.max(4 * body_read + (64 << 10)),
                "{reserved} bytes reserved after {body_read} arrived"
            );
        }
        let space = asm.space();
        let step = match rng.below(4) {
            0 => 1,
            1 => 1 + rng.below(64) as usize,
            _ => usize::MAX,
        };
        let n = space.len().min(step).min(stream.len() - at);
        space[..n].copy_from_slice(&stream[at..at + n]);
        at += n;
        let in_body = asm_in_body(&asm);
        match asm.advance(n) {
            Ok(Some(h)) if h.ftype == FrameType::Data => {
                asm.start_body(h, &pool);
                body_read = 0;
            }
            Ok(Some(h)) => got.push((h, Vec::new())),
            Ok(None) => {
                if in_body {
                    body_read += n;
                }
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(got, want);
    assert_eq!(err, want_err);
    if err.is_none() {
        assert_eq!(asm.mid_frame(), partial);
    }
    asm.discard(&pool);
    assert!(!asm.mid_frame());
}

fn asm_in_body(asm: &Assembler) -> bool {
    asm.body_header().is_some()
}

/// `handshake::parse`: a hello decodes iff it is long enough and has the
/// magic; re-encoded with its nonce it is the same bytes.
pub fn hello(data: &[u8]) {
    let Some(p) = handshake::parse(data) else {
        assert!(data.len() < handshake::HELLO_LEN || &data[..8] != b"MESHWORK");
        return;
    };
    let mut nonce = [0u8; 24];
    nonce.copy_from_slice(&data[handshake::NONCE_AT..handshake::HELLO_LEN]);
    let again = handshake::encode(&p, &nonce);
    assert_eq!(again[..], data[..handshake::HELLO_LEN]);
    assert_eq!(handshake::parse(&again), Some(p));
}

/// The same-host negotiation's messages (`shm/setup.rs`, magic
/// `mwshm003`) and a single-copy descriptor (`shm/copy.rs`): what decodes
/// re-encodes to the same bytes, and a descriptor names at most four
/// ranges, adding up to the length it is decoded against. A ring message
/// names no path, only where the peer opens the segment (a process id
/// and a descriptor number); what is opened there is checked when it is
/// opened (sealed, private, bound to the link: `shm/region.rs`), not
/// here.
pub fn shm_negotiation(data: &[u8]) {
    crate::shm::fuzz_negotiation(data);
}

/// A shared-memory ring driven by a script of writes, publications, reads
/// and frees: from an honest producer every byte published comes out once
/// and in order; from a hostile one (raw words anywhere in the data area,
/// lies in the reader's `tail`) the reader reads at most what it asks
/// for or refuses the ring, never panics (`shm/ring/fuzz.rs`).
pub fn shm_ring(data: &[u8]) {
    crate::shm::fuzz_ring(data);
}

/// The seed's messages: Join, Challenge, Reply, a sealed record, the
/// welcome's parts, the table, an advertised address, and the input as a
/// sealed record or a link's envelope. Every decoder reads the whole
/// input (a world for the table from its first byte).
pub fn seed(data: &[u8]) {
    if let Some(j) = seed::JoinMsg::decode(data) {
        let again = j.encode();
        let mut want = data[..again.len()].to_vec();
        // The flags keep the star bit and a growth's count (bits 8..).
        let flags = u32::from(j.star) | (j.grow << 8);
        want[20..24].copy_from_slice(&flags.to_le_bytes());
        assert_eq!(again[..], want[..]);
        assert_eq!(seed::JoinMsg::decode(&again), Some(j));
    }
    if let Some(c) = seed::ChallengeMsg::decode(data) {
        let again = c.encode();
        assert_eq!(again[..], data[..again.len()]);
        assert_eq!(seed::ChallengeMsg::decode(&again), Some(c));
    }
    if let Some(r) = seed::ReplyMsg::decode(data) {
        assert_eq!(r.encode()[..], data[..12]);
    }
    // A record nobody sealed under this key never opens; one sealed does,
    // and only in its place.
    let (key, shared) = ([0x5A; 32], [0xA5; 32]);
    let join = [7u8; seed::JOIN_LEN];
    let session = || seed::Session::new(&key, &join, b"challenge", b"proof", &shared);
    let body = data.get(4..).unwrap_or_default();
    assert!(session().open(seed::Record::Welcome, body).is_err());
    let Ok(sealed) = session().seal(seed::Record::Welcome, data) else {
        panic!("sealing failed");
    };
    let mut opener = session();
    assert!(opener.open(seed::Record::Table, &sealed[4..]).is_err());
    assert_eq!(
        session()
            .open(seed::Record::Welcome, &sealed[4..])
            .ok()
            .as_deref(),
        Some(data)
    );

    let mut rest = data;
    match seed::read_welcome(&mut rest) {
        Ok(parts) => {
            assert!(parts.iter().all(|p| p.len() <= seed::WELCOME_PART_MAX));
            let again = seed::encode_welcome([&parts[0], &parts[1], &parts[2]]);
            assert_eq!(again, data[..data.len() - rest.len()]);
        }
        Err(seed::WelcomeError::TooLong(n)) => assert!(n > seed::WELCOME_PART_MAX),
        Err(seed::WelcomeError::Short) => {}
    }

    let world = u32::from(data.first().copied().unwrap_or(0));
    let body = data.get(1..).unwrap_or_default();
    let mut rest = body;
    if let Ok(table) = seed::read_table(&mut rest, world) {
        let mut want = body[..body.len() - rest.len()].to_vec();
        if want[..4] != [0; 4] {
            want[..4].copy_from_slice(&1u32.to_le_bytes());
        }
        let again = seed::encode_table(&table);
        assert_eq!(again, want);
        assert_eq!(seed::read_table(&mut &again[..], world).ok(), Some(table));
    }

    if data.len() >= ADDR_LEN {
        let mut again = Vec::new();
        put_addr(&mut again, seed::get_addr(data));
        assert_eq!(again, data[..ADDR_LEN]);
    }
    open_sealed(data);
}

/// Open `sealed` as a sealed leaf key (refused: it was not sealed under
/// this key), and seal then open it as a plaintext.
fn open_sealed(sealed: &[u8]) {
    let key = [0x5A; 32];
    assert!(open_record(&key, 0, b"leaf key", sealed).is_err());
    let boxed = seal_record(&key, 0, b"leaf key", sealed).expect("sealing");
    assert_eq!(boxed.len(), sealed.len() + TAG_LEN);
    assert_eq!(
        open_record(&key, 0, b"leaf key", &boxed).ok().as_deref(),
        Some(sealed)
    );
    // Only in its place.
    assert!(open_record(&key, 1, b"leaf key", &boxed).is_err());
    // Bytes nobody sealed never open as a link's envelope either.
    let pool = Arc::new(BufferPool::new());
    for protect in [Protect::Authenticate, Protect::Encrypt] {
        let mut opener = Opener::new(key, protect);
        assert!(opener.open(sealed.to_vec(), 4, 1 << 20, &pool).is_err());
    }
}

fn core(rank: u32, world: u32, shape: crate::Shape) -> Core {
    Core::new(&CoreConfig {
        rank,
        world,
        shape,
        timeout: Duration::from_secs(1),
        liveness: Duration::from_secs(1),
        max_message_bytes: 1 << 20,
        peer_budget_bytes: 1 << 20,
        // Deep enough for a whole script (4 096 messages) on one lane:
        // the scripts send without waiting for credit.
        lane_depth: 4096,
        ranks_here: 1,
    })
}

/// The QUIC order keeper `In`. First byte even: an honest sender — a
/// script of sends stamped by `Out` (counters starting near the 16-bit
/// wrap), frames and sidecar payloads arriving in any interleaving the
/// wires allow; every lane must come out complete and in send order. Odd:
/// a hostile sender — arbitrary stamps, streams, types and ranks; `In`
/// may refuse, never panic, and holds a bounded amount.
pub fn order(data: &[u8]) {
    let mut input = Input::new(data);
    match input.u8() & 1 {
        0 => order_honest(&mut input),
        _ => order_hostile(&mut input),
    }
}

fn lane(s: usize) -> LaneKey {
    LaneKey {
        comm: 0,
        kind: LaneKind::PointToPoint,
        tag: s as u64,
    }
}

fn order_honest(input: &mut Input<'_>) {
    let streams = STREAMS as usize;
    let (frames0, payloads0) = (input.u32(), 0u16.wrapping_sub(u16::from(input.u8())));
    let mut out = Out::starting_at(streams, frames0, payloads0);
    let mut rng = Rng::new(input.u64());
    // What travels: frames per QUIC stream, payloads on the one sidecar.
    let mut quic: Vec<VecDeque<(Header, Option<Payload>)>> =
        (0..streams).map(|_| VecDeque::new()).collect();
    let mut sidecar = VecDeque::new();
    let mut sent: Vec<Vec<u32>> = vec![Vec::new(); streams];
    let mut n = 0u32;
    while !input.done() && n < 4096 {
        let b = input.u8();
        let s = usize::from(b >> 2) % streams;
        let mut h = Header {
            ftype: FrameType::Data,
            kind: LaneKind::PointToPoint,
            src: 1,
            dst: 0,
            comm: 0,
            tag: s as u64,
            len: 4,
            aux: 0,
            seq: 0,
        };
        let body = Payload::from_parts(&[&n.to_le_bytes()]);
        match b % 4 {
            0 => {
                out.payload(s, &mut h);
                sidecar.push_back((s, h, body));
            }
            1 => {
                // A heartbeat on the stream: ordered, delivers nothing.
                let mut hb = Header::control(FrameType::Heartbeat, 1, 0);
                out.frame(s, &mut hb);
                quic[s].push_back((hb, None));
                continue;
            }
            _ => {
                out.frame(s, &mut h);
                quic[s].push_back((h, Some(body)));
            }
        }
        sent[s].push(n);
        n += 1;
    }
    let core = core(0, 2, crate::Shape::Mesh);
    let mut inn = In::starting_at(streams, frames0, payloads0);
    loop {
        let ready: Vec<usize> = (0..streams).filter(|&s| !quic[s].is_empty()).collect();
        let pick = rng.below(ready.len() as u64 + 1) as usize;
        if let Some(&s) = ready.get(pick) {
            let Some((h, p)) = quic[s].pop_front() else {
                break;
            };
            assert_eq!(inn.frame(&core, 1, s, h, p), Ok(()));
        } else if let Some((s, h, p)) = sidecar.pop_front() {
            assert_eq!(inn.payload(&core, 1, s, h, p), Ok(()));
        } else if ready.is_empty() {
            break;
        }
    }
    for (s, want) in sent.iter().enumerate() {
        let mut got = Vec::new();
        while let Some(Ok(p)) = core.inbox.try_take(1, lane(s), None) {
            let b = p.as_ref();
            got.push(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        assert_eq!(&got, want, "stream {s}");
    }
}

fn order_hostile(input: &mut Input<'_>) {
    let cfg = input.u8();
    let world = 2 + u32::from(cfg % 4);
    // A mesh rank, a star coordinator, a star worker (the one that takes
    // peer-gone notices) or a ring's rank (a relay for its neighbours),
    // on its link to `peer`.
    let (rank, shape, peer) = match (cfg >> 2) % 4 {
        0 => (0, crate::Shape::Mesh, 1),
        1 => (0, crate::Shape::Star, 1 + u32::from(cfg >> 4) % (world - 1)),
        2 => (1 + u32::from(cfg >> 4) % (world - 1), crate::Shape::Star, 0),
        _ if world >= 3 => (0, crate::Shape::KRegular { degree: 2 }, world - 1),
        _ => (0, crate::Shape::Mesh, 1),
    };
    let core = core(rank, world, shape);
    let streams = STREAMS as usize;
    let (frames0, payloads0) = (input.u32(), input.u16());
    let mut inn = In::starting_at(streams, frames0, payloads0);
    let mut events = 0;
    while !input.done() && events < 8192 {
        events += 1;
        let what = input.u8();
        // Mostly real streams; sometimes one that does not exist.
        let s = usize::from(input.u8()) % (streams + 1);
        let ranks = input.u8();
        let mut h = Header {
            ftype: FRAME_TYPES[usize::from(what >> 1) % FRAME_TYPES.len()],
            kind: LANE_KINDS[usize::from(what >> 4) % LANE_KINDS.len()],
            src: u32::from(ranks & 0xF) % world,
            dst: u32::from(ranks >> 4) % world,
            comm: 0,
            tag: u64::from(input.u8() % 4),
            len: 0,
            // Stamps near the counters: some line up, some never will.
            aux: frames0.wrapping_add(u32::from(input.u8() % 8)),
            seq: payloads0
                .wrapping_add(u16::from(input.u8() % 8))
                .wrapping_sub(2),
        };
        let body = Payload::from_parts(&[&[what; 3]]);
        if h.ftype == FrameType::Credit {
            // Bytes credited: anything a peer may claim.
            h.len = u64::from(input.u8()) << (input.u8() % 64);
        }
        let r = if what & 1 == 0 {
            // The sidecar carries data frames only.
            h.ftype = FrameType::Data;
            h.len = 3;
            inn.payload(&core, peer, s, h, body)
        } else {
            let p = (h.ftype == FrameType::Data).then(|| {
                h.len = 3;
                body
            });
            inn.frame(&core, peer, s, h, p)
        };
        if r.is_err() {
            // A protocol error closes the link: nothing more comes.
            break;
        }
    }
}

/// Run `entry` over the fixed-seed inputs the unit tests use in place of
/// a fuzzer: `seeds` themselves, then `count` inputs, each either random
/// bytes (up to `max_len`) or a seed with a few bytes flipped,
/// overwritten or cut off.
pub fn sweep(seed: u64, count: usize, max_len: usize, seeds: &[Vec<u8>], entry: fn(&[u8])) {
    let mut rng = Rng::new(seed);
    for s in seeds {
        entry(s);
    }
    let mut input = Vec::with_capacity(max_len);
    for _ in 0..count {
        input.clear();
        if seeds.is_empty() || rng.below(2) == 0 {
            let len = rng.below(max_len as u64 + 1);
            input.extend((0..len).map(|_| rng.next() as u8));
        } else {
            input.extend_from_slice(&seeds[rng.below(seeds.len() as u64) as usize]);
        }
        for _ in 0..rng.below(4) {
            if input.is_empty() {
                break;
            }
            let i = rng.below(input.len() as u64) as usize;
            match rng.below(4) {
                0 => input[i] ^= 1 << rng.below(8),
                1 => input[i] = rng.next() as u8,
                2 => input.truncate(i),
                _ => input[i] = [0, 1, 0xFF, 0x7F][rng.below(4) as usize],
            }
        }
        entry(&input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(h: &Header) -> Vec<u8> {
        h.encode().to_vec()
    }

    #[test]
    fn frame_header_survives_random_and_mutated_headers() {
        let h = Header {
            ftype: FrameType::Data,
            kind: LaneKind::Rpc,
            src: 1,
            dst: 2,
            comm: 3,
            tag: 4,
            len: 100,
            aux: 5,
            seq: 6,
        };
        let mut valid = 4u32.to_le_bytes().to_vec();
        valid.extend_from_slice(&1000u64.to_le_bytes());
        valid.extend_from_slice(&header_bytes(&h));
        sweep(1, 100_000, 60, &[valid], frame_header);
    }

    #[test]
    fn assembler_survives_random_and_mutated_streams() {
        let mut stream = vec![3u8, 1, 7, 0];
        for (i, len) in [0u64, 5, 40, 67].into_iter().enumerate() {
            let mut h = Header::control(FrameType::Data, 1, 2);
            h.len = len;
            h.tag = i as u64;
            stream.extend_from_slice(&h.encode());
            stream.extend((0..len).map(|j| j as u8));
            stream.extend_from_slice(&Header::control(FrameType::Heartbeat, 0, 1).encode());
        }
        let mut huge = vec![0u8, 0, 1, 0];
        let mut h = Header::control(FrameType::Data, 0, 0);
        h.len = 16 << 30;
        huge.extend_from_slice(&h.encode());
        huge.extend_from_slice(&[7; 100]);
        sweep(2, 30_000, 300, &[stream, huge], assembler);
    }

    #[test]
    fn shm_ring_survives_honest_and_hostile_scripts() {
        // Honest: fill past the ring, read in pieces, free, publish.
        let honest: Vec<u8> = [0u8]
            .into_iter()
            .chain(
                [
                    0, 0xff, 0x7f, 1, 2, 0x10, 0, 3, 0, 0x00, 0x20, 1, 2, 0xff, 0x1f, 3,
                ]
                .repeat(8),
            )
            .collect();
        // Hostile: the same, with marks and lies between.
        let hostile: Vec<u8> = [1u8]
            .into_iter()
            .chain(
                [
                    0, 0x40, 0, 1, 4, 0, 0, 0, 4, 8, 0, 1, 5, 1, 2, 3, 4, 5, 6, 7, 8, 2, 0x40, 0,
                ]
                .repeat(8),
            )
            .collect();
        sweep(11, 3_000, 200, &[honest, hostile], shm_ring);
    }

    #[test]
    fn shm_negotiation_survives_random_and_mutated_messages() {
        let mut offer = b"mwshm003\x01".to_vec();
        offer.extend((0..56).map(|i| i as u8));
        // A ring message: present, the creator's process id and
        // descriptor, the capacity, whether it reads the peer's probe.
        let mut ring = vec![1u8];
        ring.extend_from_slice(&4242u32.to_le_bytes());
        ring.extend_from_slice(&7u32.to_le_bytes());
        ring.extend_from_slice(&(1u64 << 20).to_le_bytes());
        ring.push(1);
        sweep(9, 100_000, 120, &[offer, ring], shm_negotiation);
    }

    #[test]
    fn hello_survives_random_and_mutated_hellos() {
        let mut h = b"MESHWORK".to_vec();
        h.extend((8..handshake::HELLO_LEN + 40).map(|i| i as u8));
        sweep(3, 100_000, 120, &[h], hello);
    }

    #[test]
    fn seed_messages_survive_random_and_mutated_messages() {
        let join = seed::JoinMsg {
            version: seed::SEED_VERSION,
            world: 4,
            want: 1,
            star: true,
            grow: 0,
            nonce: [9; 24],
            share: [3; 33],
        }
        .encode()
        .to_vec();
        let challenge = seed::ChallengeMsg {
            version: seed::SEED_VERSION,
            nonce: [8; 24],
            share: [2; 33],
        }
        .encode()
        .to_vec();
        let reply = seed::ReplyMsg {
            status: 0,
            rank: 1,
            world: 4,
        }
        .encode()
        .to_vec();
        let welcome = seed::encode_welcome([b"ca", b"leaf", &[1; 30]]);
        let mut peers = vec![3u8];
        peers.extend(seed::encode_table(&seed::Table::Peers(vec![
            "10.0.0.1:5".parse().unwrap(),
            "[fe80::1]:6".parse().unwrap(),
            "0.0.0.0:0".parse().unwrap(),
        ])));
        let mut missing = vec![4u8];
        missing.extend(seed::encode_table(&seed::Table::Missing(vec![0, 3])));
        let seeds = [join, challenge, reply, welcome, peers, missing];
        sweep(4, 50_000, 100, &seeds, seed);
    }

    #[test]
    fn order_keeps_lanes_in_order_and_survives_hostile_stamps() {
        // Honest scripts starting just before the 16-bit wrap, and
        // hostile ones.
        let honest: Vec<u8> = [0u8, 0, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6, 7, 8]
            .into_iter()
            .chain((0..200).map(|i: u8| i.wrapping_mul(37)))
            .collect();
        let mut hostile = honest.clone();
        hostile[0] = 1;
        sweep(5, 4_000, 400, &[honest, hostile], order);
    }

    #[test]
    fn sealed_streams_deliver_only_authentic_frames() {
        // Honest: 8 frames of the lengths the bytes say; hostile: the
        // same bytes, unsealed.
        let honest: Vec<u8> = [0u8, 7, 0, 8]
            .into_iter()
            .chain((0..40).map(|i: u8| i.wrapping_mul(53)))
            .collect();
        let mut hostile = honest.clone();
        hostile[0] = 1;
        sweep(6, 3_000, 200, &[honest, hostile], sealed_stream);
    }

    #[test]
    fn order_keeps_lanes_in_order_across_the_wrap() {
        // 200 payloads among 400 frames on one stream, from payload
        // 65 500 on: the stamps wrap.
        let mut script = vec![0u8, 0, 0, 0, 0, 36, 1, 2, 3, 4, 5, 6, 7, 8];
        script.extend((0..600).map(|i| if i % 3 == 0 { 4 } else { 6 }));
        order(&script);
    }
}
