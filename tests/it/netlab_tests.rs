//! meshwork across network-namespace hosts: a star whose worker sits behind
//! NAT, a host whose cable is cut mid-collective, a rate-limited link.

use crate::netlab::Lab;
use crate::procs::{all_ok, spawn, Launch};
use std::time::{Duration, Instant};

fn launch(
    world: u32,
    peers: &str,
    topology: &str,
    timeout_s: f64,
    wrap: Vec<Vec<String>>,
) -> Launch {
    Launch {
        world,
        env: vec![
            ("PEERS".into(), peers.into()),
            ("TOPOLOGY".into(), topology.into()),
            ("TIMEOUT_S".into(), timeout_s.to_string()),
            ("CLUSTER_TOKEN".into(), "netlab-secret-token".into()),
            ("TRANSPORT".into(), "quic".into()),
        ],
        wrap,
        sockets: Default::default(),
    }
}

/// QUIC on lossy links: two of three hosts drop 5 % of their UDP
/// datagrams each way, at random; every collective still gives exact
/// results, within its deadline.
#[test]
fn netlab_quic_collectives_are_exact_with_5_percent_udp_loss() {
    let Some(mut lab) = Lab::or_skip("loss") else {
        return;
    };
    let n = lab.net;
    let hosts = lab.lan_hosts("l", 0..3).unwrap();
    lab.udp_loss(&hosts[1], 5).unwrap();
    lab.udp_loss(&hosts[2], 5).unwrap();
    let peers: Vec<String> = (0..3)
        .map(|i| format!("10.77.{n}.{}:29500", 10 + i))
        .collect();
    let wrap = Lab::exec_in_each(&hosts);
    let l = launch(3, &peers.join(","), "mesh", 20.0, wrap);
    let mut ranks = spawn(&l, "all");
    all_ok(&ranks.results(Duration::from_secs(240)));
}

/// Two hosts with two ranks each: the pair on each host shares memory,
/// the pairs across hosts use QUIC, in one group, and every collective is
/// exact (each rank checks its links, by kind, rank by rank).
#[test]
fn netlab_two_hosts_of_two_ranks_mix_shared_memory_and_quic() {
    let Some(mut lab) = Lab::or_skip("mixed") else {
        return;
    };
    let n = lab.net;
    let hosts = lab.lan_hosts("m", 0..2).unwrap();
    let peers: Vec<String> = [(0, 29500), (0, 29501), (1, 29500), (1, 29501)]
        .iter()
        .map(|(h, port)| format!("10.77.{n}.{}:{port}", 10 + h))
        .collect();
    let wrap = Lab::exec_in_each([&hosts[0], &hosts[0], &hosts[1], &hosts[1]]);
    let l = launch(4, &peers.join(","), "mesh", 20.0, wrap);
    let expect = [
        "Local,SharedMemory,Quic,Quic",
        "SharedMemory,Local,Quic,Quic",
        "Quic,Quic,Local,SharedMemory",
        "Quic,Quic,SharedMemory,Local",
    ];
    let per_rank: Vec<Vec<(String, String)>> = expect
        .iter()
        .map(|e| vec![("EXPECT_LINKS".to_string(), e.to_string())])
        .collect();
    let mut ranks = crate::procs::spawn_with(&l, "all", &per_rank);
    all_ok(&ranks.results(Duration::from_secs(240)));
}

#[test]
fn netlab_star_with_a_worker_behind_nat_runs_every_collective() {
    let Some(mut lab) = Lab::or_skip("nat-star") else {
        return;
    };
    let n = lab.net;
    let (coord, _) = lab.lan_host("c", 10).unwrap();
    let natted = lab.host_behind_nat("w1", 20).unwrap();
    let (w2, _) = lab.lan_host("w2", 12).unwrap();
    let (w3, _) = lab.lan_host("w3", 13).unwrap();
    // It is a real NAT: the worker reaches the coordinator, not the reverse.
    assert!(lab.can_ping(&natted, &format!("10.77.{n}.10")));
    assert!(!lab.can_ping(&coord, &format!("10.78.{n}.2")));
    let wrap = Lab::exec_in_each([&coord, &natted, &w2, &w3]);
    // Workers are given only the coordinator's address.
    let l = launch(4, &format!("10.77.{n}.10:29500"), "star", 20.0, wrap);
    let mut ranks = spawn(&l, "all");
    all_ok(&ranks.results(Duration::from_secs(240)));
}

