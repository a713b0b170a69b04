//! Staged collectives: memory the network cannot read (a CUDA device
//! buffer) goes through host buffers, a chunk at a time, the copies of one
//! chunk overlapping the collective of the one before.
//!
//! The pipeline knows nothing of CUDA: it drives a [`Source`] (copies out)
//! and a [`Sink`] (copies back), so its chunking, ordering and failure
//! handling are tested here on host memory, on machines with no GPU.
//!
//! With two host buffers, chunk `k + 1` is copied out while chunk `k`'s
//! collective runs on a helper thread, and chunk `k` is copied back while
//! chunk `k + 1`'s runs:
//!
//! ```text
//! caller:  down 0 | down 1 | (wait 0) up 0 | down 2 | (wait 1) up 1 | …
//! helper:         | op 0 ........ | op 1 ........ | op 2 ........ | …
//! ```
//!
//! Every rank must cut the same chunks (the same length, the same chunk
//! size), because each chunk is its own collective. A chunk's own check
//! is not enough: with chunks of 4, a rank staging 8 elements and one
//! staging 4 agree on the first chunk, and the longer one's second chunk
//! would wait for a collective the other never starts (or take its next
//! one). So the ranks first agree on the length ([`same_length`]: one
//! all_gather of a `u64`), and a rank whose length differs is named in
//! `CollectiveMismatch` on every rank, as the unstaged call would be.

use crate::{Element, Error, ProcessGroup, Result};
use std::ops::DerefMut;
use std::sync::mpsc;

mod work;
#[cfg(feature = "cuda")]
pub use work::DeviceWork;
#[cfg(feature = "cuda")]
pub(crate) use work::{by_rank_nb, elementwise_nb};

/// Memory the pipeline copies out of.
pub(crate) trait Source<T> {
    /// Its length in elements.
    fn len(&self) -> usize;
    /// Copies `self[at..at + into.len()]` into `into`, complete on return.
    fn download(&mut self, at: usize, into: &mut [T]) -> Result<()>;
}

/// Memory the pipeline copies out of and back into.
pub(crate) trait Sink<T>: Source<T> {
    /// Copies `from` into `self[at..at + from.len()]`, complete on return.
    fn upload(&mut self, at: usize, from: &[T]) -> Result<()>;
}

/// Every rank of `g` stages `n` elements for `op`: `Ok`, or
/// `CollectiveMismatch` naming the first rank whose length differs (the
/// same verdict on every rank, from one all_gather of the lengths).
pub(crate) fn same_length(g: &ProcessGroup, op: &str, n: usize) -> Result<()> {
    let mut all = vec![0u64; g.world_size() as usize];
    g.all_gather(&[n as u64], &mut all)?;
    match all.iter().position(|&m| m != n as u64) {
        None => Ok(()),
        Some(rank) => Err(Error::CollectiveMismatch {
            op: op.to_string(),
            ours: format!("{op} of {n} elements (staged from a device)"),
            theirs: format!("{op} of {} elements", all[rank]),
            rank: rank as u32,
        }),
    }
}

/// Which copies a chunk needs: a broadcast's non-root reads nothing out, a
/// reduce's non-root writes nothing back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ways {
    /// Copy each chunk out before its collective.
    pub(crate) down: bool,
    /// Copy each chunk back after it.
    pub(crate) up: bool,
}

impl Ways {
    pub(crate) const BOTH: Ways = Ways {
        down: true,
        up: true,
    };
}

