//! Sealed payloads (`ENCRYPT_BULK`): every data frame's payload on a TCP
//! link becomes `nonce (8 B) ‖ AES-256-GCM ciphertext ‖ tag (16 B)`, with
//! the frame's header (carrying the plaintext length) as associated data.
//!
//! Each direction of a link has its own key, from the handshake
//! (`handshake::Keys`: HMAC of the token-derived key over both fresh
//! hellos), so only the two ends can read or forge a payload. Nonces count
//! up from 0 per direction and must arrive strictly increasing: a replayed,
//! reordered or altered payload is a protocol error that closes the link.
//! Sealing happens where the link's wire order is decided (under its
//! lock), so nonce order is wire order. Header-only control frames
//! (heartbeats, goodbyes, credits) are not sealed.

use crate::wire::Header;
use crate::BufferPool;
use boring::symm::{Cipher, Crypter, Mode};
use std::sync::Arc;

/// Bytes a sealed payload adds: nonce and tag.
pub(crate) const SEAL_OVERHEAD: usize = 8 + 16;

fn iv(nonce: u64) -> [u8; 12] {
    let mut iv = [0u8; 12];
    iv[4..].copy_from_slice(&nonce.to_le_bytes());
    iv
}

/// An AES-256-GCM cipher for payload `nonce` of a frame with header `h`
/// and `plain_len` plaintext bytes (the header, with that length, is the
/// associated data).
fn crypter(
    mode: Mode,
    key: &[u8; 32],
    nonce: u64,
    h: &Header,
    plain_len: usize,
) -> Result<Crypter, boring::error::ErrorStack> {
    let mut c = Crypter::new(Cipher::aes_256_gcm(), mode, key, Some(&iv(nonce)))?;
    let mut aad = *h;
    aad.len = plain_len as u64;
    c.aad_update(&aad.encode())?;
    Ok(c)
}

/// One direction's sealing side.
pub(crate) struct Sealer {
    key: [u8; 32],
    next: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealer(next {})", self.next)
    }
}

impl Sealer {
    pub(crate) fn new(key: [u8; 32]) -> Sealer {
        Sealer { key, next: 0 }
    }

    /// Seal the concatenation of `parts` for a frame with header `h`;
    /// `h.len` becomes the sealed length.
    pub(crate) fn seal(
        &mut self,
        h: &mut Header,
        parts: &[&[u8]],
        pool: &Arc<BufferPool>,
    ) -> Result<Vec<u8>, String> {
        let plain: usize = parts.iter().map(|p| p.len()).sum();
        let nonce = self.next;
        self.next += 1;
        let err = |e: boring::error::ErrorStack| format!("sealing: {e}");
        let mut c = crypter(Mode::Encrypt, &self.key, nonce, h, plain).map_err(err)?;
        // The cipher may write up to a block more than it is given.
        let mut out = pool.take_filled(plain + SEAL_OVERHEAD + 16);
        out[..8].copy_from_slice(&nonce.to_le_bytes());
        let mut at = 8;
        for p in parts {
            at += c.update(p, &mut out[at..]).map_err(err)?;
        }
        at += c.finalize(&mut out[at..]).map_err(err)?;
        c.get_tag(&mut out[at..at + 16]).map_err(err)?;
        out.truncate(at + 16);
        h.len = out.len() as u64;
        Ok(out)
    }
}

/// One direction's opening side.
pub(crate) struct Opener {
    key: [u8; 32],
    /// The nonce the next payload must exceed (none yet: any).
    last: Option<u64>,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Opener(last {:?})", self.last)
    }
}

impl Opener {
    pub(crate) fn new(key: [u8; 32]) -> Opener {
        Opener { key, last: None }
    }

    /// Open a sealed payload of a frame with header `h` (whose `len` is
    /// the sealed length; it becomes the plaintext length).
    pub(crate) fn open(
        &mut self,
        h: &mut Header,
        sealed: &[u8],
        pool: &Arc<BufferPool>,
    ) -> Result<Vec<u8>, String> {
        if sealed.len() < SEAL_OVERHEAD {
            return Err(format!("a sealed payload of {} bytes", sealed.len()));
        }
        let nonce = u64::from_le_bytes(sealed[..8].try_into().map_err(|_| "nonce")?);
        if self.last.is_some_and(|l| nonce <= l) {
            return Err(format!("payload nonce {nonce} replayed or out of order"));
        }
        let plain = sealed.len() - SEAL_OVERHEAD;
        let (body, tag) = sealed[8..].split_at(plain);
        let err = |e: boring::error::ErrorStack| format!("a payload that does not open: {e}");
        let mut c = crypter(Mode::Decrypt, &self.key, nonce, h, plain).map_err(err)?;
        c.set_tag(tag).map_err(err)?;
        let mut out = pool.take_filled(plain + 16);
        let mut at = c.update(body, &mut out).map_err(err)?;
        at += c.finalize(&mut out[at..]).map_err(err)?;
        out.truncate(at);
        self.last = Some(nonce);
        h.len = plain as u64;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::FrameType;

    #[test]
    fn sealed_payloads_open_once_in_order_and_unaltered() {
        let pool = Arc::new(BufferPool::new());
        let key = [7u8; 32];
        let (mut s, mut o) = (Sealer::new(key), Opener::new(key));
        let mut h = Header::control(FrameType::Data, 0, 1);
        h.tag = 9;
        let mut h1 = h;
        let a = s.seal(&mut h1, &[b"hello ", b"world"], &pool).unwrap();
        assert_eq!(h1.len as usize, 11 + SEAL_OVERHEAD);
        assert!(!a.windows(5).any(|w| w == b"hello"), "ciphertext");
        let mut h2 = h;
        let b = s.seal(&mut h2, &[b"again"], &pool).unwrap();

        let mut r1 = h1;
        assert_eq!(o.open(&mut r1, &a, &pool).unwrap(), b"hello world");
        assert_eq!(r1.len, 11);
        // A replay of the first is refused; the second opens.
        assert!(o.open(&mut h1.clone(), &a, &pool).is_err());
        let mut r2 = h2;
        assert_eq!(o.open(&mut r2, &b, &pool).unwrap(), b"again");

        // Altered ciphertext, altered header, wrong key: refused.
        let mut h3 = h;
        let c = s.seal(&mut h3, &[b"third"], &pool).unwrap();
        let mut bad = c.clone();
        bad[10] ^= 1;
        assert!(o.clone_fresh().open(&mut h3.clone(), &bad, &pool).is_err());
        let mut other_lane = h3;
        other_lane.tag = 10;
        assert!(o.clone_fresh().open(&mut other_lane, &c, &pool).is_err());
        assert!(Opener::new([8u8; 32])
            .open(&mut h3.clone(), &c, &pool)
            .is_err());
        assert!(o.open(&mut h3.clone(), &c, &pool).is_ok());
        assert!(o.open(&mut h3.clone(), &c[..10], &pool).is_err());
    }

    impl Opener {
        fn clone_fresh(&self) -> Opener {
            Opener {
                key: self.key,
                last: self.last,
            }
        }
    }
}