#[test]
fn netlab_faults_a_cut_cable_is_a_timeout_within_the_deadline() {
    const DEADLINE_S: f64 = 2.0;
    let Some(mut lab) = Lab::or_skip("cut-cable") else {
        return;
    };
    let n = lab.net;
    let hosts: Vec<(String, String)> = (1..=3)
        .map(|i| lab.lan_host(&format!("h{i}"), 10 + i).unwrap())
        .collect();
    let peers: Vec<String> = (1..=3)
        .map(|i| format!("10.77.{n}.{}:29500", 10 + i))
        .collect();
    let wrap = Lab::exec_in_each(hosts.iter().map(|(ns, _)| ns));
    let mut ranks = spawn(
        &launch(3, &peers.join(","), "mesh", DEADLINE_S, wrap),
        "loop",
    );
    ranks.wait_for(&[0, 1, 2], "READY", Duration::from_secs(60));
    let cut = Instant::now();
    lab.set_link(&hosts[2].0, &hosts[2].1, false).unwrap();
    let results = ranks.wait_for(
        &[0, 1],
        "RESULT ",
        Duration::from_secs_f64(DEADLINE_S + 2.0),
    );
    assert!(cut.elapsed() < Duration::from_secs_f64(DEADLINE_S + 2.0));
    for (r, line) in &results {
        assert!(
            line.starts_with("RESULT err Timeout")
                || line.starts_with("RESULT err PeerDisconnected"),
            "rank {r}: {line}"
        );
    }
    assert!(
        results
            .iter()
            .any(|(_, l)| l.contains("Timeout") && l.contains("[2]")),
        "{results:?}"
    );
}

#[test]
fn netlab_a_slow_link_that_keeps_moving_does_not_time_out() {
    // 16 MiB all-reduces through a 40 Mbit/s link take seconds, far past a
    // 1 s deadline, but bytes keep arriving, so nothing times out.
    let Some(mut lab) = Lab::or_skip("slow-link") else {
        return;
    };
    let n = lab.net;
    let hosts: Vec<(String, String)> = (1..=2)
        .map(|i| lab.lan_host(&format!("h{i}"), 10 + i).unwrap())
        .collect();
    lab.rate_limit(&hosts[1].0, &hosts[1].1, "40mbit").unwrap();
    let peers: Vec<String> = (1..=2)
        .map(|i| format!("10.77.{n}.{}:29500", 10 + i))
        .collect();
    let wrap = Lab::exec_in_each(hosts.iter().map(|(ns, _)| ns));
    let started = Instant::now();
    let mut ranks = spawn(&launch(2, &peers.join(","), "mesh", 1.0, wrap), "slow");
    all_ok(&ranks.results(Duration::from_secs(120)));
    assert!(
        started.elapsed() > Duration::from_secs(2),
        "the link was not slow"
    );
}

fn discovery_env(
    world: u32,
    topology: &str,
    token: &str,
    host: Option<&str>,
    wrap: Vec<Vec<String>>,
) -> Launch {
    let mut env: Vec<(String, String)> = vec![
        ("DISCOVER".into(), "1".into()),
        ("DISC_PORT".into(), "29600".into()),
        ("DATA_PORT".into(), "29500".into()),
        ("TOPOLOGY".into(), topology.into()),
        ("TIMEOUT_S".into(), "20".into()),
        ("CLUSTER_TOKEN".into(), token.into()),
    ];
    if let Some(h) = host {
        env.push(("DISCOVER_HOST".into(), h.into()));
    }
    Launch {
        world,
        env,
        wrap,
        sockets: Default::default(),
    }
}

