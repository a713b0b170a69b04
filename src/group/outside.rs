//! Collectives another engine carries (NCCL on device buffers) still take
//! their place in the group's order and flight record, so the group's
//! forensics cover them: a rank that never entered one is named in the
//! `Timeout` of the ranks that did, as for a collective meshwork carries,
//! and a member that died ends the wait with `PeerDisconnected`.

use super::{Begun, Call, GroupInner, ProcessGroup};
use crate::error::{Error, Result};
use meshwork_collectives::Element;
use std::time::{Duration, Instant};

/// A collective in the group's order that another engine runs: made with
/// [`ProcessGroup::outside`], ended by [`Outside::watch`] or [`Outside::refused`].
pub(crate) struct Outside {
    call: Begun,
    started: Instant,
}

/// What the engine says of its call when asked.
#[derive(Debug)]
pub(crate) enum Progress {
    /// Complete.
    Done,
    /// Not yet.
    Pending,
    /// It failed.
    Failed(Error),
}

impl ProcessGroup {
    /// Take the next place in the group's order for `call` on `count`
    /// elements of `T`, carried by another engine. The same checks as a
    /// meshwork collective (a usable group, its root in range, `Avg` on
    /// floats only).
    pub(crate) fn outside<T: Element>(&self, call: Call, count: usize) -> Result<Outside> {
        let call = self.shared().begin::<T>(call, count)?;
        Ok(Outside {
            call,
            started: Instant::now(),
        })
    }
}

impl Outside {
    /// Poll `progress` until it is done, it fails, a member of the group
    /// fails, or the group's deadline passes; `abort` is called, once,
    /// before any error but the engine's own is returned, to unblock the
    /// engine. The outcome goes into the flight record.
    pub(crate) fn watch(
        self,
        mut progress: impl FnMut() -> Progress,
        abort: impl FnOnce(),
    ) -> Result<()> {
        let inner = &self.call.inner;
        let deadline = self.started + inner.timeout();
        let mut turns = 0u32;
        let outcome = loop {
            match progress() {
                Progress::Done => break Ok(()),
                Progress::Failed(e) => break Err(e),
                Progress::Pending => {}
            }
            if let Some(e) = inner.member_failed() {
                abort();
                break Err(e);
            }
            if Instant::now() >= deadline {
                abort();
                break Err(inner.stalled(self.call.desc.coll.name(), self.call.seq));
            }
            turns = turns.saturating_add(1);
            pause(turns);
        };
        inner.rpc.flight.end(self.call.flight, &outcome);
        outcome
    }

    /// The engine refused the call: `e` is recorded and handed back.
    pub(crate) fn refused(self, e: Error) -> Error {
        let outcome: Result<()> = Err(e);
        self.call.inner.rpc.flight.end(self.call.flight, &outcome);
        outcome.err().unwrap_or(Error::ShutDown)
    }
}

/// Spin briefly, then yield, then sleep a little longer each turn up to
/// 1 ms: a device collective of a few µs answers within the spins, one of
/// seconds costs a core nothing.
#[allow(
    clippy::disallowed_methods,
    reason = "a poll's back-off, not synchronisation: a device call has no completion to \
              wait on with a deadline (cuEventSynchronize has none), so it is asked"
)]
pub(crate) fn pause(turns: u32) {
    if turns < 64 {
        std::hint::spin_loop();
    } else if turns < 256 {
        std::thread::yield_now();
    } else {
        let us = u64::from(turns - 255).min(1000);
        std::thread::sleep(Duration::from_micros(us));
    }
}

impl GroupInner {
    /// The group cannot go on: revoked, shut down, or a member failed
    /// (named).
    fn member_failed(&self) -> Option<Error> {
        if let Err(e) = self.check_usable() {
            return Some(e);
        }
        self.transport
            .failed()
            .first()
            .map(|&rank| Error::PeerDisconnected { rank })
    }

