//! The GPU half of `benches/cuda/device-check.sh` (`--features cuda`), one
//! process per rank under `meshrun -n 4`: every collective and
//! point-to-point on device buffers, for every dtype, blocking and `_nb`,
//! against the same call on host buffers (bit for bit); NCCL loaded and a world of one run
//! through it; the staged all_reduce's time beside the host call's and
//! the copies' alone. Exits 1 if any case differs, 2 if there is no GPU.

#![allow(clippy::print_stdout, reason = "the device check reports its results")]

use meshwork::cuda::cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use meshwork::cuda::{nccl_check, Device, DeviceGroup, DeviceWork, Path};
use meshwork::{Element, Node, ProcessGroup, ReduceOp};
use std::sync::Arc;
use std::time::Instant;

type Outcome = std::result::Result<(), String>;

/// A dtype the check runs, made from small integers (exact in every
/// dtype, sums of four ranks included, so host and device agree bit for
/// bit whatever the reduction order).
trait Small: Element + DeviceRepr {
    fn small(k: u8) -> Self;
}

macro_rules! small {
    ($($t:ty => $f:expr),* $(,)?) => {
        $(impl Small for $t {
            fn small(k: u8) -> Self {
                let f: fn(u8) -> $t = $f;
                f(k)
            }
        })*
    };
}

small!(
    f32 => f32::from,
    f64 => f64::from,
    meshwork::half::f16 => |k| meshwork::half::f16::from_f32(f32::from(k)),
    meshwork::half::bf16 => |k| meshwork::half::bf16::from_f32(f32::from(k)),
    i8 => |k| k as i8,
    i32 => i32::from,
    i64 => i64::from,
    u8 => |k| k,
    u32 => u32::from,
    u64 => u64::from,
);

fn values<T: Small>(rank: u32, n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::small(((i * 7 + rank as usize * 3) % 13 + 1) as u8))
        .collect()
}

fn to_device<T: Small>(s: &Arc<CudaStream>, v: &[T]) -> CudaSlice<T> {
    s.clone_htod(v).expect("device memory")
}

fn to_host<T: Small>(s: &Arc<CudaStream>, d: &CudaSlice<T>) -> Vec<T> {
    s.clone_dtoh(d).expect("a copy from the device")
}

