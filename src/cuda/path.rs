//! Where each rank of a group runs (its host, its GPU, whether it loads
//! NCCL) and the path a `DeviceGroup` takes from that: the same verdict on
//! every rank, from one all_gather.

use super::{failed, ffi};
use crate::{ProcessGroup, Result};
use cudarc::driver::CudaStream;

/// How a [`DeviceGroup`](super::DeviceGroup) moves device buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Path {
    /// NCCL, device to device, for all_reduce, broadcast, reduce,
    /// all_gather, reduce_scatter, all_to_all, gather and scatter; scan,
    /// exclusive_scan and point-to-point (tagged, which NCCL is not) are
    /// staged.
    Nccl,
    /// Ranks on several hosts, the same number on each, a GPU per rank:
    /// all_reduce in three tiers (NCCL reduce-scatter in each host, a
    /// staged meshwork all_reduce of each shard between hosts, NCCL
    /// all-gather in each host); every other call staged.
    Hierarchical {
        /// Hosts.
        hosts: usize,
        /// Ranks (GPUs) on each.
        per_host: usize,
    },
    /// Every call staged through pinned host memory; `why` says why not
    /// NCCL.
    Staged {
        /// Why NCCL is not used.
        why: String,
    },
}

/// Where one rank runs: its host and its GPU, and the NCCL it loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) host: [u8; 16],
    pub(crate) gpu: [u8; 16],
    /// The NCCL release it loads with every call meshwork makes, as
    /// `major·10000 + minor·100 + patch`; 0 for none.
    pub(crate) nccl: u32,
}

const PLACEMENT_BYTES: usize = 36;

impl Placement {
    fn encode(&self) -> [u8; PLACEMENT_BYTES] {
        let mut b = [0u8; PLACEMENT_BYTES];
        b[..16].copy_from_slice(&self.host);
        b[16..32].copy_from_slice(&self.gpu);
        b[32..].copy_from_slice(&self.nccl.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Placement {
        let mut p = Placement {
            host: [0; 16],
            gpu: [0; 16],
            nccl: u32::from_le_bytes([b[32], b[33], b[34], b[35]]),
        };
        p.host.copy_from_slice(&b[..16]);
        p.gpu.copy_from_slice(&b[16..32]);
        p
    }

    /// A rank that cannot say where it runs: it takes no NCCL path.
    pub(crate) fn unusable() -> Placement {
        Placement {
            host: host_id(),
            gpu: [0; 16],
            nccl: 0,
        }
    }

    /// This process on `stream`'s device.
    pub(crate) fn here(stream: &CudaStream) -> Result<Placement> {
        let uuid = stream
            .context()
            .uuid()
            .map_err(|e| failed("the device's UUID", &e))?;
        Ok(Placement {
            host: host_id(),
            gpu: uuid.bytes.map(|b| b as u8),
            nccl: match (ffi::api(), super::nccl_version()) {
                (Ok(_), Ok(v)) => v.major * 10_000 + v.minor * 100 + v.patch,
                _ => 0,
            },
        })
    }
}

/// This machine: its kernel's boot id (two network namespaces of one
/// machine are one host to NCCL, which sees the same GPUs), else a hash
/// of its host name.
fn host_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .unwrap_or_default();
    let hex: Vec<u8> = text.trim().bytes().filter(u8::is_ascii_hexdigit).collect();
    if hex.len() == 32 {
        for (i, pair) in hex.chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).unwrap_or("00");
            id[i] = u8::from_str_radix(s, 16).unwrap_or(0);
        }
    } else {
        let h = name_hash(text.trim().as_bytes());
        id.copy_from_slice(&h);
    }
    id
}

/// 16 bytes of SHA-256 (only to tell host names apart).
fn name_hash(bytes: &[u8]) -> [u8; 16] {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// The path every rank takes, from every rank's placement (the same
/// verdict everywhere: it is a function of what all_gather gave all).
pub(crate) fn choose(all: &[Placement]) -> Path {
    let staged = |why: String| Path::Staged { why };
    if let Some(rank) = all.iter().position(|p| p.nccl == 0) {
        return staged(format!(
            "rank {rank} cannot load NCCL 2.18 or newer (libnccl.so.2)"
        ));
    }
    // NCCL refuses a communicator of mixed releases.
    if let Some(rank) = all.iter().position(|p| p.nccl != all[0].nccl) {
        let v = |code: u32| format!("{}.{}.{}", code / 10_000, code / 100 % 100, code % 100);
        return staged(format!(
            "ranks load different NCCL releases ({} on rank 0, {} on rank {rank})",
            v(all[0].nccl),
            v(all[rank].nccl)
        ));
    }
    for (a, pa) in all.iter().enumerate() {
        if let Some(b) = all[a + 1..]
            .iter()
            .position(|pb| pb.gpu == pa.gpu && pb.host == pa.host)
        {
            return staged(format!(
                "ranks {a} and {} share one GPU; NCCL needs a GPU per rank",
                a + 1 + b
            ));
        }
    }
    let layout = Layout::of(all);
    match (layout.hosts, layout.per_host) {
        (1, _) => Path::Nccl,
        (hosts, Some(1)) => staged(format!(
            "one rank on each of {hosts} hosts: NCCL has nothing to do inside a host"
        )),
        (hosts, Some(per_host)) => Path::Hierarchical { hosts, per_host },
        (hosts, None) => staged(format!(
            "the {hosts} hosts hold different numbers of ranks; the hierarchical \
             all_reduce needs the same number on each"
        )),
    }
}

/// The hosts of a group: each rank's host (numbered by first appearance)
/// and its place among that host's ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Host number of each rank.
    pub(crate) host_of: Vec<usize>,
    /// Each rank's place on its host (in rank order).
    pub(crate) local_of: Vec<usize>,
    /// How many hosts.
    pub(crate) hosts: usize,
    /// Ranks on each host, if every host has the same number.
    pub(crate) per_host: Option<usize>,
}

