//! Forming under Slurm's `srun` with nothing else set.
//!
//! Every task of a step knows who it is (`SLURM_PROCID` of `SLURM_NTASKS`)
//! and where the step runs (`SLURM_STEP_NODELIST`), and nothing more that
//! all tasks share. So the group forms through meshwork's seed, which
//! rank 0 hosts on the step's first host — where every placement but
//! `arbitrary` puts it — on a port computed from the job and step ids,
//! the same in every task and different for two steps of one job. A step
//! on one host needs no token (the seed and the ranks stay on loopback);
//! a step over several needs `CLUSTER_TOKEN`, which the environment alone
//! cannot supply: docs/launchers.md says why and how.
//!
//! The parsers and the decision are pure functions of a lookup function,
//! tested with a map; only [`launched`] reads the process's
//! environment and resolves a host name.

use crate::env::lookup_in;
use crate::error::{Error, Result};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};

/// The seed's ports when `MESHWORK_SLURM_PORT` does not set one: from
/// `PORT_BASE`, `PORT_SPAN` of them (20000–28191). Below Linux's
/// ephemeral range (32768–60999), so no outgoing connection's source port
/// can hold one; above Slurm's own (6817–6819) and the usual services;
/// below meshwork's defaults (29400 in the examples, `DATA_PORT` 29500,
/// `DISC_PORT` 29600, also torch's `MASTER_PORT`).
pub(crate) const PORT_BASE: u16 = 20_000;
/// See [`PORT_BASE`]; a power of two, so the port depends on the job id
/// modulo `PORT_SPAN / STEPS_PER_JOB` and the step id modulo
/// `STEPS_PER_JOB` only.
pub(crate) const PORT_SPAN: u16 = 8_192;
/// Steps of one job whose ports all differ (ids 0..16; a job rarely runs
/// more at once); jobs 512 ids apart share ports, step by step.
const STEPS_PER_JOB: u64 = 16;

/// The most hosts or task counts a list may expand to: a bound on what a
/// malformed value can make this allocate (a step has at most
/// `SLURM_NTASKS` hosts anyway).
const MAX_EXPANDED: usize = 1 << 20;

/// The most bytes of names a host list may expand to: 2^20 names of 64
/// bytes (Linux's longest host name), far beyond any real step, and a
/// bound on what a malformed value (a range written a million digits
/// wide) can make this allocate.
const MAX_EXPANDED_BYTES: usize = 64 << 20;

/// The seed's port for step `step` of job `job`:
/// `20000 + (16·job + step) mod 8192`.
pub(crate) fn seed_port(job: u64, step: u64) -> u16 {
    // 8192 divides 2^64, so wrapping arithmetic keeps the residue.
    let slot = job.wrapping_mul(STEPS_PER_JOB).wrapping_add(step) % u64::from(PORT_SPAN);
    PORT_BASE + slot as u16
}

/// Why a list in Slurm's syntax cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListError {
    /// The list, or an item between two commas, is empty.
    Empty,
    /// A `[` without its `]`, a `]` without its `[`, or brackets nested.
    Brackets,
    /// A space or control character: Slurm writes none.
    Character(char),
    /// A bracket range that is not `n` or `lo-hi`, decimal, `lo <= hi`.
    Range(String),
    /// A tasks-per-node item that is not `n` or `n(xk)`, `k >= 1`.
    Count(String),
    /// More than [`MAX_EXPANDED`] entries.
    TooMany,
    /// Host names of more than [`MAX_EXPANDED_BYTES`] bytes in all.
    TooLong,
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListError::Empty => write!(f, "an empty list or an empty item between commas"),
            ListError::Brackets => write!(f, "unbalanced or nested brackets"),
            ListError::Character(c) => write!(f, "the character {c:?} is not in a host list"),
            ListError::Range(r) => write!(
                f,
                "{r:?} is not a range (n or lo-hi, decimal, lo <= hi) as in node[01-04,07]"
            ),
            ListError::Count(c) => write!(f, "{c:?} is not a count (n or n(xk)) as in 2(x3),1"),
            ListError::TooMany => write!(f, "expands to more than {MAX_EXPANDED} entries"),
            ListError::TooLong => {
                write!(
                    f,
                    "expands to more than {MAX_EXPANDED_BYTES} bytes of host names"
                )
            }
        }
    }
}

