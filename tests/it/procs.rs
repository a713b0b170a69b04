//! Rank processes for multi-process tests: the test binary re-executes
//! itself into `scenarios::rank_process_entry`, which runs the scenario
//! named in `MESHWORK_TEST_SCENARIO` and reports on stdout with lines
//! starting `RESULT `. Every child is killed and reaped when the `Ranks`
//! guard drops.

use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Ranks {
    pub children: Vec<Child>,
    lines: Receiver<(u32, String)>,
    /// For the lines of processes added later (`add`).
    tx: crossbeam_channel::Sender<(u32, String)>,
    pub log: Vec<(u32, String)>,
}

/// How to start one rank: its environment beyond the scenario.
pub struct Launch {
    pub world: u32,
    pub env: Vec<(String, String)>,
    /// Per-rank wrapper, e.g. `ip netns exec NS`; empty for none.
    pub wrap: Vec<Vec<String>>,
    /// Per-rank listening sockets, bound before the ranks start and handed
    /// to each through `MESHRUN_SOCKETS` (as meshrun does); taken by the
    /// first spawn, after which this process holds them no more.
    pub sockets: Mutex<Vec<Option<(TcpListener, UdpSocket)>>>,
}

impl Launch {
    /// A loopback group with free ports, on QUIC (the default transport).
    pub fn loopback(world: u32, topology: &str, timeout_s: f64) -> Launch {
        let (addrs, held) = crate::support::bound_ports(world as usize);
        let peers: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        Launch {
            world,
            env: vec![
                ("PEERS".into(), peers.join(",")),
                ("TOPOLOGY".into(), topology.into()),
                ("TIMEOUT_S".into(), timeout_s.to_string()),
                ("TRANSPORT".into(), "quic".into()),
            ],
            wrap: Vec::new(),
            sockets: Mutex::new(held.into_iter().map(Some).collect()),
        }
    }

    /// The same group on another transport (`quic` or `tcp`).
    pub fn on(mut self, transport: &str) -> Launch {
        self.set("TRANSPORT", transport);
        self
    }

    /// Set (or replace) one variable of every rank's environment.
    pub fn set(&mut self, name: &str, value: &str) {
        self.env.retain(|(k, _)| k != name);
        self.env.push((name.into(), value.into()));
    }
}

/// Every rank reported success.
pub fn all_ok(results: &[(u32, String)]) {
    assert!(
        results.iter().all(|(_, l)| l.starts_with("RESULT ok")),
        "{results:#?}"
    );
}

pub fn spawn(launch: &Launch, scenario: &str) -> Ranks {
    spawn_with(launch, scenario, &[])
}

/// [`spawn`] with extra variables per rank (applied last).
/// This test binary (`exe`) run as a rank process of `scenario`, under
/// `wrap` (e.g. `ip netns exec NS`; empty for none).
pub fn rank_command(exe: &std::path::Path, wrap: &[String], scenario: &str) -> Command {
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.args([
        "scenarios::rank_process_entry",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("MESHWORK_TEST_SCENARIO", scenario);
    cmd
}

pub fn spawn_with(launch: &Launch, scenario: &str, per_rank: &[Vec<(String, String)>]) -> Ranks {
    let exe = std::env::current_exe().expect("test binary path");
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut children = Vec::new();
    for rank in 0..launch.world {
        let wrap = launch.wrap.get(rank as usize).cloned().unwrap_or_default();
        let mut cmd = rank_command(&exe, &wrap, scenario);
        cmd.env("RANK", rank.to_string())
            .env("WORLD", launch.world.to_string())
            .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(
                per_rank
                    .get(rank as usize)
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let held = launch
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(rank as usize)
            .and_then(Option::take);
        if let Some((tcp, udp)) = &held {
            let fds = [tcp.as_raw_fd(), udp.as_raw_fd()];
            cmd.env("MESHRUN_SOCKETS", format!("{},{}", fds[0], fds[1]));
            // SAFETY: the closure runs in the child between fork and exec
            // and only calls fcntl(2), which is async-signal-safe; it keeps
            // this rank's two sockets open across exec.
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
        }
        let mut child = cmd.spawn().expect("spawn a rank process");
        // The child has its own copies; this process lets its go, so a
        // rank that dies leaves nothing listening on its port.
        drop(held);
        relay_lines(&mut child, rank, &tx);
        children.push(child);
    }
    Ranks {
        children,
        lines: rx,
        tx,
        log: Vec::new(),
    }
}

/// Pass `child`'s stdout lines, tagged `id`, to `tx`.
fn relay_lines(child: &mut Child, id: u32, tx: &crossbeam_channel::Sender<(u32, String)>) {
    let out = child.stdout.take().expect("piped stdout");
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send((id, line)).is_err() {
                break;
            }
        }
    });
}

