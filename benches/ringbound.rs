//! all_reduce across four network-namespace hosts on a bridge, every host
//! link limited to 1 Gbit/s (`tc tbf` on both ends), against the ring
//! bound: 2(n−1)/n · S ÷ the goodput of one TCP stream between two of the
//! same hosts, measured in the same lab, in the same run.
//!
//! ```text
//! cargo build --release --bin meshrun   # not needed: ranks start directly
//! cargo bench --bench ringbound          # needs root, iproute2
//! RB_RATE=500mbit RB_SIZES=16777216 cargo bench --bench ringbound
//! FRAME_AUTH=0 TRANSPORT=tcp cargo bench --bench ringbound   # the cost of authentication
//! ```
//!
//! Each rank runs in its host's namespace (`ip netns exec`), a barrier,
//! N calls, the mean per call, the maximum over ranks; results verified.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table"
)]

#[allow(dead_code, reason = "the benchmark uses part of the test lab")]
#[path = "../tests/it/netlab.rs"]
mod netlab;

use meshwork::{Node, ReduceOp};
use netlab::Lab;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Instant;

const WORLD: u8 = 4;
const TOKEN: &str = "ring bound benchmark token";
const STREAM_PORT: u16 = 29_990;

/// Bytes one TCP stream carries while its goodput is measured.
const STREAM_BYTES: usize = 256 << 20;
/// The longest any step of that measurement may wait.
const STREAM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

fn rank_main() -> meshwork::Result<()> {
    let g = Node::from_env()?.connect()?;
    let sizes: Vec<usize> = std::env::var("RB_SIZES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    for bytes in sizes {
        let n = bytes / 4;
        let mut x = vec![0f32; n];
        let iters = ((512usize << 20) / bytes).clamp(3, 10);
        let mut worst = 0u64;
        let mut total = 0f64;
        // One call to warm up, then the timed ones.
        for i in 0..=iters {
            for (j, v) in x.iter_mut().enumerate() {
                *v = (g.rank() as usize + j % 7) as f32;
            }
            g.barrier()?;
            let t = Instant::now();
            g.all_reduce(&mut x, ReduceOp::Sum)?;
            let mut took = [t.elapsed().as_secs_f64()];
            g.all_reduce(&mut took, ReduceOp::Max)?;
            if i > 0 {
                total += took[0];
            }
            let p = g.world_size() as usize;
            let wrong = x
                .iter()
                .enumerate()
                .filter(|&(j, &v)| v != (p * (p - 1) / 2 + p * (j % 7)) as f32)
                .count();
            worst = worst.max(wrong as u64);
        }
        if g.rank() == 0 {
            println!("ROW all_reduce {bytes} {:.6} {worst}", total / iters as f64);
        }
    }
    g.shutdown()
}

/// One side of the goodput measurement: receive `STREAM_BYTES` (sink) or
/// send them (source, to `RB_PEER`); the source prints seconds taken.
fn stream_main(role: &str) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    if role == "sink" {
        let l = TcpListener::bind(("0.0.0.0", STREAM_PORT))?;
        println!("LISTENING");
        std::io::stdout().flush()?;
        // The parent kills this process if the source fails before it
        // connects; after that, no read waits past the deadline.
        let (mut s, _) = l.accept()?;
        s.set_read_timeout(Some(STREAM_DEADLINE))?;
        s.set_write_timeout(Some(STREAM_DEADLINE))?;
        let mut got = 0;
        while got < STREAM_BYTES {
            match s.read(&mut buf)? {
                0 => break,
                k => got += k,
            }
        }
        s.write_all(b"k")?;
        return Ok(());
    }
    let peer = std::env::var("RB_PEER").unwrap_or_default();
    let addr: std::net::SocketAddr = format!("{peer}:{STREAM_PORT}")
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut s = TcpStream::connect_timeout(&addr, STREAM_DEADLINE)?;
    s.set_read_timeout(Some(STREAM_DEADLINE))?;
    s.set_write_timeout(Some(STREAM_DEADLINE))?;
    let t = Instant::now();
    let mut sent = 0;
    while sent < STREAM_BYTES {
        s.write_all(&buf)?;
        sent += buf.len();
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)?;
    println!("SECONDS {:.6}", t.elapsed().as_secs_f64());
    Ok(())
}

