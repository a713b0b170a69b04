//! Authenticated frames on TCP links: whenever a cluster token is set,
//! every frame a TCP link carries — data, heartbeat, goodbye, credit,
//! peer-gone; the TCP transport's and QUIC's sidecar alike — travels in an
//! envelope that only holders of the link's keys can make:
//!
//! ```text
//! outer header (40 B, framing only: a data frame of len = 40 + n + 16)
//! inner header (40 B, the frame's own)  ─┐ authenticated
//! payload      (n B, data frames only)   │ (encrypted with ENCRYPT_BULK)
//! tag          (16 B)                   ─┘
//! ```
//!
//! The tag is keyed by the link's key for that direction
//! (`handshake::Keys`: from the token and both fresh hellos, so beyond
//! anyone without the token; a token holder who recorded the hellos can
//! derive them) over a nonce that counts up from 0 and never travels:
//! each side knows which frame comes next, so a frame altered, inserted,
//! dropped, replayed or reordered fails its tag. By default the inner
//! header and the payload are authenticated and travel in clear: the tag
//! is AEGISMAC-128X4's over `inner header ‖ payload`, with the nonce as
//! its nonce, under a key derived from the link's (`frame_mac.rs`; hashed
//! where the bytes lie, without a copy; 55 GB/s on one core here, against
//! 24 for AWS-LC's GMAC, the tag until protocol 11, and 6.5 for keyed
//! BLAKE3, before it, which matters on loopback and fast networks: see
//! `benches/mac.rs`). A frame from 1 MiB is tagged piece by
//! piece as the TCP link writes it, and checked as it is read (`Tagging`,
//! `Checking`, `Opener::stream_start`). With `ENCRYPT_BULK` the tag is AES-256-GCM's, the inner
//! header its associated data and the payload its plaintext, so the
//! payload is also secret. The outer header is only framing: what it says
//! is acted on only after the envelope opens, and then only as the inner
//! header says.
//!
//! A receiver acts on nothing before the tag verifies; a tag that fails
//! closes the link. Sealing happens where the link's wire order is decided
//! (under its lock), so nonce order is wire order.

use super::frame_mac::{FrameMac, MacError, MAC_KEY_LEN};
use crate::wire::frame::FrameError;
use crate::wire::{FrameType, Header, HEADER_LEN};
use crate::{BufferPool, LaneKind, Payload};
use boring::error::ErrorStack;
use boring::symm::{Cipher, Crypter, Mode};
use std::sync::Arc;

/// Bytes of a tag.
pub(crate) const TAG_LEN: usize = 16;
/// Bytes an envelope adds to a frame: the outer header and the tag.
pub(crate) const SEAL_OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// Why this side could not seal a frame or a record: a failure here,
/// never the peer's doing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SealError {
    /// A control frame handed over with a payload (a bug on this side:
    /// only data frames carry one).
    #[error("sealing: a {0:?} frame with a payload")]
    PayloadOnControl(FrameType),
    /// AES-256-GCM failed in BoringSSL while sealing.
    #[error("sealing: {0}")]
    Crypto(ErrorStack),
    /// The frame MAC was used out of order while tagging (a bug here).
    #[error("sealing: {0}")]
    Tag(MacError),
}

