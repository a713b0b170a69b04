//! The frame reader on bytes made here: every frame of a stream comes out
//! whole and once however the reads split it (fixed seeds), envelopes
//! open only when their tag checks, and each way a peer can break the
//! stream is its own error.

use super::*;
use crate::auth::seal::Protect;
use crate::fuzzing::{data_only, mesh_core, reader, stream};
use crate::wire::HEADER_LEN;
use crate::LaneKind;

fn data(src: u32, dst: u32, tag: u64, len: usize) -> Header {
    Header {
        ftype: FrameType::Data,
        kind: LaneKind::PointToPoint,
        src,
        dst,
        comm: 0,
        tag,
        len: len as u64,
        aux: 0,
        seq: 0,
    }
}

fn payload(tag: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 31 + tag) as u8).collect()
}

/// What a stream from rank 1 holds: data frames of many lengths (0, one
/// byte, a header's worth, over the assembler's first reservation) with
/// heartbeats between them.
fn frames() -> Vec<(Header, Vec<u8>)> {
    let mut out = Vec::new();
    for (tag, len) in [0usize, 1, 39, 40, 41, 1000, 70_000, 3]
        .into_iter()
        .enumerate()
    {
        out.push((Header::control(FrameType::Heartbeat, 1, 0), Vec::new()));
        out.push((data(1, 0, tag as u64, len), payload(tag as u64, len)));
    }
    out
}

/// Feed `bytes` as a link would, split by `seed`: the frames that came
/// out, or the first error.
fn read_all(
    r: &mut Reader,
    core: &Core,
    bytes: &[u8],
    seed: u64,
) -> Result<Vec<(Header, Vec<u8>)>, ReadError> {
    let (got, ended) = crate::fuzzing::read_all(r, core, bytes, seed);
    assert!(ended?, "the stream ended inside a frame");
    Ok(got)
}

#[test]
fn every_frame_comes_out_whole_however_the_reads_split_it() {
    let core = mesh_core();
    let frames = frames();
    for sealed in [false, true] {
        let bytes = stream(&frames, sealed);
        for seed in 0..20 {
            let mut r = reader(sealed);
            let got = read_all(&mut r, &core, &bytes, seed).unwrap();
            assert_eq!(got, data_only(&frames), "sealed {sealed}, seed {seed}");
        }
    }
}

#[test]
fn an_altered_envelope_is_refused_wherever_the_byte_is() {
    let core = mesh_core();
    let h = data(1, 0, 4, 39);
    let frame = [(h, payload(4, 39))];
    let bytes = stream(&frame, true);
    // Outer header, inner header, 39 bytes of payload, tag.
    let tag = 2 * HEADER_LEN + 39;
    for at in [HEADER_LEN + 3, 2 * HEADER_LEN + 5, tag + 2] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x40;
        let mut r = reader(true);
        let got = read_all(&mut r, &core, &bad, 1);
        assert!(
            matches!(got, Err(ReadError::Auth(AuthError::Forged))),
            "byte {at}: {got:?}"
        );
    }
}

#[test]
fn a_frame_outside_its_envelope_is_refused_on_a_sealed_link() {
    let core = mesh_core();
    let frames = frames();
    let plain = stream(&frames, false);
    let got = read_all(&mut reader(true), &core, &plain, 3);
    assert!(
        matches!(got, Err(ReadError::Protocol(ProtocolError::Unsealed))),
        "{got:?}"
    );
}

#[test]
fn an_envelope_sealed_under_another_key_is_refused() {
    let core = mesh_core();
    let frames = frames();
    let bytes = stream(&frames, true);
    let opener = Opener::new([8; 32], Protect::Authenticate);
    let mut r = Reader::new(1, 3, 1 << 20, Some(opener));
    let got = read_all(&mut r, &core, &bytes, 4);
    assert!(
        matches!(got, Err(ReadError::Auth(AuthError::Forged))),
        "{got:?}"
    );
}