    /// Collective `seq` (`op`) made no progress for the deadline and no
    /// member is known failed: those that never entered it, named by
    /// their answers; else every other member, entered but stuck, and
    /// what those whose own call failed say of it.
    fn stalled(&self, op: &str, seq: u64) -> Error {
        if let Some(e) = self.member_failed() {
            return e;
        }
        let found = self.ask_about(seq);
        if let Some(missing) = found.missing(op, seq) {
            return Error::Timeout {
                op: op.to_string(),
                waiting_on: missing.ranks,
                detail: missing.detail,
            };
        }
        let words: Vec<String> = found
            .failed
            .iter()
            .map(|(rank, a)| format!("rank {rank}: {}", a.words(seq)))
            .collect();
        Error::Timeout {
            op: op.to_string(),
            waiting_on: (0..self.world).filter(|&r| r != self.rank).collect(),
            detail: if words.is_empty() {
                String::new()
            } else {
                format!(": {}", words.join("; "))
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::{local, on_world};
    use crate::{CallState, ReduceOp};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Barrier;

    /// Done after a few polls: `Ok`, recorded as done, no abort; the
    /// group's next collective pairs with the others' (the outside call
    /// took one place in the order on every rank).
    #[test]
    fn a_completed_outside_call_takes_one_place_in_the_order() {
        let out = on_world(3, |g| {
            let polls = AtomicU32::new(0);
            let aborts = AtomicU32::new(0);
            let call = g.outside::<f32>(Call::AllReduce { op: ReduceOp::Sum }, 8);
            let r = call.unwrap().watch(
                || match polls.fetch_add(1, Ordering::Relaxed) {
                    0..=9 => Progress::Pending,
                    _ => Progress::Done,
                },
                || {
                    aborts.fetch_add(1, Ordering::Relaxed);
                },
            );
            let mut next = [g.rank()];
            g.all_reduce(&mut next, ReduceOp::Sum).unwrap();
            let record = g.flight_record();
            (r, aborts.into_inner(), next, record)
        });
        for (r, aborts, next, record) in out {
            r.unwrap();
            assert_eq!(aborts, 0);
            assert_eq!(next, [3]);
            let entry = &record[record.len() - 2];
            assert_eq!((entry.op, entry.seq), ("all_reduce", 0));
            assert_eq!(entry.state, CallState::Done);
            assert_eq!(record[record.len() - 1].seq, 1);
        }
    }

    /// The engine's own failure is returned as it is, without an abort.
    #[test]
    fn the_engines_failure_is_returned_without_an_abort() {
        let out = on_world(2, |g| {
            let aborted = AtomicU32::new(0);
            let call = g.outside::<u8>(Call::Broadcast { root: 1 }, 4).unwrap();
            let r = call.watch(
                || {
                    Progress::Failed(Error::DeviceFailed {
                        op: "broadcast".into(),
                        what: "an illegal address".into(),
                    })
                },
                || {
                    aborted.fetch_add(1, Ordering::Relaxed);
                },
            );
            (r, aborted.into_inner())
        });
        for (r, aborted) in out {
            assert!(matches!(r, Err(Error::DeviceFailed { .. })), "{r:?}");
            assert_eq!(aborted, 0);
        }
    }

    /// Ranks 0 and 1 enter a call rank 2 never makes: at the deadline the
    /// engine is aborted once and both name rank 2 as not having entered
    /// it, as they would for a collective meshwork carries.
    #[test]
    fn a_rank_that_never_entered_is_named_at_the_deadline() {
        let done = Barrier::new(3);
        let out = on_world(3, |g| {
            g.set_timeout(Duration::from_millis(300));
            let r = if g.rank() < 2 {
                let aborts = AtomicU32::new(0);
                let call = g.outside::<f32>(Call::AllGather, 16).unwrap();
                let r = call.watch(
                    || Progress::Pending,
                    || {
                        aborts.fetch_add(1, Ordering::Relaxed);
                    },
                );
                Some((r, aborts.into_inner()))
            } else {
                None
            };
            // Rank 2 stays up to answer the others' questions.
            done.wait();
            r
        });
        for (r, aborts) in out.into_iter().flatten() {
            assert_eq!(aborts, 1);
            match r {
                Err(Error::Timeout {
                    op,
                    waiting_on,
                    detail,
                }) => {
                    assert_eq!(op, "all_gather");
                    assert_eq!(waiting_on, [2]);
                    assert!(
                        detail.contains("rank 2 has not entered all_gather #0"),
                        "{detail}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// Every rank entered, but rank 1's engine failed at once while the
    /// others' waited: at the deadline they say what rank 1 says of it.
    #[test]
    fn a_rank_whose_engine_failed_is_described_at_the_deadline() {
        let done = Barrier::new(3);
        let out = on_world(3, |g| {
            g.set_timeout(Duration::from_millis(300));
            let call = g.outside::<f32>(Call::AllReduce { op: ReduceOp::Sum }, 4);
            let r = call.unwrap().watch(
                || match g.rank() {
                    1 => Progress::Failed(Error::DeviceFailed {
                        op: "all_reduce".into(),
                        what: "unhandled cuda error".into(),
                    }),
                    _ => Progress::Pending,
                },
                || {},
            );
            done.wait();
            (g.rank(), r)
        });
        for (rank, r) in out {
            match (rank, r) {
                (1, Err(Error::DeviceFailed { .. })) => {}
                (
                    _,
                    Err(Error::Timeout {
                        waiting_on, detail, ..
                    }),
                ) => {
                    assert_eq!(waiting_on.len(), 2, "{waiting_on:?}");
                    // Its class, in this rank's words: never the text
                    // of a member's error.
                    assert!(
                        detail.contains("rank 1: its all_reduce #0 failed")
                            && detail.contains("(a device failure)"),
                        "{detail}"
                    );
                }
                (rank, other) => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    /// A call the engine refused keeps its place, recorded as failed
    /// with the error it hands back.
    #[test]
    fn a_refused_call_is_recorded_failed_in_its_place() {
        let g = local(1).unwrap().pop().unwrap();
        let call = g.outside::<f64>(Call::Gather { root: 0 }, 3).unwrap();
        let e = call.refused(Error::InvalidArgument("gather: recv has 2 elements".into()));
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        let mut next = [1.0f64];
        g.all_reduce(&mut next, ReduceOp::Sum).unwrap();
        let record = g.flight_record();
        assert_eq!((record[0].op, record[0].seq), ("gather", 0));
        assert!(
            matches!(&record[0].state, CallState::Failed(why) if why.contains("recv has 2")),
            "{:?}",
            record[0].state
        );
        assert_eq!(record[1].seq, 1);
    }

    /// The same checks as a meshwork collective, before any place is taken.
    #[test]
    fn bad_arguments_take_no_place() {
        let out = on_world(2, |g| {
            let bad_root = g.outside::<f32>(
                Call::Reduce {
                    op: ReduceOp::Sum,
                    root: 2,
                },
                4,
            );
            let avg_int = g.outside::<i32>(Call::AllReduce { op: ReduceOp::Avg }, 4);
            let mut next = [1u8];
            g.all_reduce(&mut next, ReduceOp::Sum).unwrap();
            (bad_root.err(), avg_int.err(), next, g.flight_record().len())
        });
        for (bad_root, avg_int, next, calls) in out {
            assert!(
                matches!(bad_root, Some(Error::InvalidArgument(_))),
                "{bad_root:?}"
            );
            assert!(
                matches!(avg_int, Some(Error::InvalidArgument(_))),
                "{avg_int:?}"
            );
            assert_eq!(next, [2]);
            assert_eq!(calls, 1);
        }
    }
}