/// Four hosts form a mesh by UDP broadcast discovery and run every
/// collective, while a second job (another token, two hosts) discovers on
/// the same LAN and port at the same time: the jobs stay apart.
#[test]
fn netlab_mesh_forms_by_broadcast_discovery_and_jobs_stay_apart() {
    let Some(mut lab) = Lab::or_skip("disc-mesh") else {
        return;
    };
    let hosts = lab.lan_hosts("h", 1..=6).unwrap();
    let wrap_a = Lab::exec_in_each(&hosts[..4]);
    let wrap_b = Lab::exec_in_each(&hosts[4..]);
    let mut a = spawn(
        &discovery_env(4, "mesh", "netlab discovery job a", None, wrap_a),
        "all",
    );
    let mut b = spawn(
        &discovery_env(2, "mesh", "netlab discovery job b", None, wrap_b),
        "all",
    );
    let ra = a.results(Duration::from_secs(240));
    let rb = b.results(Duration::from_secs(240));
    assert!(
        ra.iter()
            .chain(&rb)
            .all(|(_, l)| l.starts_with("RESULT ok")),
        "{ra:#?} {rb:#?}"
    );
}

/// A star whose worker sits behind NAT finds the coordinator by asking its
/// host (`DISCOVER_HOST`) and runs every collective.
#[test]
fn netlab_star_worker_behind_nat_discovers_the_coordinator() {
    let Some(mut lab) = Lab::or_skip("disc-star") else {
        return;
    };
    let n = lab.net;
    let (coord, _) = lab.lan_host("c", 10).unwrap();
    let natted = lab.host_behind_nat("w1", 20).unwrap();
    let (w2, _) = lab.lan_host("w2", 12).unwrap();
    let wrap = Lab::exec_in_each([&coord, &natted, &w2]);
    let coordinator = format!("10.77.{n}.10");
    let mut ranks = spawn(
        &discovery_env(
            3,
            "star",
            "netlab star discovery job",
            Some(&coordinator),
            wrap,
        ),
        "all",
    );
    all_ok(&ranks.results(Duration::from_secs(240)));
}

/// A joiner with the wrong token never hears a valid announcement: the
/// others form without it and it times out naming the ranks it missed.
#[test]
fn netlab_faults_discovery_ignores_a_wrong_token() {
    let Some(mut lab) = Lab::or_skip("disc-token") else {
        return;
    };
    let hosts = lab.lan_hosts("h", 1..=3).unwrap();
    let wrap = Lab::exec_in_each(&hosts);
    let mut l = discovery_env(3, "mesh", "netlab the right token", None, wrap);
    l.set("TIMEOUT_S", "2");
    let per_rank = vec![
        Vec::new(),
        Vec::new(),
        vec![(
            "CLUSTER_TOKEN".to_string(),
            "netlab the wrong token".to_string(),
        )],
    ];
    let mut ranks = crate::procs::spawn_with(&l, "connect", &per_rank);
    let results = ranks.results(Duration::from_secs(30));
    for (r, line) in &results {
        assert!(
            line.starts_with("RESULT err FormationTimeout"),
            "rank {r}: {line}"
        );
    }
    // The impostor heard nobody; the others heard each other, not it.
    assert!(
        results.iter().any(|(r, l)| *r == 2 && l.contains("[0, 1]")),
        "{results:?}"
    );
    assert!(
        results.iter().any(|(r, l)| *r == 0 && l.contains("[2]")),
        "{results:?}"
    );
}

/// A discovery port held by another program is an error naming it, not a
/// panic and not a silent wait.
#[test]
fn netlab_a_busy_discovery_port_is_an_error() {
    let Some(mut lab) = Lab::or_skip("disc-busy") else {
        return;
    };
    let (h1, _) = lab.lan_host("h1", 11).unwrap();
    let (h2, _) = lab.lan_host("h2", 12).unwrap();
    let holder_launch = Launch {
        world: 1,
        env: vec![("HOLD_PORT".into(), "29600".into())],
        wrap: vec![Lab::exec_in(&h1)],
        sockets: Default::default(),
    };
    let mut holder = spawn(&holder_launch, "hold_udp_port");
    holder.wait_for(&[0], "READY", Duration::from_secs(20));
    let wrap = vec![Lab::exec_in(&h1), Lab::exec_in(&h2)];
    let mut ranks = spawn(
        &discovery_env(2, "mesh", "netlab busy port job", None, wrap),
        "connect",
    );
    let results = ranks.wait_for(&[0], "RESULT ", Duration::from_secs(20));
    let line = &results[0].1;
    assert!(
        line.starts_with("RESULT err ConnectionFailed") && line.contains("29600"),
        "{line}"
    );
}