/// Every case for dtype `T`: (name, outcome).
fn check<T: Small>(
    g: &ProcessGroup,
    dg: &DeviceGroup,
    chunk: usize,
) -> meshwork::Result<Vec<(String, Outcome)>> {
    let s = dg.stream().clone();
    let rank = g.rank();
    let world = g.world_size() as usize;
    let mut out = Vec::new();
    let mut record = |name: &str, same: bool, at: bool| {
        let outcome = if !at || same {
            Ok(())
        } else {
            Err("the device's result differs from the host's".to_string())
        };
        out.push((format!("{name} {}", std::any::type_name::<T>()), outcome));
    };
    // Elementwise: three chunks and a ragged tail, through the pipeline.
    let n = 3 * chunk / std::mem::size_of::<T>() + 5;
    let data = values::<T>(rank, n);
    type HostCall<'a, T> = Box<dyn Fn(&mut [T]) -> meshwork::Result<()> + 'a>;
    type DevCall<'a, T> = Box<dyn Fn(&mut CudaSlice<T>) -> meshwork::Result<()> + 'a>;
    let cases: Vec<(&str, HostCall<'_, T>, DevCall<'_, T>, bool)> = vec![
        (
            "all_reduce sum",
            Box::new(|b| g.all_reduce(b, ReduceOp::Sum)),
            Box::new(|d| dg.all_reduce(d, ReduceOp::Sum)),
            true,
        ),
        (
            "all_reduce max",
            Box::new(|b| g.all_reduce(b, ReduceOp::Max)),
            Box::new(|d| dg.all_reduce(d, ReduceOp::Max)),
            true,
        ),
        (
            "broadcast",
            Box::new(|b| g.broadcast(b, 1)),
            Box::new(|d| dg.broadcast(d, 1)),
            true,
        ),
        (
            "reduce",
            Box::new(|b| g.reduce(b, ReduceOp::Sum, 2)),
            Box::new(|d| dg.reduce(d, ReduceOp::Sum, 2)),
            rank == 2,
        ),
        (
            "scan",
            Box::new(|b| g.scan(b, ReduceOp::Sum)),
            Box::new(|d| dg.scan(d, ReduceOp::Sum)),
            true,
        ),
        (
            "exclusive_scan",
            Box::new(|b| g.exclusive_scan(b, ReduceOp::Min)),
            Box::new(|d| dg.exclusive_scan(d, ReduceOp::Min)),
            rank != 0,
        ),
    ];
    let mut wants = std::collections::HashMap::new();
    for (name, host, dev, at) in cases {
        let mut want = data.clone();
        host(&mut want)?;
        let mut d = to_device(&s, &data);
        dev(&mut d)?;
        record(name, to_host(&s, &d) == want, at);
        wants.insert(name, want);
    }
    // The same, non-blocking: all five issued before any is waited for.
    let nb: Vec<(&str, DeviceWork<CudaSlice<T>>, bool)> = vec![
        (
            "all_reduce sum",
            dg.all_reduce_nb(to_device(&s, &data), ReduceOp::Sum),
            true,
        ),
        ("broadcast", dg.broadcast_nb(to_device(&s, &data), 1), true),
        (
            "reduce",
            dg.reduce_nb(to_device(&s, &data), ReduceOp::Sum, 2),
            rank == 2,
        ),
        (
            "scan",
            dg.scan_nb(to_device(&s, &data), ReduceOp::Sum),
            true,
        ),
        (
            "exclusive_scan",
            dg.exclusive_scan_nb(to_device(&s, &data), ReduceOp::Min),
            rank != 0,
        ),
    ];
    for (name, work, at) in nb {
        let d = work.wait()?;
        record(
            &format!("{name} (_nb)"),
            Some(&to_host(&s, &d)) == wants.get(name),
            at,
        );
    }
    // Laid out by rank: whole buffers.
    let b = 1001;
    let block = values::<T>(rank, b);
    let blocks = values::<T>(rank, world * b);
    let zeros = |len| vec![bytemuck::Zeroable::zeroed(); len];
    type HostPair<'a, T> = Box<dyn Fn(&[T], &mut [T]) -> meshwork::Result<()> + 'a>;
    type DevPair<'a, T> =
        Box<dyn Fn(&CudaSlice<T>, &mut CudaSlice<T>) -> meshwork::Result<()> + 'a>;
    let gather_root = 3 % world as u32;
    // (name, what is sent, received length, host call, device call, checked here)
    type ByRank<'a, T> = (
        &'a str,
        &'a [T],
        usize,
        HostPair<'a, T>,
        DevPair<'a, T>,
        bool,
    );
    let cases: Vec<ByRank<'_, T>> = vec![
        (
            "all_gather",
            &block,
            world * b,
            Box::new(|s, r| g.all_gather(s, r)),
            Box::new(|s, r| dg.all_gather(s, r)),
            true,
        ),
        (
            "reduce_scatter",
            &blocks,
            b,
            Box::new(|s, r| g.reduce_scatter(s, r, ReduceOp::Sum)),
            Box::new(|s, r| dg.reduce_scatter(s, r, ReduceOp::Sum)),
            true,
        ),
        (
            "all_to_all",
            &blocks,
            world * b,
            Box::new(|s, r| g.all_to_all(s, r)),
            Box::new(|s, r| dg.all_to_all(s, r)),
            true,
        ),
        (
            "gather",
            &block,
            world * b,
            Box::new(|s, r| g.gather(s, r, gather_root)),
            Box::new(|s, r| dg.gather(s, r, gather_root)),
            rank == gather_root,
        ),
        (
            "scatter",
            &blocks,
            b,
            Box::new(|s, r| g.scatter(s, r, 0)),
            Box::new(|s, r| dg.scatter(s, r, 0)),
            true,
        ),
    ];
    let mut wants = std::collections::HashMap::new();
    for (name, send, recv_len, host, dev, at) in cases {
        let mut want = zeros(recv_len);
        host(send, &mut want)?;
        let mut d = to_device(&s, &zeros(recv_len));
        dev(&to_device(&s, send), &mut d)?;
        record(name, to_host(&s, &d) == want, at);
        wants.insert(name, want);
    }
    let into = |len| to_device(&s, &zeros(len));
    let nb: Vec<(&str, DeviceWork<CudaSlice<T>>, bool)> = vec![
        (
            "all_gather",
            dg.all_gather_nb(&to_device(&s, &block), into(world * b)),
            true,
        ),
        (
            "reduce_scatter",
            dg.reduce_scatter_nb(&to_device(&s, &blocks), into(b), ReduceOp::Sum),
            true,
        ),
        (
            "all_to_all",
            dg.all_to_all_nb(&to_device(&s, &blocks), into(world * b)),
            true,
        ),
        (
            "gather",
            dg.gather_nb(&to_device(&s, &block), into(world * b), gather_root),
            rank == gather_root,
        ),
        (
            "scatter",
            dg.scatter_nb(&to_device(&s, &blocks), into(b), 0),
            true,
        ),
    ];
    for (name, work, at) in nb {
        let d = work.wait()?;
        record(
            &format!("{name} (_nb)"),
            Some(&to_host(&s, &d)) == wants.get(name),
            at,
        );
    }
    dg.barrier_nb().wait()?;
    if world == 1 {
        dg.barrier()?;
        return Ok(out);
    }
    // Point to point around the ring: device to device, and device to host.
    let next = (rank + 1) % world as u32;
    let prev = (rank + world as u32 - 1) % world as u32;
    dg.send(&to_device(&s, &block), next, 7)?;
    let mut d = to_device(&s, &zeros(b));
    dg.recv(&mut d, prev, 7)?;
    let sent_by_prev = values::<T>(prev, b);
    record("send/recv device", to_host(&s, &d) == sent_by_prev, true);
    dg.send(&to_device(&s, &block), next, 8)?;
    let mut h = zeros(b);
    g.recv(&mut h, prev, 8)?;
    record("device send, host recv", h == sent_by_prev, true);
    dg.barrier()?;
    Ok(out)
}

