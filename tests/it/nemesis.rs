//! The nemesis lab: a job under `RECOVERY=shrink` on hosts in network
//! namespaces, and a seeded schedule of faults — a member killed, frozen
//! (SIGSTOP, then SIGCONT), the LAN cut 2 | 2 or 3 | 1, one host away,
//! 5 % of every packet lost, a slow link — each healed before the next.
//! After every run the log must show:
//!
//! * every completed call exact (a rank that sees a wrong sum says
//!   `WRONG` and the run fails);
//! * never two groups carrying on at once (two groups with no process in
//!   common never both complete calls within the same span of time);
//! * after a cut, the side with a majority carrying on within the
//!   detection and agreement time, and a side without one stopping with
//!   `NoQuorum` (or learning, after the heal, that the others went on:
//!   `Expelled`);
//! * the job back at full size after each heal (the members `grow`, the
//!   rank that was cut off or frozen `rejoin`s, a killed one is replaced).
//!
//! The seed runs as a process of its own (`meshrun seed --elastic`) on a
//! host no fault touches, so the job can lose any member.
//!
//! Lines a job process prints (times in ms since the Unix epoch, from one
//! clock: every host is a namespace of this machine):
//! `VIEW t pids` (its group, by the members' process ids), `TICK t pids`
//! (calls completed in that group), `EVENT t kind detail`, `WRONG …`.

#![allow(
    clippy::print_stdout,
    reason = "the job reports to the test on stdout, the test its faults"
)]

use crate::netlab::Lab;
use crate::procs::Ranks;
use crate::recovery::Rng;
use meshwork::{Error, Node, ProcessGroup, ReduceOp};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const DEADLINE_S: u64 = 4;
const TOKEN: &str = "nemesis-lab-secret-token";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The job's pace: a round every 20 ms or so (the job trains; the lab's
/// two cores also run the network), and a pause between tries of a
/// group that is stale.
#[allow(
    clippy::disallowed_methods,
    reason = "the job's pacing, not a wait for anything"
)]
fn pace() {
    std::thread::sleep(Duration::from_millis(20));
}

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

// ---------------------------------------------------------------- the job

