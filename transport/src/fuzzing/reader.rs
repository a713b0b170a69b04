//! The link's frame reader (`link/reader.rs`) on streams of envelopes.
//!
//! First byte even: an honest sender's envelopes (heartbeats and data
//! frames of the lengths the input says, sealed under the link key), with
//! up to two bytes altered where the input says, read in splits drawn
//! from the input. What comes out is always the honest data frames, in
//! order, up to some point: nothing altered is ever delivered. Unaltered,
//! all of them come out and the stream ends cleanly; altered inside an
//! envelope's body (its frame header, payload or tag), nothing from that
//! envelope on comes out, and the stream does not end cleanly.
//!
//! Odd: bytes nobody sealed, read by a sealed reader (nothing comes out)
//! and by a plain one (no panic, memory bounded by the assembler).

use super::{core, Input, Rng};
use crate::auth::seal::{Opener, Protect, Sealer};
use crate::link::{Core, Fed, ReadError, Reader};
use crate::wire::{FrameType, Header, HEADER_LEN};
use crate::{BufferPool, LaneKind, Shape};
use std::sync::Arc;

const KEY: [u8; 32] = [0x3C; 32];

/// Frames out of a stream, and how it ended: `Ok(true)` between frames,
/// `Ok(false)` inside one, `Err` refused.
pub(crate) type Read = (Vec<(Header, Vec<u8>)>, Result<bool, ReadError>);

/// A reader of rank 1's stream to rank 0 (worlds of 3), sealed or plain.
pub(crate) fn reader(sealed: bool) -> Reader {
    let opener = sealed.then(|| Opener::new(KEY, Protect::Authenticate));
    Reader::new(1, 3, 1 << 20, opener)
}

/// Rank 0 of a mesh of 3.
pub(crate) fn mesh_core() -> Core {
    core(0, 3, Shape::Mesh)
}

/// The bytes of `frames` on the wire: each in its envelope (sealed under
/// the key [`reader`]'s openers hold), or plain.
#[cfg(test)]
pub(crate) fn stream(frames: &[(Header, Vec<u8>)], sealed: bool) -> Vec<u8> {
    stream_marked(frames, sealed).0
}

/// [`stream`], and where each frame's bytes start.
fn stream_marked(frames: &[(Header, Vec<u8>)], sealed: bool) -> (Vec<u8>, Vec<usize>) {
    let pool = Arc::new(BufferPool::new());
    let mut sealer = Sealer::new(KEY, Protect::Authenticate);
    let (mut bytes, mut starts) = (Vec::new(), Vec::new());
    for (h, p) in frames {
        starts.push(bytes.len());
        if sealed {
            let parts: [&[u8]; 1] = [p];
            let env = sealer.seal(h, &parts, &pool).expect("sealing");
            env.pieces(&parts).for_each(|b| bytes.extend_from_slice(b));
        } else {
            bytes.extend_from_slice(&h.encode());
            bytes.extend_from_slice(p);
        }
    }
    (bytes, starts)
}

/// The data frames of `frames` (what a reader delivers of them; control
/// frames act inside it).
pub(crate) fn data_only(frames: &[(Header, Vec<u8>)]) -> Vec<(Header, Vec<u8>)> {
    frames
        .iter()
        .filter(|(h, _)| h.ftype == FrameType::Data)
        .cloned()
        .collect()
}

/// Feed `bytes` to `r` as a link would, in reads split by `seed` (a
/// quarter as large as the reader takes, the rest 1–64 bytes).
pub(crate) fn read_all(r: &mut Reader, core: &Core, bytes: &[u8], seed: u64) -> Read {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut at = 0;
    let ended = loop {
        if r.frame_ready() {
            match r.frame(core) {
                Ok(Some((h, p))) => out.push((h, p.as_ref().to_vec())),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            continue;
        }
        if at == bytes.len() {
            break Ok(!r.mid_frame());
        }
        let space = r.space();
        assert!(!space.is_empty(), "no room while a frame is incomplete");
        let step = match rng.below(4) {
            0 => usize::MAX,
            _ => 1 + rng.below(64) as usize,
        };
        let n = space.len().min(step).min(bytes.len() - at);
        space[..n].copy_from_slice(&bytes[at..at + n]);
        at += n;
        let took = match r.fed(core, n) {
            Ok(Fed::More) => Ok(()),
            Ok(Fed::Header(h)) => r.dispatch(core, h).map(|body| {
                if let Some(h) = body {
                    r.body(h, &core.pool);
                }
            }),
            Ok(Fed::Envelope(h)) => r.envelope(h, &core.pool, &[]),
            Err(e) => Err(e),
        };
        if let Err(e) = took {
            break Err(e);
        }
    };
    (out, ended)
}

/// See the module docs.
pub fn sealed_stream(data: &[u8]) {
    let mut input = Input::new(data);
    let hostile = input.u8() & 1 == 1;
    let seed = u64::from(input.u16()) << 32 | 0x51ED;
    let core = mesh_core();
    if hostile {
        let bytes = input.rest();
        let (got, _) = read_all(&mut reader(true), &core, bytes, seed);
        assert!(
            got.is_empty(),
            "bytes nobody sealed came out of an envelope"
        );
        let _ = read_all(&mut reader(false), &core, bytes, seed);
        return;
    }
    let mut frames = Vec::new();
    for i in 0..input.u8() % 12 {
        if input.u8() & 3 == 0 {
            frames.push((Header::control(FrameType::Heartbeat, 1, 0), Vec::new()));
            continue;
        }
        let len = usize::from(input.u16() % 3000);
        let h = Header {
            kind: LaneKind::PointToPoint,
            tag: u64::from(i),
            len: len as u64,
            ..Header::control(FrameType::Data, 1, 0)
        };
        let p = (0..len)
            .map(|j| (j as u64 * 131 + u64::from(i)) as u8)
            .collect();
        frames.push((h, p));
    }
    let (honest, starts) = stream_marked(&frames, true);
    let mut bytes = honest.clone();
    for _ in 0..input.u8() % 3 {
        if bytes.is_empty() {
            break;
        }
        let at = input.u32() as usize % bytes.len();
        bytes[at] ^= input.u8();
    }
    // Two changes of one byte may cancel out: what differs is altered.
    let first = bytes.iter().zip(&honest).position(|(a, b)| a != b);
    let want = data_only(&frames);
    let (got, ended) = read_all(&mut reader(true), &core, &bytes, seed);
    assert!(
        got.len() <= want.len() && got == want[..got.len()],
        "an altered frame came out"
    );
    let Some(at) = first else {
        assert_eq!(got, want, "an honest stream lost frames");
        assert!(matches!(ended, Ok(true)), "an honest stream: {ended:?}");
        return;
    };
    // The envelope the first altered byte is in.
    let k = starts.partition_point(|&s| s <= at) - 1;
    if at >= starts[k] + HEADER_LEN {
        let before = data_only(&frames[..k]).len();
        assert!(
            got.len() <= before,
            "frames from an altered envelope on came out"
        );
        assert!(
            !matches!(ended, Ok(true)),
            "an altered stream ended cleanly"
        );
    }
}