#[test]
fn a_header_that_does_not_decode_ends_the_stream() {
    let core = mesh_core();
    let mut bytes = data(1, 0, 0, 4).encode().to_vec();
    // A rank outside the world of 3.
    bytes[4..8].copy_from_slice(&9u32.to_le_bytes());
    let got = read_all(&mut reader(false), &core, &bytes, 5);
    assert!(
        matches!(got, Err(ReadError::Protocol(ProtocolError::BadHeader(_)))),
        "{got:?}"
    );
    // Over the cap.
    let bytes = data(1, 0, 0, 2 << 20).encode();
    let got = read_all(&mut reader(false), &core, &bytes, 5);
    assert!(
        matches!(got, Err(ReadError::Protocol(ProtocolError::BadHeader(_)))),
        "{got:?}"
    );
}

#[test]
fn the_core_refusing_a_header_is_a_typed_verdict() {
    let core = mesh_core();
    let r = reader(false);
    // Data from rank 1 for rank 2: a mesh relays nothing.
    let got = r.dispatch(&core, data(1, 2, 0, 4));
    assert!(
        matches!(
            got,
            Err(ReadError::Protocol(ProtocolError::NotCarried(
                Carried::DataFrame
            )))
        ),
        "{got:?}"
    );
    // Data claiming another source than the link's peer.
    let got = r.dispatch(&core, data(2, 0, 0, 4));
    assert!(matches!(got, Err(ReadError::Protocol(_))), "{got:?}");
    // A goodbye ends the stream.
    let got = r.dispatch(&core, Header::control(FrameType::Bye, 1, 0));
    assert!(
        matches!(got, Err(ReadError::Protocol(ProtocolError::Ended))),
        "{got:?}"
    );
    // A heartbeat acts at once; a data frame's body comes next.
    let hb = Header::control(FrameType::Heartbeat, 1, 0);
    assert!(matches!(r.dispatch(&core, hb), Ok(None)));
    let h = data(1, 0, 0, 4);
    assert!(matches!(r.dispatch(&core, h), Ok(Some(x)) if x == h));
}

#[test]
fn a_stream_cut_inside_a_frame_is_seen() {
    let core = mesh_core();
    let frames = frames();
    for sealed in [false, true] {
        let bytes = stream(&frames, sealed);
        let mut r = reader(sealed);
        let cut = &bytes[..bytes.len() - 1];
        let (got, ended) = crate::fuzzing::read_all(&mut r, &core, cut, 2);
        assert_eq!(got.len(), data_only(&frames).len() - 1, "sealed {sealed}");
        assert!(matches!(ended, Ok(false)), "sealed {sealed}: {ended:?}");
        assert!(r.mid_frame(), "sealed {sealed}");
        r.discard(&core.pool);
        assert!(!r.mid_frame());
    }
}

#[test]
fn a_body_resumed_after_a_direct_read_comes_out_whole() {
    let core = mesh_core();
    let h = data(1, 0, 5, 100);
    let p = payload(5, 100);
    for sealed in [false, true] {
        let bytes = stream(&[(h, p.clone())], sealed);
        let mut r = reader(sealed);
        r.space()[..HEADER_LEN].copy_from_slice(&bytes[..HEADER_LEN]);
        let got = r.fed(&core, HEADER_LEN).unwrap();
        // A direct read took the next 30 bytes, in two pieces, then gave
        // way to the reader.
        let (a, b) = (
            &bytes[HEADER_LEN..HEADER_LEN + 10],
            &bytes[HEADER_LEN + 10..HEADER_LEN + 30],
        );
        match got {
            Fed::Header(h) => {
                let h = r.dispatch(&core, h).unwrap().unwrap();
                r.resume(h, &core.pool, &[a, b]);
            }
            Fed::Envelope(outer) => r.envelope(outer, &core.pool, &[a, b]).unwrap(),
            Fed::More => panic!("a whole header fed"),
        }
        let out = read_all(&mut r, &core, &bytes[HEADER_LEN + 30..], 6).unwrap();
        assert_eq!(out, vec![(h, p.clone())], "sealed {sealed}");
    }
}