/// Why an envelope (or a sealed record) does not open. Every variant but
/// the last three says what the peer, or whoever sits between, sent:
/// nothing of it may be acted on, and a link closes over it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// An envelope too short to hold a frame header and a tag.
    #[error("an envelope of {len} bytes (a header and a tag need {})", HEADER_LEN + TAG_LEN)]
    ShortEnvelope { len: usize },
    /// A tag that does not verify: the envelope was altered, inserted,
    /// replayed, reordered, sealed under another key, or one before it
    /// was dropped.
    #[error("a frame that fails authentication")]
    Forged,
    /// AES-256-GCM refused to open the envelope (the same causes as
    /// [`Forged`](Self::Forged), as BoringSSL reports them).
    #[error("a frame that fails authentication ({0})")]
    ForgedCipher(ErrorStack),
    /// An authentic envelope whose frame header is malformed: the peer
    /// itself sent it.
    #[error("an authentic frame with a malformed header: {0}")]
    BadHeader(FrameError),
    /// An authentic envelope whose payload is not the length its header
    /// says (a control frame carries none).
    #[error("an envelope of {carried} payload bytes for a frame of {claimed}")]
    LengthMismatch { carried: usize, claimed: u64 },
    /// A sealed record too short to hold its tag.
    #[error("a sealed record of {len} bytes (its tag alone is {TAG_LEN})")]
    ShortRecord { len: usize },
    /// A sealed record that does not open: altered, sealed under another
    /// key, or for another place or context.
    #[error("a record that does not open ({0})")]
    ForgedRecord(ErrorStack),
    /// AES-256-GCM could not be set up here to open it (this side's
    /// failure, not the peer's).
    #[error("opening: {0}")]
    Crypto(ErrorStack),
    /// The frame MAC was used out of order while checking a tag (a bug
    /// on this side).
    #[error("opening: {0}")]
    Tag(MacError),
    /// An encrypted envelope checked where it lies ([`Opener::begin`]; a
    /// bug on this side: only authenticated envelopes can be).
    #[error("an encrypted envelope opened in place")]
    EncryptedInPlace,
}

/// What a link's envelopes protect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protect {
    /// Integrity: headers and payloads authenticated (AEGISMAC), payloads
    /// in clear.
    Authenticate,
    /// Integrity and secrecy of payloads (`ENCRYPT_BULK`).
    Encrypt,
}

fn iv(nonce: u64) -> [u8; 12] {
    let mut iv = [0u8; 12];
    iv[4..].copy_from_slice(&nonce.to_le_bytes());
    iv
}

/// The MAC of a direction's authenticated envelopes, under a key derived
/// from its link key (so that one key never serves two constructions:
/// `ENCRYPT_BULK` uses the link key itself).
fn tagger(key: &[u8; 32]) -> FrameMac {
    let derived = blake3::derive_key("meshwork frame tag AEGISMAC-128X4 v1", key);
    let mut k = [0u8; MAC_KEY_LEN];
    k.copy_from_slice(&derived[..MAC_KEY_LEN]);
    FrameMac::new(&k)
}

/// The tag of envelope `nonce`: AEGISMAC over its inner header, then the
/// payload in `parts`, hashed where the bytes lie. The nonce is never
/// repeated under one key: each direction of a link has its own, counted
/// up from 0.
fn mac(
    tagger: &mut FrameMac,
    nonce: u64,
    inner: &[u8],
    parts: &[&[u8]],
) -> Result<[u8; TAG_LEN], MacError> {
    tagger.tag(nonce, std::iter::once(inner).chain(parts.iter().copied()))
}

