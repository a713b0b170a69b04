//! Keeping every lane in order across its QUIC stream and the TCP sidecar.
//!
//! A lane always uses the same QUIC stream `s` (`link::stream_of`), and a
//! message of the lane goes either on `s` (a frame) or on the sidecar (a
//! payload over the threshold). The sender stamps, per stream:
//!
//! * each frame on `s` with `seq` = the number of sidecar payloads of `s`
//!   sent before it (mod 2^16);
//! * each sidecar payload of `s` with `aux` = the number of frames sent on
//!   `s` before it, and `seq` = its own number among the payloads of `s`.
//!
//! The receiver delivers a frame of `s` once exactly `seq` payloads of `s`
//! are delivered, and a payload once exactly `aux` frames of `s` and `seq`
//! payloads of `s` are — so a lane's messages come out in the order they
//! were sent, whichever path was faster, and neither path waits for the
//! other beyond that: a payload is delivered by the thread that read its
//! last byte off the sidecar, with no descriptor to wait for on QUIC.
//!
//! Stamps and sends happen under one lock per link (`Out`), so the order
//! of the stamps is the order on the wires. Payloads are at least
//! `MIN_THRESHOLD` bytes, which keeps the payloads in flight on one stream
//! far below 2^16 (the links' byte budgets bound them), so the 16-bit
//! counter never wraps onto a payload still in flight.
//!
//! What waits here has not reached the inbox, whose bounds a peer could
//! otherwise go around by stamping its messages for a turn that never
//! comes. So the waiting is held to the inbox's bounds: at most
//! [`MAX_WAITING`] frames and as many payloads per stream (the inbox
//! holds a lane's messages to 2^18), and the bytes of point-to-point and
//! RPC messages count against `PEER_BUDGET_BYTES` together with what
//! their sender has queued in the inbox (`Inbox::budget_admits`). Past
//! either bound the link closes with a protocol error, as TCP's does
//! when the inbox refuses. Collective bytes are bounded in number of
//! messages only, here as in the inbox (`docs/security.md`).

use crate::inbox::budgeted;
use crate::link::{Carried, Core, Gone, Next, ProtocolError};
use crate::wire::{FrameType, Header};
use crate::Payload;
use std::collections::{HashMap, VecDeque};

/// Streams of one link (the receiving side is made with this many).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use super::engine::STREAMS;

/// The smallest sidecar threshold (see the module docs).
pub const MIN_THRESHOLD: usize = 2 << 10;

/// Frames, or payloads, one stream may hold waiting for their turn: more
/// means a peer whose stamps never line up (a protocol error, not memory
/// without bound).
const MAX_WAITING: usize = 1 << 16;

/// The sending side's counters for one link, per stream.
#[derive(Debug)]
pub(crate) struct Out {
    frames: Vec<u32>,
    payloads: Vec<u16>,
}

impl Out {
    pub(crate) fn new(streams: usize) -> Out {
        Out::starting_at(streams, 0, 0)
    }

    /// Counters as if `frames` frames and `payloads` payloads had been sent
    /// on every stream (the fuzz targets start near the 16-bit wrap).
    pub(crate) fn starting_at(streams: usize, frames: u32, payloads: u16) -> Out {
        Out {
            frames: vec![frames; streams],
            payloads: vec![payloads; streams],
        }
    }

    /// Stamp a frame for stream `s`.
    pub(crate) fn frame(&mut self, s: usize, h: &mut Header) {
        h.seq = self.payloads[s];
        self.frames[s] = self.frames[s].wrapping_add(1);
    }

    /// Take back the last frame stamp of stream `s` (it was not sent).
    pub(crate) fn unstamp_frame(&mut self, s: usize) {
        self.frames[s] = self.frames[s].wrapping_sub(1);
    }

    /// Take back the last payload stamp of stream `s` (it was not sent).
    pub(crate) fn unstamp_payload(&mut self, s: usize) {
        self.payloads[s] = self.payloads[s].wrapping_sub(1);
    }

    /// Stamp a sidecar payload of stream `s`.
    pub(crate) fn payload(&mut self, s: usize, h: &mut Header) {
        h.aux = self.frames[s];
        h.seq = self.payloads[s];
        self.payloads[s] = self.payloads[s].wrapping_add(1);
    }
}

