//! Kubernetes workloads played in the network lab (docs/launchers.md,
//! deploy/): "pods" are network-namespace hosts on a LAN, and each rank
//! process runs in a mount namespace of its own with its pod's
//! `/etc/hosts` — the line the kubelet writes for the pod, plus the lab's
//! stand-in for the cluster's DNS records — and a `resolv.conf` naming its
//! own loopback, so no lookup leaves the lab. Each starts with exactly the
//! environment its controller (and the manifest in deploy/) gives: no
//! `RANK`, `WORLD`, `PEERS` or `SEED` of meshwork's own. The seed's record
//! appears only 2 s after the ranks start, as a pod's DNS record does once
//! the pod runs: a rank that did not retry the name would fail at once.
//! Every group forms through the seed rank 0's pod hosts and runs an
//! all-reduce, each process at the rank its environment gives it.
//!
//! And addresses that answer: hosts whose names list a dead bridge's
//! address first form over the live one, well within the deadline.

use crate::netlab::Lab;
use crate::procs::{all_ok, spawn, Launch};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = "netlab-k8s-secret-token";

/// A directory of this test's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("meshwork-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write a scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Append `line` to `path` in place (the same file, so a bind mount of it
/// sees the line).
fn append(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open a hosts file");
    writeln!(f, "{line}").expect("append to a hosts file");
}

fn quoted(s: &str) -> String {
    assert!(!s.contains('\''), "{s}");
    format!("'{s}'")
}

/// The command prefix that runs one process in `ns` with `hosts` as its
/// `/etc/hosts` and `resolv` as its `resolv.conf`; with `env`, meshwork's
/// `RANK` and `WORLD` unset and exactly `env` added.
fn pod_wrap(
    ns: &str,
    hosts: &Path,
    resolv: &Path,
    env: Option<&[(String, String)]>,
) -> Vec<String> {
    let mut script = format!(
        "mount --bind {} /etc/hosts && mount --bind {} /etc/resolv.conf && exec ",
        quoted(&hosts.display().to_string()),
        quoted(&resolv.display().to_string()),
    );
    if let Some(env) = env {
        script.push_str("env -u RANK -u WORLD ");
        for (k, v) in env {
            script.push_str(&format!("{k}={} ", quoted(v)));
        }
    }
    script.push_str("\"$0\" \"$@\"");
    let mut wrap = Lab::exec_in(ns);
    wrap.extend(["unshare", "-m", "sh", "-c"].map(String::from));
    wrap.push(script);
    wrap
}

/// One rank process of a played workload.
struct Process {
    /// Which lab host (pod) it runs on.
    host: usize,
    /// The pod's own `/etc/hosts` line, as the kubelet writes it.
    kubelet_line: String,
    /// Its environment, as the controller and the manifest set it.
    env: Vec<(&'static str, String)>,
    /// The rank that environment must give it.
    rank: u32,
}

/// Run `processes` on `hosts` pods of a fresh lab; `seed_record(ips)` is
/// the seed's DNS record, which appears 2 s after they start. Each must
/// form at its rank and all-reduce.
fn play(
    test: &str,
    hosts: u8,
    processes: impl Fn(&[String]) -> Vec<Process>,
    seed_record: impl Fn(&[String]) -> String,
) {
    let Some(mut lab) = Lab::or_skip(test) else {
        return;
    };
    let namespaces = lab.lan_hosts("k", 0..hosts).unwrap();
    let ips: Vec<String> = (0..hosts)
        .map(|i| format!("10.77.{}.{}", lab.net, 10 + i))
        .collect();
    let procs = processes(&ips);
    let scratch = Scratch::new(test);
    let resolv = scratch.write("resolv.conf", "nameserver 127.0.0.1\n");
    let mut files = Vec::new();
    let mut wrap = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        let hosts_file = scratch.write(
            &format!("hosts-{i}"),
            &format!("127.0.0.1\tlocalhost\n{}\n", p.kubelet_line),
        );
        let env: Vec<(String, String)> = p
            .env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        wrap.push(pod_wrap(
            &namespaces[p.host],
            &hosts_file,
            &resolv,
            Some(&env),
        ));
        files.push(hosts_file);
    }
    let launch = Launch {
        world: procs.len() as u32,
        env: vec![
            ("TIMEOUT_S".into(), "30".into()),
            ("CLUSTER_TOKEN".into(), TOKEN.into()),
            ("TRANSPORT".into(), "quic".into()),
        ],
        wrap,
        sockets: Default::default(),
    };
    let mut ranks = spawn(&launch, "all_reduce_small");
    #[allow(
        clippy::disallowed_methods,
        reason = "the DNS record appears late on purpose"
    )]
    std::thread::sleep(Duration::from_secs(2));
    let record = seed_record(&ips);
    for f in &files {
        append(f, &record);
    }
    let results = ranks.results(Duration::from_secs(120));
    all_ok(&results);
    let world = procs.len();
    for (i, line) in &results {
        let want = format!("RESULT ok rank {} of {world}", procs[*i as usize].rank);
        assert_eq!(line, &want, "process {i}: {results:?}");
    }
}