/// Expand a host list as Slurm writes it: comma-separated items, each a
/// name with bracket groups of comma-separated numbers and ranges
/// (`node[01-04,07]`, `a1,b[2-3]`). A range is as wide as its lower
/// bound is written (`[08-10]`: `08 09 10`; `[8-10]`: `8 9 10`). Several
/// groups in one name (`rack[1-2]-n[01-02]`) expand as a product, the
/// leftmost slowest; text after a group is kept (`n[1-2]-ib`). Hosts in
/// the order written, duplicates kept.
///
/// What a list expands to is measured before anything is expanded: more
/// than [`MAX_EXPANDED`] names, or names of more than
/// [`MAX_EXPANDED_BYTES`] in all, is [`ListError::TooMany`] or
/// [`ListError::TooLong`], whatever the value asks for.
pub(crate) fn parse_hostlist(list: &str) -> std::result::Result<Vec<String>, ListError> {
    let items = split_outside_brackets(list)?
        .into_iter()
        .map(host_parts)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let (mut names, mut bytes) = (0usize, 0usize);
    for parts in &items {
        let (n, b) = expanded_size(parts)?;
        names = names
            .checked_add(n)
            .filter(|&n| n <= MAX_EXPANDED)
            .ok_or(ListError::TooMany)?;
        bytes = bytes
            .checked_add(b)
            .filter(|&b| b <= MAX_EXPANDED_BYTES)
            .ok_or(ListError::TooLong)?;
    }
    let mut hosts = Vec::with_capacity(names);
    for parts in &items {
        let mut names = vec![String::new()];
        for part in parts {
            names = match part {
                HostPart::Text(t) => names.into_iter().map(|n| n + t).collect(),
                HostPart::Numbers(ranges) => names
                    .iter()
                    .flat_map(|n| ranges.iter().flat_map(move |r| r.names(n)))
                    .collect(),
            };
        }
        hosts.extend(names);
    }
    Ok(hosts)
}

/// How many names one item expands to, and at most how many bytes they
/// take: counted from the ranges, none written out.
fn expanded_size(parts: &[HostPart<'_>]) -> std::result::Result<(usize, usize), ListError> {
    let (mut count, mut longest) = (1usize, 0usize);
    for part in parts {
        match part {
            HostPart::Text(t) => longest = longest.saturating_add(t.len()),
            HostPart::Numbers(ranges) => {
                let group = ranges.iter().map(NumberRange::len).sum::<usize>();
                count = count
                    .checked_mul(group)
                    .filter(|&c| c <= MAX_EXPANDED)
                    .ok_or(ListError::TooMany)?;
                let widest = ranges.iter().map(NumberRange::widest).max().unwrap_or(0);
                longest = longest.saturating_add(widest);
            }
        }
    }
    Ok((count, count.saturating_mul(longest)))
}

/// Expand Slurm's tasks per node: comma-separated counts, each `n` or `n`
/// repeated `k` times, `n(xk)` (`2(x3),1`: `2 2 2 1`).
pub(crate) fn parse_tasks_per_node(list: &str) -> std::result::Result<Vec<u32>, ListError> {
    let mut counts = Vec::new();
    for item in list.split(',') {
        if item.is_empty() {
            return Err(ListError::Empty);
        }
        let bad = || ListError::Count(item.to_string());
        let (n, k) = match item.strip_suffix(')').map(|i| i.split_once("(x")) {
            None => (item, "1"),
            Some(Some((n, k))) => (n, k),
            Some(None) => return Err(bad()),
        };
        let n: u32 = decimal(n).ok_or_else(bad)?;
        let k: usize = decimal(k).filter(|&k| k >= 1).ok_or_else(bad)?;
        if k > MAX_EXPANDED - counts.len() {
            return Err(ListError::TooMany);
        }
        counts.extend(std::iter::repeat_n(n, k));
    }
    Ok(counts)
}

/// Digits only (no sign, no space), as a number.
fn decimal<T: std::str::FromStr>(s: &str) -> Option<T> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// The items of a host list: split at the commas outside brackets.
fn split_outside_brackets(list: &str) -> std::result::Result<Vec<&str>, ListError> {
    let mut items = Vec::new();
    let (mut open, mut start) = (false, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' if !open => open = true,
            ']' if open => open = false,
            '[' | ']' => return Err(ListError::Brackets),
            ',' if !open => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            c if c.is_whitespace() || c.is_control() => return Err(ListError::Character(c)),
            _ => {}
        }
    }
    if open {
        return Err(ListError::Brackets);
    }
    items.push(&list[start..]);
    if items.iter().any(|i| i.is_empty()) {
        return Err(ListError::Empty);
    }
    Ok(items)
}

