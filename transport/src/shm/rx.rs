//! The receive side of a shared-memory link: frames read off the
//! inbound ring through the one frame assembler and the core's dispatch,
//! a posted receive's payload read straight into the caller's buffer,
//! and the link's end (a ring that lies, a peer gone).

use super::*;

impl ShmLink {
    /// Read the ring now if no other thread is (into `posted`'s buffers
    /// when given); whether the link has ended.
    pub(super) fn read_now(&self, core: &Core, posted: Option<&mut Posted<'_>>) -> bool {
        // A waiting caller asks this in a loop: most turns find nothing
        // new, which two loads tell without the lock.
        if self.rx_clean.load(Ordering::Acquire)
            && !self.ended.load(Ordering::Acquire)
            && self.inn.has_unread() == Ok(false)
        {
            return false;
        }
        match self.rx.try_lock() {
            Ok(mut rx) => self.pump(&mut rx, core, posted),
            Err(_) => self.ended.load(Ordering::Acquire),
        }
    }

    /// Process every complete frame in the ring (with `posted`: until the
    /// posted message is read into its buffers); whether the link ended.
    pub(super) fn pump(&self, rx: &mut Rx, core: &Core, posted: Option<&mut Posted<'_>>) -> bool {
        let ended = self.pump_frames(rx, core, posted);
        self.freed(&rx.cursor);
        let clean = !rx.reader.frame_ready() && rx.pending.is_none();
        self.rx_clean.store(clean, Ordering::Release);
        ended
    }

    fn pump_frames(&self, rx: &mut Rx, core: &Core, mut posted: Option<&mut Posted<'_>>) -> bool {
        loop {
            if rx.ended {
                return true;
            }
            if self.ended.load(Ordering::Acquire) {
                return self.end(rx, core);
            }
            if rx.reader.frame_ready() {
                match rx.reader.frame(core) {
                    Ok(Some((h, payload))) => {
                        if !core.on_data(self.peer, h, payload) {
                            return self.refuse(rx, core);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => return self.refused(rx, core, &e),
                }
                continue;
            }
            if rx.pending.is_some() {
                match self.read_pending(rx, core, posted.as_deref_mut()) {
                    Ok(None) if rx.pending.is_some() => return false,
                    Ok(None) | Ok(Some(copy::Took::Delivered)) => continue,
                    Ok(Some(copy::Took::Filled)) => return false,
                    Ok(Some(copy::Took::Ended)) => return true,
                    Err(Corrupt) => return self.corrupt_ring(rx, core),
                }
            }
            let n = match self.inn.read(&mut rx.cursor, rx.reader.space()) {
                Ok(0) => return false,
                Ok(n) => n,
                Err(Corrupt) => return self.corrupt_ring(rx, core),
            };
            self.freed_some(&rx.cursor);
            let h = match rx.reader.fed(core, n) {
                Ok(Fed::More) => continue,
                Ok(Fed::Header(h)) if copy::marked(&h) => {
                    rx.pending = Some(copy::Pending::new(h));
                    continue;
                }
                Ok(Fed::Header(h)) => rx.reader.dispatch(core, h),
                // Frames on a ring come without envelopes.
                Ok(Fed::Envelope(_)) => Err(ProtocolError::Unsealed.into()),
                Err(e) => Err(e),
            };
            match h {
                Ok(None) => {}
                Ok(Some(h)) => match posted.as_deref_mut() {
                    Some(p) if p.wants(core, &h) => {
                        if self.read_direct(rx, core, h, p) {
                            return false;
                        }
                    }
                    _ => rx.reader.body(h, &core.pool),
                },
                Err(e) => return self.refused(rx, core, &e),
            }
        }
    }

    /// The peer broke the protocol (or said goodbye): say why and end
    /// the link.
    fn refused(&self, rx: &mut Rx, core: &Core, e: &ReadError) -> bool {
        e.log(self.peer);
        self.refuse(rx, core)
    }

    pub(super) fn corrupt_ring(&self, rx: &mut Rx, core: &Core) -> bool {
        tracing::error!(
            peer = self.peer,
            "the peer corrupted the ring's control words; closing the link"
        );
        self.refuse(rx, core)
    }

    /// [`freed`](Self::freed) once a batch is read: a writer waiting for
    /// room goes on while a large frame is still being read, and a small
    /// frame's header and body cost one store to the ring's `tail`.
    pub(super) fn freed_some(&self, cur: &ring::Cursor) {
        if self.inn.unfreed(cur) >= FREE_BATCH {
            self.freed(cur);
        }
    }

    /// Free the room of what was read up to `cur`, waking the writer if
    /// it waits for it.
    pub(super) fn freed(&self, cur: &ring::Cursor) {
        if self.inn.free(cur) {
            self.ring_bell();
        }
    }

    /// Read the body of `h` straight into the caller's buffers as its
    /// bytes come; whether it was read whole (otherwise what was read goes
    /// to the assembler, which reads the rest).
    pub(super) fn read_direct(
        &self,
        rx: &mut Rx,
        core: &Core,
        h: Header,
        p: &mut Posted<'_>,
    ) -> bool {
        let total = p.len();
        let mut read = 0;
        // Since when nothing came (read only once the ring runs dry: a
        // small message's body is there with its header).
        let mut quiet: Option<Instant> = None;
        while read < total {
            let (n, corrupt) = {
                let dst = if read < p.head.len() {
                    &mut p.head[read..]
                } else {
                    &mut p.body[read - p.head.len()..]
                };
                match self.inn.read(&mut rx.cursor, dst) {
                    Ok(n) => (n, false),
                    Err(Corrupt) => (0, true),
                }
            };
            if corrupt {
                self.refuse(rx, core);
                return false;
            }
            if n > 0 {
                read += n;
                quiet = None;
                self.freed_some(&rx.cursor);
                continue;
            }
            // Nothing more yet: the writer may wait for the room read.
            self.freed(&rx.cursor);
            if quiet.get_or_insert_with(Instant::now).elapsed() >= DIRECT_STALL {
                core.progress(self.peer, h.src, h.kind);
                let got = prefix(read, &[&*p.head, &*p.body]);
                rx.reader.resume(h, &core.pool, &got);
                return false;
            }
            self.pause();
        }
        p.took(core, &h);
        p.filled = true;
        true
    }

    pub(super) fn end(&self, rx: &mut Rx, core: &Core) -> bool {
        if !rx.ended {
            rx.ended = true;
            rx.pending = None;
            rx.reader.discard(&core.pool);
            self.ended.store(true, Ordering::Release);
            core.lost(self.peer);
            self.wake_room();
            self.flushed.set();
        }
        true
    }

    /// A protocol error: cut the doorbell (the peer sees this side gone)
    /// and end the link.
    pub(super) fn refuse(&self, rx: &mut Rx, core: &Core) -> bool {
        let _ = self.sock.shutdown(Shutdown::Both);
        self.end(rx, core)
    }

    pub(super) fn fail(&self, core: &Core) {
        let _ = self.sock.shutdown(Shutdown::Both);
        self.ended.store(true, Ordering::Release);
        // The reader, whoever it is, finds the link ended on its next turn;
        // the I/O thread ends it now if it can.
        if let Ok(mut rx) = self.rx.try_lock() {
            self.end(&mut rx, core);
        }
        self.wake_room();
        self.wake_io();
    }
}
