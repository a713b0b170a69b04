//! The pieces of a secure round (`rounds.rs` runs the protocol): key
//! agreement, masks, threshold shares, share encryption and fixed point.
//!
//! - **Key agreement**: X25519 (BoringSSL's). Each worker makes two key
//!   pairs a round: one whose agreements seed the pairwise masks, one
//!   whose agreements key the encryption of its shares.
//! - **Masks**: BLAKE3's extendable output, keyed by a 32-byte seed, read
//!   as little-endian `u64`s and added modulo 2⁶⁴.
//! - **Threshold shares**: Shamir's scheme over the integers modulo the
//!   Mersenne prime 2⁶¹ − 1, a 32-byte secret cut into five chunks of at
//!   most 7 bytes; a worker's share is the polynomials' values at its
//!   rank.
//! - **Share encryption**: a BLAKE3 keystream and a BLAKE3 MAC over the
//!   ciphertext (encrypt then MAC), both keyed from the agreement, the
//!   round and the two ranks, so no key is used twice.
//! - **Fixed point**: `round(v · 2²⁴)` as a two's-complement `u64`; sums
//!   wrap as the masks do and come out exact.

use crate::error::{Error, Result};

/// The shares' field: integers modulo 2⁶¹ − 1.
const P: u64 = (1 << 61) - 1;

/// A secret's chunks (32 bytes in 7-byte pieces).
pub(crate) const CHUNKS: usize = 5;

/// One share: the chunks' polynomials at one point.
pub(crate) type Share = [u64; CHUNKS];

/// Bytes of an encrypted pair of shares (the mask key's and the self
/// mask's, `CHUNKS` `u64`s each), its MAC included.
pub(crate) const SEALED_LEN: usize = 2 * CHUNKS * 8 + 32;

/// Fixed point's scale: 2²⁴ (a step of about 6·10⁻⁸).
pub(crate) const SCALE: f64 = (1u64 << 24) as f64;

fn reduce(x: u128) -> u64 {
    let v = (x & u128::from(P)) + (x >> 61);
    let v = (v & u128::from(P)) + (v >> 61);
    let v = v as u64;
    if v >= P {
        v - P
    } else {
        v
    }
}

fn add(a: u64, b: u64) -> u64 {
    reduce(u128::from(a) + u128::from(b))
}

fn sub(a: u64, b: u64) -> u64 {
    reduce(u128::from(a) + u128::from(P - b % P))
}

fn mul(a: u64, b: u64) -> u64 {
    reduce(u128::from(a) * u128::from(b))
}

fn pow(mut a: u64, mut e: u64) -> u64 {
    let mut r = 1;
    while e > 0 {
        if e & 1 == 1 {
            r = mul(r, a);
        }
        a = mul(a, a);
        e >>= 1;
    }
    r
}

fn inverse(a: u64) -> u64 {
    pow(a, P - 2)
}

/// Random bytes from the operating system.
pub(crate) fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b)
        .map_err(|e| Error::InvalidArgument(format!("a secure round needs randomness: {e}")))?;
    Ok(b)
}

/// A uniformly random element of the field.
fn random_element() -> Result<u64> {
    loop {
        let v = u64::from_le_bytes(random::<8>()?) & P;
        if v < P {
            return Ok(v);
        }
    }
}

fn chunks(secret: &[u8; 32]) -> Share {
    let mut c = [0u64; CHUNKS];
    for (i, piece) in secret.chunks(7).enumerate() {
        let mut b = [0u8; 8];
        b[..piece.len()].copy_from_slice(piece);
        c[i] = u64::from_le_bytes(b);
    }
    c
}

/// Shares of `secret` at each of `points` (distinct, nonzero), any
/// `threshold` of which give it back, fewer nothing about it.
pub(crate) fn share(secret: &[u8; 32], points: &[u32], threshold: u32) -> Result<Vec<Share>> {
    let mut polys = Vec::with_capacity(CHUNKS);
    for c in chunks(secret) {
        let mut coeffs = vec![c];
        for _ in 1..threshold.max(1) {
            coeffs.push(random_element()?);
        }
        polys.push(coeffs);
    }
    Ok(points
        .iter()
        .map(|&x| {
            let mut s = [0u64; CHUNKS];
            for (out, coeffs) in s.iter_mut().zip(&polys) {
                *out = coeffs
                    .iter()
                    .rev()
                    .fold(0, |acc, &a| add(mul(acc, u64::from(x)), a));
            }
            s
        })
        .collect())
}

