//! all_reduce across hosts in three tiers (`Path::Hierarchical`): with
//! `L` ranks on each host and `n` elements, `shard = n / L`:
//!
//! 1. NCCL reduce-scatter inside each host: local rank `l` holds the
//!    host's sum of `buf[l·shard..(l+1)·shard]`;
//! 2. a meshwork all_reduce of that shard between the hosts' rank `l`s
//!    (one group per local rank, `H` ranks each), staged through pinned
//!    host memory with its copies pipelined against the transfer;
//! 3. NCCL all-gather inside each host.
//!
//! The `n − L·shard < L` elements left over are all_reduced in the host,
//! then across it by every local rank's group (the same few elements
//! each: no rank waits on another to pass them on). Every host holds the
//! same number of ranks, so `Avg` composes (the average of the hosts'
//! averages). Only the network between hosts carries host memory; the
//! host's own GPUs talk device to device.
//!
//! The tiers are a trait, so the same composition runs on host memory in
//! tests, with meshwork sub-groups for both tiers.

use super::intra::NcclComm;
use super::path::Layout;
use super::staging::{Sink, Source, Ways};
use super::{download, upload, DeviceGroup};
use crate::{Element, ProcessGroup, ReduceOp, Result};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use std::ops::Range;
use std::sync::Arc;

/// What the composition needs of each tier.
pub(crate) trait Tiers<T: Element> {
    /// The memory reduced.
    type Mem: ?Sized;
    fn len(&self, m: &Self::Mem) -> usize;
    /// Ranks on this host (`L`).
    fn per_host(&self) -> usize;
    /// In the host: `m[..L·shard]` reduced, this rank's shard left in
    /// its slot.
    fn host_reduce_scatter(&self, m: &mut Self::Mem, shard: usize, op: ReduceOp) -> Result<()>;
    /// In the host: every rank's slot to every rank.
    fn host_all_gather(&self, m: &mut Self::Mem, shard: usize) -> Result<()>;
    /// In the host: `m[at]` all_reduced.
    fn host_all_reduce(&self, m: &mut Self::Mem, at: Range<usize>, op: ReduceOp) -> Result<()>;
    /// Between hosts (this rank's local-rank group): `m[at]` all_reduced.
    fn across(&self, m: &mut Self::Mem, at: Range<usize>, op: ReduceOp) -> Result<()>;
    /// This rank's place on its host.
    fn local(&self) -> usize;
}

/// The hierarchical all_reduce of `m` (see the module docs).
pub(crate) fn all_reduce<T: Element, X: Tiers<T>>(
    x: &X,
    m: &mut X::Mem,
    op: ReduceOp,
) -> Result<()> {
    let (n, l) = (x.len(m), x.per_host());
    let shard = n / l;
    let main = shard * l;
    if shard > 0 {
        x.host_reduce_scatter(m, shard, op)?;
        let mine = x.local() * shard;
        x.across(m, mine..mine + shard, op)?;
        x.host_all_gather(m, shard)?;
    }
    if main < n {
        x.host_all_reduce(m, main..n, op)?;
        x.across(m, main..n, op)?;
    }
    Ok(())
}

/// The two tiers of a hierarchical group: NCCL among this host's ranks,
/// and a staged group of the ranks with this rank's place on every host.
pub(crate) struct Hier {
    host_group: Arc<ProcessGroup>,
    host: NcclComm,
    /// The staged tier between hosts (its chunk size is the group's).
    pub(super) across: DeviceGroup,
    local: usize,
    per_host: usize,
    /// The group's and the across group's communicators when made: a
    /// shrink of either changes who is reduced with whom.
    parent_comm: u64,
    across_comm: u64,
}

impl Hier {
    /// `group` split by host and by place on the host (two collectives of
    /// `group`): the host's group, ranked by place, and the place's
    /// group, ranked by host.
    pub(crate) fn split(
        group: &ProcessGroup,
        layout: &Layout,
    ) -> Result<(Arc<ProcessGroup>, Arc<ProcessGroup>)> {
        let me = group.rank() as usize;
        let (host, local) = (layout.host_of[me], layout.local_of[me]);
        let host_group = group.split(host as u32, local as u32)?;
        let across_group = group.split(local as u32, host as u32)?;
        Ok((host_group, across_group))
    }