impl Ranks {
    /// Start `cmd` (any program; stdout piped here) as one more process,
    /// whose lines carry the id returned (the next after the others').
    pub fn add(&mut self, mut cmd: Command) -> u32 {
        let id = self.children.len() as u32;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a process");
        relay_lines(&mut child, id, &self.tx);
        self.children.push(child);
        id
    }

    /// No process yet: `add` starts them.
    pub fn none() -> Ranks {
        let (tx, rx) = crossbeam_channel::unbounded();
        Ranks {
            children: Vec::new(),
            lines: rx,
            tx,
            log: Vec::new(),
        }
    }

    /// Wait for process `id` to exit; its status. Panics past `within`.
    pub fn exit_status(&mut self, id: u32, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.children[id as usize].try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "process {id} did not exit within {within:?}; log: {:?}",
                self.log
            );
            // Drain output meanwhile; a line is as good as a tick.
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(20)) {
                self.log.push(l);
            }
        }
    }
}

impl Ranks {
    /// Wait until every rank in `ranks` printed a line starting with
    /// `prefix`; returns those lines by rank. Panics past `deadline`.
    pub fn wait_for(
        &mut self,
        ranks: &[u32],
        prefix: &str,
        within: Duration,
    ) -> Vec<(u32, String)> {
        let deadline = Instant::now() + within;
        let mut got: Vec<(u32, String)> = self
            .log
            .iter()
            .filter(|(r, l)| ranks.contains(r) && l.starts_with(prefix))
            .cloned()
            .collect();
        while ranks.iter().any(|r| !got.iter().any(|(g, _)| g == r)) {
            match self.lines.recv_deadline(deadline) {
                Ok((r, line)) => {
                    self.log.push((r, line.clone()));
                    if ranks.contains(&r)
                        && line.starts_with(prefix)
                        && !got.iter().any(|(g, _)| *g == r)
                    {
                        got.push((r, line));
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    let missing: Vec<_> = ranks
                        .iter()
                        .filter(|r| !got.iter().any(|(g, _)| g == *r))
                        .collect();
                    panic!(
                        "ranks {missing:?} did not print {prefix:?} within {within:?}; log: {:?}",
                        self.log
                    );
                }
            }
        }
        got.sort();
        got
    }

    /// Wait for every rank to print its `RESULT` line.
    pub fn results(&mut self, within: Duration) -> Vec<(u32, String)> {
        let all: Vec<u32> = (0..self.children.len() as u32).collect();
        self.wait_for(&all, "RESULT ", within)
    }

    /// Take in every line that comes within `d`.
    pub fn drain_for(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while let Ok(l) = self.lines.recv_deadline(deadline) {
            self.log.push(l);
        }
    }

    pub fn pid(&self, rank: u32) -> i32 {
        self.children[rank as usize].id() as i32
    }

    pub fn signal(&self, rank: u32, sig: i32) {
        // SAFETY: kill(2) on a child we spawned and have not reaped yet.
        let rc = unsafe { libc::kill(self.pid(rank), sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.pid(rank));
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
