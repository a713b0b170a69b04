//! Same-host peers' heaps mapped here, and why each is the peer's own;
//! and making a group's heap (`ProcessGroup::make_heap`: the heap check,
//! with the steps below around it).
//!
//! A rank with same-host peers keeps its heap in a sealed memfd
//! (`SharedRegion`), which those peers open through `/proc/<pid>/fd/<fd>`
//! of the owner. Where it is never travels in the heap check's
//! all-gather, which other ranks relay (and could rewrite): every message
//! below goes over the pair's own shared-memory link (a rank whose link
//! kind is `SharedMemory` is a direct hop, and the transport checks a
//! message's source against the link it came on). And the region's name,
//! fixed when it is made, commits to what only the pair knows:
//!
//! 1. **Challenges.** Each rank sends each same-host peer 16 fresh random
//!    bytes, and takes one message from each.
//! 2. **Region.** The owner makes its region bound to one entry per peer
//!    `m` whose challenge it took: `SHA-256("meshwork heap entry v1" ‖ m
//!    ‖ owner ‖ m's challenge)`, in rank order.
//! 3. **Offers.** After the heap check, each rank sends each same-host
//!    peer its region's locator (process id, descriptor) and its entries;
//!    or nothing (a kept heap, a region that could not be made).
//! 4. **Map.** A rank maps an offer only if its own entry (for that owner,
//!    with the challenge it sent that owner) is among the entries and the
//!    region it opens is bound to exactly them (`SharedRegion::open`
//!    checks the name, seals, owner, mode and size). Another rank's
//!    region carries entries for the challenges sent to that rank, not
//!    this one's; a member that passes this rank's challenge on as its own
//!    gets an entry under its own rank. Whatever is refused is reached by
//!    messages.
//!
//! Every rank sends and takes exactly one message of each kind per
//! same-host peer whatever happens, so nothing is left queued on a lane
//! and nobody waits for a message that will not come.

use super::super::{GroupInner, ProcessGroup};
use super::store::{Heap, Mapped};
use crate::error::{Error, Result};
use meshwork_transport::{LaneKey, LaneKind, LinkKind};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Control-lane tags of the two messages (the group's own control tags
/// are small numbers; these spell "heap").
const CHALLENGE_TAG: u64 = 0x6865_6170_0000_0001;
const OFFER_TAG: u64 = 0x6865_6170_0000_0002;

const CHALLENGE_LEN: usize = 16;
const ENTRY_LEN: usize = 32;
/// An offer's head: process id, descriptor, number of entries.
const OFFER_HEAD: usize = 12;

/// The entry that binds `owner`'s region to mapper `mapper` and the
/// challenge the mapper sent it.
pub(super) fn entry(mapper: u32, owner: u32, challenge: &[u8]) -> [u8; ENTRY_LEN] {
    let mut h = Sha256::new();
    h.update(b"meshwork heap entry v1");
    h.update(mapper.to_le_bytes());
    h.update(owner.to_le_bytes());
    h.update(challenge);
    h.finalize().into()
}

/// An offer: where the region is and the entries it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Offer {
    pub at: (u32, u32),
    pub entries: Vec<[u8; ENTRY_LEN]>,
}

impl Offer {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(OFFER_HEAD + self.entries.len() * ENTRY_LEN);
        m.extend_from_slice(&self.at.0.to_le_bytes());
        m.extend_from_slice(&self.at.1.to_le_bytes());
        m.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            m.extend_from_slice(e);
        }
        m
    }

    /// An offer of at most `world` entries; `None` for "no region" or
    /// anything that is not an offer.
    pub(super) fn decode(m: &[u8], world: usize) -> Option<Offer> {
        let (head, rest) = m.split_first_chunk::<OFFER_HEAD>()?;
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let n = usize::try_from(word(8)).ok()?;
        if n > world || rest.len() != n.checked_mul(ENTRY_LEN)? {
            return None;
        }
        let entries = rest
            .chunks_exact(ENTRY_LEN)
            .map(|c| c.try_into().ok())
            .collect::<Option<Vec<[u8; ENTRY_LEN]>>>()?;
        Some(Offer {
            at: (word(0), word(4)),
            entries,
        })
    }

    /// The binding `SharedRegion` commits to: the entries, in order.
    pub(super) fn binding(&self) -> Vec<u8> {
        self.entries.concat()
    }
}

/// One rank's side of the exchange with its same-host peers.
pub(super) struct Exchange {
    inner: Arc<GroupInner>,
    /// Same-host peers, ascending, with the challenge sent to each.
    sent: Vec<(u32, [u8; CHALLENGE_LEN])>,
    /// The entries of the peers whose challenge came whole, in rank order.
    entries: Vec<[u8; ENTRY_LEN]>,
}

