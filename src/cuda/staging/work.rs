//! Non-blocking calls on staged memory: the input is copied out when the
//! call is made (so the call takes its place in the group's order then,
//! as a host `_nb` call does), the collective runs on the group's thread
//! on that host copy, and [`DeviceWork::wait`] copies the result back and
//! hands the buffer over.
//!
//! The whole buffer is staged at once: a chunked pipeline would be one
//! collective per chunk, each taking its place in the order only when the
//! one before it ends, after calls the caller made in between.

use super::{Sink, Source, Ways};
use crate::{Element, Error, Result, Work};
use std::fmt;
use std::time::Duration;

/// The pending result of a non-blocking call on a device buffer
/// (`DeviceGroup::all_reduce_nb`, …): the collective progresses on the
/// group's thread; [`wait`](Self::wait) copies its result into the device
/// buffer and returns that buffer. Every call has the group's deadline,
/// so `wait` always returns.
pub struct DeviceWork<R> {
    pending: Box<dyn Pending<R>>,
}

/// A host call in flight and what turns its result into `R`.
trait Pending<R>: Send {
    fn is_complete(&self) -> bool;
    fn wait(self: Box<Self>) -> Result<R>;
    fn wait_timeout(
        self: Box<Self>,
        timeout: Duration,
    ) -> std::result::Result<Result<R>, Box<dyn Pending<R>>>;
}

struct Staged<H, F> {
    work: Work<H>,
    finish: F,
}

impl<H, R, F> Pending<R> for Staged<H, F>
where
    H: Send + 'static,
    R: 'static,
    F: FnOnce(H) -> Result<R> + Send + 'static,
{
    fn is_complete(&self) -> bool {
        self.work.is_complete()
    }
    fn wait(self: Box<Self>) -> Result<R> {
        let Staged { work, finish } = *self;
        work.wait().and_then(finish)
    }
    fn wait_timeout(
        self: Box<Self>,
        timeout: Duration,
    ) -> std::result::Result<Result<R>, Box<dyn Pending<R>>> {
        let Staged { work, finish } = *self;
        match work.wait_timeout(timeout) {
            Ok(done) => Ok(done.and_then(finish)),
            Err(work) => Err(Box::new(Staged { work, finish })),
        }
    }
}

/// A call that ended before it was issued (an argument or copy error).
struct Ended<R>(Result<R>);

impl<R: Send> Pending<R> for Ended<R> {
    fn is_complete(&self) -> bool {
        true
    }
    fn wait(self: Box<Self>) -> Result<R> {
        self.0
    }
    fn wait_timeout(
        self: Box<Self>,
        _: Duration,
    ) -> std::result::Result<Result<R>, Box<dyn Pending<R>>> {
        Ok(self.0)
    }
}

impl<R: Send + 'static> DeviceWork<R> {
    /// `work` in flight; `finish` turns its host result into `R` on the
    /// thread that waits.
    pub(crate) fn new<H: Send + 'static>(
        work: Work<H>,
        finish: impl FnOnce(H) -> Result<R> + Send + 'static,
    ) -> DeviceWork<R> {
        DeviceWork {
            pending: Box::new(Staged { work, finish }),
        }
    }

    /// A call that ended before it was issued.
    pub(crate) fn ended(result: Result<R>) -> DeviceWork<R> {
        DeviceWork {
            pending: Box::new(Ended(result)),
        }
    }

    /// Block until the collective completes, copy its result into the
    /// device buffer, and return the buffer (or the error).
    pub fn wait(self) -> Result<R> {
        self.pending.wait()
    }

    /// [`wait`](Self::wait) at most `timeout` for the collective: the
    /// result, or the handle back (`Err`) if it has not completed by then
    /// (it goes on; wait again, or drop the handle). The copy back is not
    /// counted in `timeout`.
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<Result<R>, DeviceWork<R>> {
        self.pending
            .wait_timeout(timeout)
            .map_err(|pending| DeviceWork { pending })
    }

    /// Whether the collective has completed (`wait` then only copies the
    /// result back); never blocks.
    pub fn is_complete(&self) -> bool {
        self.pending.is_complete()
    }
}

impl<R> fmt::Debug for DeviceWork<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceWork")
            .field("complete", &self.pending.is_complete())
            .finish()
    }
}

/// An elementwise call on `mem` (all_reduce, broadcast, reduce, scan,
/// exclusive_scan): `mem` copied out when `ways.down`, `issue` given the
/// host copy, and its result copied back into `mem` when `ways.up`;
/// `into` turns `mem` into what `wait` returns.
pub(crate) fn elementwise_nb<T, M, R>(
    op: &'static str,
    mut mem: M,
    ways: Ways,
    issue: impl FnOnce(Vec<T>) -> Work<Vec<T>>,
    into: impl FnOnce(M) -> R + Send + 'static,
) -> DeviceWork<R>
where
    T: Element,
    M: Sink<T> + Send + 'static,
    R: Send + 'static,
{
    let n = mem.len();
    let host = copy_out(&mut mem, n, ways.down);
    issue_staged(op, host, mem, ways.up, issue, into)
}