/// Whether two tags are equal, in time independent of where they differ.
fn same_tag(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn crypter(mode: Mode, key: &[u8; 32], nonce: u64) -> Result<Crypter, ErrorStack> {
    Crypter::new(Cipher::aes_256_gcm(), mode, key, Some(&iv(nonce)))
}

/// A frame in its envelope, ready for the wire: `head` (outer and inner
/// header), then `cipher` if encrypted, else the payload as given, then
/// `tag`.
#[derive(Debug)]
pub(crate) struct Envelope {
    pub head: [u8; 2 * HEADER_LEN],
    pub cipher: Option<Vec<u8>>,
    pub tag: [u8; TAG_LEN],
}

impl Envelope {
    /// The outer header (what a queue item's header is).
    pub(crate) fn outer(&self) -> [u8; HEADER_LEN] {
        let mut o = [0u8; HEADER_LEN];
        o.copy_from_slice(&self.head[..HEADER_LEN]);
        o
    }

    /// Its bytes on the wire, in order (`parts`: the payload it was
    /// sealed over, which goes as it is unless encrypted).
    pub(crate) fn pieces<'a>(
        &'a self,
        parts: &'a [&'a [u8]],
    ) -> impl Iterator<Item = &'a [u8]> + Clone {
        std::iter::once(&self.head[..HEADER_LEN]).chain(self.after_outer(parts))
    }

    /// Its bytes after the outer header.
    fn after_outer<'a>(&'a self, parts: &'a [&'a [u8]]) -> impl Iterator<Item = &'a [u8]> + Clone {
        let plain: &[&[u8]] = if self.cipher.is_some() { &[] } else { parts };
        std::iter::once(&self.head[HEADER_LEN..])
            .chain(self.cipher.as_deref())
            .chain(plain.iter().copied())
            .chain(std::iter::once(&self.tag[..]))
            .filter(|p| !p.is_empty())
    }

    /// The bytes after the outer header, copied into one buffer (for a
    /// frame that waits in a queue behind its outer header).
    pub(crate) fn rest_in(&self, parts: &[&[u8]], pool: &Arc<BufferPool>) -> Payload {
        let all: Vec<&[u8]> = self.after_outer(parts).collect();
        Payload::from_parts_in(&all, Some(pool))
    }
}

/// The outer and inner headers of frame `h` carrying `n` payload bytes.
fn heads(h: &Header, n: usize) -> Result<[u8; 2 * HEADER_LEN], SealError> {
    let mut inner = *h;
    if h.ftype == FrameType::Data {
        inner.len = n as u64;
    } else if n != 0 {
        return Err(SealError::PayloadOnControl(h.ftype));
    }
    let outer = Header {
        ftype: FrameType::Data,
        kind: LaneKind::Control,
        src: h.src,
        dst: h.dst,
        comm: 0,
        tag: 0,
        len: (HEADER_LEN + n + TAG_LEN) as u64,
        aux: 0,
        seq: 0,
    };
    let mut head = [0u8; 2 * HEADER_LEN];
    head[..HEADER_LEN].copy_from_slice(&outer.encode());
    head[HEADER_LEN..].copy_from_slice(&inner.encode());
    Ok(head)
}

/// How a direction's envelopes are made and opened.
enum Keyed {
    /// Tagged (`Protect::Authenticate`); boxed, as the MAC's state under
    /// way is over a KiB.
    Tag(Box<FrameMac>),
    /// Encrypted under the link key (`Protect::Encrypt`).
    Encrypt([u8; 32]),
}

impl Keyed {
    fn new(key: [u8; 32], protect: Protect) -> Keyed {
        match protect {
            Protect::Authenticate => Keyed::Tag(Box::new(tagger(&key))),
            Protect::Encrypt => Keyed::Encrypt(key),
        }
    }

    fn protect(&self) -> Protect {
        match self {
            Keyed::Tag(_) => Protect::Authenticate,
            Keyed::Encrypt(_) => Protect::Encrypt,
        }
    }
}

/// One direction's sealing side.
pub(crate) struct Sealer {
    keyed: Keyed,
    next: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealer({:?}, next {})", self.keyed.protect(), self.next)
    }
}

impl Sealer {
    pub(crate) fn new(key: [u8; 32], protect: Protect) -> Sealer {
        Sealer {
            keyed: Keyed::new(key, protect),
            next: 0,
        }
    }

