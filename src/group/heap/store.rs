//! A heap's words, and the same-host peers' heaps mapped here.
//!
//! A rank whose group has same-host peers (shared-memory links) keeps its
//! heap in a shared region (`SharedRegion`: a sealed memfd); when the
//! group forms, every rank checks every heap's size (the heap check's
//! all-gather) and offers its region to each same-host peer over their
//! own link, bound to that peer's challenge (`share.rs`), and each maps
//! its same-host peers'. An operation on a mapped peer's heap is then
//! this process's own load, store or atomic instruction on the peer's
//! memory: no message, and no thread of the target's. Atomics stay
//! linearizable (they are the same hardware atomics on the same memory,
//! whoever issues them). Anything not mapped (another host, a region that
//! cannot be made, or is not bound to this rank's challenge) is reached
//! by messages.

use super::super::GroupInner;
use super::Refusal;
use meshwork_transport::SharedRegion;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A rank's heap: its own, or a same-host peer's mapped here.
pub(crate) struct Heap {
    words: Words,
    len: usize,
}

/// Where a heap's words are.
enum Words {
    /// This process's memory, reached by others through messages.
    Private(Box<[AtomicU64]>),
    /// A region same-host peers map (this rank's own, or a peer's).
    Shared(SharedRegion),
}

impl Heap {
    /// A zeroed heap of `len` bytes in this process's memory; `None` if it
    /// cannot be allocated.
    pub(crate) fn new(len: usize) -> Option<Arc<Heap>> {
        let n = len.div_ceil(8);
        let mut words = Vec::new();
        words.try_reserve_exact(n).ok()?;
        words.extend((0..n).map(|_| AtomicU64::new(0)));
        Some(Arc::new(Heap {
            words: Words::Private(words.into_boxed_slice()),
            len,
        }))
    }

    /// A zeroed heap of `len` bytes that same-host peers can map, bound
    /// to `binding` (`share.rs`); in this process's memory if no shared
    /// region can be made.
    pub(crate) fn new_shared(len: usize, binding: &[u8]) -> Option<Arc<Heap>> {
        match SharedRegion::create(len.div_ceil(8), binding) {
            Ok(region) => Some(Arc::new(Heap {
                words: Words::Shared(region),
                len,
            })),
            Err(e) => {
                tracing::debug!("the heap is not shared with same-host peers: {e}");
                Heap::new(len)
            }
        }
    }

    /// Same-host rank `peer`'s heap of `len` bytes, offered at `at` (its
    /// process id and descriptor) bound to `binding`; `None` if it is not
    /// such a region (then it is reached by messages).
    pub(super) fn map(peer: u32, at: (u32, u32), len: usize, binding: &[u8]) -> Option<Arc<Heap>> {
        match SharedRegion::open(at, len.div_ceil(8), binding) {
            Ok(region) => Some(Arc::new(Heap {
                words: Words::Shared(region),
                len,
            })),
            Err(e) => {
                tracing::warn!(
                    peer,
                    "rank {peer}'s heap cannot be mapped (/proc/{}/fd/{}: {e}); it is reached by messages",
                    at.0,
                    at.1
                );
                None
            }
        }
    }

    /// Where same-host peers open this heap, if they still can.
    pub(super) fn locator(&self) -> Option<(u32, u32)> {
        match &self.words {
            Words::Shared(r) => r.locator(),
            Words::Private(_) => None,
        }
    }

    /// Its peers have mapped it: nothing else may open it.
    pub(super) fn withdraw(&self) {
        if let Words::Shared(r) = &self.words {
            r.withdraw();
        }
    }