/// One piece of a host name: literal text, or a bracket group's ranges.
enum HostPart<'a> {
    Text(&'a str),
    Numbers(Vec<NumberRange>),
}

/// `lo-hi` of a bracket group, each number written at least `width`
/// digits wide (zero-padded as the lower bound is written).
struct NumberRange {
    lo: u64,
    hi: u64,
    width: usize,
}

impl NumberRange {
    /// How many numbers (at most [`MAX_EXPANDED`]: checked when read).
    fn len(&self) -> usize {
        (self.hi - self.lo) as usize + 1
    }

    /// The widest number written, in bytes.
    fn widest(&self) -> usize {
        self.width.max(self.hi.to_string().len())
    }

    /// `prefix` followed by each number.
    fn names<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = String> + 'a {
        let width = self.width;
        (self.lo..=self.hi).map(move |x| format!("{prefix}{x:0width$}"))
    }
}

/// Cut one item (brackets balanced, none nested: checked by the caller)
/// into text and bracket groups, read but not expanded.
fn host_parts(item: &str) -> std::result::Result<Vec<HostPart<'_>>, ListError> {
    let mut parts = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']').ok_or(ListError::Brackets)? + open;
        if open > 0 {
            parts.push(HostPart::Text(&rest[..open]));
        }
        parts.push(HostPart::Numbers(read_ranges(&rest[open + 1..close])?));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(HostPart::Text(rest));
    }
    Ok(parts)
}

/// `01-04,07` → `01-04` and `07`, at most [`MAX_EXPANDED`] numbers in all.
fn read_ranges(group: &str) -> std::result::Result<Vec<NumberRange>, ListError> {
    let (mut out, mut count) = (Vec::new(), 0usize);
    for range in group.split(',') {
        let bad = || ListError::Range(range.to_string());
        let (lo_text, hi_text) = range.split_once('-').unwrap_or((range, range));
        let lo: u64 = decimal(lo_text).ok_or_else(bad)?;
        let hi: u64 = decimal(hi_text).ok_or_else(bad)?;
        if lo > hi {
            return Err(bad());
        }
        count = usize::try_from(hi - lo)
            .ok()
            .and_then(|n| n.checked_add(1))
            .and_then(|n| n.checked_add(count))
            .filter(|&n| n <= MAX_EXPANDED)
            .ok_or(ListError::TooMany)?;
        out.push(NumberRange {
            lo,
            hi,
            width: lo_text.len(),
        });
    }
    Ok(out)
}

/// Why the Slurm environment cannot form a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlurmError {
    /// A variable Slurm set is malformed or at odds with another.
    Bad {
        /// The variable at fault.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong, and the remedy where there is one.
        why: String,
    },
    /// A step over several hosts and no `CLUSTER_TOKEN`.
    TokenRequired {
        /// The step's hosts, as `SLURM_STEP_NODELIST` gave them.
        nodelist: String,
        /// How many.
        hosts: usize,
    },
}

impl fmt::Display for SlurmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlurmError::Bad { var, value, why } => write!(f, "{var}={value:?}: {why}"),
            SlurmError::TokenRequired { nodelist, hosts } => write!(
                f,
                "CLUSTER_TOKEN is not set and this Slurm step runs on {hosts} hosts \
                 (SLURM_STEP_NODELIST={nodelist}): ranks on different hosts must share a \
                 secret. Put `export CLUSTER_TOKEN=$(meshrun token)` in the batch script \
                 before srun (srun passes it to every task), or set SEED yourself"
            ),
        }
    }
}

impl From<SlurmError> for Error {
    fn from(e: SlurmError) -> Error {
        Error::InvalidArgument(e.to_string())
    }
}