fn vars(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// An Indexed Job of 4 with its headless Service: rank =
/// `JOB_COMPLETION_INDEX`, the seed at `train-0`'s name in the Service,
/// which each pod reads from its own name in `/etc/hosts`.
#[test]
fn netlab_k8s_an_indexed_job_forms_through_index_0_in_its_service() {
    play(
        "k8s-indexed",
        4,
        |ips| {
            (0..4)
                .map(|i| Process {
                    host: i,
                    kubelet_line: format!(
                        "{}\ttrain-{i}.train-svc.ml.svc.cluster.local\ttrain-{i}",
                        ips[i]
                    ),
                    env: vars(&[
                        ("JOB_COMPLETION_INDEX", &i.to_string()),
                        ("HOSTNAME", &format!("train-{i}")),
                        ("WORLD", "4"),
                    ]),
                    rank: i as u32,
                })
                .collect()
        },
        |ips| format!("{}\ttrain-0.train-svc.ml.svc.cluster.local", ips[0]),
    );
}

/// A JobSet of 2 Jobs of 2 pods, started out of rank order: rank =
/// `JOB_GLOBAL_INDEX` × 2 + `JOB_COMPLETION_INDEX`, the seed at the first
/// Job's first pod in the JobSet's subdomain.
#[test]
fn netlab_k8s_a_jobset_forms_through_its_first_jobs_first_pod() {
    // (job, pod) of each process, on hosts 0..4.
    const PODS: [(u32, u32); 4] = [(1, 1), (0, 1), (0, 0), (1, 0)];
    play(
        "k8s-jobset",
        4,
        |ips| {
            PODS.iter()
                .enumerate()
                .map(|(host, &(job, pod))| {
                    let name = format!("js-workers-{job}-{pod}");
                    Process {
                        host,
                        kubelet_line: format!(
                            "{}\t{name}.js.ml.svc.cluster.local\t{name}",
                            ips[host]
                        ),
                        env: vars(&[
                            ("JOB_COMPLETION_INDEX", &pod.to_string()),
                            ("JOBSET_NAME", "js"),
                            ("REPLICATED_JOB_NAME", "workers"),
                            ("JOB_GLOBAL_INDEX", &job.to_string()),
                            ("GLOBAL_REPLICAS", "2"),
                            ("WORLD", "4"),
                            ("HOSTNAME", &name),
                        ]),
                        rank: job * 2 + pod,
                    }
                })
                .collect()
        },
        |ips| format!("{}\tjs-workers-0-0.js", ips[2]),
    );
}

/// A PyTorchJob of a master and a worker with `nprocPerNode: 2`, two
/// processes a pod (sharing memory) without torchrun: rank = `RANK` × 2 +
/// `LOCAL_RANK`, the seed on the master at `MASTER_PORT`.
#[test]
fn netlab_k8s_a_pytorchjob_counts_processes_a_pod() {
    // (pod, local rank) of each process.
    const PROCS: [(u32, u32); 4] = [(1, 1), (0, 0), (1, 0), (0, 1)];
    play(
        "k8s-pytorchjob",
        2,
        |ips| {
            PROCS
                .iter()
                .map(|&(pod, local)| {
                    let name = match pod {
                        0 => "pt-master-0".to_string(),
                        w => format!("pt-worker-{}", w - 1),
                    };
                    Process {
                        host: pod as usize,
                        kubelet_line: format!("{}\t{name}", ips[pod as usize]),
                        env: vars(&[
                            ("MASTER_ADDR", "pt-master-0"),
                            ("MASTER_PORT", "23456"),
                            ("WORLD_SIZE", "4"),
                            ("RANK", &pod.to_string()),
                            ("PET_MASTER_ADDR", "pt-master-0"),
                            ("PET_MASTER_PORT", "23456"),
                            ("PET_NNODES", "2"),
                            ("PET_NODE_RANK", &pod.to_string()),
                            ("PET_NPROC_PER_NODE", "2"),
                            ("PYTHONUNBUFFERED", "1"),
                            ("LOCAL_RANK", &local.to_string()),
                            ("HOSTNAME", &name),
                        ]),
                        rank: pod * 2 + local,
                    }
                })
                .collect()
        },
        |ips| format!("{}\tpt-master-0", ips[0]),
    );
}

/// A LeaderWorkerSet group of 4: rank = `LWS_WORKER_INDEX` of
/// `LWS_GROUP_SIZE`, the seed at `LWS_LEADER_ADDRESS`, whose record the
/// leader waits for too.
#[test]
fn netlab_k8s_a_leader_worker_set_group_forms_through_its_leader() {
    play(
        "k8s-lws",
        4,
        |ips| {
            (0..4)
                .map(|i| {
                    let name = match i {
                        0 => "lws-0".to_string(),
                        w => format!("lws-0-{w}"),
                    };
                    Process {
                        host: i,
                        kubelet_line: format!(
                            "{}\t{name}.lws.default.svc.cluster.local\t{name}",
                            ips[i]
                        ),
                        env: vars(&[
                            ("LWS_LEADER_ADDRESS", "lws-0.lws.default"),
                            ("LWS_GROUP_SIZE", "4"),
                            ("LWS_WORKER_INDEX", &i.to_string()),
                            ("HOSTNAME", &name),
                        ]),
                        rank: i as u32,
                    }
                })
                .collect()
        },
        |ips| format!("{}\tlws-0.lws.default", ips[0]),
    );
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Four hosts on the lab's LAN, each also on a second bridge that is down
/// (10.79.N.0/24), and a hosts file that lists every host's dead address
/// first: the namespaces, the file and the scratch directory holding it.
fn dead_bridge_lab(test: &str) -> Option<(Lab, Vec<String>, PathBuf, PathBuf, Scratch)> {
    let mut lab = Lab::or_skip(test)?;
    let n = lab.net;
    let hosts = lab.lan_hosts("d", 0..4).unwrap();
    let prefix = hosts[0]
        .strip_suffix("-d0")
        .expect("lab host names")
        .to_string();
    let br = format!("{prefix}-br");
    ip(&["-n", &br, "link", "add", "br1", "type", "bridge"]);
    // br1 stays down: whatever enters it goes nowhere.
    let mut lines = String::from("127.0.0.1\tlocalhost\n");
    for (i, ns) in hosts.iter().enumerate() {
        let (a, b) = (format!("{prefix}x{i}"), format!("{prefix}y{i}"));
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        ip(&["link", "set", &a, "netns", ns]);
        ip(&["link", "set", &b, "netns", &br]);
        ip(&["-n", &br, "link", "set", &b, "master", "br1"]);
        ip(&["-n", &br, "link", "set", &b, "up"]);
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("10.79.{n}.{}/24", 10 + i),
            "dev",
            &a,
        ]);
        ip(&["-n", ns, "link", "set", &a, "up"]);
        lines.push_str(&format!(
            "10.79.{n}.{}\tnode{i}\n10.77.{n}.{}\tnode{i}\n",
            10 + i,
            10 + i
        ));
    }
    assert!(lab.can_ping(&hosts[1], &format!("10.77.{n}.10")));
    assert!(
        !lab.can_ping(&hosts[1], &format!("10.79.{n}.10")),
        "the bridge is not dead"
    );
    let scratch = Scratch::new(test);
    let hosts_file = scratch.write("hosts", &lines);
    let resolv = scratch.write("resolv.conf", "nameserver 127.0.0.1\n");
    Some((lab, hosts, hosts_file, resolv, scratch))
}

