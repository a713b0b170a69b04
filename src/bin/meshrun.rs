//! `meshrun`: start N local processes of one program as a meshwork group —
//! the no-MPI answer to `mpirun -np N` and `torchrun`.
//!
//! ```text
//! meshrun -n 4 [--topology mesh|star|kregular:D|hypercube|tree:K] [--transport quic|tcp] [--timeout SECONDS] [--keep-going] -- PROGRAM ARGS…
//! ```
//!
//! Each process gets `RANK`, `WORLD`, `PEERS` (free loopback ports),
//! `TOPOLOGY` and `TRANSPORT` (from `--transport`, else the launcher's own
//! `TRANSPORT`, else quic; and `TIMEOUT_S` if given); every line it
//! prints is prefixed with `[rank]`. Unless `CLUSTER_TOKEN` is set, every
//! launch gives its processes a fresh random token, so no other user of
//! the host can join or disturb the job. `meshrun token` prints a random
//! token for jobs started some other way. When a rank fails, the others are
//! stopped and `meshrun` exits with that rank's status; it exits 0 when all
//! ranks do. With `--keep-going` (a program that survives failures:
//! `agree`, `shrink`), the others run on, and `meshrun` exits with the
//! first failed rank's status once every rank has ended. `meshrun devices`
//! says which CUDA devices and which NCCL this process would use (a build
//! with `--features cuda`), or what is missing.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a launcher relays its ranks' output"
)]

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const USAGE: &str = "usage: meshrun -n N [--topology mesh|star|kregular:D|hypercube|tree:K] [--transport quic|tcp] [--timeout SECONDS] [--keep-going] -- PROGRAM [ARGS…]\n       meshrun token\n       meshrun devices\n       meshrun seed --world N --bind ADDR [--topology mesh|star] [--timeout SECONDS] [--elastic]";

struct Options {
    n: u32,
    topology: String,
    transport: String,
    timeout: Option<String>,
    keep_going: bool,
    program: Vec<String>,
}

/// Why the command line is not a launch: help asked for, or what is wrong
/// with it (printed before the usage).
#[derive(Debug, thiserror::Error)]
enum Usage {
    #[error("help")]
    Help,
    #[error("{0} needs a value")]
    NeedsValue(String),
    #[error("-n expects a number, got {0:?}")]
    NotANumber(String),
    #[error(
        "--topology expects mesh, star, kregular:<degree>, hypercube or tree:<fanout>, got {0:?}"
    )]
    UnknownTopology(String),
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    #[error("-n N (N ≥ 1) is required")]
    NoWorld,
    #[error("no program given after --")]
    NoProgram,
}

fn parse(args: &[String]) -> Result<Options, Usage> {
    let mut o = Options {
        n: 0,
        topology: "mesh".into(),
        transport: std::env::var("TRANSPORT").unwrap_or_else(|_| "quic".into()),
        timeout: None,
        keep_going: false,
        program: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let value = |i: usize| {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| Usage::NeedsValue(args[i].clone()))
        };
        match args[i].as_str() {
            "-n" | "--np" => {
                o.n = value(i)?
                    .parse()
                    .map_err(|_| Usage::NotANumber(args[i + 1].clone()))?;
                i += 2;
            }
            "--topology" => {
                o.topology = value(i)?;
                let known = ["mesh", "star", "hypercube"].contains(&o.topology.as_str())
                    || ["kregular:", "tree:"].iter().any(|k| {
                        o.topology
                            .strip_prefix(k)
                            .is_some_and(|d| d.parse::<u32>().is_ok())
                    });
                if !known {
                    return Err(Usage::UnknownTopology(o.topology));
                }
                i += 2;
            }
            "--transport" => {
                o.transport = value(i)?;
                i += 2;
            }
            "--timeout" => {
                o.timeout = Some(value(i)?);
                i += 2;
            }
            "--keep-going" => {
                o.keep_going = true;
                i += 1;
            }
            "--" => {
                o.program = args[i + 1..].to_vec();
                break;
            }
            "-h" | "--help" => return Err(Usage::Help),
            other => return Err(Usage::UnknownOption(other.to_string())),
        }
    }
    if o.n == 0 {
        return Err(Usage::NoWorld);
    }
    if o.program.is_empty() {
        return Err(Usage::NoProgram);
    }
    Ok(o)
}