/// Goodput of one TCP stream from host 1 to host 2, bytes per second.
fn goodput(hosts: &[String], exe: &str, sink_ip: &str) -> Option<f64> {
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &hosts[1], exe])
        .env("BENCH_ROLE", "sink")
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = [0u8; 10];
    let ready = sink
        .stdout
        .as_mut()
        .is_some_and(|o| o.read_exact(&mut line).is_ok());
    let out = ready
        .then(|| {
            Command::new("ip")
                .args(["netns", "exec", &hosts[0], exe])
                .env("BENCH_ROLE", "source")
                .env("RB_PEER", sink_ip)
                .output()
                .ok()
        })
        .flatten();
    if !out.as_ref().is_some_and(|o| o.status.success()) {
        // The source never connected (or failed): the sink would wait.
        let _ = sink.kill();
    }
    let _ = sink.wait();
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    let secs: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("SECONDS "))?
        .trim()
        .parse()
        .ok()?;
    Some(STREAM_BYTES as f64 / secs)
}

fn main() {
    match std::env::var("BENCH_ROLE").as_deref() {
        Ok("rank") => {
            if let Err(e) = rank_main() {
                eprintln!("rank failed: {e}");
                std::process::exit(1);
            }
            return;
        }
        Ok(role @ ("sink" | "source")) => {
            if let Err(e) = stream_main(role) {
                eprintln!("{role} failed: {e}");
                std::process::exit(1);
            }
            return;
        }
        _ => {}
    }
    let rate = std::env::var("RB_RATE").unwrap_or_else(|_| "1gbit".into());
    let sizes = std::env::var("RB_SIZES").unwrap_or_else(|_| "16777216,67108864".into());
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut lab = match Lab::new("ringbound-bench") {
        Ok(l) => l,
        Err(e) => {
            println!("# SKIPPED: {e}");
            return;
        }
    };
    let n = lab.net;
    let mut hosts = Vec::new();
    for i in 1..=WORLD {
        let (ns, dev) = match lab.lan_host(&format!("h{i}"), 10 + i) {
            Ok(x) => x,
            Err(e) => {
                println!("# cannot build the lab: {e}");
                return;
            }
        };
        // Both ends of the host's link: its own interface, and the
        // bridge's port (the veth's other end: same name, `b` for `a`).
        let port = dev.replacen('a', "b", 1);
        let br = format!("{}-br", ns.split('-').next().unwrap_or_default());
        for (where_, d) in [(&ns, &dev), (&br, &port)] {
            if let Err(e) = lab.rate_limit(where_, d, &rate) {
                println!("# cannot limit the rate: {e}");
                return;
            }
        }
        hosts.push(ns);
    }
    let Some(bps) = goodput(&hosts, &exe, &format!("10.77.{n}.12")) else {
        println!("# the TCP stream between two hosts failed");
        return;
    };
    let peers: Vec<String> = (1..=WORLD)
        .map(|i| format!("10.77.{n}.{}:29500", 10 + i))
        .collect();
    let mut children = Vec::new();
    for (r, ns) in hosts.iter().enumerate() {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, &exe])
            .env("BENCH_ROLE", "rank")
            .env("RANK", r.to_string())
            .env("WORLD", WORLD.to_string())
            .env("PEERS", peers.join(","))
            .env("CLUSTER_TOKEN", TOKEN)
            .env("RB_SIZES", &sizes)
            .stdout(Stdio::piped())
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                println!("# cannot start rank {r}: {e}");
                return;
            }
        }
    }
    let mut rows = Vec::new();
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output();
        if r == 0 {
            if let Ok(o) = out {
                rows.extend(
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .filter_map(|l| l.strip_prefix("ROW all_reduce "))
                        .map(str::to_string),
                );
            }
        }
    }
    let p = f64::from(WORLD);
    println!(
        "# {WORLD} hosts on a bridge, every host link {rate} (tbf, both ends); transport {}; frames over TCP {}",
        std::env::var("TRANSPORT").unwrap_or_else(|_| "quic".into()),
        match std::env::var("FRAME_AUTH").as_deref() {
            Ok("0") => "unauthenticated (FRAME_AUTH=0)",
            _ => "authenticated",
        }
    );
    println!(
        "# one TCP stream between two hosts: {:.1} MB/s goodput",
        bps / 1e6
    );
    println!("# ring bound = 2(n-1)/n * S / goodput; ratio = time / bound (1.00 = at the bound)");
    println!(
        "{:>10} | {:>10} {:>10} {:>7} {:>3}",
        "size(B)", "time(ms)", "bound(ms)", "ratio", "#w"
    );
    for row in rows {
        let f: Vec<&str> = row.split_whitespace().collect();
        let (Some(Ok(bytes)), Some(Ok(secs))) = (
            f.first().map(|s| s.parse::<f64>()),
            f.get(1).map(|s| s.parse::<f64>()),
        ) else {
            continue;
        };
        let bound = 2.0 * (p - 1.0) / p * bytes / bps;
        println!(
            "{bytes:>10} | {:>10.1} {:>10.1} {:>7.3} {:>3}",
            secs * 1e3,
            bound * 1e3,
            secs / bound,
            f.get(2).unwrap_or(&"-")
        );
    }
    drop(lab);
}