/// A job bootstrapped by a seed: rank 0 (on `seed_host`) hosts it at
/// `seed_host:29400`; the ranks with `join` set ask it for a rank.
fn seed_launch(world: u32, topology: &str, seed_host: &str, wrap: Vec<Vec<String>>) -> Launch {
    Launch {
        world,
        env: vec![
            ("SEED".into(), format!("{seed_host}:29400")),
            ("TOPOLOGY".into(), topology.into()),
            ("TIMEOUT_S".into(), "20".into()),
            ("CLUSTER_TOKEN".into(), "seed-secret-token".into()),
            ("TRANSPORT".into(), "quic".into()),
        ],
        wrap,
        sockets: Default::default(),
    }
}

/// `RANK` left empty (absent) on every rank but 0: the seed assigns them.
fn joiners(world: u32) -> Vec<Vec<(String, String)>> {
    (0..world)
        .map(|r| match r {
            0 => Vec::new(),
            _ => vec![("RANK".to_string(), String::new())],
        })
        .collect()
}

/// Four hosts on a LAN, no addresses given but the seed's: the seed hands
/// out ranks, the table and TLS identities; the mesh runs every
/// collective.
#[test]
fn netlab_seed_bootstrap_forms_a_mesh_across_4_hosts() {
    let Some(mut lab) = Lab::or_skip("seed-mesh") else {
        return;
    };
    let n = lab.net;
    let hosts = lab.lan_hosts("s", 0..4).unwrap();
    let wrap = Lab::exec_in_each(&hosts);
    let l = seed_launch(4, "mesh", &format!("10.77.{n}.10"), wrap);
    let mut ranks = crate::procs::spawn_with(&l, "all", &joiners(4));
    all_ok(&ranks.results(Duration::from_secs(240)));
}

/// A star bootstrapped by a seed on the coordinator's host, with a worker
/// behind a NAT router: it joins, learns the coordinator, dials out, and
/// every collective runs.
#[test]
fn netlab_seed_bootstrap_star_with_a_worker_behind_nat() {
    let Some(mut lab) = Lab::or_skip("seed-star") else {
        return;
    };
    let n = lab.net;
    let (coord, _) = lab.lan_host("c", 10).unwrap();
    let natted = lab.host_behind_nat("w1", 20).unwrap();
    let (w2, _) = lab.lan_host("w2", 12).unwrap();
    let wrap = Lab::exec_in_each([&coord, &natted, &w2]);
    let l = seed_launch(3, "star", &format!("10.77.{n}.10"), wrap);
    let mut ranks = crate::procs::spawn_with(&l, "all", &joiners(3));
    all_ok(&ranks.results(Duration::from_secs(240)));
}