#[derive(Debug, Default)]
struct InStream {
    frames_done: u32,
    payloads_done: u16,
    /// Frames read off QUIC, not yet deliverable (a control frame has no
    /// payload).
    frames: VecDeque<(Header, Option<Payload>)>,
    /// Payloads read off the sidecar, not yet deliverable (in sidecar
    /// order, which is their order).
    payloads: VecDeque<(Header, Payload)>,
}

/// Bytes of budgeted lanes (point to point, RPC) waiting in a link's
/// streams, per (sender, receiver): a relay holds what it passes on
/// against the budget its sender keeps toward the receiver.
#[derive(Debug, Default)]
struct Held(HashMap<(u32, u32), u64>);

impl Held {
    /// The bytes of `h` that count against its sender's budget.
    fn counted(h: &Header, payload: Option<&Payload>) -> u64 {
        match payload {
            Some(p) if h.ftype == FrameType::Data && budgeted(h.kind) => p.len() as u64,
            _ => 0,
        }
    }

    /// Count `n` bytes of `h` as waiting here, if its sender's budget has
    /// room for them (see the module docs); `Err` if it does not.
    fn admit(&mut self, core: &Core, h: &Header, n: u64) -> Result<(), ProtocolError> {
        if n == 0 {
            return Ok(());
        }
        let key = (h.src, h.dst);
        let held = self.0.get(&key).copied().unwrap_or(0);
        if !core.inbox.budget_admits(h.src, held, n, h.dst == core.rank) {
            return Err(ProtocolError::WaitingPastBudget {
                src: h.src,
                bytes: held.saturating_add(n),
            });
        }
        *self.0.entry(key).or_insert(0) += n;
        Ok(())
    }

    /// `n` bytes of `h` no longer wait here (delivered).
    fn release(&mut self, h: &Header, n: u64) {
        if n == 0 {
            return;
        }
        let key = (h.src, h.dst);
        if let Some(held) = self.0.get_mut(&key) {
            *held = held.saturating_sub(n);
            if *held == 0 {
                self.0.remove(&key);
            }
        }
    }
}

/// The receiving side of one link: what waits for its turn, per stream.
#[derive(Debug)]
pub(crate) struct In {
    streams: Vec<InStream>,
    /// Peer-gone notices received, per (rank gone, what it says, rank
    /// told): a relay sends each on every stream (behind what it relayed
    /// there), and it counts here with the last copy. Notices for
    /// different ranks (a sparse shape's relay passes on several) count
    /// apart, and a notice that counted starts afresh. Only notices the
    /// link may carry are counted (`Core::may_tell_gone`), by the kind
    /// they say: at most the ranks the peer may speak of, four kinds
    /// each, whatever it sends.
    gone_marks: HashMap<(u32, u32, u32), usize>,
    held: Held,
}

impl In {
    pub(crate) fn new(streams: usize) -> In {
        In::starting_at(streams, 0, 0)
    }

    /// The receiving side of a link on which `frames` frames and `payloads`
    /// payloads of every stream were delivered already (see
    /// [`Out::starting_at`]).
    pub(crate) fn starting_at(streams: usize, frames: u32, payloads: u16) -> In {
        In {
            streams: (0..streams)
                .map(|_| InStream {
                    frames_done: frames,
                    payloads_done: payloads,
                    ..InStream::default()
                })
                .collect(),
            gone_marks: HashMap::new(),
            held: Held::default(),
        }
    }

    /// A frame of stream `s` from `peer`, read off QUIC: deliver it and
    /// whatever it unblocks, in order. `Err`: a protocol error.
    pub(crate) fn frame(
        &mut self,
        core: &Core,
        peer: u32,
        s: usize,
        h: Header,
        payload: Option<Payload>,
    ) -> Result<(), ProtocolError> {
        self.on_stream(core, peer, s, |st, held| {
            if st.frames.len() >= MAX_WAITING {
                return Err(ProtocolError::FramesWithoutPayloads {
                    waiting: st.frames.len(),
                });
            }
            held.admit(core, &h, Held::counted(&h, payload.as_ref()))?;
            st.frames.push_back((h, payload));
            Ok(())
        })
    }

    /// Change stream `s` by `change`, then deliver what that unblocks.
    fn on_stream(
        &mut self,
        core: &Core,
        peer: u32,
        s: usize,
        change: impl FnOnce(&mut InStream, &mut Held) -> Result<(), ProtocolError>,
    ) -> Result<(), ProtocolError> {
        let st = self
            .streams
            .get_mut(s)
            .ok_or(ProtocolError::NoSuchStream { index: s })?;
        change(st, &mut self.held)?;
        st.deliver(core, peer, &mut self.gone_marks, &mut self.held)
    }

