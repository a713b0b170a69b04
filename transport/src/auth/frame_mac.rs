//! The tag of authenticated frames (`seal.rs`): AEGISMAC-128X4, the MAC
//! of the AEGIS family (draft-irtf-cfrg-aegis-aead, "AEGIS as a Message
//! Authentication Code"), computed by libaegis through the `aegis` crate.
//!
//! Why AEGIS and not GMAC (the tag of protocol 11): AEGIS is built from
//! the AES round, which every server CPU runs in hardware and current
//! ones four blocks per instruction (VAES), with no carry-less multiply
//! in the way. On this machine's CPU (AMD EPYC, Zen 4) AEGISMAC-128X4
//! tags 55 GB/s on one core for a MiB in cache, against 24 for AWS-LC's
//! GMAC and 9 for BoringSSL's (`benches/mac.rs`; the numbers, and the
//! machine on which GMAC ran faster, are in `docs/benchmarks.md`). Four
//! ranks sharing two cores hash every byte of an all_reduce twice (sent
//! and received), so the MAC's speed is what a token costs there. A small
//! frame's tag costs about 0.13 µs (GMAC's 0.06): a key schedule per tag.
//!
//! The nonce is the frame's number on its direction of the link (never
//! repeated under a key: each direction has its own key, counted up from
//! 0), so the MAC is used as the draft requires of an AEAD's nonce too.
//! libaegis picks its implementation for the CPU at run time (VAES with
//! AVX-512 or AVX2, AES-NI, ARM's AES, or a constant-time software AES).

use aegis::aegis128x4::Aegis128X4Mac;

/// Bytes of a tag.
pub(crate) const MAC_TAG_LEN: usize = 16;
/// Bytes of a key.
pub(crate) const MAC_KEY_LEN: usize = 16;

/// A tag finished or fed without being started: a bug on this side.
#[derive(Debug, thiserror::Error)]
#[error("a frame tag {0} before it was started")]
pub struct MacError(&'static str);

/// One key's frame MAC, with the tag under way (if any).
pub struct FrameMac {
    key: [u8; MAC_KEY_LEN],
    open: Option<Aegis128X4Mac<MAC_TAG_LEN>>,
}

impl std::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameMac(AEGISMAC-128X4)")
    }
}

impl Drop for FrameMac {
    fn drop(&mut self) {
        // The key, wiped (volatile: a store to memory about to be freed
        // is otherwise dropped by the optimiser).
        for b in &mut self.key {
            // SAFETY: a valid, aligned byte of this value.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// The MAC's 16-byte nonce for frame `nonce`.
fn nonce_bytes(nonce: u64) -> [u8; 16] {
    let mut n = [0u8; 16];
    n[..8].copy_from_slice(&nonce.to_le_bytes());
    n
}

impl FrameMac {
    pub fn new(key: &[u8; MAC_KEY_LEN]) -> FrameMac {
        FrameMac {
            key: *key,
            open: None,
        }
    }

    /// The tag of `pieces`, in order, for frame `nonce` (never used twice
    /// with this key).
    pub fn tag<'a>(
        &mut self,
        nonce: u64,
        pieces: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<[u8; MAC_TAG_LEN], MacError> {
        // On the stack, not through `open`: the state (over a KiB) is not
        // moved in and out for a small frame's tag.
        self.open = None;
        let mut mac = Aegis128X4Mac::<MAC_TAG_LEN>::new_with_nonce(&self.key, &nonce_bytes(nonce));
        for p in pieces {
            mac.update(p);
        }
        Ok(mac.finalize())
    }

    /// Start the tag of frame `nonce` (never used twice with this key);
    /// what it covers follows through [`update`](Self::update), then
    /// [`finish`](Self::finish) gives it. Starting again abandons an
    /// unfinished tag.
    pub(crate) fn start(&mut self, nonce: u64) {
        self.open = Some(Aegis128X4Mac::new_with_nonce(
            &self.key,
            &nonce_bytes(nonce),
        ));
    }

    /// Cover `bytes` next.
    pub(crate) fn update(&mut self, bytes: &[u8]) -> Result<(), MacError> {
        self.open.as_mut().ok_or(MacError("fed"))?.update(bytes);
        Ok(())
    }

    /// The tag of everything covered since [`start`](Self::start).
    pub(crate) fn finish(&mut self) -> Result<[u8; MAC_TAG_LEN], MacError> {
        Ok(self.open.take().ok_or(MacError("finished"))?.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The draft's AEGISMAC-128X4 test vector (key, nonce, 35 bytes of
    /// data, 128-bit tag), through the nonce this module puts in the MAC's
    /// 16 bytes: the vector's nonce is frame number 0x20010, little-endian
    /// in the first eight bytes. The same tag again, and from pieces
    /// cut anywhere; another frame number, another tag.
    #[test]
    fn tags_match_the_drafts_vector_again_and_in_pieces() {
        let key: [u8; 16] = unhex("10010000000000000000000000000000")
            .try_into()
            .unwrap();
        assert_eq!(
            nonce_bytes(0x2_0010).to_vec(),
            unhex("10000200000000000000000000000000")
        );
        let data = unhex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122");
        let want = unhex("c45a98fd9ab8956ce616eb008cfe4e53");
        let mut m = FrameMac::new(&key);
        for _ in 0..2 {
            assert_eq!(m.tag(0x2_0010, [&data[..]]).unwrap().to_vec(), want);
        }
        for cut in 0..=data.len() {
            let (a, b) = data.split_at(cut);
            assert_eq!(m.tag(0x2_0010, [a, &[][..], b]).unwrap().to_vec(), want);
        }
        assert_ne!(m.tag(0x2_0011, [&data[..]]).unwrap().to_vec(), want);
    }

    /// A tag is started before it is fed or finished; finished once.
    #[test]
    fn a_tag_not_started_is_an_error_not_a_tag() {
        let mut m = FrameMac::new(&[3; 16]);
        assert!(m.update(b"x").is_err());
        assert!(m.finish().is_err());
        m.start(1);
        m.update(b"x").unwrap();
        m.finish().unwrap();
        assert!(m.finish().is_err(), "finished once");
    }
}