/// One rank's output stream, relayed line by line with the rank in front.
struct Stream {
    rank: u32,
    err: bool,
    pipe: Box<dyn ReadFd>,
    /// Bytes after the last newline, waiting for the rest of their line.
    partial: Vec<u8>,
}

/// A child's stdout or stderr: readable, and pollable by its descriptor.
trait ReadFd: Read + AsRawFd + Send {}
impl<T: Read + AsRawFd + Send> ReadFd for T {}

impl Stream {
    /// Print every whole line in `partial` (and the rest too at the end).
    fn emit(&mut self, end: bool, lock: &Mutex<()>) {
        let cut = if end {
            self.partial.len()
        } else {
            match self.partial.iter().rposition(|&b| b == b'\n') {
                Some(i) => i + 1,
                None => return,
            }
        };
        if cut == 0 {
            return;
        }
        let text = String::from_utf8_lossy(&self.partial[..cut]).into_owned();
        self.partial.drain(..cut);
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        for line in text.lines() {
            if self.err {
                let _ = writeln!(std::io::stderr(), "[{}] {line}", self.rank);
            } else {
                let _ = writeln!(std::io::stdout(), "[{}] {line}", self.rank);
            }
        }
    }
}

/// The ranks' output, relayed by one thread that polls every pipe: a
/// thread per pipe would make each later `fork` copy the page tables of
/// all the earlier threads' stacks, and starting a thousand ranks cost
/// seconds of kernel time that grew with the square of their number.
struct Relay {
    /// Streams for the thread to take up, and whether no more will come.
    incoming: Arc<Mutex<(Vec<Stream>, bool)>>,
    /// Written to when `incoming` changed; wakes the thread's poll.
    wake: UnixStream,
    thread: std::thread::JoinHandle<()>,
}

impl Relay {
    fn start() -> std::io::Result<Relay> {
        let (wake, woken) = UnixStream::pair()?;
        woken.set_nonblocking(true)?;
        let incoming: Arc<Mutex<(Vec<Stream>, bool)>> = Arc::default();
        let shared = Arc::clone(&incoming);
        let thread = std::thread::spawn(move || relay_loop(&shared, &woken));
        Ok(Relay {
            incoming,
            wake,
            thread,
        })
    }

    fn add(&mut self, rank: u32, err: bool, pipe: Box<dyn ReadFd>) {
        let mut g = self.incoming.lock().unwrap_or_else(|e| e.into_inner());
        g.0.push(Stream {
            rank,
            err,
            pipe,
            partial: Vec::new(),
        });
        drop(g);
        let _ = self.wake.write(&[1]);
    }

    /// No more streams: the thread ends once every stream has.
    fn finish(mut self) {
        self.incoming.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        let _ = self.wake.write(&[1]);
        let _ = self.thread.join();
    }
}

fn relay_loop(incoming: &Mutex<(Vec<Stream>, bool)>, woken: &UnixStream) {
    let lock = Mutex::new(());
    let mut streams: Vec<Stream> = Vec::new();
    let mut done = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        {
            let mut g = incoming.lock().unwrap_or_else(|e| e.into_inner());
            streams.append(&mut g.0);
            done = done || g.1;
        }
        if done && streams.is_empty() {
            return;
        }
        let mut fds: Vec<libc::pollfd> = std::iter::once(woken.as_raw_fd())
            .chain(streams.iter().map(|s| s.pipe.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: `fds` is a live, exclusively borrowed array of `nfds`
        // pollfd records for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), nfds, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[0].revents != 0 {
            while matches!((&*woken).read(&mut buf), Ok(n) if n > 0) {}
        }
        let mut ended = Vec::new();
        for (i, s) in streams.iter_mut().enumerate() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            // POLLIN or POLLHUP: one read does not block.
            match s.pipe.read(&mut buf) {
                Ok(0) | Err(_) => {
                    s.emit(true, &lock);
                    ended.push(i);
                }
                Ok(k) => {
                    s.partial.extend_from_slice(&buf[..k]);
                    s.emit(false, &lock);
                }
            }
        }
        for i in ended.into_iter().rev() {
            streams.swap_remove(i);
        }
    }
}