/// [`check`] for each of the 10 dtypes.
fn every_dtype(
    g: &ProcessGroup,
    dg: &DeviceGroup,
    chunk: usize,
) -> meshwork::Result<Vec<(String, Outcome)>> {
    let mut cases = check::<f32>(g, dg, chunk)?;
    cases.extend(check::<f64>(g, dg, chunk)?);
    cases.extend(check::<meshwork::half::f16>(g, dg, chunk)?);
    cases.extend(check::<meshwork::half::bf16>(g, dg, chunk)?);
    cases.extend(check::<i8>(g, dg, chunk)?);
    cases.extend(check::<i32>(g, dg, chunk)?);
    cases.extend(check::<i64>(g, dg, chunk)?);
    cases.extend(check::<u8>(g, dg, chunk)?);
    cases.extend(check::<u32>(g, dg, chunk)?);
    cases.extend(check::<u64>(g, dg, chunk)?);
    Ok(cases)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The staged all_reduce of `bytes` against the host call and against the
/// copies alone (device to host and back, pinned): milliseconds, medians
/// of five after one warm-up.
fn bandwidth(
    g: &ProcessGroup,
    dg: &DeviceGroup,
    bytes: usize,
) -> meshwork::Result<(f64, f64, f64)> {
    let s = dg.stream().clone();
    let n = bytes / 4;
    let mut host = vec![1.0f32; n];
    let mut dev = to_device(&s, &host);
    let (mut staged, mut plain, mut copies) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..6 {
        g.barrier()?;
        let t = Instant::now();
        dg.all_reduce(&mut dev, ReduceOp::Sum)?;
        let staged_ms = t.elapsed().as_secs_f64() * 1e3;
        g.barrier()?;
        let t = Instant::now();
        g.all_reduce(&mut host, ReduceOp::Sum)?;
        let plain_ms = t.elapsed().as_secs_f64() * 1e3;
        // SAFETY: written by the copy below before it is read.
        let mut pinned =
            unsafe { s.context().alloc_pinned_with_flags::<f32>(n, 0) }.expect("pinned memory");
        let t = Instant::now();
        s.memcpy_dtoh(&dev, &mut pinned).expect("a copy");
        s.memcpy_htod(&pinned, &mut dev).expect("a copy");
        s.synchronize().expect("the stream");
        let copy_ms = t.elapsed().as_secs_f64() * 1e3;
        if round > 0 {
            staged.push(staged_ms);
            plain.push(plain_ms);
            copies.push(copy_ms);
        }
    }
    Ok((median(staged), median(plain), median(copies)))
}

/// NCCL loaded, its version printed, then every collective NCCL carries
/// run through meshwork's NCCL path in a world of one (a group of this
/// rank alone: one host, its own GPU), for every dtype, against the host.
fn nccl_world_of_one(dev: &Device, chunk: usize) -> Outcome {
    let v = nccl_check().map_err(|e| e.to_string())?;
    println!("nccl: version {v}");
    let one = meshwork::local(1)
        .map_err(|e| e.to_string())?
        .pop()
        .ok_or("no group of one")?;
    let s = dev.stream().map_err(|e| e.to_string())?;
    let dg = DeviceGroup::connect(one.clone(), s).map_err(|e| e.to_string())?;
    if dg.path() != &Path::Nccl {
        return Err(format!(
            "a world of one did not choose NCCL: {:?}",
            dg.path()
        ));
    }
    let cases = every_dtype(&one, &dg, chunk).map_err(|e| e.to_string())?;
    let bad: Vec<String> = cases
        .iter()
        .filter(|(_, o)| o.is_err())
        .map(|(name, _)| name.clone())
        .collect();
    println!("nccl: {} cases in a world of one", cases.len());
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("differ: {}", bad.join(", ")))
    }
}

