//! Entry points of the facade's fuzz targets (`fuzz/` at the repository
//! root): the discovery datagram and the RPC envelope. The transport's
//! decoders have theirs in `meshwork_transport::fuzzing`, with the same
//! contract: arbitrary bytes in, no panic, bounded memory, and round trips
//! checked where there is an encoder.
//!
//! Not a stable API: hidden from the docs, for `fuzz/` and tests only.

use crate::discovery::{Job, ANNOUNCE, LEN, QUERY};
use crate::group::rpc::{decode_request, decode_response, request_head, Response};
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

/// A discovery datagram: raw bytes never decode unless they are an
/// authentic datagram of the job (then they are exactly what `encode`
/// makes); a datagram made from the input's fields decodes to them when
/// its rank is in the world, and to nothing once any byte is changed, it
/// is cut or lengthened, or another job reads it.
pub fn discovery(data: &[u8]) {
    let world = 4;
    let job = Job::new("fuzz token", world, 29_500, 29_600);
    if let Some((kind, rank, addr)) = job.decode(data) {
        assert_eq!(job.encode(kind, rank, Some(addr))[..], data[..]);
    }

    let magic: [u8; 8] = match at(data, 0) % 3 {
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
    let addr = (at(data, 5) & 2 != 0).then_some(SocketAddrV4::new(ip, port));
    let d = job.encode(&magic, rank, addr);
    let known = magic == *ANNOUNCE || magic == *QUERY;
    match job.decode(&d) {
        Some((kind, r, a)) => {
            assert!(known && rank < world);
            assert_eq!((kind, r), (&magic, rank));
            assert_eq!(
                a,
                addr.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
            );
        }
        None => assert!(!known || rank >= world),
    }
    let (i, flip) = (usize::from(at(data, 12)) % LEN, at(data, 13));
    if flip != 0 {
        let mut bad = d;
        bad[i] ^= flip;
        assert_eq!(job.decode(&bad), None, "byte {i} changed by {flip:#x}");
    }
    assert_eq!(job.decode(&d[..LEN - 1]), None);
    assert_eq!(job.decode(&[&d[..], &[0]].concat()), None);
    let other = Job::new("another token", world, 29_500, 29_600);
    assert_eq!(other.decode(&d), None);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshwork_transport::fuzzing::sweep;

    #[test]
    fn discovery_datagrams_survive_random_and_mutated_input() {
        let job = Job::new("fuzz token", 4, 29_500, 29_600);
        let announce = job
            .encode(ANNOUNCE, 2, Some("10.0.0.7:29602".parse().unwrap()))
            .to_vec();
        let query = job.encode(QUERY, 1, None).to_vec();
        let fields = vec![0, 3, 0, 0, 0, 2, 10, 0, 0, 7, 0x9A, 0x73, 40, 1];
        sweep(11, 50_000, 80, &[announce, query, fields], discovery);
    }

    #[test]
    fn rpc_envelopes_survive_random_and_mutated_input() {
        let request = [&request_head(7, 1 << 40)[..], b"args"].concat();
        let ok = Response::Ok(b"result").encode();
        let failed = Response::Failed(b"panicked at 'boom'").encode();
        sweep(12, 100_000, 40, &[request, ok, failed], rpc_envelope);
    }
}