/// Where the seed listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SeedHost {
    /// `127.0.0.1`: every task of the step is on one host.
    Loopback,
    /// The step's first host, by the name Slurm gives it.
    Named(String),
}

/// What a task of a Slurm step forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Formation {
    /// `SLURM_PROCID`.
    pub rank: u32,
    /// `SLURM_NTASKS`.
    pub world: u32,
    /// `SLURM_JOB_ID`, `SLURM_STEP_ID`.
    pub job: u64,
    pub step: u64,
    /// The step's hosts in Slurm's order (`SLURM_STEP_NODELIST`).
    pub hosts: Vec<String>,
    /// Where rank 0 hosts the seed, and on which port.
    pub seed_host: SeedHost,
    pub port: u16,
}

/// Decide from the environment `get` gives whether this is a task of an
/// `srun` step left to meshwork, and if so what it forms. `None` (the
/// rest of the environment decides, as without Slurm) unless
/// `SLURM_JOB_ID`, `SLURM_STEP_ID`, `SLURM_PROCID` and `SLURM_NTASKS`
/// are all set (a batch script has no `SLURM_STEP_ID`) and the job did
/// not say how to form: no `RANK`, `WORLD` or their other aliases (a
/// launcher inside the step, such as torchrun, sets them), no `PEERS`,
/// no `SEED` or `MASTER_ADDR`, no `DISCOVER` other than 0.
pub(crate) fn decide(
    get: impl Fn(&str) -> Option<String>,
) -> std::result::Result<Option<Formation>, SlurmError> {
    let var = |name: &str| lookup_in(name, &get);
    let chosen = ["PEERS", "SEED"].iter().any(|n| var(n).is_some())
        || var("DISCOVER").is_some_and(|(_, v)| v != "0");
    let (Some(("SLURM_PROCID", rank)), Some(("SLURM_NTASKS", world))) = (var("RANK"), var("WORLD"))
    else {
        return Ok(None);
    };
    let (Some((_, job)), Some((_, step))) = (var("SLURM_JOB_ID"), var("SLURM_STEP_ID")) else {
        return Ok(None);
    };
    if chosen {
        return Ok(None);
    }
    let bad = |var: &'static str, value: &str, why: &str| SlurmError::Bad {
        var,
        value: value.to_string(),
        why: why.to_string(),
    };
    let number = |name: &'static str, value: &str| -> std::result::Result<u64, SlurmError> {
        decimal(value).ok_or_else(|| bad(name, value, "expected a decimal number"))
    };
    let job_id = number("SLURM_JOB_ID", &job)?;
    let step_id = number("SLURM_STEP_ID", &step)?;
    let rank: u32 = decimal(&rank).ok_or_else(|| bad("SLURM_PROCID", &rank, "expected a rank"))?;
    let world: u32 = decimal(&world).filter(|&w| w >= 1).ok_or_else(|| {
        bad(
            "SLURM_NTASKS",
            &world,
            "expected a number of tasks, at least 1",
        )
    })?;
    if rank >= world {
        return Err(bad(
            "SLURM_PROCID",
            &rank.to_string(),
            &format!("not a rank of SLURM_NTASKS={world}"),
        ));
    }
    let (_, nodelist) = var("SLURM_STEP_NODELIST").ok_or_else(|| {
        bad(
            "SLURM_STEP_NODELIST",
            "",
            "srun sets it for every task of a step; without it rank 0's host is unknown (set SEED)",
        )
    })?;
    let hosts = parse_hostlist(&nodelist)
        .map_err(|e| bad("SLURM_STEP_NODELIST", &nodelist, &e.to_string()))?;
    if let Some((name, v)) = var("SLURM_STEP_NUM_NODES") {
        if decimal::<usize>(&v) != Some(hosts.len()) {
            return Err(bad(
                name,
                &v,
                &format!("SLURM_STEP_NODELIST={nodelist} names {} hosts", hosts.len()),
            ));
        }
    }
    if let Some((name, v)) = var("SLURM_STEP_TASKS_PER_NODE") {
        let counts = parse_tasks_per_node(&v).map_err(|e| bad(name, &v, &e.to_string()))?;
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        if counts.len() != hosts.len() || total != u64::from(world) {
            return Err(bad(
                name,
                &v,
                &format!(
                    "{} hosts, {total} tasks; SLURM_STEP_NODELIST={nodelist} names {} hosts and SLURM_NTASKS={world}",
                    counts.len(),
                    hosts.len()
                ),
            ));
        }
    }
    // Block, cyclic and plane placements start with task 0 on the step's
    // first host; an arbitrary one (SLURM_HOSTFILE) may put it anywhere,
    // and no task but rank 0 learns where.
    if let Some((name, v)) = var("SLURM_DISTRIBUTION") {
        if v.starts_with("arbitrary") {
            return Err(bad(
                name,
                &v,
                "rank 0 may run on any host of the step, and the others cannot tell which; set SEED=<rank 0's host>:<port>",
            ));
        }
    }
    if rank == 0 {
        if let Some((_, node)) = var("SLURMD_NODENAME") {
            if node != hosts[0] {
                return Err(bad(
                    "SLURM_STEP_NODELIST",
                    &nodelist,
                    &format!("rank 0 runs on {node}, not on the step's first host, where the others look for it; set SEED=<rank 0's host>:<port>"),
                ));
            }
        }
    }
    let port = match var("MESHWORK_SLURM_PORT") {
        None => seed_port(job_id, step_id),
        Some((name, v)) => decimal::<u16>(&v)
            .filter(|&p| p != 0)
            .ok_or_else(|| bad(name, &v, "expected a port, 1 to 65535"))?,
    };
    let seed_host = match hosts.len() {
        1 => SeedHost::Loopback,
        // Several hosts: the token rule's case off this host.
        n if matches!(
            super::token_rule(var("CLUSTER_TOKEN").map(|(_, t)| t).as_deref(), true, false),
            Err(crate::Error::TokenRequired)
        ) =>
        {
            return Err(SlurmError::TokenRequired { nodelist, hosts: n })
        }
        _ => SeedHost::Named(hosts[0].clone()),
    };
    Ok(Some(Formation {
        rank,
        world,
        job: job_id,
        step: step_id,
        hosts,
        seed_host,
        port,
    }))
}

