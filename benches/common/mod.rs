//! What the cross-process benchmarks share: launching rank processes
//! through `meshrun`, launching Open MPI baselines, and reading the
//! `ROW <name> <bytes> <time_us> <wrong>` lines both print.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The links of two or more processes on one host: shared memory (the
/// default), and with `SHM=0` QUIC and TCP, each with its environment.
#[allow(dead_code, reason = "the benchmarks that compare links use it")]
pub const LINKS: [(&str, &[(&str, &str)]); 3] = [
    ("shm", &[("SHM", "1")]),
    ("quic", &[("TRANSPORT", "quic"), ("SHM", "0")]),
    ("tcp", &[("TRANSPORT", "tcp"), ("SHM", "0")]),
];

/// (name, bytes) → (microseconds, wrong elements).
pub type Rows = BTreeMap<(String, usize), (f64, u64)>;

/// Run `cmd` and collect its ROW lines (a `[rank] ` prefix from meshrun is
/// stripped); `None` if it cannot start or fails.
pub fn run_rows(mut cmd: Command) -> Option<Rows> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let mut rows = Rows::new();
    for line in BufReader::new(child.stdout.take()?)
        .lines()
        .map_while(Result::ok)
    {
        let line = line
            .split_once("] ")
            .map_or(line.as_str(), |(_, l)| l)
            .to_string();
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 5 && f[0] == "ROW" {
            if let (Ok(b), Ok(t), Ok(w)) = (f[2].parse(), f[3].parse(), f[4].parse()) {
                rows.insert((f[1].to_string(), b), (t, w));
            }
        }
    }
    child.wait().ok()?.success().then_some(rows)
}

/// This process's part when [`meshrun`] started it as a rank
/// (`BENCH_ROLE=rank`): runs `rank_main` and returns true, exiting with
/// status 1 and its error on stderr if it fails; false in the driver.
pub fn as_rank(rank_main: impl FnOnce() -> meshwork::Result<()>) -> bool {
    if !std::env::var("BENCH_ROLE").is_ok_and(|r| r == "rank") {
        return false;
    }
    if let Err(e) = rank_main() {
        eprintln!("rank failed: {e}");
        std::process::exit(1);
    }
    true
}

/// `meshrun -n N --topology T -- <this benchmark>` with `BENCH_ROLE=rank`,
/// or `None` (with a note) if meshrun is not built next to it.
pub fn meshrun(n: u32, topology: &str) -> Option<Command> {
    let exe = std::env::current_exe().ok()?;
    let meshrun: PathBuf = exe.parent()?.parent()?.join("meshrun");
    if !meshrun.exists() {
        eprintln!(
            "meshrun is not built (cargo build --release --bin meshrun): no meshwork columns"
        );
        return None;
    }
    let mut c = Command::new(meshrun);
    c.args(["-n", &n.to_string(), "--topology", topology, "--"])
        .arg(exe)
        .env("BENCH_ROLE", "rank");
    Some(c)
}

/// Build `benches/baselines/<source>` with mpicc and run it on `np` ranks
/// over TCP on loopback with `args`; `None` without Open MPI.
pub fn mpi(source: &str, np: u32, args: &[String]) -> Option<Rows> {
    mpi_over(source, np, args, Btl::Tcp)
}

/// Which of Open MPI's transports (byte transfer layers) carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Btl {
    /// TCP on loopback (`--mca btl tcp,self`).
    Tcp,
    /// Shared memory (`--mca btl vader,self`; `sm` in Open MPI 5).
    SharedMemory,
    /// TCP on loopback, and one-sided operations over it too (`--mca osc
    /// pt2pt`; on one host Open MPI would otherwise map the window into
    /// shared memory whatever the BTL).
    #[allow(
        dead_code,
        reason = "only benches/one_sided.rs runs one-sided operations"
    )]
    TcpOneSided,
}

/// [`mpi`] over the chosen transport.
pub fn mpi_over(source: &str, np: u32, args: &[String], btl: Btl) -> Option<Rows> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("benches/baselines")
        .join(source);
    let bin = std::env::temp_dir().join(format!("meshwork_{}", source.trim_end_matches(".c")));
    let built = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?
        .success();
    if !built {
        return None;
    }
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &np.to_string(),
    ])
    .args(["--mca", "pml", "ob1", "--mca", "btl"]);
    match btl {
        Btl::Tcp => c.args(["tcp,self", "--mca", "btl_tcp_if_include", "lo"]),
        Btl::TcpOneSided => c.args([
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "--mca",
            "osc",
            "pt2pt",
        ]),
        Btl::SharedMemory => c.arg(shared_memory_btl()),
    }
    .arg(&bin)
    .args(args);
    run_rows(c)
}

/// Open MPI's shared-memory transport: `vader` up to 4.x, `sm` from 5.
fn shared_memory_btl() -> &'static str {
    let info = Command::new("ompi_info")
        .args(["--param", "btl", "vader"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("vader"))
        .unwrap_or(false);
    if info {
        "vader,self"
    } else {
        "sm,self"
    }
}

/// A comma-separated list.
pub fn join(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The inverse of [`join`].
pub fn parse_list(s: &str) -> Vec<usize> {
    s.split(',').filter_map(|x| x.parse().ok()).collect()
}