    /// The envelope of frame `h` whose payload is the concatenation of
    /// `parts` (none for a control frame; a data frame's `h.len` is set to
    /// their length). The nonce is spent only if sealing succeeds.
    pub(crate) fn seal(
        &mut self,
        h: &Header,
        parts: &[&[u8]],
        pool: &Arc<BufferPool>,
    ) -> Result<Envelope, SealError> {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        let head = heads(h, n)?;
        let (cipher, tag) = match &mut self.keyed {
            Keyed::Tag(tagger) => {
                let tag = mac(tagger, self.next, &head[HEADER_LEN..], parts);
                (None, tag.map_err(SealError::Tag)?)
            }
            Keyed::Encrypt(key) => {
                let err = SealError::Crypto;
                let mut c = crypter(Mode::Encrypt, key, self.next).map_err(err)?;
                c.aad_update(&head[HEADER_LEN..]).map_err(err)?;
                // The cipher may write up to a block more than it is given.
                let mut out = pool.take_filled(n + 16);
                let mut at = 0;
                for p in parts {
                    at += c.update(p, &mut out[at..]).map_err(err)?;
                }
                at += c.finalize(&mut out[at..]).map_err(err)?;
                out.truncate(at);
                let mut tag = [0u8; TAG_LEN];
                c.get_tag(&mut tag).map_err(err)?;
                (Some(out), tag)
            }
        };
        self.next += 1;
        Ok(Envelope { head, cipher, tag })
    }
}

impl Sealer {
    /// On an authenticating link, frame `h` with an `n`-byte payload
    /// sealed as it goes out: its outer and inner headers, and the tag
    /// under way, through which the payload must then pass, in order,
    /// before [`Tagging::finish`] gives the tag that follows it. The nonce
    /// is spent: the caller writes the frame or ends the link. `None` on
    /// an encrypting link.
    pub(crate) fn begin(
        &mut self,
        h: &Header,
        n: usize,
    ) -> Option<Result<([u8; 2 * HEADER_LEN], Tagging<'_>), SealError>> {
        let Keyed::Tag(tagger) = &mut self.keyed else {
            return None;
        };
        let head = match heads(h, n) {
            Ok(head) => head,
            Err(e) => return Some(Err(e)),
        };
        tagger.start(self.next);
        if let Err(e) = tagger.update(&head[HEADER_LEN..]) {
            return Some(Err(SealError::Tag(e)));
        }
        self.next += 1;
        Some(Ok((head, Tagging { tagger })))
    }
}

/// A frame's tag under way on the sending side (see [`Sealer::begin`]).
pub(crate) struct Tagging<'a> {
    tagger: &'a mut FrameMac,
}

impl Tagging<'_> {
    /// The next bytes of the payload.
    pub(crate) fn update(&mut self, bytes: &[u8]) -> Result<(), SealError> {
        self.tagger.update(bytes).map_err(SealError::Tag)
    }

    /// The tag, to follow the payload on the wire.
    pub(crate) fn finish(self) -> Result<[u8; TAG_LEN], SealError> {
        self.tagger.finish().map_err(SealError::Tag)
    }
}

/// One direction's opening side.
pub(crate) struct Opener {
    keyed: Keyed,
    next: u64,
    /// Bytes of envelope `next` hashed so far as they arrived
    /// ([`stream_start`](Self::stream_start)), if it is being hashed so.
    streamed: Option<usize>,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Opener({:?}, next {})", self.keyed.protect(), self.next)
    }
}

impl Opener {
    pub(crate) fn new(key: [u8; 32], protect: Protect) -> Opener {
        Opener {
            keyed: Keyed::new(key, protect),
            next: 0,
            streamed: None,
        }
    }