/// A call laid out by rank (all_gather, reduce_scatter, all_to_all,
/// gather, scatter): `send` copied out when `ways.down`, `issue` given the
/// host copy (it checks the lengths, as the host call it makes does), and
/// the host result copied into `recv` when `ways.up`.
pub(crate) fn by_rank_nb<T, S, M, R>(
    op: &'static str,
    send: &mut S,
    recv: M,
    ways: Ways,
    issue: impl FnOnce(Vec<T>) -> Work<Vec<T>>,
    into: impl FnOnce(M) -> R + Send + 'static,
) -> DeviceWork<R>
where
    T: Element,
    S: Source<T> + ?Sized,
    M: Sink<T> + Send + 'static,
    R: Send + 'static,
{
    // A scatter's non-root sends nothing: its host copy is empty.
    let n = if ways.down { send.len() } else { 0 };
    let host = copy_out(send, n, ways.down);
    issue_staged(op, host, recv, ways.up, issue, into)
}

/// `n` elements of `from` in host memory (`n` zeros when not `down`).
fn copy_out<T: Element, S: Source<T> + ?Sized>(
    from: &mut S,
    n: usize,
    down: bool,
) -> Result<Vec<T>> {
    let mut host = vec![bytemuck::Zeroable::zeroed(); n];
    if down {
        from.download(0, &mut host)?;
    }
    Ok(host)
}

/// The host call `issue` makes of `host` (or the copy's error, with
/// nothing issued); `wait` fills `out` from its result when `up`, and
/// `into` turns `out` into what it returns.
fn issue_staged<T, M, R>(
    op: &'static str,
    host: Result<Vec<T>>,
    mut out: M,
    up: bool,
    issue: impl FnOnce(Vec<T>) -> Work<Vec<T>>,
    into: impl FnOnce(M) -> R + Send + 'static,
) -> DeviceWork<R>
where
    T: Element,
    M: Sink<T> + Send + 'static,
    R: Send + 'static,
{
    let host = match host {
        Ok(host) => host,
        Err(e) => return DeviceWork::ended(Err(e)),
    };
    DeviceWork::new(issue(host), move |host: Vec<T>| {
        if up {
            copy_back(op, &mut out, &host)?;
        }
        Ok(into(out))
    })
}

/// `host` into `mem`, which must be as long (the host call's result
/// always is; anything else is a bug here, reported, not a panic).
fn copy_back<T, M: Sink<T>>(op: &str, mem: &mut M, host: &[T]) -> Result<()> {
    if host.len() != mem.len() {
        return Err(Error::DeviceFailed {
            op: op.to_string(),
            what: format!(
                "a staged result of {} elements for a buffer of {}",
                host.len(),
                mem.len()
            ),
        });
    }
    mem.upload(0, host)
}

#[cfg(test)]
mod tests {
    use super::super::host::{on_world, pieces, Host};
    use super::*;
    use crate::ReduceOp;
    use std::sync::Barrier;

    fn values(rank: u32, n: usize) -> Vec<i32> {
        (0..n as i32).map(|i| i * 7 + rank as i32).collect()
    }

    /// The result equals the blocking host call's, and the buffer is
    /// copied out once and back once, whole.
    #[test]
    fn a_non_blocking_staged_all_reduce_equals_the_host_call() {
        for n in [0usize, 1, 1000] {
            let out = on_world(3, |rank, g| {
                let mut want = values(rank, n);
                g.all_reduce(&mut want, ReduceOp::Sum).unwrap();
                let work = elementwise_nb(
                    "all_reduce",
                    Host::new(values(rank, n)),
                    Ways::BOTH,
                    |h| g.all_reduce_nb(h, ReduceOp::Sum),
                    |mem| mem,
                );
                let mem = work.wait().unwrap();
                (mem.data.clone(), want, mem.steps())
            });
            for (got, want, steps) in out {
                assert_eq!(got, want, "n = {n}");
                assert_eq!(pieces(&steps, false), [(0, n)]);
                assert_eq!(pieces(&steps, true), [(0, n)]);
            }
        }
    }