fn main() {
    let code = match run() {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("cuda_check: {e}");
            if matches!(e, meshwork::Error::DeviceUnavailable { .. }) {
                2
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

fn run() -> meshwork::Result<bool> {
    let g = Node::from_env()?.connect()?;
    let count = Device::count()?;
    let dev = Device::open(g.rank() as usize % count)?;
    let rank = g.rank();
    if rank == 0 {
        println!(
            "device: {} of {count}, shared by {} ranks",
            dev.name()?,
            g.world_size()
        );
    }
    let chunk = 64 << 10;
    // Four ranks on one GPU: connect takes the staged path and says why.
    let dg = DeviceGroup::connect(g.clone(), dev.stream()?)?.chunk_bytes(chunk);
    if rank == 0 {
        println!("path: {:?}", dg.path());
    }
    let cases = every_dtype(&g, &dg, chunk)?;
    let bad: Vec<_> = cases.iter().filter(|(_, o)| o.is_err()).collect();
    for (name, o) in &bad {
        println!("rank {rank}: DIFFERS {name}: {o:?}");
    }
    // Every rank's verdict, gathered: rank 0 prints one line.
    let mut all = vec![0u32; g.world_size() as usize];
    g.all_gather(&[bad.len() as u32], &mut all)?;
    if rank == 0 {
        let exact = all.iter().all(|&b| b == 0);
        println!(
            "collectives: {} cases x {} ranks, {}",
            cases.len(),
            all.len(),
            if exact {
                "all exact".to_string()
            } else {
                format!("differing per rank {all:?}")
            }
        );
    }
    let mut ok = all.iter().all(|&b| b == 0);
    let dg = DeviceGroup::new(g.clone(), dev.stream()?);
    if rank == 0 {
        println!("| bytes | staged all_reduce ms | host all_reduce ms | copies alone ms | staged / host |");
        println!("|---|---|---|---|---|");
    }
    for bytes in [1 << 20, 16 << 20, 256 << 20] {
        let (staged, plain, copies) = bandwidth(&g, &dg, bytes)?;
        if rank == 0 {
            println!(
                "| {} MiB | {staged:.2} | {plain:.2} | {copies:.2} | {:.2} |",
                bytes >> 20,
                staged / plain
            );
        }
    }
    if rank == 0 {
        match nccl_world_of_one(&dev, chunk) {
            Ok(()) => println!("nccl: every case exact"),
            Err(e) => {
                println!("nccl: FAILED: {e}");
                ok = false;
            }
        }
    }
    g.barrier()?;
    g.shutdown()?;
    Ok(ok)
}
