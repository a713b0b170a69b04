//! Shared test machinery: worlds on threads, typed inputs, and reference
//! results computed in f64 / i128 without the library's kernels.

use meshwork::half::{bf16, f16};
use meshwork::{Element, ProcessGroup, ReduceOp};
use meshwork_collectives::Collective;
use std::time::Duration;

/// Run `f` on every rank of a fresh `local(p)` world, each on its own
/// thread; returns the results in rank order.
pub fn run_world<R: Send>(p: u32, f: impl Fn(&ProcessGroup) -> R + Sync) -> Vec<R> {
    run_world_with(p, meshwork::Topology::Mesh, f)
}

/// [`run_world`] over `topology`.
pub fn run_world_with<R: Send>(
    p: u32,
    topology: meshwork::Topology,
    f: impl Fn(&ProcessGroup) -> R + Sync,
) -> Vec<R> {
    let world = meshwork::local_with(p, topology).expect("local world");
    for g in &world {
        // A failing rank must not leave the others waiting a minute.
        g.set_timeout(Duration::from_secs(20));
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = world.iter().map(|g| s.spawn(|| f(g))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Element types as the tests see them: made from small integers, read back
/// into the reference domain.
pub trait TestElem: Element {
    const FLOAT: bool;
    /// Relative tolerance for results that are rounded (Avg).
    const EPS: f64;
    fn make(x: i64) -> Self;
    fn to_f64(self) -> f64;
    fn to_i128(self) -> i128;
    fn from_f64(x: f64) -> Self;
    fn from_i128_wrapping(x: i128) -> Self;
}

macro_rules! float_elem {
    ($t:ty, $eps:expr, $from:expr, $to:expr) => {
        impl TestElem for $t {
            const FLOAT: bool = true;
            const EPS: f64 = $eps;
            fn make(x: i64) -> Self {
                $from(x as f64)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn to_i128(self) -> i128 {
                $to(self) as i128
            }
            fn from_f64(x: f64) -> Self {
                $from(x)
            }
            fn from_i128_wrapping(x: i128) -> Self {
                $from(x as f64)
            }
        }
    };
}

float_elem!(f32, 2e-7, |x: f64| x as f32, |v: f32| f64::from(v));
float_elem!(f64, 3e-16, |x: f64| x, |v: f64| v);
float_elem!(f16, 1e-3, f16::from_f64, |v: f16| v.to_f64());
float_elem!(bf16, 8e-3, bf16::from_f64, |v: bf16| v.to_f64());

macro_rules! int_elem {
    ($t:ty) => {
        impl TestElem for $t {
            const FLOAT: bool = false;
            const EPS: f64 = 0.0;
            fn make(x: i64) -> Self {
                // Scaled so sums and products wrap in the narrow types.
                (x.wrapping_mul(17)) as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn to_i128(self) -> i128 {
                self as i128
            }
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn from_i128_wrapping(x: i128) -> Self {
                x as $t
            }
        }
    };
}

int_elem!(i8);
int_elem!(i32);
int_elem!(i64);
int_elem!(u8);
int_elem!(u32);
int_elem!(u64);

/// Rank `r`'s input element `i` for `op`: products stay exact in every float
/// type (powers of two), sums stay exact in bf16.
pub fn input<T: TestElem>(r: usize, i: usize, op: Option<ReduceOp>) -> T {
    let x = if op == Some(ReduceOp::Prod) {
        [-2, -1, 1, 2][(r * 3 + i) % 4]
    } else {
        ((r * 7 + i * 13) % 23) as i64 - 11
    };
    T::make(x)
}

pub fn inputs<T: TestElem>(
    r: usize,
    range: std::ops::Range<usize>,
    op: Option<ReduceOp>,
) -> Vec<T> {
    range.map(|i| input::<T>(r, i, op)).collect()
}

/// The reduction of element `i` over `ranks`, computed in f64 (floats) or
/// i128 (integers) from the inputs, never with the library's kernels.
/// `None` for an empty range (the caller supplies the identity).
pub fn reference<T: TestElem>(op: ReduceOp, ranks: std::ops::Range<usize>, i: usize) -> Option<T> {
    let n = ranks.len();
    let vals: Vec<T> = ranks.map(|r| input::<T>(r, i, Some(op))).collect();
    if vals.is_empty() {
        return None;
    }
    Some(if T::FLOAT {
        let xs = vals.iter().map(|v| v.to_f64());
        T::from_f64(match op {
            ReduceOp::Sum => xs.sum(),
            ReduceOp::Avg => xs.sum::<f64>() / n as f64,
            ReduceOp::Prod => xs.product(),
            ReduceOp::Min => xs.fold(f64::INFINITY, f64::min),
            ReduceOp::Max => xs.fold(f64::NEG_INFINITY, f64::max),
        })
    } else {
        let xs = vals.iter().map(|v| v.to_i128());
        T::from_i128_wrapping(match op {
            ReduceOp::Sum | ReduceOp::Avg => xs.sum(),
            ReduceOp::Prod => xs.fold(1i128, |a, b| a.wrapping_mul(b)),
            ReduceOp::Min => xs.min().unwrap_or(0),
            ReduceOp::Max => xs.max().unwrap_or(0),
        })
    })
}

/// The identity as DESIGN.md states it, spelled independently of
/// `Element::identity`.
pub fn identity<T: TestElem>(op: ReduceOp) -> T {
    let bits = 8 * std::mem::size_of::<T>() as u32;
    let signed = T::from_f64(-1.0).to_i128() < 0;
    let (min, max) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    match (op, T::FLOAT) {
        (ReduceOp::Sum | ReduceOp::Avg, _) => T::from_f64(0.0),
        (ReduceOp::Prod, _) => T::from_f64(1.0),
        (ReduceOp::Min, true) => T::from_f64(f64::INFINITY),
        (ReduceOp::Max, true) => T::from_f64(f64::NEG_INFINITY),
        (ReduceOp::Min, false) => T::from_i128_wrapping(max),
        (ReduceOp::Max, false) => T::from_i128_wrapping(min),
    }
}

/// Whether `coll` takes a reduce operator.
pub fn reduces(coll: Collective) -> bool {
    matches!(
        coll,
        Collective::AllReduce
            | Collective::ReduceScatter
            | Collective::Reduce
            | Collective::Scan
            | Collective::ExclusiveScan
    )
}

/// Operators that apply to `T`.
pub fn ops_for<T: TestElem>() -> Vec<ReduceOp> {
    ReduceOp::ALL
        .into_iter()
        .filter(|&op| T::FLOAT || op != ReduceOp::Avg)
        .collect()
}

/// Run `coll` with `op` on this rank over the standard inputs; returns
/// (what this rank got, what it should get). `n` is the per-rank count (the
/// block size for block collectives). Outputs the API leaves unspecified
/// are returned empty on both sides.
pub fn run_case<T: TestElem>(
    g: &ProcessGroup,
    coll: Collective,
    op: Option<ReduceOp>,
    n: usize,
) -> meshwork::Result<(Vec<T>, Vec<T>)> {
    let p = g.world_size() as usize;
    let r = g.rank() as usize;
    let root = (p / 2) as u32;
    let is_root = r == root as usize;
    let o = op.unwrap_or(ReduceOp::Sum);
    let red = |ranks: std::ops::Range<usize>, i: usize| -> T {
        reference::<T>(o, ranks, i).unwrap_or_else(|| identity::<T>(o))
    };
    Ok(match coll {
        Collective::AllReduce => {
            let mut b = inputs::<T>(r, 0..n, op);
            g.all_reduce(&mut b, o)?;
            (b, (0..n).map(|i| red(0..p, i)).collect())
        }
        Collective::Broadcast => {
            let mut b = if is_root {
                inputs::<T>(r, 0..n, op)
            } else {
                vec![T::zeroed(); n]
            };
            g.broadcast(&mut b, root)?;
            (b, inputs::<T>(root as usize, 0..n, op))
        }
        Collective::AllGather => {
            let mut out = vec![T::zeroed(); n * p];
            g.all_gather(&inputs::<T>(r, 0..n, op), &mut out)?;
            (out, (0..p).flat_map(|q| inputs::<T>(q, 0..n, op)).collect())
        }
        Collective::ReduceScatter => {
            let mut out = vec![T::zeroed(); n];
            g.reduce_scatter(&inputs::<T>(r, 0..n * p, op), &mut out, o)?;
            (out, (r * n..(r + 1) * n).map(|i| red(0..p, i)).collect())
        }
        Collective::Reduce => {
            let mut b = inputs::<T>(r, 0..n, op);
            g.reduce(&mut b, o, root)?;
            if is_root {
                (b, (0..n).map(|i| red(0..p, i)).collect())
            } else {
                (Vec::new(), Vec::new())
            }
        }
        Collective::AllToAll => {
            let mut out = vec![T::zeroed(); n * p];
            g.all_to_all(&inputs::<T>(r, 0..n * p, op), &mut out)?;
            let want = (0..p)
                .flat_map(|q| inputs::<T>(q, r * n..(r + 1) * n, op))
                .collect();
            (out, want)
        }
        Collective::Gather => {
            let mut out = if is_root {
                vec![T::zeroed(); n * p]
            } else {
                Vec::new()
            };
            g.gather(&inputs::<T>(r, 0..n, op), &mut out, root)?;
            let want = if is_root {
                (0..p).flat_map(|q| inputs::<T>(q, 0..n, op)).collect()
            } else {
                Vec::new()
            };
            (out, want)
        }
        Collective::Scatter => {
            let send = if is_root {
                inputs::<T>(r, 0..n * p, op)
            } else {
                Vec::new()
            };
            let mut out = vec![T::zeroed(); n];
            g.scatter(&send, &mut out, root)?;
            (out, inputs::<T>(root as usize, r * n..(r + 1) * n, op))
        }
        Collective::Scan => {
            let mut b = inputs::<T>(r, 0..n, op);
            g.scan(&mut b, o)?;
            (b, (0..n).map(|i| red(0..r + 1, i)).collect())
        }
        Collective::ExclusiveScan => {
            let mut b = inputs::<T>(r, 0..n, op);
            g.exclusive_scan(&mut b, o)?;
            (b, (0..n).map(|i| red(0..r, i)).collect())
        }
        Collective::Barrier => {
            g.barrier()?;
            (Vec::new(), Vec::new())
        }
    })
}

/// Compare element-wise; a mismatch reports rank, index, expected, actual.
/// Avg results are rounded and may differ in the last place.
pub fn compare<T: TestElem>(
    got: &[T],
    want: &[T],
    op: Option<ReduceOp>,
    ctx: &str,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{ctx}: length {} != expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if op == Some(ReduceOp::Avg) {
            (g.to_f64() - w.to_f64()).abs() <= w.to_f64().abs() * T::EPS * 2.0
        } else {
            bytemuck::bytes_of(g) == bytemuck::bytes_of(w)
        };
        if !ok {
            return Err(format!("{ctx}: index {i}: expected {w:?}, got {g:?}"));
        }
    }
    Ok(())
}

/// Listening sockets for `n` loopback ranks, bound as formation binds them
/// ([`meshwork::bind_rank_sockets`]), and their addresses: handed to each
/// rank (`Node::listen_on`, or a child's `MESHRUN_SOCKETS`), the ports are
/// the ranks' from the start — no other test can take one meanwhile.
pub fn bound_ports(
    n: usize,
) -> (
    Vec<std::net::SocketAddr>,
    Vec<(std::net::TcpListener, std::net::UdpSocket)>,
) {
    let held: Vec<_> = (0..n)
        .map(|_| {
            meshwork::bind_rank_sockets(std::net::Ipv4Addr::LOCALHOST.into())
                .expect("bind a rank's sockets")
        })
        .collect();
    let addrs = held
        .iter()
        .map(|(t, _)| t.local_addr().expect("a bound address"))
        .collect();
    (addrs, held)
}

/// `n` loopback addresses whose ports are free right now for both TCP and
/// UDP (QUIC and its TCP sidecar share the number), for the tests whose
/// ports cannot be handed over bound: a seed's address, a rank a test
/// starts late, stands in for or leaves unstarted. Ranks started at once
/// take [`bound_ports`] instead.
///
/// Whoever uses these binds them later (the addresses must be known to every
/// rank before any of them binds), so another socket may take one in
/// between. Three things keep that window narrow:
/// - the ports come from 20000..29000, below Linux's ephemeral range
///   (32768–60999 by default), which the kernel draws on for `bind(:0)`
///   and for the source port of every outgoing connection, the links'
///   own dials among them; so nothing the kernel assigns lands on them
///   (and the defaults 29400/29500/29600 lie above);
/// - nextest runs every test in a process of its own, many at once: each
///   process starts at its own place in that range (spread by pid) and
///   walks on from call to call, so concurrent tests try different ports,
///   and a port an earlier test of this process just released is not
///   offered again soon;
/// - every candidate is bound for TCP and for UDP and held until all `n`
///   are chosen, so a port someone holds is skipped and none repeats.
pub fn free_ports(n: usize) -> Vec<std::net::SocketAddr> {
    let mut held = Vec::new();
    let mut tried = 0;
    while held.len() < n {
        tried += 1;
        assert!(tried <= FREE_SPAN, "no {n} ports free in {FREE_LOW}..");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], next_free_candidate()));
        if let Ok(t) = std::net::TcpListener::bind(addr) {
            if let Ok(u) = std::net::UdpSocket::bind(addr) {
                held.push((t, u, addr));
            }
        }
    }
    held.into_iter().map(|(_, _, a)| a).collect()
}

const FREE_LOW: u16 = 20_000;
const FREE_SPAN: u16 = 9_000;
/// The next candidate is `FREE_LOW + FREE_CURSOR % FREE_SPAN`; `u32::MAX`
/// until the first call places it by pid.
static FREE_CURSOR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

fn next_free_candidate() -> u16 {
    use std::sync::atomic::Ordering::Relaxed;
    // Slots of 64 ports, one per process (modulo the number of slots).
    let slots = u32::from(FREE_SPAN / 64);
    let start = std::process::id() % slots * 64;
    let _ = FREE_CURSOR.compare_exchange(u32::MAX, start, Relaxed, Relaxed);
    let i = FREE_CURSOR.fetch_add(1, Relaxed) % u32::from(FREE_SPAN);
    FREE_LOW + i as u16
}

/// Form a `world`-rank group on loopback (default settings: QUIC, ranks
/// sharing memory), one thread per rank, and run `f` on each; results in
/// rank order.
pub fn run_nodes<R: Send>(
    world: u32,
    topology: meshwork::Topology,
    f: impl Fn(&ProcessGroup) -> meshwork::Result<R> + Sync,
) -> Vec<meshwork::Result<R>> {
    run_nodes_with(world, topology, |n| n, f)
}

/// [`run_nodes`] with every rank's `Node` adjusted by `tweak` first.
pub fn run_nodes_with<R: Send>(
    world: u32,
    topology: meshwork::Topology,
    tweak: impl Fn(meshwork::Node) -> meshwork::Node + Sync,
    f: impl Fn(&ProcessGroup) -> meshwork::Result<R> + Sync,
) -> Vec<meshwork::Result<R>> {
    let (addrs, held) = bound_ports(world as usize);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .zip(held)
            .map(|(r, (tcp, udp))| {
                let (addrs, f, tweak) = (addrs.clone(), &f, &tweak);
                s.spawn(move || {
                    let g = tweak(meshwork::Node::new(r, world))
                        .peers(addrs)?
                        .listen_on(tcp, Some(udp))
                        .topology(topology)
                        .timeout(Duration::from_secs(20))
                        .connect()?;
                    f(&g)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}