impl Exchange {
    /// Step 1 with `peers` (this rank's same-host peers).
    pub(super) fn challenge(inner: Arc<GroupInner>, peers: &[u32]) -> Result<Exchange> {
        let me = inner.rank;
        let mut sent = Vec::with_capacity(peers.len());
        for &peer in peers {
            let mut c = [0u8; CHALLENGE_LEN];
            getrandom::getrandom(&mut c).map_err(|e| {
                Error::Io(std::io::Error::other(format!(
                    "no randomness for a challenge: {e}"
                )))
            })?;
            inner
                .transport
                .send(peer, key(&inner, CHALLENGE_TAG), &[&c])
                .map_err(|e| Error::from_transport(e, "the heap's same-host exchange"))?;
            sent.push((peer, c));
        }
        let mut entries = Vec::with_capacity(peers.len());
        for &peer in peers {
            let got = inner
                .transport
                .recv(peer, key(&inner, CHALLENGE_TAG), inner.timeout(), None)
                .map_err(|e| Error::from_transport(e, "the heap's same-host exchange"))?;
            match got.as_ref().len() {
                CHALLENGE_LEN => entries.push(entry(peer, me, got.as_ref())),
                n => tracing::warn!(
                    peer,
                    "rank {peer} sent a heap challenge of {n} bytes; it will reach this heap by messages"
                ),
            }
        }
        Ok(Exchange {
            inner,
            sent,
            entries,
        })
    }

    /// What this rank's region is to be bound to.
    pub(super) fn binding(&self) -> Vec<u8> {
        self.entries.concat()
    }

    /// Steps 3 and 4: offer `heap`'s region, take the peers' offers, and
    /// map those bound to this rank's challenges; by rank (`world` of
    /// them), `None` for every rank not mapped.
    pub(super) fn map_peers(&self, heap: &Heap, world: usize) -> Result<Vec<Option<Arc<Heap>>>> {
        let inner = &self.inner;
        let offer = heap.locator().map(|at| Offer {
            at,
            entries: self.entries.clone(),
        });
        let msg = offer.map(|o| o.encode()).unwrap_or_default();
        for &(peer, _) in &self.sent {
            inner
                .transport
                .send(peer, key(inner, OFFER_TAG), &[&msg])
                .map_err(|e| Error::from_transport(e, "the heap's same-host exchange"))?;
        }
        let mut mapped: Vec<Option<Arc<Heap>>> = vec![None; world];
        for &(peer, challenge) in &self.sent {
            let got = inner
                .transport
                .recv(peer, key(inner, OFFER_TAG), inner.timeout(), None)
                .map_err(|e| Error::from_transport(e, "the heap's same-host exchange"))?;
            if got.as_ref().is_empty() {
                continue;
            }
            if let Some(slot) = mapped.get_mut(peer as usize) {
                *slot = accept(
                    inner.rank,
                    peer,
                    &challenge,
                    got.as_ref(),
                    world,
                    heap.len(),
                );
            }
        }
        Ok(mapped)
    }
}

/// Rank `me`'s mapping of the heap of `len` bytes that `owner` offered in
/// `msg`, if the offer is bound to the challenge `me` sent `owner` (step
/// 4); `None` otherwise (then `owner` is reached by messages).
fn accept(
    me: u32,
    owner: u32,
    challenge: &[u8],
    msg: &[u8],
    world: usize,
    len: usize,
) -> Option<Arc<Heap>> {
    let mine = entry(me, owner, challenge);
    let Some(offer) = Offer::decode(msg, world).filter(|o| o.entries.contains(&mine)) else {
        tracing::warn!(
            peer = owner,
            "rank {owner} offered a heap not bound to this rank's challenge; it is reached by messages"
        );
        return None;
    };
    Heap::map(owner, offer.at, len, &offer.binding())
}

fn key(inner: &GroupInner, tag: u64) -> LaneKey {
    LaneKey {
        comm: inner.comm_id,
        kind: LaneKind::Control,
        tag,
    }
}

/// Words of a rank's record in the heap check: the size, and whether it
/// offers its region to its same-host peers (then everyone waits in a
/// barrier until they have mapped it).
const RECORD: usize = 2;