/// The secret from `threshold` shares (point, share), or `None` if they
/// do not make one (too few, a point twice, a share not in the field).
pub(crate) fn reconstruct(shares: &[(u32, Share)], threshold: u32) -> Option<[u8; 32]> {
    let used = shares.get(..threshold as usize)?;
    let mut out = [0u64; CHUNKS];
    for (i, &(xi, si)) in used.iter().enumerate() {
        let mut num = 1;
        let mut den = 1;
        for (j, &(xj, _)) in used.iter().enumerate() {
            if i != j {
                if xi == xj {
                    return None;
                }
                num = mul(num, u64::from(xj));
                den = mul(den, sub(u64::from(xj), u64::from(xi)));
            }
        }
        let l = mul(num, inverse(den));
        for (o, &s) in out.iter_mut().zip(&si) {
            if s >= P {
                return None;
            }
            *o = add(*o, mul(s, l));
        }
    }
    let mut secret = [0u8; 32];
    for (i, piece) in secret.chunks_mut(7).enumerate() {
        let bytes = out[i].to_le_bytes();
        // A chunk is at most 7 bytes (the last, 4): anything above is not
        // a secret these shares were made of.
        if bytes[piece.len()..].iter().any(|&b| b != 0) {
            return None;
        }
        piece.copy_from_slice(&bytes[..piece.len()]);
    }
    Some(secret)
}

/// An X25519 key pair.
pub(crate) struct KeyPair {
    pub public: [u8; 32],
    secret: [u8; 32],
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair").finish_non_exhaustive()
    }
}

impl Drop for KeyPair {
    fn drop(&mut self) {
        self.secret = [0; 32];
    }
}

impl KeyPair {
    pub(crate) fn generate() -> KeyPair {
        let (mut public, mut secret) = ([0u8; 32], [0u8; 32]);
        // SAFETY: both buffers are the 32 bytes X25519_keypair writes.
        unsafe { boring_sys::X25519_keypair(public.as_mut_ptr(), secret.as_mut_ptr()) };
        KeyPair { public, secret }
    }

    /// The pair whose secret half is `secret` (one reconstructed from
    /// shares).
    pub(crate) fn from_secret(secret: [u8; 32]) -> KeyPair {
        KeyPair {
            public: [0; 32],
            secret,
        }
    }

    pub(crate) fn secret(&self) -> &[u8; 32] {
        &self.secret
    }

    /// The agreement with `peer`'s public key; `None` for a key that
    /// makes none (a point of small order).
    pub(crate) fn agree(&self, peer: &[u8; 32]) -> Option<[u8; 32]> {
        let mut out = [0u8; 32];
        // SAFETY: three 32-byte buffers, as X25519 reads and writes.
        let ok =
            unsafe { boring_sys::X25519(out.as_mut_ptr(), self.secret.as_ptr(), peer.as_ptr()) };
        (ok == 1).then_some(out)
    }
}

/// The seed of the mask a pair of workers shares in `round`, from their
/// agreement.
pub(crate) fn pair_seed(agreement: &[u8; 32], round: u64) -> [u8; 32] {
    let mut material = agreement.to_vec();
    material.extend_from_slice(&round.to_le_bytes());
    blake3::derive_key("meshwork 2026 secure round pairwise mask", &material)
}

/// Add (`sign` +1) or take away (−1) the mask `seed` expands to.
pub(crate) fn apply_mask(acc: &mut [u64], seed: &[u8; 32], sign: i8) {
    let mut xof = blake3::Hasher::new_keyed(seed).finalize_xof();
    let mut buf = [0u8; 4096];
    for block in acc.chunks_mut(buf.len() / 8) {
        let bytes = &mut buf[..block.len() * 8];
        xof.fill(bytes);
        for (a, m) in block.iter_mut().zip(bytes.chunks_exact(8)) {
            let m = u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]]);
            *a = if sign >= 0 {
                a.wrapping_add(m)
            } else {
                a.wrapping_sub(m)
            };
        }
    }
}

/// The keys sealing what `from` sends `to` in `round`.
fn share_keys(agreement: &[u8; 32], round: u64, from: u32, to: u32) -> ([u8; 32], [u8; 32]) {
    let mut material = agreement.to_vec();
    material.extend_from_slice(&round.to_le_bytes());
    material.extend_from_slice(&from.to_le_bytes());
    material.extend_from_slice(&to.to_le_bytes());
    (
        blake3::derive_key("meshwork 2026 secure round share cipher", &material),
        blake3::derive_key("meshwork 2026 secure round share mac", &material),
    )
}

/// `from`'s two shares for `to`, sealed.
pub(crate) fn seal(
    agreement: &[u8; 32],
    round: u64,
    from: u32,
    to: u32,
    shares: (&Share, &Share),
) -> Vec<u8> {
    let (cipher, mac) = share_keys(agreement, round, from, to);
    let mut out: Vec<u8> = shares
        .0
        .iter()
        .chain(shares.1)
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut stream = vec![0u8; out.len()];
    blake3::Hasher::new_keyed(&cipher)
        .finalize_xof()
        .fill(&mut stream);
    out.iter_mut().zip(&stream).for_each(|(o, s)| *o ^= s);
    let tag = blake3::keyed_hash(&mac, &out);
    out.extend_from_slice(tag.as_bytes());
    out
}