/// The job a rank process runs (scenario `nemesis`; `nemesis_join` for a
/// replacement, which first joins the running job): mixed verified calls
/// in a loop, recovering from whatever the nemesis does, until the test
/// creates `STOP_FILE`.
pub(crate) fn job(mut g: Arc<ProcessGroup>) -> meshwork::Result<String> {
    let target: u32 = std::env::var("NEMESIS_TARGET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(g.world_size());
    let grow_file = std::env::var("GROW_FILE").map(PathBuf::from).ok();
    let stop_file = std::env::var("STOP_FILE").map(PathBuf::from).ok();
    let mut view: Option<String> = None;
    let mut i = 0u64;
    // The last kind of event printed: a streak of the same is said once.
    let mut last = String::new();
    let event = |last: &mut String, kind: &str, detail: String| {
        if kind != last {
            say(&format!("EVENT {} {kind} {detail}", now_ms()));
            *last = kind.to_string();
        }
    };
    loop {
        if stop_file.as_ref().is_some_and(|f| f.exists()) {
            return Ok(format!("stopped after {i} rounds"));
        }
        let step = (|| -> meshwork::Result<Option<Arc<ProcessGroup>>> {
            if view.is_none() {
                let mut pids = vec![0u32; g.world_size() as usize];
                g.all_gather(&[std::process::id()], &mut pids)?;
                pids.sort_unstable();
                let v = pids
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                say(&format!("VIEW {} {v}", now_ms()));
                view = Some(v);
            }
            // Rank 0 says whether to grow now: the test makes the file
            // once a fault is healed, with processes waiting to come back.
            let mut grow = [0u32];
            if g.rank() == 0
                && g.world_size() < target
                && grow_file.as_ref().is_some_and(|f| f.exists())
            {
                grow[0] = target - g.world_size();
            }
            g.broadcast(&mut grow, 0)?;
            if grow[0] > 0 {
                return g.grow(grow[0]).map(Some);
            }
            let w = g.world_size();
            let mut ones = [1u32; 64];
            g.all_reduce(&mut ones, ReduceOp::Sum)?;
            let mut ranks = [u64::from(g.rank()) + 1; 8];
            g.all_reduce(&mut ranks, ReduceOp::Sum)?;
            let want = u64::from(w) * u64::from(w + 1) / 2;
            if ones.iter().any(|&x| x != w) || ranks.iter().any(|&x| x != want) {
                say(&format!(
                    "WRONG {} world {w}: {:?} {:?}",
                    now_ms(),
                    &ones[..4],
                    &ranks[..2]
                ));
            }
            Ok(None)
        })();
        match step {
            Ok(Some(grown)) => {
                event(&mut last, "grown", format!("world {}", grown.world_size()));
                g = grown;
                view = None;
            }
            Ok(None) => {
                i += 1;
                if i.is_multiple_of(5) {
                    say(&format!(
                        "TICK {} {}",
                        now_ms(),
                        view.as_deref().unwrap_or("")
                    ));
                    last.clear();
                }
                if i == 5 {
                    say("READY");
                }
                pace();
            }
            Err(Error::GroupShrunk { failed }) => {
                event(
                    &mut last,
                    "shrunk",
                    format!("{failed:?} world {}", g.world_size()),
                );
                view = None;
            }
            Err(Error::NoQuorum { reachable, needed }) => {
                // The group retries by itself once the network heals, if
                // the others are still there to agree with; if they went
                // on, or its links to them ended, it says `Expelled`.
                event(&mut last, "noquorum", format!("{reachable:?} {needed}"));
                pace();
            }
            Err(Error::Expelled { .. }) => {
                event(&mut last, "expelled", String::new());
                g = rejoin(&g, &stop_file)?;
                event(
                    &mut last,
                    "rejoined",
                    format!("rank {} world {}", g.rank(), g.world_size()),
                );
                view = None;
            }
            Err(e) => {
                event(&mut last, "error", format!("{e}").replace('\n', " "));
                pace();
            }
        }
    }
}

/// `g`'s process back in the job through the seed, trying until it is
/// (each try lasts a deadline) or the test stops the job.
fn rejoin(g: &ProcessGroup, stop_file: &Option<PathBuf>) -> meshwork::Result<Arc<ProcessGroup>> {
    loop {
        match g.rejoin() {
            Ok(back) => return Ok(back),
            Err(e) if stop_file.as_ref().is_none_or(|f| !f.exists()) => {
                tracing::info!("rejoin: {e}; again");
            }
            Err(e) => return Err(e),
        }
    }
}

/// A replacement process: joins the running job (trying until the
/// members grow it), then runs the job.
pub(crate) fn join_then_run() -> meshwork::Result<String> {
    let stop_file = std::env::var("STOP_FILE").map(PathBuf::from).ok();
    loop {
        match Node::join_running().connect() {
            Ok(g) => {
                say(&format!(
                    "EVENT {} joined rank {} world {}",
                    now_ms(),
                    g.rank(),
                    g.world_size()
                ));
                return job(g);
            }
            Err(e) if stop_file.as_ref().is_none_or(|f| !f.exists()) => {
                tracing::info!("join: {e}; again");
            }
            Err(e) => return Err(e),
        }
    }
}

// ---------------------------------------------------------------- the lab

/// What the nemesis does, and undoes.
#[derive(Clone, Debug)]
enum Fault {
    Kill(usize),
    Freeze(usize),
    /// Hosts by index, each inner list a side.
    Cut(Vec<Vec<usize>>),
    Away(usize),
    Loss(u8),
    Slow(usize),
}

/// A job process on `host`: this test binary run as scenario `scenario`
/// (`rank`: its rank and the world, for the first formation).
fn job_process(
    host: &str,
    scenario: &str,
    env: &[(String, String)],
    rank: Option<(usize, usize)>,
) -> std::process::Command {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = crate::procs::rank_command(&exe, &Lab::exec_in(host), scenario);
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if let Some((r, n)) = rank {
        cmd.env("RANK", r.to_string()).env("WORLD", n.to_string());
    }
    cmd
}

/// A job of `n` processes on `n` hosts plus the seed's host.
struct Nemesis {
    lab: Lab,
    hosts: Vec<String>,
    ranks: Ranks,
    /// The job's processes now, by host (a killed one is replaced).
    on_host: Vec<u32>,
    grow_file: PathBuf,
    stop_file: PathBuf,
    launch_env: Vec<(String, String)>,
    n: usize,
    /// What the run survived, for the report.
    survived: Vec<String>,
}

/// A parsed job line: (process, time, kind, rest).
fn parse(id: u32, line: &str) -> Option<(u32, u64, String, String)> {
    let mut it = line.splitn(3, ' ');
    let kind = it.next()?;
    if !matches!(kind, "VIEW" | "TICK" | "EVENT" | "WRONG") {
        return None;
    }
    let t = it.next()?.parse().ok()?;
    Some((id, t, kind.to_string(), it.next().unwrap_or("").to_string()))
}

impl Nemesis {
    fn start(test: &str, n: usize) -> Option<Nemesis> {
        let mut lab = Lab::or_skip(test)?;
        let net = lab.net;
        let hosts = lab.lan_hosts("h", 0..n as u8).unwrap();
        let (seed_host, _) = lab.lan_host("seed", 9).unwrap();
        let seed = format!("10.77.{net}.9:29400");
        let dir =
            std::env::temp_dir().join(format!("meshwork-nemesis-{}-{}", test, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (grow_file, stop_file) = (dir.join("grow"), dir.join("stop"));
        let mut ranks = Ranks::none();
        let mut seed_cmd = std::process::Command::new("ip");
        seed_cmd
            .args([
                "netns",
                "exec",
                &seed_host,
                env!("CARGO_BIN_EXE_meshrun"),
                "seed",
            ])
            .args(["--world", &n.to_string(), "--bind", &seed, "--elastic"])
            .args(["--timeout", &DEADLINE_S.to_string()])
            .env("CLUSTER_TOKEN", TOKEN);
        ranks.add(seed_cmd);
        let launch_env: Vec<(String, String)> = [
            ("SEED", seed.as_str()),
            ("CLUSTER_TOKEN", TOKEN),
            ("TOPOLOGY", "mesh"),
            ("TRANSPORT", "quic"),
            ("RECOVERY", "shrink"),
            ("TIMEOUT_S", &DEADLINE_S.to_string()),
            ("NEMESIS_TARGET", &n.to_string()),
            ("GROW_FILE", grow_file.to_str().unwrap()),
            ("STOP_FILE", stop_file.to_str().unwrap()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        // `NEMESIS_QUORUM=unsafe:1` shows the lab catching a fork.
        .chain(
            std::env::var("NEMESIS_QUORUM")
                .ok()
                .map(|q| ("QUORUM".to_string(), q)),
        )
        .collect();
        // The job's processes are ids 1..=n (the seed is 0).
        for (r, host) in hosts.iter().enumerate() {
            ranks.add(job_process(host, "nemesis", &launch_env, Some((r, n))));
        }
        let on_host: Vec<u32> = (1..=n as u32).collect();
        let mut nem = Nemesis {
            lab,
            hosts,
            ranks,
            on_host,
            grow_file,
            stop_file,
            launch_env,
            n,
            survived: Vec::new(),
        };
        let ids = nem.on_host.clone();
        nem.ranks.wait_for(&ids, "READY", Duration::from_secs(120));
        Some(nem)
    }

    /// Apply `f`; undo it after `hold`. Returns the time of the fault and
    /// the time of its healing (ms since the epoch).
    fn strike(&mut self, f: &Fault, hold: Duration) -> (u64, u64) {
        let at = now_ms();
        println!("NEMESIS {at} {f:?} for {hold:?}");
        match f {
            Fault::Kill(h) => self.ranks.signal(self.on_host[*h], libc::SIGKILL),
            Fault::Freeze(h) => self.ranks.signal(self.on_host[*h], libc::SIGSTOP),
            Fault::Cut(sides) => {
                let sides: Vec<Vec<String>> = sides
                    .iter()
                    .map(|s| s.iter().map(|&h| self.hosts[h].clone()).collect())
                    .collect();
                self.lab.partition(&sides).unwrap();
            }
            Fault::Away(h) => self.lab.host_link(&self.hosts[*h], false).unwrap(),
            Fault::Loss(p) => {
                for h in &self.hosts {
                    self.lab.lossy(h, *p).unwrap();
                }
            }
            Fault::Slow(h) => self.lab.slow(&self.hosts[*h]).unwrap(),
        }
        self.ranks.drain_for(hold);
        let healed = now_ms();
        println!("NEMESIS {healed} healed");
        match f {
            Fault::Kill(h) => {
                // A new process on the dead one's host takes its place.
                let cmd = job_process(&self.hosts[*h], "nemesis_join", &self.launch_env, None);
                self.on_host[*h] = self.ranks.add(cmd);
            }
            Fault::Freeze(h) => self.ranks.signal(self.on_host[*h], libc::SIGCONT),
            Fault::Cut(_) => self.lab.heal_partition(),
            Fault::Away(h) => self.lab.host_link(&self.hosts[*h], true).unwrap(),
            Fault::Loss(_) => {
                for h in &self.hosts {
                    self.lab.clear_loss(h);
                }
            }
            Fault::Slow(h) => self.lab.fast(&self.hosts[*h]),
        }
        std::fs::write(&self.grow_file, b"grow").unwrap();
        (at, healed)
    }

    /// Wait until the job is whole again: a group of every host's process
    /// completing calls. Panics past `within`.
    fn whole(&mut self, since: u64, within: Duration) -> u64 {
        let want: BTreeSet<u32> = self.on_host.iter().copied().collect();
        let end = Instant::now() + within;
        loop {
            // Pids are what views name: map them to process ids.
            let mut ticked: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
            for (id, line) in &self.ranks.log {
                if let Some((id, t, kind, rest)) = parse(*id, line) {
                    if kind == "TICK" && t >= since {
                        ticked.entry(rest).or_default().insert(id);
                    }
                }
            }
            if let Some(t) = ticked
                .iter()
                .find(|(view, ids)| view.split(',').count() == self.n && **ids == want)
                .map(|_| now_ms())
            {
                let _ = std::fs::remove_file(&self.grow_file);
                return t;
            }
            assert!(
                Instant::now() < end,
                "the job is not whole {within:?} after the heal; log: {:#?}",
                self.ranks.log
            );
            self.ranks.drain_for(Duration::from_millis(100));
        }
    }

    /// The invariants over the whole log (see the module docs).
    fn check(&self) {
        let lines: Vec<_> = self
            .ranks
            .log
            .iter()
            .filter_map(|(id, l)| parse(*id, l))
            .collect();
        let wrong: Vec<_> = lines.iter().filter(|l| l.2 == "WRONG").collect();
        assert!(wrong.is_empty(), "wrong results: {wrong:?}");
        // Each group's span of completed calls.
        let mut spans: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for (_, t, kind, view) in &lines {
            if kind == "TICK" {
                let s = spans.entry(view.as_str()).or_insert((*t, *t));
                s.0 = s.0.min(*t);
                s.1 = s.1.max(*t);
            }
        }
        // Two groups with no member in common both completing calls over
        // the same time: a fork. (Groups that share a member cannot both
        // progress: a process is in one at a time; the same members after
        // a rejoin are the same view again.)
        let spans: Vec<_> = spans.into_iter().collect();
        let members = |v: &str| -> BTreeSet<String> { v.split(',').map(str::to_string).collect() };
        for (i, (a, sa)) in spans.iter().enumerate() {
            for (b, sb) in spans.iter().skip(i + 1) {
                if !members(a).is_disjoint(&members(b)) {
                    continue;
                }
                let overlap = sa.1.min(sb.1).saturating_sub(sa.0.max(sb.0));
                assert!(
                    overlap == 0,
                    "two groups carried on at once for {overlap} ms: [{a}] {sa:?} and [{b}] {sb:?}"
                );
            }
        }
    }

    /// The first time after `since` a group of exactly `members` (job
    /// process ids) completed calls on all of them.
    fn carried_on(&self, since: u64, members: &BTreeSet<u32>) -> Option<u64> {
        let mut by_view: BTreeMap<&str, (BTreeSet<u32>, u64)> = BTreeMap::new();
        for (id, line) in &self.ranks.log {
            if let Some((id, t, kind, _)) = parse(*id, line) {
                if kind == "TICK" && t >= since {
                    let view = line.splitn(3, ' ').nth(2).unwrap_or("");
                    let e = by_view.entry(view).or_insert((BTreeSet::new(), 0));
                    e.0.insert(id);
                    e.1 = e.1.max(t);
                    if e.0 == *members && view.split(',').count() == members.len() {
                        return Some(e.1);
                    }
                }
            }
        }
        None
    }

    /// Events of `kind` from process `id` after `since`.
    fn events(&self, id: u32, kind: &str, since: u64) -> usize {
        self.ranks
            .log
            .iter()
            .filter_map(|(i, l)| parse(*i, l))
            .filter(|(i, t, k, rest)| {
                *i == id && *t >= since && k == "EVENT" && rest.starts_with(kind)
            })
            .count()
    }

    fn stop(mut self) {
        let _ = std::fs::write(&self.stop_file, b"stop");
        self.ranks.drain_for(Duration::from_millis(200));
        if let Some(dir) = self.stop_file.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A cut of the LAN into `sides` (host indices) for `hold`: the side with
/// a majority carries on within `within` of the cut and the others stop
/// with `NoQuorum`; none carries on if no side has one; after the heal the
/// job is whole again. Returns how long the majority took.
fn cut_and_heal(
    nem: &mut Nemesis,
    sides: Vec<Vec<usize>>,
    hold: Duration,
    within: Duration,
) -> Option<u64> {
    let majority = sides.iter().find(|s| s.len() * 2 > nem.n).cloned();
    let (at, healed) = nem.strike(&Fault::Cut(sides.clone()), hold);
    let took = match &majority {
        Some(side) => {
            let members: BTreeSet<u32> = side.iter().map(|&h| nem.on_host[h]).collect();
            let t = nem.carried_on(at, &members).unwrap_or_else(|| {
                panic!(
                    "the majority {side:?} did not carry on during the cut; log: {:#?}",
                    nem.ranks.log
                )
            });
            assert!(
                t - at <= within.as_millis() as u64,
                "the majority carried on {} ms after the cut",
                t - at
            );
            Some(t - at)
        }
        None => None,
    };
    for side in &sides {
        if Some(side) == majority.as_ref() {
            continue;
        }
        for &h in side {
            let id = nem.on_host[h];
            assert!(
                nem.events(id, "noquorum", at) > 0,
                "host {h} (process {id}) did not stop with NoQuorum; log: {:#?}",
                nem.ranks.log
            );
        }
    }
    if majority.is_none() {
        // Nobody completed a call from detection and agreement after the
        // cut until the heal.
        let quiet_from = at + within.as_millis() as u64;
        let late: Vec<_> = nem
            .ranks
            .log
            .iter()
            .filter_map(|(i, l)| parse(*i, l))
            .filter(|(_, t, k, _)| k == "TICK" && *t > quiet_from && *t < healed)
            .collect();
        assert!(
            late.is_empty(),
            "a side without quorum carried on: {late:?}"
        );
    }
    nem.whole(healed, Duration::from_secs(60));
    nem.survived.push(format!("{:?}", Fault::Cut(sides)));
    took
}

/// Four hosts: a 3 | 1 cut — the three carry on exact within 3 s, the one
/// stops with `NoQuorum`, and after the heal it rejoins and the job is four
/// again; then a 2 | 2 cut — neither side carries on, and after the heal
/// the four go on together; then rank 0's host alone cut off — the three
/// carry on without the lowest rank.
#[test]
fn netlab_faults_quorum_a_cut_never_forks_the_job() {
    let Some(mut nem) = Nemesis::start("quorum", 4) else {
        return;
    };
    let took = cut_and_heal(
        &mut nem,
        vec![vec![0, 1, 2], vec![3]],
        Duration::from_secs(6),
        Duration::from_secs(3),
    );
    println!("3 | 1: the three carried on {took:?} ms after the cut");
    cut_and_heal(
        &mut nem,
        vec![vec![0, 1], vec![2, 3]],
        Duration::from_secs(6),
        Duration::from_secs(3),
    );
    // rank 0's host cut off: the job loses the coordinator of its
    // agreements and goes on without it (the seed is elsewhere), within
    // 3 s as after the first cut. Right after the 2 | 2 heal this once
    // took a deadline: a sidecar still in TCP's retransmission backoff
    // held rank 0 silent in its own eyes while QUIC messages had ended
    // the silence, and never said it again (`tcp::rx::check_silence`).
    // The cut is held 8 s so that the majority still carries on during
    // it.
    let took = cut_and_heal(
        &mut nem,
        vec![vec![1, 2, 3], vec![0]],
        Duration::from_secs(8),
        Duration::from_secs(3),
    );
    println!("1 | 3: the three carried on {took:?} ms after the cut");
    nem.check();
    nem.stop();
}

/// The seeded nemesis: `NEMESIS_FAULTS` faults (CI: 7, each kind once;
/// by hand, as many as you like: `NEMESIS_FAULTS=60 cargo nextest run -E
/// 'test(/nemesis_seeded/)' --no-capture`) drawn from `NEMESIS_SEED`
/// (printed), on `NEMESIS_HOSTS` hosts (4), each held 1-5 s and healed,
/// the job whole again after each; then the invariants over the whole
/// log.
#[test]
fn netlab_faults_nemesis_seeded_schedule() {
    let seed: u64 = std::env::var("NEMESIS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x4e_e5e5);
    let faults: usize = std::env::var("NEMESIS_FAULTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let hosts: usize = std::env::var("NEMESIS_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    println!("NEMESIS seed {seed} faults {faults} hosts {hosts}");
    let Some(mut nem) = Nemesis::start("nemesis", hosts) else {
        return;
    };
    let mut rng = Rng(seed);
    let started = Instant::now();
    // The first seven faults are each kind once, in a seeded order; the
    // rest are drawn at random.
    let mut kinds: Vec<u64> = (0..7).collect();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for k in 0..faults {
        let h = rng.below(hosts as u64) as usize;
        let hold = Duration::from_millis(1000 + rng.below(4000));
        let kind = kinds.get(k).copied().unwrap_or_else(|| rng.below(7));
        let fault = match kind {
            0 => Fault::Kill(h),
            1 => Fault::Freeze(h),
            2 => {
                let mut order: Vec<usize> = (0..hosts).collect();
                for i in (1..hosts).rev() {
                    order.swap(i, rng.below(i as u64 + 1) as usize);
                }
                let (a, b) = order.split_at(hosts / 2);
                Fault::Cut(vec![a.to_vec(), b.to_vec()])
            }
            3 => Fault::Cut(vec![(0..hosts).filter(|&x| x != h).collect(), vec![h]]),
            4 => Fault::Away(h),
            5 => Fault::Loss(5),
            _ => Fault::Slow(h),
        };
        println!("NEMESIS fault {k}: {fault:?}");
        match fault {
            Fault::Cut(sides) => {
                // The majority is given 3 s to carry on, as in the quorum
                // test (at the default seed a 2 | 2 cut comes right before
                // a 3 | 1: the three took a deadline there until a
                // sidecar's silence could fall due again, 1.2 s since).
                // The cut is held 2 s longer: healed sooner, it would take
                // the chance away (once healed, the cut rank is heard again
                // and nobody need go on without it), and a loaded
                // machine's detection and agreement then lose a race with
                // the heal that the test never meant to run.
                let within = Duration::from_secs(3);
                let held = hold.max(within + Duration::from_secs(2));
                let took = cut_and_heal(&mut nem, sides, held, within);
                println!("NEMESIS the majority carried on {took:?} ms after the cut");
            }
            f => {
                let (at, healed) = nem.strike(&f, hold);
                let _ = at;
                nem.whole(healed, Duration::from_secs(60));
                nem.survived.push(format!("{f:?}"));
            }
        }
    }
    nem.check();
    println!(
        "NEMESIS seed {seed}: survived {} faults in {:?}: {:?}",
        nem.survived.len(),
        started.elapsed(),
        nem.survived
    );
    nem.stop();
}