    /// Open the body of an envelope (what follows its outer header): the
    /// frame's own header and payload, or why it does not open. Nothing
    /// of it may be acted on before this returns `Ok`.
    pub(crate) fn open(
        &mut self,
        mut body: Vec<u8>,
        world: u32,
        max_len: u64,
        pool: &Arc<BufferPool>,
    ) -> Result<(Header, Payload), AuthError> {
        if body.len() < HEADER_LEN + TAG_LEN {
            return Err(AuthError::ShortEnvelope { len: body.len() });
        }
        let n = body.len() - HEADER_LEN - TAG_LEN;
        let Some((inner, rest)) = body.split_first_chunk::<HEADER_LEN>() else {
            return Err(AuthError::ShortEnvelope { len: body.len() });
        };
        let (payload, tag) = rest.split_at(n);
        let err = AuthError::ForgedCipher;
        let streamed = self.streamed.take();
        let plain = match &mut self.keyed {
            Keyed::Tag(tagger) => {
                let want = if streamed == Some(HEADER_LEN + n) {
                    // Hashed as it arrived, all of it.
                    tagger.finish()
                } else {
                    mac(tagger, self.next, inner, &[payload])
                };
                let want = want.map_err(AuthError::Tag)?;
                if !same_tag(&want, tag) {
                    return Err(AuthError::Forged);
                }
                None
            }
            Keyed::Encrypt(key) => {
                let mut c = crypter(Mode::Decrypt, key, self.next).map_err(AuthError::Crypto)?;
                c.aad_update(inner).map_err(err)?;
                c.set_tag(tag).map_err(err)?;
                let mut out = pool.take_filled(n + 16);
                let mut at = c.update(payload, &mut out).map_err(err)?;
                at += c.finalize(&mut out[at..]).map_err(err)?;
                out.truncate(at);
                Some(out)
            }
        };
        // Authentic from here on.
        self.next += 1;
        let h = authentic_header(inner, n, world, max_len)?;
        let payload = match plain {
            Some(p) => {
                pool.give(body);
                Payload::from_vec_in(p, Some(pool))
            }
            None => {
                body.truncate(HEADER_LEN + n);
                let mut p = Payload::from_vec_in(body, Some(pool));
                p.advance(HEADER_LEN);
                p
            }
        };
        Ok((h, payload))
    }
}

impl Opener {
    /// Whether this link's envelopes can be checked where their payload
    /// lies (authenticated, not encrypted), for [`begin`](Self::begin).
    pub(crate) fn in_place(&self) -> bool {
        matches!(self.keyed, Keyed::Tag(_))
    }

    /// Start hashing the next envelope as its body (what follows its outer
    /// header) is assembled, so that [`open`](Self::open) only finishes
    /// the tag: called when its body starts, then
    /// [`stream_feed`](Self::stream_feed) after every read. Only on
    /// [`in_place`](Self::in_place) links (elsewhere it does nothing).
    /// Whatever was hashed before is abandoned.
    pub(crate) fn stream_start(&mut self) -> Result<(), AuthError> {
        self.streamed = None;
        if let Keyed::Tag(tagger) = &mut self.keyed {
            tagger.start(self.next);
            self.streamed = Some(0);
        }
        Ok(())
    }

    /// The envelope's body as read so far, `read` of `total` bytes (the
    /// tag included): what of it is new and before the tag is hashed.
    pub(crate) fn stream_feed(&mut self, read: &[u8], total: usize) -> Result<(), AuthError> {
        let (Some(fed), Keyed::Tag(tagger)) = (self.streamed, &mut self.keyed) else {
            return Ok(());
        };
        let covered = read.len().min(total.saturating_sub(TAG_LEN));
        if covered > fed {
            tagger.update(&read[fed..covered]).map_err(AuthError::Tag)?;
            self.streamed = Some(covered);
        }
        Ok(())
    }

    /// Start checking the next envelope's tag while its bytes arrive
    /// (only on [`in_place`](Self::in_place) links): every byte after the
    /// outer header up to the tag goes through [`Checking::update`], in
    /// wire order, then [`Checking::finish`] checks the tag. Abandoning it
    /// spends nothing: the envelope can still be opened afterwards.
    pub(crate) fn begin(&mut self) -> Result<Checking<'_>, AuthError> {
        self.streamed = None;
        let Keyed::Tag(tagger) = &mut self.keyed else {
            return Err(AuthError::EncryptedInPlace);
        };
        tagger.start(self.next);
        Ok(Checking {
            tagger,
            next: &mut self.next,
        })
    }
}