    /// The tiers over the groups [`split`](Self::split) made: the host's
    /// NCCL communicator is made here (collective over the host group).
    pub(crate) fn new(
        group: &ProcessGroup,
        host_group: Arc<ProcessGroup>,
        across_group: Arc<ProcessGroup>,
        stream: &Arc<CudaStream>,
    ) -> Result<Hier> {
        let host = NcclComm::connect(&host_group, stream)?;
        Ok(Hier {
            local: host_group.rank() as usize,
            per_host: host_group.world_size() as usize,
            parent_comm: group.inner().comm_id,
            across_comm: across_group.inner().comm_id,
            host_group,
            host,
            across: DeviceGroup::new(across_group, Arc::clone(stream)),
        })
    }

    /// `Ok` while `parent` and the across group are those the tiers were
    /// made over; else the host communicator is aborted and the call
    /// refused (make a new `DeviceGroup`).
    pub(crate) fn current(&self, parent: &ProcessGroup) -> Result<()> {
        if parent.inner().comm_id == self.parent_comm
            && self.across.group().inner().comm_id == self.across_comm
        {
            return Ok(());
        }
        Err(self.host.reject(crate::Error::DeviceFailed {
            op: "all_reduce".into(),
            what: "the group changed (shrank or grew) since its tiers were made; \
                   make a new DeviceGroup"
                .into(),
        }))
    }
}

/// `buf[base..base + len]`, staged by the tier between hosts.
struct InRange<'a, T> {
    buf: &'a mut CudaSlice<T>,
    at: Range<usize>,
    stream: &'a Arc<CudaStream>,
}

impl<T: DeviceRepr> Source<T> for InRange<'_, T> {
    fn len(&self) -> usize {
        self.at.len()
    }
    fn download(&mut self, at: usize, into: &mut [T]) -> Result<()> {
        download(
            self.buf,
            self.stream,
            "all_reduce",
            self.at.start + at,
            into,
        )
    }
}

impl<T: DeviceRepr> Sink<T> for InRange<'_, T> {
    fn upload(&mut self, at: usize, from: &[T]) -> Result<()> {
        upload(
            self.buf,
            self.stream,
            "all_reduce",
            self.at.start + at,
            from,
        )
    }
}

impl<T: Element + DeviceRepr> Tiers<T> for Hier {
    type Mem = CudaSlice<T>;

    fn len(&self, m: &CudaSlice<T>) -> usize {
        m.len()
    }
    fn per_host(&self) -> usize {
        self.per_host
    }
    fn local(&self) -> usize {
        self.local
    }
    fn host_reduce_scatter(&self, m: &mut CudaSlice<T>, shard: usize, op: ReduceOp) -> Result<()> {
        self.host
            .reduce_scatter_in_place(&self.host_group, m, shard, op)
    }
    fn host_all_gather(&self, m: &mut CudaSlice<T>, shard: usize) -> Result<()> {
        self.host.all_gather_in_place(&self.host_group, m, shard)
    }
    fn host_all_reduce(&self, m: &mut CudaSlice<T>, at: Range<usize>, op: ReduceOp) -> Result<()> {
        self.host.all_reduce_range(&self.host_group, m, at, op)
    }
    fn across(&self, m: &mut CudaSlice<T>, at: Range<usize>, op: ReduceOp) -> Result<()> {
        let stream = Arc::clone(self.across.stream());
        let mut mem = InRange {
            buf: m,
            at,
            stream: &stream,
        };
        let g = self.across.group();
        // A failure between hosts, on this rank alone, would leave its
        // host-mates in the all-gather that follows: the host's
        // communicator is aborted so that nothing pairs with it wrongly.
        self.across
            .pipeline("all_reduce", &mut mem, Ways::BOTH, |h| g.all_reduce(h, op))
            .map_err(|e| self.host.reject(e))
    }
}

