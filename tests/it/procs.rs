//! Rank processes for multi-process tests: the test binary re-executes
//! itself into `scenarios::rank_process_entry`, which runs the scenario
//! named in `MESHWORK_TEST_SCENARIO` and reports on stdout with lines
//! starting `RESULT `. Every child is killed and reaped when the `Ranks`
//! guard drops.

use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Ranks {
    pub children: Vec<Child>,
    lines: Receiver<(u32, String)>,
    pub log: Vec<(u32, String)>,
}

/// How to start one rank: its environment beyond the scenario.
pub struct Launch {
    pub world: u32,
    pub env: Vec<(String, String)>,
    /// Per-rank wrapper, e.g. `ip netns exec NS`; empty for none.
    pub wrap: Vec<Vec<String>>,
}

impl Launch {
    /// A loopback group with free ports, on QUIC (the default transport).
    pub fn loopback(world: u32, topology: &str, timeout_s: f64) -> Launch {
        let peers: Vec<String> = crate::support::free_ports(world as usize)
            .iter()
            .map(|a| a.to_string())
            .collect();
        Launch {
            world,
            env: vec![
                ("PEERS".into(), peers.join(",")),
                ("TOPOLOGY".into(), topology.into()),
                ("TIMEOUT_S".into(), timeout_s.to_string()),
                ("TRANSPORT".into(), "quic".into()),
            ],
            wrap: Vec::new(),
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
pub fn spawn_with(launch: &Launch, scenario: &str, per_rank: &[Vec<(String, String)>]) -> Ranks {
    let exe = std::env::current_exe().expect("test binary path");
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut children = Vec::new();
    for rank in 0..launch.world {
        let wrap = launch.wrap.get(rank as usize).cloned().unwrap_or_default();
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        cmd.args([
            "scenarios::rank_process_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MESHWORK_TEST_SCENARIO", scenario)
        .env("RANK", rank.to_string())
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
        let mut child = cmd.spawn().expect("spawn a rank process");
        let out = child.stdout.take().expect("piped stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((rank, line)).is_err() {
                    break;
                }
            }
        });
        children.push(child);
    }
    Ranks {
        children,
        lines: rx,
        log: Vec::new(),
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