/// Runs `op` (one collective, elementwise across ranks) over all of `mem`
/// in chunks of at most `chunk` elements, staged through `bufs`: host
/// buffers of at least `chunk` elements each, all of them handed back in
/// `bufs` whatever happens (the caller reuses them). With one buffer, or
/// one chunk, nothing overlaps and no thread is started. An empty `mem`
/// still runs `op` once, on an empty slice, so a rank whose length
/// differs from the others' is told so instead of left waiting.
///
/// The first error — a copy's or a collective's — ends the pipeline: no
/// collective is started after it, the chunks already in flight are
/// waited for (each bounded by the group's deadline), and it is returned.
pub(crate) fn pipelined<T, M, B, F>(
    mem: &mut M,
    bufs: &mut Vec<B>,
    chunk: usize,
    ways: Ways,
    op: F,
) -> Result<()>
where
    T: Element,
    M: Sink<T> + ?Sized,
    B: DerefMut<Target = [T]> + Send,
    F: Fn(&mut [T]) -> Result<()> + Sync,
{
    let n = mem.len();
    if chunk == 0 || bufs.is_empty() || bufs.iter().any(|b| b.len() < chunk.min(n)) {
        return Err(Error::InvalidArgument(format!(
            "staging: {} host buffers for chunks of {chunk} elements",
            bufs.len()
        )));
    }
    // At least one chunk: an empty buffer still runs its collective.
    let chunks = n.div_ceil(chunk).max(1);
    let len_of = |k: usize| chunk.min(n - k * chunk);
    if chunks == 1 || bufs.len() == 1 {
        let host = &mut bufs[0];
        for k in 0..chunks {
            let part = &mut host[..len_of(k)];
            if ways.down {
                mem.download(k * chunk, part)?;
            }
            op(part)?;
            if ways.up {
                mem.upload(k * chunk, part)?;
            }
        }
        return Ok(());
    }
    std::thread::scope(|s| {
        let (to_helper, jobs) = mpsc::channel::<(usize, B)>();
        let (back, done) = mpsc::channel::<(usize, B, Option<Result<()>>)>();
        let op = &op;
        s.spawn(move || {
            let mut failed = false;
            for (k, mut host) in jobs {
                // After a failure the rest are handed back unrun: the
                // caller has an error to return, and a collective started
                // now would wait on ranks that have stopped.
                let outcome = (!failed).then(|| op(&mut host[..len_of(k)]));
                failed |= matches!(outcome, Some(Err(_)));
                if back.send((k, host, outcome)).is_err() {
                    return;
                }
            }
        });
        let mut next = 0;
        let mut in_flight = 0;
        let mut first_error = None;
        while first_error.is_none() && (next < chunks || in_flight > 0) {
            // Copy out as many chunks as there are free buffers.
            while next < chunks {
                let Some(mut host) = bufs.pop() else { break };
                if ways.down {
                    if let Err(e) = mem.download(next * chunk, &mut host[..len_of(next)]) {
                        bufs.push(host);
                        first_error = Some(e);
                        break;
                    }
                }
                // The helper only ends when `to_helper` is dropped.
                let _ = to_helper.send((next, host));
                next += 1;
                in_flight += 1;
            }
            if first_error.is_some() || in_flight == 0 {
                break;
            }
            let Ok((k, host, outcome)) = done.recv() else {
                break;
            };
            in_flight -= 1;
            match outcome {
                Some(Ok(())) if ways.up => {
                    if let Err(e) = mem.upload(k * chunk, &host[..len_of(k)]) {
                        first_error = Some(e);
                    }
                }
                Some(Ok(())) => {}
                Some(Err(e)) => first_error = Some(e),
                None => {}
            }
            bufs.push(host);
        }
        drop(to_helper);
        // Take back every buffer still out (their collectives end by the
        // group's deadline at the latest).
        for (_, host, outcome) in done.iter() {
            if let (None, Some(Err(e))) = (&first_error, outcome) {
                first_error = Some(e);
            }
            bufs.push(host);
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// Runs `op` once over all of `send` (copied out whole) into a host buffer
/// of `recv_len` elements, copied back whole into `recv` when `up`: the
/// collectives whose output is laid out by rank (all_gather, gather,
/// scatter, reduce_scatter, all_to_all).
pub(crate) fn staged_whole<T, S, R, F>(send: &mut S, recv: &mut R, ways: Ways, op: F) -> Result<()>
where
    T: Element,
    S: Source<T> + ?Sized,
    R: Sink<T> + ?Sized,
    F: FnOnce(&[T], &mut [T]) -> Result<()>,
{
    let zero = bytemuck::Zeroable::zeroed();
    let mut out = vec![zero; send.len()];
    if ways.down {
        send.download(0, &mut out)?;
    }
    let mut back = vec![zero; recv.len()];
    op(&out, &mut back)?;
    if ways.up {
        recv.upload(0, &back)?;
    }
    Ok(())
}

#[cfg(test)]
mod host;
#[cfg(test)]
mod tests {
    use super::host::*;
    use super::*;
    use crate::ReduceOp;

    /// Lengths around the chunk size (empty, one short, one over, many
    /// chunks and a ragged tail) all give the unstaged call's result, and
    /// the copies cover the buffer exactly once each way, in order, no
    /// piece longer than a chunk.
    #[test]
    fn a_staged_all_reduce_equals_the_host_call_at_every_length() {
        let chunk = 7;
        for n in [0usize, 1, 6, 7, 8, 14, 15, 50] {
            let results = on_world(3, |rank, g| {
                let data: Vec<i64> = (0..n as i64).map(|i| i * 10 + i64::from(rank)).collect();
                let mut want = data.clone();
                g.all_reduce(&mut want, ReduceOp::Sum).unwrap();
                let mut mem = Host::new(data);
                let mut host = bufs::<i64>(2, chunk);
                pipelined(&mut mem, &mut host, chunk, Ways::BOTH, |b| {
                    g.all_reduce(b, ReduceOp::Sum)
                })
                .unwrap();
                assert_eq!(host.len(), 2, "every buffer is handed back");
                (mem.data.clone(), want, mem.steps())
            });
            for (got, want, steps) in results {
                assert_eq!(got, want, "n = {n}");
                let want_pieces: Vec<(usize, usize)> = (0..n.max(1))
                    .step_by(chunk)
                    .map(|at| (at, chunk.min(n - at.min(n))))
                    .collect();
                assert_eq!(pieces(&steps, false), want_pieces, "n = {n}");
                assert_eq!(pieces(&steps, true), want_pieces, "n = {n}");
            }
        }
    }

    /// With two buffers, chunk k + 1 is copied out before chunk k is
    /// copied back: the copy out is not held behind the collective and the
    /// copy back (a pipeline, not a loop of three steps).
    #[test]
    fn the_next_chunk_is_copied_out_before_the_last_one_is_copied_back() {
        let chunk = 4;
        let n = 4 * chunk + 1;
        let steps = on_world(2, |_, g| {
            let mut mem = Host::new(vec![1.0f32; n]);
            let mut host = bufs::<f32>(2, chunk);
            pipelined(&mut mem, &mut host, chunk, Ways::BOTH, |b| {
                g.all_reduce(b, ReduceOp::Sum)
            })
            .unwrap();
            assert!(mem.data.iter().all(|&x| x == 2.0));
            mem.steps()
        });
        for steps in steps {
            let at = |s: Step| steps.iter().position(|x| *x == s).unwrap();
            for k in 0..4 {
                let next_down = at(Step::Down((k + 1) * chunk, chunk.min(n - (k + 1) * chunk)));
                let this_up = at(Step::Up(k * chunk, chunk));
                assert!(next_down < this_up, "chunk {k}: {steps:?}");
            }
        }
    }

    /// A broadcast's non-root copies nothing out, a reduce's non-root
    /// nothing back; the results are the host call's.
    #[test]
    fn copies_a_rank_does_not_need_are_not_made() {
        let chunk = 5;
        let n = 23;
        let out = on_world(3, |rank, g| {
            let root = 1;
            let mut mem = Host::new(vec![rank + 1; n]);
            let mut host = bufs::<u32>(2, chunk);
            let ways = Ways {
                down: rank == root,
                up: true,
            };
            pipelined(&mut mem, &mut host, chunk, ways, |b| g.broadcast(b, root)).unwrap();
            let broadcast = (mem.data.clone(), mem.steps());
            let mut mem = Host::new(vec![rank + 1; n]);
            let ways = Ways {
                down: true,
                up: rank == root,
            };
            pipelined(&mut mem, &mut host, chunk, ways, |b| {
                g.reduce(b, ReduceOp::Sum, root)
            })
            .unwrap();
            (rank, broadcast, mem.data.clone(), mem.steps())
        });
        for (rank, (bdata, bsteps), rdata, rsteps) in out {
            assert_eq!(bdata, vec![2; n]);
            let downs = pieces(&bsteps, false).len();
            assert_eq!(downs, if rank == 1 { 5 } else { 0 }, "rank {rank}");
            let ups = pieces(&rsteps, true).len();
            assert_eq!(ups, if rank == 1 { 5 } else { 0 }, "rank {rank}");
            if rank == 1 {
                assert_eq!(rdata, vec![6; n]);
            }
        }
    }

    /// A scan staged chunk by chunk is the host scan (prefixes are
    /// elementwise across ranks, so chunks do not interact), for an
    /// inclusive and an exclusive scan, on a float type.
    #[test]
    fn scans_are_staged_exactly() {
        let chunk = 3;
        let n = 10;
        let out = on_world(4, |rank, g| {
            let data: Vec<f64> = (0..n).map(|i| (i as f64) + f64::from(rank) * 0.5).collect();
            let mut want = data.clone();
            g.scan(&mut want, ReduceOp::Max).unwrap();
            let mut want_ex = data.clone();
            g.exclusive_scan(&mut want_ex, ReduceOp::Sum).unwrap();
            let mut host = bufs::<f64>(3, chunk);
            let mut mem = Host::new(data.clone());
            pipelined(&mut mem, &mut host, chunk, Ways::BOTH, |b| {
                g.scan(b, ReduceOp::Max)
            })
            .unwrap();
            let mut ex = Host::new(data);
            pipelined(&mut ex, &mut host, chunk, Ways::BOTH, |b| {
                g.exclusive_scan(b, ReduceOp::Sum)
            })
            .unwrap();
            (mem.data == want, ex.data == want_ex, host.len())
        });
        assert!(
            out.iter().all(|&(a, b, bufs)| a && b && bufs == 3),
            "{out:?}"
        );
    }

    /// A copy that fails on every rank at the same chunk ends the call
    /// there with that error, the chunks before it written back, nothing
    /// after it started, every buffer handed back.
    #[test]
    fn a_failed_copy_ends_the_pipeline_with_its_error() {
        let chunk = 4;
        let n = 24;
        let out = on_world(2, |_, g| {
            let mut mem = Host::new(vec![1u64; n]);
            mem.fail_down_at = Some(3 * chunk);
            let mut host = bufs::<u64>(2, chunk);
            let r = pipelined(&mut mem, &mut host, chunk, Ways::BOTH, |b| {
                g.all_reduce(b, ReduceOp::Sum)
            });
            (r, mem.data.clone(), mem.steps(), host.len())
        });
        for (r, data, steps, bufs) in out {
            assert!(
                matches!(&r, Err(Error::DeviceFailed { what, .. }) if what.contains("at 12")),
                "{r:?}"
            );
            assert_eq!(bufs, 2);
            assert!(steps
                .iter()
                .all(|s| !matches!(s, Step::Down(at, _) if *at > 12)));
            // Chunks 0 and 1 were reduced and written back before chunk 3
            // was reached (two buffers: 2 had to be taken back first).
            assert_eq!(&data[..2 * chunk], &[2; 8]);
            assert_eq!(&data[3 * chunk..], &[1; 12]);
        }
    }

    /// A collective that fails (a root outside the group) is returned as
    /// it is, and no later chunk's collective is started.
    #[test]
    fn a_failed_collective_ends_the_pipeline_with_its_error() {
        let chunk = 2;
        let out = on_world(2, |_, g| {
            let mut mem = Host::new(vec![0i32; 9]);
            let mut host = bufs::<i32>(2, chunk);
            let calls = std::sync::atomic::AtomicUsize::new(0);
            let r = pipelined(&mut mem, &mut host, chunk, Ways::BOTH, |b| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                g.broadcast(b, 9)
            });
            (r, calls.into_inner(), host.len())
        });
        for (r, calls, bufs) in out {
            assert!(
                matches!(&r, Err(Error::InvalidArgument(m)) if m.contains('9')),
                "{r:?}"
            );
            assert_eq!(calls, 1, "no collective after the first failed");
            assert_eq!(bufs, 2);
        }
    }

    /// Lengths that differ between ranks are named before any chunk
    /// moves, never a hang — also where one rank's chunks are a prefix of
    /// another's (8 against 4 with chunks of 4: the first chunks agree),
    /// and where one rank has a single chunk; ranks that agree go on.
    #[test]
    fn ranks_with_other_lengths_are_told_so() {
        let chunk = 4;
        for lengths in [[10, 6, 10], [8, 4, 8], [12, 8, 12], [4, 4, 3], [9, 9, 9]] {
            let out = on_world(3, |rank, g| {
                let n = lengths[rank as usize];
                let mut mem = Host::new(vec![1i32; n]);
                let mut host = bufs::<i32>(2, chunk);
                same_length(g, "all_reduce", n)?;
                pipelined(&mut mem, &mut host, chunk, Ways::BOTH, |b| {
                    g.all_reduce(b, ReduceOp::Sum)
                })?;
                Ok::<_, Error>(mem.data)
            });
            let odd = lengths.iter().position(|&n| n != lengths[0]);
            for (rank, r) in out.into_iter().enumerate() {
                match (odd, r) {
                    (None, Ok(data)) => assert_eq!(data, vec![3; lengths[0]]),
                    (
                        Some(odd),
                        Err(Error::CollectiveMismatch {
                            rank: named,
                            theirs,
                            ..
                        }),
                    ) => {
                        // Each names the first rank whose length is not its own.
                        let want = lengths.iter().position(|&n| n != lengths[rank]).unwrap();
                        assert_eq!(named as usize, want, "{lengths:?} rank {rank}");
                        assert!(theirs.contains(&lengths[want].to_string()), "{theirs}");
                        assert!(odd < 3);
                    }
                    (_, r) => panic!("{lengths:?} rank {rank}: {r:?}"),
                }
            }
        }
    }

    /// Buffers too short for a chunk, or none, are refused before any
    /// copy or collective.
    #[test]
    fn host_buffers_that_cannot_hold_a_chunk_are_refused() {
        let mut mem = Host::new(vec![0u8; 10]);
        let mut none: Vec<Vec<u8>> = Vec::new();
        let never = |_: &mut [u8]| -> Result<()> { panic!("no collective may run") };
        assert!(matches!(
            pipelined(&mut mem, &mut none, 4, Ways::BOTH, never),
            Err(Error::InvalidArgument(_))
        ));
        let mut short = bufs::<u8>(2, 3);
        assert!(matches!(
            pipelined(&mut mem, &mut short, 4, Ways::BOTH, never),
            Err(Error::InvalidArgument(_))
        ));
        assert!(mem.steps().is_empty());
    }

    /// The whole-buffer path: an all_gather's output laid out by rank.
    #[test]
    fn a_whole_buffer_collective_is_staged_once_each_way() {
        let out = on_world(3, |rank, g| {
            let mut send = Host::new(vec![rank as u8; 2]);
            let mut recv = Host::new(vec![0u8; 6]);
            staged_whole(&mut send, &mut recv, Ways::BOTH, |s, r| g.all_gather(s, r)).unwrap();
            (recv.data.clone(), send.steps(), recv.steps())
        });
        for (data, sent, received) in out {
            assert_eq!(data, [0, 0, 1, 1, 2, 2]);
            assert_eq!(sent, [Step::Down(0, 2)]);
            assert_eq!(received, [Step::Up(0, 6)]);
        }
    }
}