/// [`seal`]'s shares back, or `None` if `sealed` is not what `from` sent
/// `to` in `round` under this agreement.
pub(crate) fn open(
    agreement: &[u8; 32],
    round: u64,
    from: u32,
    to: u32,
    sealed: &[u8],
) -> Option<(Share, Share)> {
    if sealed.len() != SEALED_LEN {
        return None;
    }
    let (cipher, mac) = share_keys(agreement, round, from, to);
    let (body, tag) = sealed.split_at(SEALED_LEN - 32);
    // Constant time: blake3's Hash compares so.
    if blake3::keyed_hash(&mac, body) != blake3::Hash::from_bytes(tag.try_into().ok()?) {
        return None;
    }
    let mut plain = body.to_vec();
    let mut stream = vec![0u8; plain.len()];
    blake3::Hasher::new_keyed(&cipher)
        .finalize_xof()
        .fill(&mut stream);
    plain.iter_mut().zip(&stream).for_each(|(o, s)| *o ^= s);
    let mut words = plain
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    let mut a = [0u64; CHUNKS];
    let mut b = [0u64; CHUNKS];
    a.iter_mut()
        .chain(b.iter_mut())
        .for_each(|v| *v = words.next().unwrap_or(0));
    Some((a, b))
}

/// `v` in fixed point.
pub(crate) fn encode(v: f64) -> u64 {
    (v * SCALE).round() as i64 as u64
}

/// A fixed-point sum back.
pub(crate) fn decode(v: u64) -> f64 {
    v as i64 as f64 / SCALE
}

/// The largest magnitude a value may have in a secure round of `n`
/// workers: their sum stays inside fixed point's range.
pub(crate) fn limit(n: usize) -> f64 {
    (1u64 << 62) as f64 / SCALE / n.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_threshold_of_shares_gives_the_secret_back() {
        let secret: [u8; 32] = std::array::from_fn(|i| (i * 37 + 5) as u8);
        let points: Vec<u32> = (1..=9).collect();
        let shares = share(&secret, &points, 4).unwrap();
        let all: Vec<(u32, Share)> = points.iter().copied().zip(shares).collect();
        for pick in [[0, 1, 2, 3], [8, 2, 5, 6], [7, 6, 4, 0]] {
            let got: Vec<(u32, Share)> = pick.iter().map(|&i| all[i]).collect();
            assert_eq!(reconstruct(&got, 4), Some(secret));
        }
        // Too few, a point twice: nothing (or not the secret).
        assert_eq!(reconstruct(&all[..3], 4), None);
        let twice = vec![all[0], all[0], all[1], all[2]];
        assert_eq!(reconstruct(&twice, 4), None);
        assert_ne!(reconstruct(&all[..3], 3), Some(secret));
    }

    #[test]
    fn the_field_is_arithmetic_modulo_its_prime() {
        for a in [0, 1, 2, P - 1, 1 << 60, 12_345_678_901] {
            if a != 0 {
                assert_eq!(mul(a, inverse(a)), 1, "{a}");
            }
            assert_eq!(sub(add(a, 7), 7), a);
            assert_eq!(mul(a, P - 1), sub(0, a));
        }
    }

    #[test]
    fn sealed_shares_open_only_for_their_pair_and_round() {
        let (a, b) = (KeyPair::generate(), KeyPair::generate());
        let k = a.agree(&b.public).unwrap();
        assert_eq!(Some(k), b.agree(&a.public));
        let (s1, s2) = ([1, 2, 3, 4, 5], [6, 7, 8, 9, P - 1]);
        let sealed = seal(&k, 3, 1, 2, (&s1, &s2));
        assert_eq!(sealed.len(), SEALED_LEN);
        assert_eq!(open(&k, 3, 1, 2, &sealed), Some((s1, s2)));
        assert_eq!(open(&k, 4, 1, 2, &sealed), None);
        assert_eq!(open(&k, 3, 2, 1, &sealed), None);
        let mut bent = sealed.clone();
        bent[0] ^= 1;
        assert_eq!(open(&k, 3, 1, 2, &bent), None);
        assert_eq!(
            a.agree(&[0; 32]),
            None,
            "a point of small order agrees nothing"
        );
    }

    #[test]
    fn masks_cancel_and_fixed_point_sums_exactly() {
        let seed = [7u8; 32];
        let mut acc = vec![encode(1.5), encode(-2.25), encode(0.0)];
        apply_mask(&mut acc, &seed, 1);
        assert_ne!(acc[0], encode(1.5));
        apply_mask(&mut acc, &seed, -1);
        let sum = acc.iter().fold(0u64, |s, &v| s.wrapping_add(v));
        assert_eq!(decode(sum), -0.75);
    }
}