impl ProcessGroup {
    /// Give the group a symmetric heap of `bytes` (after checking that
    /// every rank has one of the same size: a collective): `keep` if it is
    /// that size (a grown group keeps a member's), else a zeroed one,
    /// shared with same-host peers where there are any; and map theirs.
    pub(crate) fn make_heap(&self, bytes: usize, keep: Option<&Arc<Heap>>) -> Result<()> {
        if bytes == 0 {
            // Every link's handshake compared the heap's size (0 too): a
            // rank with a heap was refused at formation.
            return Ok(());
        }
        let links = self.links();
        let me = self.rank();
        let same_host: Vec<u32> = (0..links.len() as u32)
            .filter(|&r| r != me && links[r as usize] == LinkKind::SharedMemory)
            .collect();
        // Challenges first: a new region is bound to them when it is made.
        let exchange = Exchange::challenge(self.shared(), &same_host)?;
        let heap = match keep {
            Some(heap) if heap.len() == bytes => Some(Arc::clone(heap)),
            _ if !same_host.is_empty() => Heap::new_shared(bytes, &exchange.binding()),
            _ => Heap::new(bytes),
        }
        .ok_or_else(|| {
            Error::InvalidArgument(format!("a heap of {bytes} bytes cannot be allocated"))
        })?;
        // Served before this rank's part of the check leaves: whoever has
        // passed the check may use it at once.
        self.inner().attach_heap(&heap);
        let world = self.world_size() as usize;
        let mut records = vec![0u64; world * RECORD];
        let mine = [bytes as u64, u64::from(heap.locator().is_some())];
        match self.all_gather(&mine, &mut records) {
            Err(Error::Timeout { waiting_on, .. }) => {
                return Err(Error::InvalidArgument(format!(
                    "the heap check: ranks {waiting_on:?} did not take part within the deadline (a rank without a heap does not); set the same HEAP_MB (Node::heap_bytes) everywhere"
                )))
            }
            r => r?,
        }
        let records: Vec<&[u64]> = records.chunks_exact(RECORD).collect();
        if let Some(r) = records.iter().position(|rec| rec[0] != bytes as u64) {
            return Err(Error::InvalidArgument(format!(
                "the heap differs between ranks: rank {r} has {} bytes, this rank {bytes}; set the same HEAP_MB (Node::heap_bytes) everywhere",
                records[r][0]
            )));
        }
        let top = exchange.map_peers(&heap, world)?;
        // Every rank offering a region has had it mapped by whoever could
        // (the records are the same everywhere: all or none wait).
        if records.iter().any(|rec| rec[1] != 0) {
            self.barrier()?;
            heap.withdraw();
        }
        let top = Arc::new(top);
        let here = (*top).clone();
        let _ = self.inner().mapped.set(Mapped { top, here });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays a hostile same-host member H against mapper B, with real
    /// regions in this process: H offers, as its own heap, rank A's region
    /// (bound to A's mappers), then a region of its own that claims B's
    /// entry for A, then passes B's challenge to A as its own. Each is
    /// refused by the check B runs; only H's own honest region maps.
    #[test]
    fn a_member_cannot_offer_another_ranks_heap_as_its_own() {
        let (a, b, h) = (0u32, 1u32, 2u32);
        // B's challenges to A and to H; H's challenge to A.
        let (b_to_a, b_to_h, h_to_a) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        // Whether B maps an offer from `owner`, as `map_peers` does.
        let accepts = |owner: u32, challenge: &[u8; 16], offer: &Offer| -> bool {
            accept(b, owner, challenge, &offer.encode(), 4, 64).is_some()
        };
        // A's region, bound to its mappers B and H.
        let a_entries = vec![entry(b, a, &b_to_a), entry(h, a, &h_to_a)];
        let a_heap = Heap::new_shared(64, &a_entries.concat()).unwrap();
        let a_offer = Offer {
            at: a_heap.locator().unwrap(),
            entries: a_entries.clone(),
        };
        assert!(accepts(a, &b_to_a, &a_offer), "A's genuine offer");
        // 1. H names A's region, with A's entries: B's entry for H is not
        //    among them.
        assert!(!accepts(h, &b_to_h, &a_offer), "A's region as H's");
        // 2. H names A's region but lists B's entry for H: the region is
        //    not bound to that list.
        let forged = Offer {
            at: a_offer.at,
            entries: vec![entry(b, h, &b_to_h)],
        };
        assert!(!accepts(h, &b_to_h, &forged), "a forged list");
        // 3. H sends A, as its own challenge, the one B sent H: A's entry
        //    for it is under H's rank, not B's.
        let relayed = vec![entry(b, a, &b_to_a), entry(h, a, &b_to_h)];
        let a2 = Heap::new_shared(64, &relayed.concat()).unwrap();
        let relayed_offer = Offer {
            at: a2.locator().unwrap(),
            entries: relayed,
        };
        assert!(!accepts(h, &b_to_h, &relayed_offer), "a relayed challenge");
        // H's own region, bound to B's challenge: that one is H's.
        let h_entries = vec![entry(b, h, &b_to_h)];
        let h_heap = Heap::new_shared(64, &h_entries.concat()).unwrap();
        let h_offer = Offer {
            at: h_heap.locator().unwrap(),
            entries: h_entries,
        };
        assert!(accepts(h, &b_to_h, &h_offer), "H's own");
    }

    #[test]
    fn offers_round_trip_and_garbage_is_none() {
        let o = Offer {
            at: (77, 9),
            entries: vec![[5; 32], [6; 32]],
        };
        assert_eq!(Offer::decode(&o.encode(), 4), Some(o.clone()));
        assert_eq!(Offer::decode(&o.encode(), 1), None, "more than the world");
        assert_eq!(Offer::decode(&o.encode()[..40], 4), None, "short");
        let mut huge = o.encode();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Offer::decode(&huge, 4), None);
        assert_eq!(Offer::decode(&[], 4), None);
    }
}