#[cfg(test)]
mod tests {
    use super::super::path::{Layout, Placement};
    use super::*;
    use crate::local::on_world;

    /// Both tiers as meshwork sub-groups on host memory.
    struct OnHost {
        host: Arc<ProcessGroup>,
        across: Arc<ProcessGroup>,
    }

    impl<T: Element> Tiers<T> for OnHost {
        type Mem = [T];
        fn len(&self, m: &[T]) -> usize {
            m.len()
        }
        fn per_host(&self) -> usize {
            self.host.world_size() as usize
        }
        fn local(&self) -> usize {
            self.host.rank() as usize
        }
        fn host_reduce_scatter(&self, m: &mut [T], shard: usize, op: ReduceOp) -> Result<()> {
            let (l, me) = (Tiers::<T>::per_host(self), Tiers::<T>::local(self));
            let mut out = vec![bytemuck::Zeroable::zeroed(); shard];
            self.host.reduce_scatter(&m[..l * shard], &mut out, op)?;
            m[me * shard..(me + 1) * shard].copy_from_slice(&out);
            Ok(())
        }
        fn host_all_gather(&self, m: &mut [T], shard: usize) -> Result<()> {
            let (l, me) = (Tiers::<T>::per_host(self), Tiers::<T>::local(self));
            let mine = m[me * shard..(me + 1) * shard].to_vec();
            self.host.all_gather(&mine, &mut m[..l * shard])
        }
        fn host_all_reduce(&self, m: &mut [T], at: Range<usize>, op: ReduceOp) -> Result<()> {
            self.host.all_reduce(&mut m[at], op)
        }
        fn across(&self, m: &mut [T], at: Range<usize>, op: ReduceOp) -> Result<()> {
            self.across.all_reduce(&mut m[at], op)
        }
    }

    /// Six ranks as three hosts of two, in the order 0 1 2 0 1 2 (hosts
    /// interleaved, so the splits' ranks differ from the parent's).
    fn tiers(g: &ProcessGroup) -> OnHost {
        let all: Vec<Placement> = (0..6u8)
            .map(|r| Placement {
                host: [r % 3; 16],
                gpu: [r; 16],
                nccl: 21_803,
            })
            .collect();
        let layout = Layout::of(&all);
        let me = g.rank() as usize;
        let (host, local) = (layout.host_of[me], layout.local_of[me]);
        OnHost {
            host: g.split(host as u32, local as u32).unwrap(),
            across: g.split(local as u32, host as u32).unwrap(),
        }
    }

    /// Every length (empty, shorter than a host, a ragged tail, many
    /// shards) and operator gives what the flat all_reduce gives.
    #[test]
    fn three_tiers_give_the_flat_all_reduce() {
        let out = on_world(6, |g| {
            let x = tiers(g);
            let mut results = Vec::new();
            for n in [0usize, 1, 2, 5, 6, 7, 101] {
                for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod] {
                    let data: Vec<i64> = (0..n as i64)
                        .map(|i| (i * 7 + i64::from(g.rank()) * 3) % 11 - 4)
                        .collect();
                    let mut want = data.clone();
                    g.all_reduce(&mut want, op).unwrap();
                    let mut got = data;
                    all_reduce(&x, &mut got[..], op).unwrap();
                    results.push((n, op, got, want));
                }
                // Avg: the hosts' averages averaged (equal hosts).
                let data: Vec<f64> = (0..n).map(|i| (i + g.rank() as usize) as f64).collect();
                let mut want = data.clone();
                g.all_reduce(&mut want, ReduceOp::Avg).unwrap();
                let mut got = data;
                all_reduce(&x, &mut got[..], ReduceOp::Avg).unwrap();
                let close = got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12);
                results.push((n, ReduceOp::Avg, vec![i64::from(close)], vec![1]));
            }
            results
        });
        for rank in out {
            for (n, op, got, want) in rank {
                assert_eq!(got, want, "n = {n}, {op:?}");
            }
        }
    }
}