/// An `srun` step left to meshwork (see [`decide`]), read from the
/// process's environment (a [`Launcher`](super::from_env)): `None` when
/// not under one or when `SEED` is set; else the seed's address, on the
/// step's first host, where rank 0 hosts it. The rank and the world come
/// from `SLURM_PROCID` and `SLURM_NTASKS` through their rows in the table.
pub(super) fn launched() -> Result<Option<super::from_env::Launched>> {
    if crate::env::lookup("SEED").is_some() {
        return Ok(None);
    }
    let Some(step) = decide(|name| std::env::var(name).ok())? else {
        return Ok(None);
    };
    let seed = seed_address(&step)?;
    tracing::info!(
        job = step.job,
        step = step.step,
        rank = step.rank,
        world = step.world,
        hosts = step.hosts.len(),
        %seed,
        "a Slurm step: forming through the seed rank 0 hosts"
    );
    Ok(Some(super::from_env::Launched {
        seed: seed.to_string(),
        rank: None,
        world: None,
    }))
}

/// Resolve where the seed listens. A host that resolves only to loopback
/// (a Debian `/etc/hosts` maps its own name to 127.0.1.1) would have rank
/// 0 listen where no other host reaches: refused, naming the variable.
fn seed_address(step: &Formation) -> Result<SocketAddr> {
    let host = match &step.seed_host {
        SeedHost::Loopback => return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, step.port))),
        SeedHost::Named(host) => host,
    };
    let bad = |why: String| SlurmError::Bad {
        var: "SLURM_STEP_NODELIST",
        value: host.clone(),
        why,
    };
    let addrs: Vec<SocketAddr> = (host.as_str(), step.port)
        .to_socket_addrs()
        .map_err(|e| {
            bad(format!(
                "the step's first host does not resolve: {e}; set SEED"
            ))
        })?
        .collect();
    let reachable = |a: &&SocketAddr| !a.ip().is_loopback();
    let seed = addrs
        .iter()
        .filter(reachable)
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.iter().find(reachable))
        .ok_or_else(|| {
            bad(format!(
                "the step's first host resolves to {addrs:?} here, loopback only, which the other hosts cannot reach; fix the host's name resolution or set SEED"
            ))
        })?;
    Ok(*seed)
}

#[cfg(test)]
mod tests;