    /// Peer-gone notices whose copies are being counted.
    #[cfg(test)]
    pub(crate) fn gone_marks(&self) -> usize {
        self.gone_marks.len()
    }

    /// A payload of stream `s` from `peer`, read off the sidecar.
    pub(crate) fn payload(
        &mut self,
        core: &Core,
        peer: u32,
        s: usize,
        h: Header,
        payload: Payload,
    ) -> Result<(), ProtocolError> {
        self.on_stream(core, peer, s, |st, held| {
            if st.payloads.len() >= MAX_WAITING {
                return Err(ProtocolError::PayloadsWithoutFrames {
                    waiting: st.payloads.len(),
                });
            }
            held.admit(core, &h, Held::counted(&h, Some(&payload)))?;
            st.payloads.push_back((h, payload));
            Ok(())
        })
    }
}

impl In {
    /// Whether sidecar payload `h` of stream `s` is next in its stream's
    /// order: the frames and payloads sent before it are delivered, and
    /// nothing waits. Then nothing of the stream can be delivered before
    /// it (what comes next waits for it), and a posted receive may read
    /// it straight into its buffers.
    pub(crate) fn payload_is_next(&self, s: usize, h: &Header) -> bool {
        // (A payload waiting means an earlier one is not delivered: the
        // stamps say so too, unless they wrapped; this says it plainly.)
        self.streams.get(s).is_some_and(|st| {
            st.payloads.is_empty() && h.seq == st.payloads_done && h.aux == st.frames_done
        })
    }

    /// The payload [`payload_is_next`](Self::payload_is_next) let through
    /// was read into a posted receive's buffers: it counts as delivered,
    /// and the frames waiting for it go on.
    pub(crate) fn payload_taken(
        &mut self,
        core: &Core,
        peer: u32,
        s: usize,
    ) -> Result<(), ProtocolError> {
        self.on_stream(core, peer, s, |st, _| {
            st.payloads_done = st.payloads_done.wrapping_add(1);
            Ok(())
        })
    }
}

impl InStream {
    fn deliver(
        &mut self,
        core: &Core,
        peer: u32,
        gone_marks: &mut HashMap<(u32, u32, u32), usize>,
        held: &mut Held,
    ) -> Result<(), ProtocolError> {
        loop {
            if self
                .frames
                .front()
                .is_some_and(|(h, _)| h.seq == self.payloads_done)
            {
                let Some((h, payload)) = self.frames.pop_front() else {
                    break;
                };
                self.frames_done = self.frames_done.wrapping_add(1);
                held.release(&h, Held::counted(&h, payload.as_ref()));
                match payload {
                    Some(p) => {
                        if !core.on_data(peer, h, p) {
                            return Err(ProtocolError::NotCarried(Carried::Frame));
                        }
                    }
                    None if h.ftype == FrameType::PeerGone => {
                        // Counted only if it can count: about and for
                        // ranks this link may speak of, by the kind it
                        // says (so what is held is bounded by the world).
                        if !core.may_tell_gone(peer, &h) {
                            return Err(ProtocolError::NotCarried(Carried::PeerGone));
                        }
                        let mark = (h.src, Gone::from_aux(h.aux) as u32, h.dst);
                        let marks = gone_marks.entry(mark).or_insert(0);
                        *marks += 1;
                        if *marks == super::engine::STREAMS as usize {
                            gone_marks.remove(&mark);
                            if matches!(core.on_header(peer, h), Next::End) {
                                return Err(ProtocolError::NotCarried(Carried::PeerGone));
                            }
                        }
                    }
                    None => {
                        if matches!(core.on_header(peer, h), Next::End) {
                            return Err(ProtocolError::Ended);
                        }
                    }
                }
                continue;
            }
            if self
                .payloads
                .front()
                .is_some_and(|(h, _)| h.seq == self.payloads_done && h.aux == self.frames_done)
            {
                let Some((h, payload)) = self.payloads.pop_front() else {
                    break;
                };
                self.payloads_done = self.payloads_done.wrapping_add(1);
                held.release(&h, Held::counted(&h, Some(&payload)));
                debug_assert_eq!(h.ftype, FrameType::Data);
                if !core.on_data(peer, h, payload) {
                    return Err(ProtocolError::NotCarried(Carried::SidecarPayload));
                }
                continue;
            }
            return Ok(());
        }
        Ok(())
    }
}