impl Layout {
    pub(crate) fn of(all: &[Placement]) -> Layout {
        let mut seen: Vec<[u8; 16]> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        let mut host_of = Vec::with_capacity(all.len());
        let mut local_of = Vec::with_capacity(all.len());
        for p in all {
            let h = match seen.iter().position(|s| *s == p.host) {
                Some(h) => h,
                None => {
                    seen.push(p.host);
                    counts.push(0);
                    seen.len() - 1
                }
            };
            host_of.push(h);
            local_of.push(counts[h]);
            counts[h] += 1;
        }
        let per_host = counts
            .first()
            .copied()
            .filter(|&c| counts.iter().all(|&x| x == c));
        Layout {
            host_of,
            local_of,
            hosts: seen.len(),
            per_host,
        }
    }
}

/// Every rank's placement: the path they all take, and their layout.
pub(crate) fn agree_on_path(group: &ProcessGroup, me: Placement) -> Result<(Path, Layout)> {
    let world = group.world_size() as usize;
    let mut all = vec![0u8; world * PLACEMENT_BYTES];
    group.all_gather(&me.encode(), &mut all)?;
    let all: Vec<Placement> = all.chunks(PLACEMENT_BYTES).map(Placement::decode).collect();
    Ok((choose(&all), Layout::of(&all)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::on_world;

    fn at(host: u8, gpu: u8) -> Placement {
        Placement {
            host: [host; 16],
            gpu: [gpu; 16],
            nccl: 21_803,
        }
    }

    fn why(p: Path) -> String {
        match p {
            Path::Staged { why } => why,
            other => panic!("not staged: {other:?}"),
        }
    }

    #[test]
    fn nccl_only_for_one_host_with_a_gpu_per_rank() {
        assert_eq!(choose(&[at(1, 1), at(1, 2), at(1, 3)]), Path::Nccl);
        let mut no_nccl = [at(1, 1), at(1, 2), at(1, 3)];
        no_nccl[2].nccl = 0;
        assert!(why(choose(&no_nccl)).starts_with("rank 2 cannot load NCCL"));
        let mut mixed = [at(1, 1), at(1, 2), at(1, 3)];
        mixed[1].nccl = 22_105;
        let mixed = why(choose(&mixed));
        assert_eq!(
            mixed,
            "ranks load different NCCL releases (2.18.3 on rank 0, 2.21.5 on rank 1)"
        );
        let hosts = why(choose(&[at(1, 1), at(2, 2), at(1, 3), at(3, 4)]));
        assert!(
            hosts.contains("3 hosts hold different numbers of ranks"),
            "{hosts}"
        );
        assert_eq!(
            choose(&[at(1, 1), at(2, 2), at(1, 3), at(2, 4)]),
            Path::Hierarchical {
                hosts: 2,
                per_host: 2
            }
        );
        let one_each = why(choose(&[at(1, 1), at(2, 2), at(3, 3)]));
        assert!(
            one_each.starts_with("one rank on each of 3 hosts"),
            "{one_each}"
        );
        // The same UUID on two hosts is two GPUs.
        assert_eq!(
            choose(&[at(1, 1), at(1, 2), at(2, 1), at(2, 2)]),
            Path::Hierarchical {
                hosts: 2,
                per_host: 2
            }
        );
        let shared = why(choose(&[at(1, 1), at(1, 2), at(1, 1)]));
        assert!(
            shared.starts_with("ranks 0 and 2 share one GPU"),
            "{shared}"
        );
    }

    #[test]
    fn a_layout_numbers_hosts_by_first_appearance_and_ranks_within_them() {
        let l = Layout::of(&[at(7, 1), at(3, 2), at(7, 3), at(3, 4), at(7, 5), at(3, 6)]);
        assert_eq!(l.host_of, [0, 1, 0, 1, 0, 1]);
        assert_eq!(l.local_of, [0, 0, 1, 1, 2, 2]);
        assert_eq!((l.hosts, l.per_host), (2, Some(3)));
        assert_eq!(Layout::of(&[at(1, 1), at(2, 2), at(1, 3)]).per_host, None);
    }

    /// Every rank reaches the same verdict from what each says of itself.
    #[test]
    fn the_ranks_agree_on_the_path() {
        let paths = on_world(3, |g| {
            let nccl = agree_on_path(g, at(1, g.rank() as u8)).unwrap().0;
            let shared = agree_on_path(g, at(1, (g.rank() % 2) as u8)).unwrap().0;
            (nccl, shared)
        });
        for (nccl, shared) in paths {
            assert_eq!(nccl, Path::Nccl);
            assert!(why(shared).starts_with("ranks 0 and 2 share one GPU"));
        }
    }

    #[test]
    fn a_host_id_is_stable_and_not_empty() {
        assert_eq!(host_id(), host_id());
        assert_ne!(host_id(), [0; 16]);
    }
}