    /// A broadcast's non-roots copy nothing out; a reduce's copy nothing
    /// back, and get their buffer back as it was.
    #[test]
    fn ranks_skip_the_copies_they_do_not_need() {
        let out = on_world(3, |rank, g| {
            let root = 1;
            let bcast = elementwise_nb(
                "broadcast",
                Host::new(values(rank, 5)),
                Ways {
                    down: rank == root,
                    up: rank != root,
                },
                |h| g.broadcast_nb(h, root),
                |mem| mem,
            )
            .wait()
            .unwrap();
            let reduced = elementwise_nb(
                "reduce",
                Host::new(values(rank, 5)),
                Ways {
                    down: true,
                    up: rank == root,
                },
                |h| g.reduce_nb(h, ReduceOp::Max, root),
                |mem| mem,
            )
            .wait()
            .unwrap();
            (
                rank,
                bcast.data.clone(),
                bcast.steps(),
                reduced.data.clone(),
                reduced.steps(),
            )
        });
        for (rank, bcast, bsteps, reduced, rsteps) in out {
            assert_eq!(bcast, values(1, 5));
            let (down, up) = if rank == 1 { (1, 0) } else { (0, 1) };
            assert_eq!(pieces(&bsteps, false).len(), down, "rank {rank}");
            assert_eq!(pieces(&bsteps, true).len(), up, "rank {rank}");
            let want = if rank == 1 {
                values(2, 5)
            } else {
                values(rank, 5)
            };
            assert_eq!(reduced, want, "rank {rank}");
            assert_eq!(pieces(&rsteps, true).len(), up ^ 1, "rank {rank}");
        }
    }

    /// The call is made when the function returns, not when it is waited
    /// for: rank 0's handle is not complete while the others have not
    /// called, `wait_timeout` hands it back, and it completes once they do.
    #[test]
    fn wait_timeout_hands_an_unfinished_call_back() {
        let called = Barrier::new(3);
        let out = on_world(3, |rank, g| {
            let call = || {
                elementwise_nb(
                    "all_reduce",
                    Host::new(values(rank, 4)),
                    Ways::BOTH,
                    |h| g.all_reduce_nb(h, ReduceOp::Sum),
                    |mem| mem.data,
                )
            };
            if rank == 0 {
                let work = call();
                let work = match work.wait_timeout(Duration::from_millis(20)) {
                    Err(work) => work,
                    Ok(r) => panic!("complete before the others called: {r:?}"),
                };
                assert!(!work.is_complete());
                called.wait();
                work.wait().unwrap()
            } else {
                called.wait();
                call().wait().unwrap()
            }
        });
        let want: Vec<i32> = (0..4).map(|i| 3 * 7 * i + 3).collect();
        for got in out {
            assert_eq!(got, want);
        }
    }

    /// A copy out that fails ends the call before it is issued: the error
    /// from `wait`, and the group's next call pairs with the others' next.
    #[test]
    fn a_failed_copy_out_issues_nothing() {
        let out = on_world(3, |rank, g| {
            let mut mem = Host::new(values(rank, 6));
            mem.fail_down_at = Some(0);
            let work = elementwise_nb(
                "all_reduce",
                mem,
                Ways::BOTH,
                |h| g.all_reduce_nb(h, ReduceOp::Sum),
                |mem| mem,
            );
            assert!(work.is_complete());
            let err = work.wait().err();
            let mut next = vec![rank as i32; 2];
            g.all_reduce(&mut next, ReduceOp::Sum).unwrap();
            (err, next)
        });
        for (err, next) in out {
            assert!(matches!(err, Some(Error::DeviceFailed { .. })), "{err:?}");
            assert_eq!(next, [3, 3]);
        }
    }

    /// A by-rank call gives the host call's result; a `recv` of the wrong
    /// length is refused before anything is issued.
    #[test]
    fn a_non_blocking_staged_all_gather_checks_recv_first() {
        let out = on_world(3, |rank, g| {
            let mut send = Host::new(values(rank, 2));
            let short = all_gather_into(g, &mut send, 5);
            let got = by_rank_nb(
                "all_gather",
                &mut send,
                Host::new(vec![0; 6]),
                Ways::BOTH,
                |h| g.all_gather_nb(h),
                |mem| mem.data,
            )
            .wait()
            .unwrap();
            (short, got)
        });
        let want: Vec<i32> = (0..3).flat_map(|r| values(r, 2)).collect();
        for (short, got) in out {
            match short {
                Some(Error::InvalidArgument(m)) => {
                    assert!(m.contains("recv has 5 elements, expected 6"), "{m}")
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(got, want);
        }
    }

    /// An all_gather into a `recv` of `len` elements (6 are needed),
    /// through the group's entry with a host `recv` of the same length
    /// (as `DeviceGroup::call_nb` makes it).
    fn all_gather_into(g: &crate::ProcessGroup, send: &mut Host<i32>, len: usize) -> Option<Error> {
        by_rank_nb(
            "all_gather",
            send,
            Host::new(vec![0; len]),
            Ways::BOTH,
            |send| {
                let recv = vec![0; len];
                g.call_nb(
                    crate::Call::AllGather,
                    crate::OwnedBuffers::SendRecv { send, recv },
                )
            },
            |mem| mem,
        )
        .wait()
        .err()
    }
}
