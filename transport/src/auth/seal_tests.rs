//! Sealing and opening: what the tag covers however the payload is cut,
//! frames tagged and checked piece by piece, envelopes and records that
//! open only once, in order and unaltered, and a dropped envelope noticed
//! by the next.

use super::*;

fn data(tag: u64) -> Header {
    let mut h = Header::control(FrameType::Data, 0, 1);
    h.kind = LaneKind::PointToPoint;
    h.tag = tag;
    h
}

/// The envelope's body as the receiver reads it (after the outer header).
fn wire(e: &Envelope, parts: &[&[u8]]) -> Vec<u8> {
    let mut v = e.head[HEADER_LEN..].to_vec();
    match &e.cipher {
        Some(c) => v.extend_from_slice(c),
        None => parts.iter().for_each(|p| v.extend_from_slice(p)),
    }
    v.extend_from_slice(&e.tag);
    let outer = Header::decode(&e.outer(), 2, u64::MAX).unwrap();
    assert_eq!(outer.len as usize, v.len());
    v
}

/// The tag covers the inner header, the payload however it is cut
/// into parts, and the nonce; and it is not the tag under the link key
/// itself (`ENCRYPT_BULK`'s key), but under one derived from it.
#[test]
fn the_tag_covers_header_payload_and_nonce_however_the_payload_is_cut() {
    let key = [9u8; 32];
    let mut g = tagger(&key);
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
    let whole = mac(&mut g, 5, &[1; HEADER_LEN], &[&payload]).unwrap();
    for cut in [0, 1, 15, 16, 17, 999, 1000] {
        let (a, b) = payload.split_at(cut);
        assert_eq!(
            mac(&mut g, 5, &[1; HEADER_LEN], &[a, &[], b]).unwrap(),
            whole
        );
    }
    assert_ne!(
        mac(&mut g, 6, &[1; HEADER_LEN], &[&payload]).unwrap(),
        whole
    );
    assert_ne!(
        mac(&mut g, 5, &[2; HEADER_LEN], &[&payload]).unwrap(),
        whole
    );
    assert_ne!(
        mac(&mut g, 5, &[1; HEADER_LEN], &[&payload[1..]]).unwrap(),
        whole
    );
    let mut first_half = [0u8; MAC_KEY_LEN];
    first_half.copy_from_slice(&key[..MAC_KEY_LEN]);
    let mut under_link_key = FrameMac::new(&first_half);
    assert_ne!(
        mac(&mut under_link_key, 5, &[1; HEADER_LEN], &[&payload]).unwrap(),
        whole
    );
}

/// A frame tagged piece by piece as it goes out opens like any other;
/// checked as it arrives, it passes once, in its place, unaltered; an
/// abandoned check spends nothing.
#[test]
fn frames_tagged_and_checked_piece_by_piece_open_as_sealed() {
    let pool = Arc::new(BufferPool::new());
    let key = [4u8; 32];
    let mut s = Sealer::new(key, Protect::Authenticate);
    let (mut whole, mut checked) = (
        Opener::new(key, Protect::Authenticate),
        Opener::new(key, Protect::Authenticate),
    );
    let payload: Vec<u8> = (0..5000u32).map(|i| (i % 241) as u8).collect();
    for nonce in 0..3u64 {
        let Some(Ok((head, mut tagging))) = s.begin(&data(nonce), payload.len()) else {
            panic!("an authenticating sealer begins");
        };
        for piece in payload.chunks(1234) {
            tagging.update(piece).unwrap();
        }
        let tag = tagging.finish().unwrap();
        let mut body = head[HEADER_LEN..].to_vec();
        body.extend_from_slice(&payload);
        body.extend_from_slice(&tag);
        let (h, p) = whole.open(body.clone(), 2, u64::MAX, &pool).unwrap();
        assert_eq!((h.tag, p.as_ref()), (nonce, &payload[..]));
        let inner: [u8; HEADER_LEN] = head[HEADER_LEN..].try_into().unwrap();
        // Abandoned halfway: nothing spent.
        let mut check = checked.begin().unwrap();
        check.update(&inner).unwrap();
        check.update(&payload[..100]).unwrap();
        // Altered: refused, nothing spent.
        let mut check = checked.begin().unwrap();
        check.update(&inner).unwrap();
        check.update(&payload[1..]).unwrap();
        check.update(&[0]).unwrap();
        assert!(matches!(
            check.finish(&inner, payload.len(), &tag, 2, u64::MAX),
            Err(AuthError::Forged)
        ));
        let mut check = checked.begin().unwrap();
        for piece in std::iter::once(&inner[..]).chain(payload.chunks(777)) {
            check.update(piece).unwrap();
        }
        let h = check
            .finish(&inner, payload.len(), &tag, 2, u64::MAX)
            .unwrap();
        assert_eq!(h.tag, nonce);
    }
    // Hashed while assembled: opened by finishing the tag if all of it
    // was hashed, by hashing it whole otherwise; bytes hashed that are
    // not the bytes opened fail.
    let mut streamed = Opener::new(key, Protect::Authenticate);
    let mut s = Sealer::new(key, Protect::Authenticate);
    for (nonce, fed) in [(0u64, usize::MAX), (1, 1000), (2, 0), (3, usize::MAX)] {
        let env = s.seal(&data(nonce), &[&payload], &pool).unwrap();
        let body = wire(&env, &[&payload]);
        streamed.stream_start().unwrap();
        let upto = fed.min(body.len());
        for at in (0..upto).step_by(999) {
            let end = (at + 999).min(upto);
            streamed.stream_feed(&body[..end], body.len()).unwrap();
        }
        if nonce == 3 {
            // The hash saw other bytes than those opened: refused.
            let mut other = body.clone();
            other[HEADER_LEN + 7] ^= 1;
            let mut fresh = Opener::new(key, Protect::Authenticate);
            fresh.next = 3;
            fresh.stream_start().unwrap();
            fresh.stream_feed(&other, other.len()).unwrap();
            assert!(matches!(
                fresh.open(body.clone(), 2, u64::MAX, &pool),
                Err(AuthError::Forged)
            ));
        }
        let (h, p) = streamed.open(body, 2, u64::MAX, &pool).unwrap();
        assert_eq!((h.tag, p.as_ref()), (nonce, &payload[..]));
    }

    // An encrypting link has neither.
    let mut enc = Sealer::new(key, Protect::Encrypt);
    assert!(enc.begin(&data(0), 10).is_none());
    let mut enc = Opener::new(key, Protect::Encrypt);
    assert!(matches!(enc.begin(), Err(AuthError::EncryptedInPlace)));
}

