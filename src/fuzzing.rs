//! Entry points of the facade's fuzz targets (`fuzz/` at the repository
//! root): the discovery datagram and the RPC envelope. The transport's
//! decoders have theirs in `meshwork_transport::fuzzing`, with the same
//! contract: arbitrary bytes in, no panic, bounded memory, and round trips
//! checked where there is an encoder.
//!
//! Not a stable API: hidden from the docs, for `fuzz/` and tests only.

use crate::group::rpc::{decode_request, decode_response, request_head, Response};
use crate::node::discovery::{Datagram, Job, ANNOUNCE, FRESH_MS, LEN, QUERY};
use std::net::{Ipv4Addr, SocketAddrV4};

/// The byte at `i` (zero past the end).
fn at(data: &[u8], i: usize) -> u8 {
    data.get(i).copied().unwrap_or(0)
}

fn u32_at(data: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([
        at(data, i),
        at(data, i + 1),
        at(data, i + 2),
        at(data, i + 3),
    ])
}

fn u64_at(data: &[u8], i: usize) -> u64 {
    u64::from(u32_at(data, i)) | u64::from(u32_at(data, i + 4)) << 32
}

/// The token the discovery target's job uses.
const FUZZ_TOKEN: &str = "fuzz token, sixteen bytes or more";

/// A discovery datagram: raw bytes never decode unless they are an
/// authentic, fresh datagram of the job (then they are exactly what
/// `encode` makes); a datagram made from the input's fields decodes to
/// them when its rank is in the world and its stamp within `FRESH_MS` of
/// the receiver's clock, and to nothing once any byte is changed, it is
/// cut or lengthened, another job reads it, or it is read a minute later.
pub fn discovery(data: &[u8]) {
    let world = 4;
    let job = Job::new(FUZZ_TOKEN, world, 29_500, 29_600);
    // The receiver's clock: the input's own stamp, moved by up to ±32 s.
    let skew = i64::from(i16::from_le_bytes([at(data, 48), at(data, 49)]));
    let now = u64_at(data, 32).saturating_add_signed(skew);
    if let Some(d) = job.decode(data, now) {
        assert_eq!(job.encode(&d)[..], data[..]);
        assert!(d.sent_ms.abs_diff(now) <= FRESH_MS);
    }

    let kind: [u8; 8] = match at(data, 0) % 3 {
        0 => *ANNOUNCE,
        1 => *QUERY,
        _ => std::array::from_fn(|i| at(data, 14 + i)),
    };
    let rank = match at(data, 5) % 2 {
        0 => u32::from(at(data, 1)) % (world + 2),
        _ => u32_at(data, 1),
    };
    let ip = Ipv4Addr::from(u32_at(data, 6));
    let port = u16::from_le_bytes([at(data, 10), at(data, 11)]);
    let sent = Datagram {
        kind,
        rank,
        addr: SocketAddrV4::new(ip, port),
        sent_ms: u64_at(data, 22),
        nonce: std::array::from_fn(|i| at(data, 50 + i)),
    };
    // The receiver's clock: up to about ±64 s from the stamp.
    let skew = i64::from(i16::from_le_bytes([at(data, 30), at(data, 31)])) * 2;
    let now = sent.sent_ms.saturating_add_signed(skew);
    let d = job.encode(&sent);
    let valid = (kind == *ANNOUNCE || kind == *QUERY) && rank < world;
    match job.decode(&d, now) {
        Some(got) => {
            assert!(valid && sent.sent_ms.abs_diff(now) <= FRESH_MS);
            assert_eq!(got, sent);
        }
        None => assert!(!valid || sent.sent_ms.abs_diff(now) > FRESH_MS),
    }
    let at_send = sent.sent_ms;
    assert_eq!(job.decode(&d, at_send).is_some(), valid);
    // A minute later (a stamp near the end of time has no later minute:
    // saturating there would ask for a stale stamp to be refused at its
    // own time).
    if let Some(later) = at_send.checked_add(60_000) {
        assert_eq!(job.decode(&d, later), None);
    }
    if at_send >= 60_000 {
        assert_eq!(job.decode(&d, at_send - 60_000), None);
    }
    let (i, flip) = (usize::from(at(data, 12)) % LEN, at(data, 13));
    if flip != 0 {
        let mut bad = d;
        bad[i] ^= flip;
        assert_eq!(
            job.decode(&bad, at_send),
            None,
            "byte {i} changed by {flip:#x}"
        );
    }
    assert_eq!(job.decode(&d[..LEN - 1], at_send), None);
    assert_eq!(job.decode(&[&d[..], &[0]].concat(), at_send), None);
    let other = Job::new("another token, also long enough", world, 29_500, 29_600);
    assert_eq!(other.decode(&d, at_send), None);
}

/// The RPC envelope: a request is `fn_id`, request id, arguments; a
/// response a status byte and its body. Both decoders are checked against
/// their encoders, both ways.
pub fn rpc_envelope(data: &[u8]) {
    match decode_request(data) {
        Some((fn_id, id, args)) => {
            assert_eq!([&request_head(fn_id, id)[..], args].concat(), data);
        }
        None => assert!(data.len() < 12),
    }
    let response = decode_response(data);
    match response {
        Response::Malformed => assert!(data.first().is_none_or(|&s| s > 2)),
        Response::Unknown => assert_eq!(data.first(), Some(&1)),
        Response::Ok(_) | Response::Failed(_) => assert_eq!(response.encode(), data),
    }
    assert_eq!(decode_response(&response.encode()), response);
    // The heap's requests travel beside RPC's: applied to a heap of 64
    // bytes, anything is answered or dropped, and a refusal names the size.
    if let (Some(heap), Some((_, id, args))) = (crate::group::Heap::new(64), decode_request(data)) {
        if let Some((_, answer)) = crate::group::heap_answer_to(Some(&heap), id, args) {
            if answer[0] != 0 {
                assert!(String::from_utf8_lossy(&answer[1..]).contains("64 bytes"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshwork_transport::fuzzing::sweep;

    #[test]
    fn discovery_datagrams_survive_random_and_mutated_input() {
        let job = Job::new(FUZZ_TOKEN, 4, 29_500, 29_600);
        // A fixed clock: decode takes it as a parameter.
        let at: u64 = 1_700_000_000_000;
        let announce = job
            .encode(&Datagram {
                kind: *ANNOUNCE,
                rank: 2,
                addr: "10.0.0.7:29602".parse().unwrap(),
                sent_ms: at,
                nonce: [0; 16],
            })
            .to_vec();
        let query = job
            .encode(&Datagram {
                kind: *QUERY,
                rank: 1,
                addr: "0.0.0.0:0".parse().unwrap(),
                sent_ms: at,
                nonce: [7; 16],
            })
            .to_vec();
        let mut fields = vec![0, 3, 0, 0, 0, 2, 10, 0, 0, 7, 0x9A, 0x73, 40, 1];
        fields.extend_from_slice(&[0; 8]);
        fields.extend_from_slice(&at.to_le_bytes());
        fields.extend_from_slice(&[0x98, 0x3A]); // 15 000 × 2: 30 s of skew, the bound
        sweep(11, 50_000, 100, &[announce, query, fields], discovery);
    }

    #[test]
    fn rpc_envelopes_survive_random_and_mutated_input() {
        let request = [&request_head(7, 1 << 40)[..], b"args"].concat();
        let ok = Response::Ok(b"result").encode();
        let failed = Response::Failed(b"panicked at 'boom'").encode();
        sweep(12, 100_000, 40, &[request, ok, failed], rpc_envelope);
    }
}