    fn words(&self) -> &[AtomicU64] {
        match &self.words {
            Words::Private(w) => w,
            Words::Shared(r) => r.words(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Why `n` bytes at `offset` are not in the heap, if they are not.
    pub(super) fn outside(&self, op: &'static str, offset: usize, n: usize) -> Option<Refusal> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => None,
            _ => Some(Refusal::Outside {
                op,
                offset,
                n,
                heap: self.len,
            }),
        }
    }

    /// Why the word at `offset` cannot be used atomically, if it cannot.
    pub(super) fn not_a_word(&self, op: &'static str, offset: usize) -> Option<Refusal> {
        if !offset.is_multiple_of(8) {
            return Some(Refusal::Misaligned {
                op,
                offset,
                heap: self.len,
            });
        }
        self.outside(op, offset, 8)
    }

    /// Copy `data` in at `offset` (in range): whole words stored, the
    /// partly covered ones at either end merged.
    pub(super) fn write(&self, offset: usize, data: &[u8]) {
        let (head, body, tail) = split_words(offset, data.len());
        self.merge(offset, &data[..head]);
        let first = (offset + head) / 8;
        let words = &self.words()[first..first + body / 8];
        for (w, c) in words.iter().zip(data[head..head + body].chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        self.merge(offset + head + body, &data[head + body..][..tail]);
    }

    /// Write `bytes` (within one word) at `offset`, keeping the word's
    /// other bytes, by compare-and-swap.
    fn merge(&self, offset: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let lo = offset % 8;
        let _ =
            self.words()[offset / 8].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let mut b = old.to_le_bytes();
                b[lo..lo + bytes.len()].copy_from_slice(bytes);
                Some(u64::from_le_bytes(b))
            });
    }

    /// Copy out `buf.len()` bytes at `offset` (in range).
    pub(super) fn read(&self, offset: usize, buf: &mut [u8]) {
        let (head, body, tail) = split_words(offset, buf.len());
        let (h, rest) = buf.split_at_mut(head);
        let (m, t) = rest.split_at_mut(body);
        self.peek(offset, h);
        let first = (offset + head) / 8;
        let words = &self.words()[first..first + body / 8];
        for (w, c) in words.iter().zip(m.chunks_exact_mut(8)) {
            c.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        self.peek(offset + head + body, &mut t[..tail]);
    }

    /// Read `out.len()` bytes (within one word) at `offset`.
    fn peek(&self, offset: usize, out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        let lo = offset % 8;
        let b = self.words()[offset / 8]
            .load(Ordering::Relaxed)
            .to_le_bytes();
        out.copy_from_slice(&b[lo..lo + out.len()]);
    }

    pub(super) fn word(&self, offset: usize) -> &AtomicU64 {
        &self.words()[offset / 8]
    }
}

/// `n` bytes at `offset` as (bytes before the first whole word, bytes in
/// whole words, bytes after them); a span inside one word is all head.
fn split_words(offset: usize, n: usize) -> (usize, usize, usize) {
    let head = ((8 - offset % 8) % 8).min(n);
    let body = (n - head) / 8 * 8;
    (head, body, n - head - body)
}

/// Peers' heaps mapped here: by the ranks of the transport underneath
/// every view (`top`, shared by a group's split and shrunk views), and by
/// this communicator's ranks (`here`).
pub(crate) struct Mapped {
    pub(super) top: Arc<Vec<Option<Arc<Heap>>>>,
    pub(super) here: Vec<Option<Arc<Heap>>>,
}

impl GroupInner {
    /// The heap of `rank` mapped here, if it is.
    pub(super) fn mapped(&self, rank: u32) -> Option<&Arc<Heap>> {
        self.mapped.get()?.here.get(rank as usize)?.as_ref()
    }

    /// Take the peers' heaps mapped by `parent` (this is a view of it,
    /// or of what it is a view of).
    pub(crate) fn inherit_mapped(&self, parent: &GroupInner) {
        let Some(m) = parent.mapped.get() else {
            return;
        };
        let top = Arc::clone(&m.top);
        let here = match self.transport.view_of() {
            Some((_, members)) => members
                .iter()
                .map(|&t| top.get(t as usize).cloned().flatten())
                .collect(),
            None => (*top).clone(),
        };
        let _ = self.mapped.set(Mapped { top, here });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_words_agree_at_every_alignment() {
        let heap = Heap::new(64).unwrap();
        for len in [0usize, 1, 3, 7, 8, 9, 15, 16, 29, 40] {
            let data: Vec<u8> = (1..=len as u8).collect();
            for offset in 0..=(64 - data.len()) {
                heap.write(0, &[0u8; 64]);
                heap.write(offset, &data);
                let mut back = vec![0u8; data.len()];
                heap.read(offset, &mut back);
                assert_eq!(back, data, "{len} bytes at {offset}");
                let mut all = [0u8; 64];
                heap.read(0, &mut all);
                assert!(all[..offset].iter().all(|&b| b == 0));
                assert!(all[offset + data.len()..].iter().all(|&b| b == 0));
            }
        }
        heap.write(8, &7u64.to_le_bytes());
        assert_eq!(heap.word(8).load(Ordering::SeqCst), 7);
    }

    #[test]
    fn a_peer_maps_a_shared_heap_bound_to_its_binding_only() {
        let heap = Heap::new_shared(24, b"entries").unwrap();
        let at = heap.locator().unwrap();
        let peer = Heap::map(1, at, 24, b"entries").unwrap();
        peer.write(3, b"hello");
        let mut back = [0u8; 5];
        heap.read(3, &mut back);
        assert_eq!(&back, b"hello");
        assert!(Heap::map(1, at, 24, b"other entries").is_none());
        assert!(Heap::map(1, at, 32, b"entries").is_none(), "another size");
        assert_eq!(Heap::new(8).unwrap().locator(), None);
    }
}