/// Form four ranks on the dead-bridge lab with `how` (`PEERS` or `SEED`,
/// by host name, and the topology); each must form well within the 30 s
/// deadline.
fn forms_over_the_live_address(test: &str, how: (&str, String), topology: &str) {
    let Some((_lab, hosts, hosts_file, resolv, _scratch)) = dead_bridge_lab(test) else {
        return;
    };
    let wrap = hosts
        .iter()
        .map(|ns| pod_wrap(ns, &hosts_file, &resolv, None))
        .collect();
    let launch = Launch {
        world: 4,
        env: vec![
            (how.0.to_string(), how.1),
            ("TOPOLOGY".into(), topology.into()),
            ("TIMEOUT_S".into(), "30".into()),
            ("CLUSTER_TOKEN".into(), TOKEN.into()),
            ("TRANSPORT".into(), "quic".into()),
        ],
        wrap,
        sockets: Default::default(),
    };
    let started = Instant::now();
    let mut ranks = spawn(&launch, "connect_timed");
    let results = ranks.results(Duration::from_secs(120));
    all_ok(&results);
    for (r, line) in &results {
        let ms: u64 = line
            .rsplit("formed_ms=")
            .next()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("rank {r}: {line}"));
        assert!(ms < 12_000, "rank {r} took {ms} ms to form: {results:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// `PEERS` by host name, each name listing a dead bridge's address
/// first: every rank dials each address in turn and listens on all.
#[test]
fn netlab_k8s_peers_whose_names_list_a_dead_bridge_first_form_over_the_live_one() {
    let peers: Vec<String> = (0..4).map(|i| format!("node{i}:29500")).collect();
    forms_over_the_live_address("dead-peers", ("PEERS", peers.join(",")), "mesh");
}

/// `SEED` by host name, listing a dead bridge's address first: rank 0
/// hosts the seed on all its addresses and the others reach it over the
/// live one. In a star, whose workers dial rank 0, they reach rank 0 over
/// the live one too, though its seed saw it at the dead one (it joined
/// its own seed there).
#[test]
fn netlab_k8s_a_seed_whose_name_lists_a_dead_bridge_first_forms_over_the_live_one() {
    let seed = ("SEED", "node0:29400".to_string());
    forms_over_the_live_address("dead-seed", seed, "star");
}
