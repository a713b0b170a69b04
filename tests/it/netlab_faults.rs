//! Failures across network-namespace hosts: a member killed or frozen on
//! a host of its own, the survivors shrinking in place and going on; and
//! a killed member replaced by a process on another host through the
//! job's seed.

use crate::netlab::{skip, Lab};
use crate::procs::{spawn, Launch, Ranks};
use std::time::Duration;

const DEADLINE_S: f64 = 3.0;
const TOKEN: &str = "netlab-faults-secret-token";

/// Four ranks on four hosts under `RECOVERY=shrink` run mixed verified
/// collectives; `victim` is killed, or stopped (silent: across hosts no
/// one can see its process), after `ready_after` rounds. Every survivor's
/// call returns the same `GroupShrunk { failed: [victim] }` and the loop
/// goes on, exact, on the three.
fn shrinks_across_hosts(lab: &mut Lab, signal: i32, victim: u32, ready_after: u32) {
    let n = lab.net;
    let hosts = lab.lan_hosts("h", 0..4).unwrap();
    let peers: Vec<String> = (0..4)
        .map(|i| format!("10.77.{n}.{}:29500", 10 + i))
        .collect();
    let l = Launch {
        world: 4,
        env: vec![
            ("PEERS".into(), peers.join(",")),
            ("TOPOLOGY".into(), "mesh".into()),
            ("TIMEOUT_S".into(), DEADLINE_S.to_string()),
            ("CLUSTER_TOKEN".into(), TOKEN.into()),
            ("RECOVERY".into(), "shrink".into()),
            ("HOLD_ON_ERROR".into(), "1".into()),
            ("READY_AFTER".into(), ready_after.to_string()),
        ],
        wrap: Lab::exec_in_each(&hosts),
        sockets: Default::default(),
    };
    let mut ranks = spawn(&l, "retry");
    ranks.wait_for(&[0, 1, 2, 3], "READY", Duration::from_secs(120));
    ranks.signal(victim, signal);
    let survivors: Vec<u32> = (0..4).filter(|&r| r != victim).collect();
    let within = Duration::from_secs_f64(DEADLINE_S + 30.0);
    for (r, line) in ranks.wait_for(&survivors, "RESULT ", within) {
        assert_eq!(
            line,
            format!("RESULT ok shrunk [{victim}] world 3"),
            "signal {signal}, rank {r}"
        );
    }
}

#[test]
fn netlab_faults_a_member_killed_on_its_host_is_shrunk_away() {
    let Some(mut lab) = Lab::or_skip("ft-kill") else {
        return;
    };
    shrinks_across_hosts(&mut lab, libc::SIGKILL, 2, 17);
}

#[test]
fn netlab_faults_a_member_frozen_on_its_host_is_shrunk_away() {
    let Some(mut lab) = Lab::or_skip("ft-stop") else {
        return;
    };
    shrinks_across_hosts(&mut lab, libc::SIGSTOP, 1, 9);
}

/// `examples/elastic` on four hosts through rank 0's seed; a member is
/// killed mid-run and a process on a fifth host, started afterwards,
/// takes its place; all four finish with the same model.
#[test]
fn netlab_faults_a_killed_member_is_replaced_from_another_host() {
    let Some(mut lab) = Lab::or_skip("ft-grow") else {
        return;
    };
    let n = lab.net;
    let hosts = lab.lan_hosts("g", 0..5).unwrap();
    let seed = format!("10.77.{n}.10:29400");
    let mut ranks = Ranks::none();
    for r in 0..4u32 {
        let env = [
            ("RANK", r.to_string()),
            ("WORLD", "4".into()),
            ("TOPOLOGY", "mesh".to_string()),
        ];
        let wrap = Lab::exec_in(&hosts[r as usize]);
        let Some(cmd) = crate::elastic::elastic_in(&wrap, &seed, &env, &["--steps", "3000"]) else {
            skip("examples/elastic is not built (cargo test builds examples)");
            return;
        };
        ranks.add(cmd);
    }
    ranks.wait_for(&[0, 1, 2, 3], "READY", Duration::from_secs(120));
    ranks.signal(3, libc::SIGKILL);
    ranks.wait_for(&[0, 1, 2], "lost ranks [3]", Duration::from_secs(30));
    let wrap = Lab::exec_in(&hosts[4]);
    let env = [("TOPOLOGY", "mesh".to_string())];
    let args = ["--join", "--steps", "3000"];
    let newcomer = ranks.add(crate::elastic::elastic_in(&wrap, &seed, &env, &args).unwrap());
    let done = ranks.wait_for(&[0, 1, 2, newcomer], "elastic OK", Duration::from_secs(120));
    let model = |l: &str| l.rsplit(' ').next().map(str::to_owned);
    for (id, line) in &done {
        // The members grew once; the newcomer joined the grown group.
        let growths = if *id == newcomer { 0 } else { 1 };
        let want = format!(" of 4 after 3000 steps, {growths} growth(s)");
        assert!(line.contains(&want), "{id}: {line}");
        assert_eq!(model(line), model(&done[0].1), "{done:#?}");
    }
    assert!(
        done[3].1.starts_with("elastic OK: rank 3 of 4"),
        "{done:#?}"
    );
}