/// A joiner with the wrong token is handed nothing and names it
/// (`ClusterTokenMismatch`) at its deadline (3 s: the seed's silence is
/// all a stranger gets too), while the job forms without it.
#[test]
fn netlab_faults_seed_refuses_a_wrong_token() {
    let Some(mut lab) = Lab::or_skip("seed-token") else {
        return;
    };
    let n = lab.net;
    let hosts = lab.lan_hosts("t", 0..4).unwrap();
    let wrap: Vec<Vec<String>> = Lab::exec_in_each(&hosts);
    let seed_host = format!("10.77.{n}.10");
    let job = seed_launch(3, "mesh", &seed_host, wrap[..3].to_vec());
    let mut ranks = crate::procs::spawn_with(&job, "connect", &joiners(3));
    let impostor = seed_launch(1, "mesh", &seed_host, wrap[3..].to_vec());
    let started = std::time::Instant::now();
    let mut bad = crate::procs::spawn_with(
        &impostor,
        "connect",
        &[vec![
            ("RANK".to_string(), String::new()),
            ("WORLD".to_string(), "3".to_string()),
            ("TIMEOUT_S".to_string(), "3".to_string()),
            (
                "CLUSTER_TOKEN".to_string(),
                "netlab the wrong token".to_string(),
            ),
        ]],
    );
    let refused = bad.results(Duration::from_secs(30));
    assert!(
        refused[0].1.starts_with("RESULT err ClusterTokenMismatch"),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    all_ok(&ranks.results(Duration::from_secs(60)));
}

/// Multi-homed hosts whose default route leads elsewhere: discovery by
/// broadcast finds nobody through the default route's interface, and finds
/// everyone with `IFNAME` naming the LAN by CIDR.
#[test]
fn netlab_ifname_picks_the_lan_on_multi_homed_hosts() {
    let Some(mut lab) = Lab::or_skip("ifname") else {
        return;
    };
    let n = lab.net;
    let hosts = lab.lan_hosts("m", 0..3).unwrap();
    for (i, ns) in hosts.iter().enumerate() {
        lab.second_default_interface(ns, 10 + i as u8).unwrap();
    }
    let wrap: Vec<Vec<String>> = Lab::exec_in_each(&hosts);
    // Without IFNAME: the announcements leave through the dummy interface.
    let mut blind = discovery_env(3, "mesh", "netlab ifname discovery job", None, wrap.clone());
    blind.set("TIMEOUT_S", "2");
    let mut ranks = spawn(&blind, "connect");
    let results = ranks.results(Duration::from_secs(30));
    assert!(
        results
            .iter()
            .all(|(_, l)| l.starts_with("RESULT err FormationTimeout")),
        "{results:#?}"
    );
    // With IFNAME by CIDR: the LAN.
    let mut l = discovery_env(3, "mesh", "netlab ifname discovery job", None, wrap);
    l.env.push(("IFNAME".into(), format!("10.77.{n}.0/24")));
    let mut ranks = spawn(&l, "all");
    all_ok(&ranks.results(Duration::from_secs(240)));
}

/// A star on a LAN with no address given at all: the workers find the
/// coordinator by mDNS (`_meshwork._udp.local.`), ask it by the
/// authenticated query, and run every collective.
#[test]
fn netlab_star_on_the_lan_finds_the_coordinator_by_mdns() {
    let Some(mut lab) = Lab::or_skip("mdns-star") else {
        return;
    };
    let hosts = lab.lan_hosts("d", 0..3).unwrap();
    let wrap = Lab::exec_in_each(&hosts);
    let mut ranks = spawn(
        &discovery_env(3, "star", "netlab mdns discovery job", None, wrap),
        "all",
    );
    all_ok(&ranks.results(Duration::from_secs(240)));
}

/// A stranger on a host of its own strikes and besieges every rank's port
/// (another version; wrong settings with a proof of nothing; 50 idle
/// connections and a dribbler each) while three hosts form a mesh, on
/// QUIC and on TCP: each forms as fast as it would unattacked (a stranger
/// that held up a handshake would cost its one-second deadline) and runs
/// every collective.
#[test]
fn netlab_siege_by_a_stranger_stops_nothing() {
    for transport in ["quic", "tcp"] {
        let Some(mut lab) = Lab::or_skip("siege") else {
            return;
        };
        let n = lab.net;
        let hosts = lab.lan_hosts("r", 0..3).unwrap();
        let (stranger, _) = lab.lan_host("x", 20).unwrap();
        let peers: Vec<String> = (0..3)
            .map(|i| format!("10.77.{n}.{}:29500", 10 + i))
            .collect();
        let siege = Launch {
            world: 1,
            env: vec![
                ("SIEGE_TARGETS".into(), peers[1..].join(",")),
                ("SIEGE_S".into(), "4".into()),
            ],
            wrap: vec![Lab::exec_in(&stranger)],
            sockets: Default::default(),
        };
        let mut attacker = spawn(&siege, "siege");
        // The targets are not up yet: ranks 1 and 2 (the ones that
        // accept) start first, so they are struck before their peers dial.
        let mut l = launch(3, &peers.join(","), "mesh", 10.0, Lab::exec_in_each(&hosts));
        l.set("TRANSPORT", transport);
        let mut ranks = spawn(&l, "connect_timed");
        attacker.wait_for(&[0], "READY", Duration::from_secs(30));
        let results = ranks.results(Duration::from_secs(60));
        all_ok(&results);
        for (r, line) in &results {
            let ms: u64 = line
                .split("formed_ms=")
                .nth(1)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(u64::MAX);
            assert!(ms < 1000, "{transport}: rank {r} formed in {ms} ms");
        }
        let said = attacker.results(Duration::from_secs(30));
        assert!(said[0].1.starts_with("RESULT ok siege"), "{said:?}");
    }
}
