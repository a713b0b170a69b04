//! The I/O thread's writing: queued frames batched into vectored writes,
//! carried from turn to turn while the socket takes them, and heartbeats.

use super::*;

/// The I/O thread's side of the queue: the batch being written and how
/// far it got, carried from turn to turn.
#[derive(Debug)]
pub(crate) struct Flusher {
    queue: Receiver<Out>,
    batch: Vec<Out>,
    /// Bytes of `batch` already written.
    done: usize,
    /// Queue items in `batch` (each counted in `pending`).
    items: usize,
    /// Budget to return once `batch` is written.
    budgeted: usize,
    /// Bytes of `batch`'s items, as counted in `Wire::queued`.
    bytes: usize,
    /// A `Close` was taken: the goodbye is the batch's last frame.
    closing: bool,
    /// The goodbye is written and the write half shut.
    pub(crate) finished: bool,
    /// Since when the socket has taken nothing of what is queued.
    pub(crate) stalled_since: Option<Instant>,
    /// When the I/O thread last sent a heartbeat.
    pub(crate) last_beat: Instant,
}

/// Where a flush stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Nothing is queued.
    Idle,
    /// The socket takes no more now: wait until it is writable.
    Blocked,
    /// Goodbye said: nothing more will be written.
    Finished,
}

impl Flusher {
    pub(crate) fn new(queue: Receiver<Out>) -> Flusher {
        Flusher {
            queue,
            batch: Vec::with_capacity(BATCH_FRAMES),
            done: 0,
            items: 0,
            budgeted: 0,
            bytes: 0,
            closing: false,
            finished: false,
            stalled_since: None,
            last_beat: Instant::now(),
        }
    }

    /// Take queued items into an empty batch.
    fn fill(&mut self) {
        let mut bytes = 0;
        while !self.closing && self.batch.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
            let Ok(item) = self.queue.try_recv() else {
                break;
            };
            self.items += 1;
            self.bytes += item.len();
            match item {
                Out::Close(bye) => {
                    self.closing = true;
                    self.batch.push(Out::Tail(bye));
                }
                Out::Frame(h, p) => {
                    bytes += p.len();
                    self.budgeted += p.len() + HEADER_LEN;
                    self.batch.push(Out::Frame(h, p));
                }
                Out::Unbudgeted(h, p) => {
                    bytes += p.len();
                    self.batch.push(Out::Unbudgeted(h, p));
                }
                Out::Reserved(h, p, reserved) => {
                    bytes += p.len();
                    self.budgeted += reserved;
                    self.batch.push(Out::Unbudgeted(h, p));
                }
                Out::Tail(t) => {
                    bytes += t.len();
                    self.batch.push(Out::Tail(t));
                }
            }
        }
    }
}

impl TcpTx {
    /// Write what is queued, as far as the socket takes it without
    /// blocking. `Err`: the connection failed.
    pub(crate) fn flush(&self, f: &mut Flusher) -> std::io::Result<Flushed> {
        loop {
            if f.finished {
                return Ok(Flushed::Finished);
            }
            if f.batch.is_empty() {
                f.fill();
                if f.batch.is_empty() {
                    return Ok(Flushed::Idle);
                }
            }
            let pieces = f.batch.iter().flat_map(Out::pieces);
            let total: usize = pieces.clone().map(<[u8]>::len).sum();
            let mut slices: Vec<IoSlice<'_>> = after(pieces, f.done).map(IoSlice::new).collect();
            let written = write_now(&self.wire.stream, &mut slices)?;
            drop(slices);
            f.done += written;
            if written > 0 {
                f.stalled_since = None;
            }
            if f.done < total {
                f.stalled_since.get_or_insert_with(Instant::now);
                return Ok(Flushed::Blocked);
            }
            // The batch is on the wire: its items are no longer pending.
            *self.wire.pending() -= f.items;
            self.wire.queued.fetch_sub(f.bytes, Ordering::Relaxed);
            self.budget.release(f.budgeted);
            f.batch.clear();
            (f.done, f.items, f.budgeted, f.bytes) = (0, 0, 0, 0);
            if f.closing {
                let _ = self.wire.stream.shutdown(Shutdown::Write);
                f.finished = true;
            }
        }
    }

    /// A heartbeat, written like any frame: at once if nothing is queued,
    /// else behind what is. `false`: the connection failed.
    pub(crate) fn heartbeat(&self, core: &Core, peer: u32) -> bool {
        // It carries this rank's liveness: the peer waits that long for
        // the next beat if it would wait less.
        let hb = Header {
            aux: core.liveness_ms(),
            ..Header::control(FrameType::Heartbeat, core.rank, peer)
        };
        let mut pending = self.wire.pending();
        if *pending != 0 {
            // The link is busy, and needs no heartbeat.
            return true;
        }
        match self.wire.seal(&hb, &[], &core.pool) {
            None => self
                .write_or_queue_tail(&mut pending, std::iter::once(&hb.encode()[..]))
                .is_ok(),
            Some(Ok(env)) => self
                .write_or_queue_tail(&mut pending, env.pieces(&[]))
                .is_ok(),
            Some(Err(e)) => {
                tracing::error!("{e}");
                false
            }
        }
    }
}