/// `meshrun seed --world N --bind ADDR [--topology mesh|star] [--timeout S]`:
/// serve one job's seed bootstrap (token from `CLUSTER_TOKEN`) until it
/// has formed.
fn seed(args: &[String]) -> ExitCode {
    let mut world = None;
    let mut bind = None;
    let mut topology = meshwork::Topology::Mesh;
    let mut timeout = std::time::Duration::from_secs(60);
    let mut elastic = false;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--elastic" {
            elastic = true;
            i += 1;
            continue;
        }
        let Some(v) = args.get(i + 1) else {
            eprintln!("meshrun seed: {} needs a value\n{SEED_USAGE}", args[i]);
            return ExitCode::from(2);
        };
        let ok = match args[i].as_str() {
            "--world" => v.parse().map(|w| world = Some(w)).is_ok(),
            "--bind" => std::net::ToSocketAddrs::to_socket_addrs(v.as_str())
                .ok()
                .and_then(|mut a| a.next())
                .map(|a| bind = Some(a))
                .is_some(),
            "--topology" => match v.as_str() {
                "mesh" => true,
                "star" => {
                    topology = meshwork::Topology::Star;
                    true
                }
                _ => false,
            },
            "--timeout" => v
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(|s| timeout = std::time::Duration::from_secs_f64(s))
                .is_some(),
            _ => false,
        };
        if !ok {
            eprintln!("meshrun seed: bad {} {v:?}\n{SEED_USAGE}", args[i]);
            return ExitCode::from(2);
        }
        i += 2;
    }
    let (Some(world), Some(bind)) = (world, bind) else {
        eprintln!("meshrun seed: --world and --bind are required\n{SEED_USAGE}");
        return ExitCode::from(2);
    };
    let token = std::env::var("CLUSTER_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    match meshwork::serve_seed(bind, world, topology, token, timeout, elastic) {
        Ok(()) => {
            println!("meshrun seed: {world} ranks formed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("meshrun seed: {e}");
            ExitCode::from(1)
        }
    }
}