#[test]
fn envelopes_open_once_in_order_and_unaltered() {
    let pool = Arc::new(BufferPool::new());
    for protect in [Protect::Authenticate, Protect::Encrypt] {
        let key = [7u8; 32];
        let (mut s, mut o) = (Sealer::new(key, protect), Opener::new(key, protect));
        let parts: [&[u8]; 2] = [b"hello ", b"world"];
        let a = s.seal(&data(9), &parts, &pool).unwrap();
        let a = wire(&a, &parts);
        assert_eq!(
            a.windows(5).any(|w| w == b"hello"),
            protect == Protect::Authenticate
        );
        let mut credit = Header::control(FrameType::Credit, 0, 1);
        credit.len = 4096;
        let b = wire(&s.seal(&credit, &[], &pool).unwrap(), &[]);
        let c = wire(&s.seal(&data(10), &[b"third"], &pool).unwrap(), &[b"third"]);

        // Out of order (the second first), a flipped bit anywhere, a
        // wrong key: refused, and the opener still expects the first.
        assert!(o.open(b.clone(), 2, 1 << 20, &pool).is_err());
        for i in [0, 33, 40, a.len() - 1] {
            let mut bad = a.clone();
            bad[i] ^= 1;
            assert!(
                o.open(bad, 2, 1 << 20, &pool).is_err(),
                "{protect:?} bit {i}"
            );
        }
        assert!(Opener::new([8u8; 32], protect)
            .open(a.clone(), 2, 1 << 20, &pool)
            .is_err());
        let (h, p) = o.open(a.clone(), 2, 1 << 20, &pool).unwrap();
        assert_eq!((h.tag, h.len, p.as_ref()), (9, 11, &b"hello world"[..]));
        // A replay of the first is refused; then the credit, in order.
        assert!(o.open(a, 2, 1 << 20, &pool).is_err());
        let (h, p) = o.open(b, 2, 1 << 20, &pool).unwrap();
        assert_eq!((h.ftype, h.len, p.len()), (FrameType::Credit, 4096, 0));
        let (h, p) = o.open(c, 2, 1 << 20, &pool).unwrap();
        assert_eq!((h.tag, p.as_ref()), (10, &b"third"[..]));
    }
}

#[test]
fn records_open_only_as_sealed() {
    let key = [1u8; 32];
    let r = seal_record(&key, 0, b"aad", b"secret").unwrap();
    assert_eq!(r.len(), 6 + TAG_LEN);
    assert_eq!(open_record(&key, 0, b"aad", &r).unwrap(), b"secret");
    assert!(open_record(&key, 1, b"aad", &r).is_err(), "another place");
    assert!(open_record(&key, 0, b"aaD", &r).is_err(), "another context");
    let mut bad = r.clone();
    bad[0] ^= 1;
    assert!(open_record(&key, 0, b"aad", &bad).is_err());
    assert!(open_record(&[2u8; 32], 0, b"aad", &r).is_err());
    assert!(open_record(&key, 0, b"aad", &r[..5]).is_err());
}

#[test]
fn a_dropped_envelope_is_noticed_by_the_next() {
    let pool = Arc::new(BufferPool::new());
    let key = [3u8; 32];
    let mut s = Sealer::new(key, Protect::Authenticate);
    let mut o = Opener::new(key, Protect::Authenticate);
    let _dropped = s.seal(&data(1), &[b"x"], &pool).unwrap();
    let next = wire(&s.seal(&data(2), &[b"y"], &pool).unwrap(), &[b"y"]);
    assert!(o.open(next, 2, 1 << 20, &pool).is_err());
}
