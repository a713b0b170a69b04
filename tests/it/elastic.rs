//! Elastic membership across processes: a killed member is replaced by a
//! process started later (`Node::join_running`), through the job's seed,
//! while the job trains on (`examples/elastic.rs`), in mesh and star.

use crate::procs::Ranks;
use std::process::Command;
use std::time::Duration;

const TOKEN: &str = "elastic integration test token";

/// `examples/elastic` as the process with `env` and `args`.
fn elastic(seed: &str, env: &[(&str, String)], args: &[&str]) -> Option<Command> {
    elastic_in(&[], seed, env, args)
}

/// The same, run through `wrap` (`ip netns exec NS`; empty: none).
pub(crate) fn elastic_in(
    wrap: &[String],
    seed: &str,
    env: &[(&str, String)],
    args: &[&str],
) -> Option<Command> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("examples").join("elastic");
    if !bin.exists() {
        return None;
    }
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(args)
        .env("SEED", seed)
        .env("CLUSTER_TOKEN", TOKEN)
        .env("TIMEOUT_S", "20")
        .env_remove("RANK")
        .env_remove("WORLD")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    Some(cmd)
}

/// Four members train; once all are under way, `victim` is killed; the
/// survivors report the loss and wait in `grow`, a new process started
/// only then takes the free rank, and all four finish every step with
/// the same model.
fn replaces_a_killed_member(topology: &str, victim: u32) {
    replaces_a_lost_member(topology, victim, libc::SIGKILL, &[]);
}

/// [`replaces_a_killed_member`], the victim sent `signal`, every process
/// run with `flags` as well.
fn replaces_a_lost_member(topology: &str, victim: u32, signal: i32, flags: &[&str]) {
    let seed = crate::support::free_ports(1)[0].to_string();
    let mut ranks = Ranks::none();
    for r in 0..4u32 {
        let env = [
            ("RANK", r.to_string()),
            ("WORLD", "4".into()),
            ("TOPOLOGY", topology.into()),
        ];
        let args = [&["--steps", "8000"], flags].concat();
        let Some(cmd) = elastic(&seed, &env, &args) else {
            crate::netlab::skip("examples/elastic is not built (cargo test builds examples)");
            return;
        };
        ranks.add(cmd);
    }
    ranks.wait_for(&[0, 1, 2, 3], "READY", Duration::from_secs(60));
    ranks.signal(victim, signal);
    let survivors: Vec<u32> = (0..4).filter(|&r| r != victim).collect();
    let lost = ranks.wait_for(&survivors, "lost ranks", Duration::from_secs(30));
    for (r, line) in &lost {
        assert!(
            line.starts_with(&format!("lost ranks [{victim}] at step")),
            "{topology}: process {r}: {line}"
        );
        assert!(
            line.ends_with("3 left, waiting for 1 new process(es)"),
            "{line}"
        );
    }
    let env = [("TOPOLOGY", topology.to_string())];
    let args = [&["--join", "--steps", "8000"], flags].concat();
    let newcomer = ranks.add(elastic(&seed, &env, &args).unwrap());
    let mut everyone = survivors.clone();
    everyone.push(newcomer);
    let done = ranks.wait_for(&everyone, "elastic OK", Duration::from_secs(60));
    let model = |l: &str| l.rsplit(' ').next().map(str::to_owned);
    for (id, line) in &done {
        assert!(
            line.contains(" of 4 after 8000 steps"),
            "{topology}: {id}: {line}"
        );
        assert_eq!(model(line), model(&done[0].1), "{done:#?}");
    }
    // The survivors keep their ranks, renumbered past the lost one; the
    // newcomer is rank 3.
    let rank_of = |id: u32| {
        let l = &done.iter().find(|(i, _)| *i == id).unwrap().1;
        l.split(' ').nth(3).unwrap().parse::<u32>().unwrap()
    };
    assert_eq!(rank_of(newcomer), 3, "{done:#?}");
    for (i, &s) in survivors.iter().enumerate() {
        assert_eq!(rank_of(s), i as u32, "{done:#?}");
        assert!(done
            .iter()
            .any(|(id, l)| *id == s && l.contains("1 growth(s)")));
    }
    for id in everyone {
        let status = ranks.exit_status(id, Duration::from_secs(30));
        assert!(status.success(), "process {id}: {status}; {:?}", ranks.log);
    }
}

#[test]
fn faults_elastic_example_replaces_a_killed_worker_in_a_mesh() {
    replaces_a_killed_member("mesh", 2);
}

/// A star's worker leaves and a new one joins while the job averages;
/// the coordinator (rank 0, the seed's host) cannot be lost.
#[test]
fn faults_elastic_example_replaces_a_killed_worker_in_a_star() {
    replaces_a_killed_member("star", 1);
}

/// The manual recovery path, as a program written against ULFM does it:
/// revoke, agree, `g = g.shrink()?` (the old group dropped at once), then
/// `g = g.grow(1)?`; a killed member.
#[test]
fn faults_elastic_manual_recovery_replaces_a_killed_member() {
    replaces_a_lost_member("mesh", 2, libc::SIGKILL, &["--manual"]);
}

/// The same with a frozen member (stopped, its links open).
#[test]
fn faults_elastic_manual_recovery_replaces_a_frozen_member() {
    replaces_a_lost_member("mesh", 1, libc::SIGSTOP, &["--manual"]);
}