const SEED_USAGE: &str =
    "usage: meshrun seed --world N --bind ADDR [--topology mesh|star] [--timeout SECONDS] [--elastic]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "seed") {
        return seed(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "devices") {
        return devices();
    }
    if args.first().is_some_and(|a| a == "token") {
        return match meshwork::random_token() {
            Ok(t) => {
                println!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("meshrun token: {e}");
                ExitCode::from(1)
            }
        };
    }
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            if !matches!(e, Usage::Help) {
                eprintln!("meshrun: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Each rank's port, bound here for TCP and UDP alike (QUIC and its
    // sidecar share the number) and handed to that rank open: no other
    // program can take it between this choice and the rank's start.
    let mut held: Vec<(TcpListener, UdpSocket)> = Vec::new();
    for _ in 0..o.n {
        match meshwork::bind_rank_sockets(std::net::Ipv4Addr::LOCALHOST.into()) {
            Ok(pair) => held.push(pair),
            Err(e) => {
                eprintln!("meshrun: cannot find free ports: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let peers: Vec<String> = held
        .iter()
        .filter_map(|(t, _)| t.local_addr().ok())
        .map(|a| a.to_string())
        .collect();
    if peers.len() != o.n as usize {
        eprintln!("meshrun: cannot find {} free ports", o.n);
        return ExitCode::from(1);
    }
    // A fresh token per launch unless one is given: another user of this
    // host cannot join or stop the job (a child's environment is readable
    // by its owner only).
    let token = match std::env::var("CLUSTER_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
    {
        Some(t) => t,
        None => match meshwork::random_token() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("meshrun: cannot make a cluster token: {e}");
                return ExitCode::from(1);
            }
        },
    };
    // The token's slow derivation, once here rather than once per rank.
    let key = meshwork_transport::kdf::derived_key(&token);
    let mut relay = match Relay::start() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("meshrun: cannot relay the ranks' output: {e}");
            return ExitCode::from(1);
        }
    };
    let mut children: Vec<(u32, Child)> = Vec::new();
    for rank in 0..o.n {
        let mut cmd = Command::new(&o.program[0]);
        cmd.args(&o.program[1..])
            .env("RANK", rank.to_string())
            .env("WORLD", o.n.to_string())
            .env("PEERS", peers.join(","))
            .env("TOPOLOGY", &o.topology)
            .env("TRANSPORT", &o.transport)
            .env("CLUSTER_TOKEN", &token)
            .env("CLUSTER_TOKEN_KEY", &key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(t) = &o.timeout {
            cmd.env("TIMEOUT_S", t);
        }
        let (tcp, udp) = &held[rank as usize];
        let fds = [tcp.as_raw_fd(), udp.as_raw_fd()];
        cmd.env("MESHRUN_SOCKETS", format!("{},{}", fds[0], fds[1]));
        // SAFETY: the closure runs in the child between fork and exec and
        // only calls fcntl(2), which is async-signal-safe; it keeps this
        // rank's two sockets open across exec (every other descriptor of
        // ours is close-on-exec).
        unsafe {
            cmd.pre_exec(move || {
                for fd in fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => {
                if let Some(out) = child.stdout.take() {
                    relay.add(rank, false, Box::new(out));
                }
                if let Some(err) = child.stderr.take() {
                    relay.add(rank, true, Box::new(err));
                }
                children.push((rank, child));
            }
            Err(e) => {
                eprintln!("meshrun: cannot start {:?}: {e}", o.program[0]);
                for (_, c) in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return ExitCode::from(1);
            }
        }
    }
    // The ranks have their own copies now.
    drop(held);
    // Wait for all; the first failure stops the rest.
    let mut failed: Option<(u32, i32)> = None;
    let mut running: Vec<(u32, Child)> = children;
    while !running.is_empty() {
        let mut still = Vec::new();
        for (rank, mut child) in running {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => {
                    if failed.is_none() {
                        let code = status.code().unwrap_or(1);
                        if o.keep_going {
                            eprintln!("meshrun: rank {rank} failed ({status}); the others go on");
                        } else {
                            eprintln!(
                                "meshrun: rank {rank} failed ({status}); stopping the others"
                            );
                        }
                        failed = Some((rank, code));
                    }
                }
                Ok(None) => still.push((rank, child)),
                Err(e) => {
                    eprintln!("meshrun: cannot wait for rank {rank}: {e}");
                    failed.get_or_insert((rank, 1));
                }
            }
        }
        if failed.is_some() && !o.keep_going {
            for (_, c) in &mut still {
                let _ = c.kill();
                let _ = c.wait();
            }
            break;
        }
        running = still;
        if !running.is_empty() {
            #[allow(
                clippy::disallowed_methods,
                reason = "polling child processes; no event to wait on across several children without a signal handler"
            )]
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    relay.finish();
    match failed {
        None => ExitCode::SUCCESS,
        Some((_, code)) => ExitCode::from(u8::try_from(code.clamp(1, 255)).unwrap_or(1)),
    }
}

/// `meshrun devices`: the CUDA devices and the NCCL this process sees, or
/// what is missing; exit 0 when both are there, 2 otherwise.
#[cfg(feature = "cuda")]
fn devices() -> ExitCode {
    use meshwork::cuda::{nccl_check, Device};
    let mut all = true;
    match Device::count() {
        Ok(n) => {
            println!("cuda: {n} device(s)");
            for i in 0..n {
                match Device::open(i).and_then(|d| d.name()) {
                    Ok(name) => println!("cuda: {i} {name}"),
                    Err(e) => {
                        println!("cuda: {i} {e}");
                        all = false;
                    }
                }
            }
            all &= n > 0;
        }
        Err(e) => {
            println!("cuda: {e}");
            all = false;
        }
    }
    match nccl_check() {
        Ok(v) => println!("nccl: {v} (every call meshwork makes found; a unique id made)"),
        Err(e) => {
            println!("nccl: {e}");
            all = false;
        }
    }
    if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

#[cfg(not(feature = "cuda"))]
fn devices() -> ExitCode {
    eprintln!("meshrun devices: this meshrun was built without the cuda feature (cargo build --features cuda)");
    ExitCode::from(2)
}