/// An envelope's tag being checked as its bytes arrive (see
/// [`Opener::begin`]).
pub(crate) struct Checking<'a> {
    tagger: &'a mut FrameMac,
    next: &'a mut u64,
}

impl Checking<'_> {
    /// The envelope's next bytes (its inner header first, then its
    /// payload).
    pub(crate) fn update(&mut self, bytes: &[u8]) -> Result<(), AuthError> {
        self.tagger.update(bytes).map_err(AuthError::Tag)
    }

    /// Whether `tag` is the tag of what was covered, which was the frame
    /// header `inner` and an `n`-byte payload: the frame's header,
    /// authentic from here on, or why not. Nothing may be acted on
    /// before `Ok`.
    pub(crate) fn finish(
        self,
        inner: &[u8; HEADER_LEN],
        n: usize,
        tag: &[u8],
        world: u32,
        max_len: u64,
    ) -> Result<Header, AuthError> {
        let want = self.tagger.finish().map_err(AuthError::Tag)?;
        if !same_tag(&want, tag) {
            return Err(AuthError::Forged);
        }
        // Authentic from here on.
        *self.next += 1;
        authentic_header(inner, n, world, max_len)
    }
}

/// The header of an authentic envelope that carried `n` payload bytes,
/// if it is well formed and says that length (a control frame, none).
fn authentic_header(
    inner: &[u8; HEADER_LEN],
    n: usize,
    world: u32,
    max_len: u64,
) -> Result<Header, AuthError> {
    let h = Header::decode(inner, world, max_len).map_err(AuthError::BadHeader)?;
    let claimed = if h.ftype == FrameType::Data { h.len } else { 0 };
    if claimed != n as u64 {
        return Err(AuthError::LengthMismatch {
            carried: n,
            claimed,
        });
    }
    Ok(h)
}

/// One AES-256-GCM record outside a link (the seed's welcome and what
/// follows it): `ciphertext ‖ tag` of `plain` under `key` and record
/// number `nonce` (each used once per key), with `aad` authenticated.
pub(crate) fn seal_record(
    key: &[u8; 32],
    nonce: u64,
    aad: &[u8],
    plain: &[u8],
) -> Result<Vec<u8>, SealError> {
    let err = SealError::Crypto;
    let mut c = crypter(Mode::Encrypt, key, nonce).map_err(err)?;
    c.aad_update(aad).map_err(err)?;
    let mut out = vec![0u8; plain.len() + 16 + TAG_LEN];
    let mut at = c.update(plain, &mut out).map_err(err)?;
    at += c.finalize(&mut out[at..]).map_err(err)?;
    c.get_tag(&mut out[at..at + TAG_LEN]).map_err(err)?;
    out.truncate(at + TAG_LEN);
    Ok(out)
}

/// The plaintext of a record made by [`seal_record`] with the same key,
/// nonce and `aad`, or why not (altered, another key, another place).
pub(crate) fn open_record(
    key: &[u8; 32],
    nonce: u64,
    aad: &[u8],
    sealed: &[u8],
) -> Result<Vec<u8>, AuthError> {
    if sealed.len() < TAG_LEN {
        return Err(AuthError::ShortRecord { len: sealed.len() });
    }
    let (body, tag) = sealed.split_at(sealed.len() - TAG_LEN);
    let err = AuthError::ForgedRecord;
    let mut c = crypter(Mode::Decrypt, key, nonce).map_err(AuthError::Crypto)?;
    c.aad_update(aad).map_err(err)?;
    c.set_tag(tag).map_err(err)?;
    let mut out = vec![0u8; body.len() + 16];
    let mut at = c.update(body, &mut out).map_err(err)?;
    at += c.finalize(&mut out[at..]).map_err(err)?;
    out.truncate(at);
    Ok(out)
}

#[cfg(test)]
#[path = "seal_tests.rs"]
mod tests;
