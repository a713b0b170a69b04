//! Forming in Kubernetes, and under torchrun, with nothing else set.
//!
//! A workload controller tells each pod who it is, in its own words; this
//! module reads them and hands `Node::from_env` what it already knows how
//! to use — a rank, a world and a seed at rank 0's pod, which hosts it —
//! in place of `RANK`, `WORLD` and `SEED` (`crate::env::translate`):
//!
//! | environment | rank | world | seed's host |
//! |---|---|---|---|
//! | Indexed Job | `JOB_COMPLETION_INDEX` | `WORLD` (set it) | `<job>-0.<service>` |
//! | JobSet | `JOB_GLOBAL_INDEX` × pods a Job + `JOB_COMPLETION_INDEX` | `WORLD` (set it) | `JOBSET_COORDINATOR`, else `<jobset>-<replicated job>-0-0.<subdomain>` |
//! | PyTorchJob | `RANK` × `PET_NPROC_PER_NODE` + `LOCAL_RANK` | `WORLD_SIZE` | `MASTER_ADDR` |
//! | torchrun | `RANK` | `WORLD_SIZE` | `MASTER_ADDR` |
//! | LeaderWorkerSet | `LWS_WORKER_INDEX` | `LWS_GROUP_SIZE` | `LWS_LEADER_ADDRESS` |
//!
//! The seed's port is `MESHWORK_SEED_PORT` (29400 by default), but
//! `MASTER_PORT` in a PyTorchJob's pods without torchrun, and
//! `MASTER_PORT + 1` under torchrun, whose own store holds `MASTER_PORT`.
//!
//! A pod's peers' DNS records appear only once those pods run, so the
//! seed's name is resolved again and again until it resolves, within the
//! formation deadline (`TIMEOUT_S`); it is then handed on by name, and
//! every address it resolves to is dialled in turn (a dead bridge's
//! listed first does not stall formation). Pods are on several hosts: a
//! `CLUSTER_TOKEN` (from a Secret) is required. Ranks announce the
//! address the seed sees them at — the pod's own, as pod networking has
//! no NAT — and rank 0 binds the seed at its pod's address, the one its
//! name resolves to. Set `SEED` or `PEERS` (or `DISCOVER`) to form
//! otherwise. docs/launchers.md has the recipes, deploy/ the manifests.
//!
//! What each controller sets (checked in their sources):
//! * Job (`completionMode: Indexed`): `JOB_COMPLETION_INDEX`; the pod's
//!   hostname is `<job>-<index>`, and with `subdomain: <service>` (a
//!   headless Service) the kubelet writes its FQDN
//!   `<hostname>.<service>.<namespace>.svc.<cluster domain>` into
//!   `/etc/hosts`. `spec.completions` is not in the pod's environment.
//! * JobSet: only the Job's `JOB_COMPLETION_INDEX`; its own indices are
//!   labels and annotations (`jobset.sigs.k8s.io/job-global-index`,
//!   `…/global-replicas`, `…/jobset-name`, `…/replicatedjob-name`,
//!   `…/coordinator`) that the manifest passes on through the downward
//!   API under the names read here. Pods are `<jobset>-<replicated
//!   job>-<job index>-<pod index>`, subdomain the JobSet's name unless
//!   `network.subdomain` says otherwise.
//! * PyTorchJob (Kubeflow training operator v1): `MASTER_ADDR` (the
//!   master pod, `<job>-master-0`), `MASTER_PORT`, `RANK` = the pod's
//!   index (master 0, worker i → i + 1), `WORLD_SIZE` = pods ×
//!   `nprocPerNode`, `PET_NNODES`, `PET_NODE_RANK`, and
//!   `PET_NPROC_PER_NODE` when `nprocPerNode` is set — for torchrun,
//!   which then starts that many processes a pod and sets `RANK`,
//!   `WORLD_SIZE`, `LOCAL_RANK` and `TORCHELASTIC_RUN_ID` per process.
//! * LeaderWorkerSet: `LWS_LEADER_ADDRESS` =
//!   `<lws>-<group>.<subdomain>.<namespace>`, `LWS_GROUP_SIZE` (pods in
//!   the group, leader included), `LWS_WORKER_INDEX` (0 for the leader).
//!   Each group is a job of its own.

use crate::env::lookup_in;
use crate::error::{Error, Result};
use std::net::ToSocketAddrs;
use std::time::{Duration, Instant};

/// The seed's port where the environment names none.
pub(crate) const DEFAULT_SEED_PORT: u16 = 29400;

/// What an environment comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    /// The environment recognised, in words.
    launcher: &'static str,
    rank: u32,
    world: u32,
    /// The seed's host (a DNS name or an address), and which variable
    /// gave it or what it was made from.
    host: String,
    host_from: &'static str,
    port: u16,
    /// One process a pod: the pod named as the seed's host is rank 0's.
    one_a_pod: bool,
    /// The pods are on several hosts.
    needs_token: bool,
}

impl Plan {
    /// `host:port`, with an IPv6 literal in brackets.
    fn seed(&self) -> String {
        match self.host.parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("[{}]:{}", self.host, self.port),
            Err(_) => format!("{}:{}", self.host, self.port),
        }
    }
}

/// `name=value: why`, as `Node::from_env` words a bad variable.
fn bad(name: &str, value: &str, why: &str) -> Error {
    Error::InvalidArgument(format!("{name}={value:?}: {why}"))
}

/// The environment of a Kubernetes workload or of torchrun, read (a
/// [`Launcher`](super::from_env)): `None` when there is none; else the
/// rank, the world and the seed, once the seed's name resolves (within
/// `TIMEOUT_S`).
pub(super) fn launched() -> Result<Option<super::from_env::Launched>> {
    let get = |name: &str| -> Option<String> {
        std::env::var(name).ok().or_else(|| match name {
            // Container runtimes set it; the kernel knows it anyway.
            "HOSTNAME" => std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
            _ => None,
        })
    };
    let hosts = match lookup_in("JOB_COMPLETION_INDEX", get).is_some() {
        true => std::fs::read_to_string("/etc/hosts").unwrap_or_default(),
        false => String::new(),
    };
    let Some(plan) = plan(&get, &hosts)? else {
        return Ok(None);
    };
    let token = lookup_in("CLUSTER_TOKEN", get).map(|(_, t)| t);
    match super::token_rule(token.as_deref(), plan.needs_token, false) {
        Err(Error::TokenRequired) => {
            tracing::error!(
                launcher = plan.launcher,
                "the pods of a Kubernetes job are on several hosts: set CLUSTER_TOKEN from a Secret"
            );
            return Err(Error::TokenRequired);
        }
        r => r?,
    }
    let timeout = lookup_in("TIMEOUT_S", get)
        .and_then(|(_, v)| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(crate::group::DEFAULT_TIMEOUT, Duration::from_secs_f64);
    let seed = plan.seed();
    wait_until_resolved(&seed, plan.host_from, timeout)?;
    tracing::info!(
        launcher = plan.launcher,
        rank = plan.rank,
        world = plan.world,
        seed,
        "forming through the seed rank 0's pod hosts"
    );
    Ok(Some(super::from_env::Launched {
        seed,
        rank: Some(plan.rank),
        world: Some(plan.world),
    }))
}

/// Resolve `hostport` until it does or `timeout` passes: a pod's DNS
/// record exists only once the pod runs (and, without
/// `publishNotReadyAddresses`, is ready).
fn wait_until_resolved(hostport: &str, from: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    let mut waiting = false;
    loop {
        let why = match hostport.to_socket_addrs().map(|mut a| a.next()) {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => "no address".to_string(),
            Err(e) => e.to_string(),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::ConnectionFailed {
                rank: 0,
                reason: format!(
                    "the seed's host {hostport} ({from}) did not resolve within {timeout:?} (TIMEOUT_S): {why}; does the headless Service exist, selecting the pods (publishNotReadyAddresses: true)?"
                ),
            });
        }
        if !waiting {
            tracing::info!("the seed's host {hostport} ({from}) does not resolve yet ({why}); retrying until it does");
            waiting = true;
        }
        #[allow(
            clippy::disallowed_methods,
            reason = "a pause between DNS lookups, bounded by the deadline"
        )]
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// The environment `get` gives, recognised and translated (no lookups);
/// `hosts` is `/etc/hosts` (an Indexed Job's pod finds its Service
/// there). `None`: not one of these environments, or `SEED`, `PEERS` or
/// `DISCOVER` chose how to form.
fn plan(get: &dyn Fn(&str) -> Option<String>, hosts: &str) -> Result<Option<Plan>> {
    let var = |name: &str| lookup_in(name, get);
    let set = |name: &str| get(name).is_some_and(|v| !v.trim().is_empty());
    // SEED itself (MASTER_ADDR, its alias, is what the controllers set).
    let chosen = set("SEED") || set("PEERS") || var("DISCOVER").is_some_and(|(_, v)| v != "0");
    if chosen {
        return Ok(None);
    }
    let number = |name: &'static str| -> Result<Option<u32>> {
        match var(name) {
            None => Ok(None),
            Some((n, v)) => v
                .parse()
                .map(Some)
                .map_err(|_| bad(n, &v, "expected a decimal number")),
        }
    };
    let need = |name: &'static str, why: &str| -> Result<u32> {
        number(name)?.ok_or_else(|| bad(name, "", why))
    };
    let port = |default: u16| -> Result<u16> {
        match var("MESHWORK_SEED_PORT") {
            None => Ok(default),
            Some((n, v)) => v
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| bad(n, &v, "expected a port, 1 to 65535")),
        }
    };
    let torchrun = set("TORCHELASTIC_RUN_ID");
    let operator = set("PET_NNODES") || set("PET_NODE_RANK");
    let plan = if (torchrun || operator) && set("MASTER_ADDR") {
        pytorch(get, torchrun, operator, &need, &port)?
    } else if set("LWS_LEADER_ADDRESS") {
        let (_, host) = var("LWS_LEADER_ADDRESS").unwrap_or_default();
        Plan {
            launcher: "LeaderWorkerSet",
            rank: need(
                "LWS_WORKER_INDEX",
                "the LeaderWorkerSet sets it in every pod",
            )?,
            world: need("LWS_GROUP_SIZE", "the LeaderWorkerSet sets it in every pod")?,
            host,
            host_from: "LWS_LEADER_ADDRESS",
            port: port(DEFAULT_SEED_PORT)?,
            one_a_pod: true,
            needs_token: true,
        }
    } else if set("JOBSET_NAME") {
        jobset(get, &need, &port)?
    } else if set("JOB_COMPLETION_INDEX") {
        indexed_job(get, hosts, &need, &port)?
    } else {
        return Ok(None);
    };
    check(&plan, get)?;
    Ok(Some(plan))
}

type Need<'a> = dyn Fn(&'static str, &str) -> Result<u32> + 'a;
type Port<'a> = dyn Fn(u16) -> Result<u16> + 'a;

/// A PyTorchJob's pod (`operator`), a process torchrun started
/// (`torchrun`), or both.
fn pytorch(
    get: &dyn Fn(&str) -> Option<String>,
    torchrun: bool,
    operator: bool,
    need: &Need<'_>,
    port: &Port<'_>,
) -> Result<Plan> {
    let var = |name: &str| lookup_in(name, get);
    let host = get("MASTER_ADDR").unwrap_or_default().trim().to_string();
    let master_port = match var("MASTER_PORT") {
        None => return Err(bad("MASTER_PORT", "", "MASTER_ADDR needs MASTER_PORT")),
        Some((n, v)) => v
            .parse::<u16>()
            .map_err(|_| bad(n, &v, "expected a port"))?,
    };
    let world = need("WORLD", "torchrun and the training operator set WORLD_SIZE")?;
    let node = need("RANK", "torchrun and the training operator set it")?;
    if torchrun {
        // torchrun's store holds MASTER_PORT on MASTER_ADDR's host: the
        // seed takes the next one (rank 0 is there with a static
        // rendezvous, as in a PyTorchJob without elasticPolicy).
        let next = master_port.checked_add(1).ok_or_else(|| {
            bad(
                "MASTER_PORT",
                "65535",
                "the seed takes MASTER_PORT + 1 under torchrun; set MESHWORK_SEED_PORT",
            )
        })?;
        return Ok(Plan {
            launcher: "torchrun",
            rank: node,
            world,
            host,
            host_from: "MASTER_ADDR",
            port: port(next)?,
            one_a_pod: false,
            needs_token: operator || get("KUBERNETES_SERVICE_HOST").is_some(),
        });
    }
    // No torchrun: RANK is the pod's index and WORLD_SIZE counts
    // PET_NPROC_PER_NODE processes a pod ("auto", "cpu", "gpu": one).
    let per_pod = var("PET_NPROC_PER_NODE")
        .and_then(|(_, v)| v.parse::<u32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    let local = match (var("LOCAL_RANK"), per_pod) {
        (None, 1) => 0,
        (None, n) => {
            return Err(bad(
                "LOCAL_RANK",
                "",
                &format!("PET_NPROC_PER_NODE={n}: start {n} processes a pod, each with its LOCAL_RANK (0 to {}), or run them under torchrun", n - 1),
            ))
        }
        (Some((n, v)), per_pod) => v
            .parse::<u32>()
            .ok()
            .filter(|&l| l < per_pod)
            .ok_or_else(|| bad(n, &v, &format!("expected 0 to {} (PET_NPROC_PER_NODE)", per_pod - 1)))?,
    };
    let rank = node
        .checked_mul(per_pod)
        .and_then(|r| r.checked_add(local))
        .filter(|&r| r < world)
        .ok_or_else(|| {
            bad(
                "RANK",
                &node.to_string(),
                &format!("pod {node} × PET_NPROC_PER_NODE={per_pod} + LOCAL_RANK={local} is not a rank of WORLD_SIZE={world} (the operator sets it to pods × PET_NPROC_PER_NODE)"),
            )
        })?;
    Ok(Plan {
        launcher: "PyTorchJob",
        rank,
        world,
        host,
        host_from: "MASTER_ADDR",
        port: port(master_port)?,
        one_a_pod: per_pod == 1,
        needs_token: true,
    })
}

/// A JobSet's pod: rank by the Job's global index and the pod's index in
/// it, the seed at the coordinator or the first Job's first pod.
fn jobset(get: &dyn Fn(&str) -> Option<String>, need: &Need<'_>, port: &Port<'_>) -> Result<Plan> {
    let var = |name: &str| lookup_in(name, get);
    let (_, name) = var("JOBSET_NAME").unwrap_or_default();
    let job = need(
        "JOB_GLOBAL_INDEX",
        "pass the pod's annotation jobset.sigs.k8s.io/job-global-index (or job-index) through the downward API",
    )?;
    let pod = need("JOB_COMPLETION_INDEX", "the Job controller sets it")?;
    let world = need(
        "WORLD",
        "a JobSet does not tell its pods how many there are: set WORLD to replicas × completions",
    )?;
    let jobs = match var("GLOBAL_REPLICAS") {
        None => 1,
        Some((n, v)) => v
            .parse::<u32>()
            .ok()
            .filter(|&j| j > 0)
            .ok_or_else(|| bad(n, &v, "expected the number of Jobs"))?,
    };
    if world % jobs != 0 {
        return Err(bad(
            "WORLD",
            &world.to_string(),
            &format!("not a multiple of the JobSet's {jobs} Jobs (GLOBAL_REPLICAS): every Job must have as many pods"),
        ));
    }
    let per_job = world / jobs;
    if job >= jobs || pod >= per_job {
        return Err(bad(
            "JOB_COMPLETION_INDEX",
            &pod.to_string(),
            &format!(
                "Job {job}'s pod {pod} is not in {jobs} Jobs of {per_job} pods (WORLD={world})"
            ),
        ));
    }
    let (host, host_from) = match var("JOBSET_COORDINATOR") {
        Some((_, c)) => (c, "JOBSET_COORDINATOR"),
        None => {
            let (_, rjob) = var("REPLICATED_JOB_NAME").ok_or_else(|| {
                bad(
                    "REPLICATED_JOB_NAME",
                    "",
                    "pass the annotation jobset.sigs.k8s.io/replicatedjob-name through the downward API, or jobset.sigs.k8s.io/coordinator as JOBSET_COORDINATOR",
                )
            })?;
            let subdomain = var("MESHWORK_K8S_SERVICE").map_or_else(|| name.clone(), |(_, s)| s);
            (
                format!("{name}-{rjob}-0-0.{subdomain}"),
                "JOBSET_NAME, REPLICATED_JOB_NAME",
            )
        }
    };
    Ok(Plan {
        launcher: "JobSet",
        rank: job * per_job + pod,
        world,
        host,
        host_from,
        port: port(DEFAULT_SEED_PORT)?,
        one_a_pod: true,
        needs_token: true,
    })
}

/// An Indexed Job's pod: its index is its rank; the seed is at index 0's
/// pod, `<job>-0` in the headless Service.
fn indexed_job(
    get: &dyn Fn(&str) -> Option<String>,
    hosts: &str,
    need: &Need<'_>,
    port: &Port<'_>,
) -> Result<Plan> {
    let var = |name: &str| lookup_in(name, get);
    let rank = need("JOB_COMPLETION_INDEX", "the Job controller sets it")?;
    let world = need(
        "WORLD",
        "an Indexed Job does not tell its pods spec.completions: set WORLD to it",
    )?;
    let hostname = get("HOSTNAME").unwrap_or_default();
    let hostname = hostname.trim();
    let job = hostname.strip_suffix(&format!("-{rank}")).ok_or_else(|| {
        bad(
            "HOSTNAME",
            hostname,
            &format!("an Indexed Job names its pods <job>-<index>, and this one's index is {rank}"),
        )
    })?;
    let (host, host_from) = match var("MESHWORK_K8S_SERVICE") {
        Some((_, service)) => (format!("{job}-0.{service}"), "MESHWORK_K8S_SERVICE"),
        None => {
            let domain = pod_domain(hosts, hostname).ok_or_else(|| {
                bad(
                    "MESHWORK_K8S_SERVICE",
                    "",
                    &format!("the pod {hostname} has no <hostname>.<subdomain>… name in /etc/hosts: give the pod template subdomain: <headless Service>, or name the Service here"),
                )
            })?;
            (format!("{job}-0.{domain}"), "HOSTNAME and /etc/hosts")
        }
    };
    Ok(Plan {
        launcher: "Indexed Job",
        rank,
        world,
        host,
        host_from,
        port: port(DEFAULT_SEED_PORT)?,
        one_a_pod: true,
        needs_token: true,
    })
}

/// What follows `<hostname>.` in the pod's name in `/etc/hosts` — the
/// kubelet writes `<ip> <hostname>.<subdomain>.<namespace>.svc.<domain>
/// <hostname>` for a pod with a subdomain.
fn pod_domain(hosts: &str, hostname: &str) -> Option<String> {
    let prefix = format!("{hostname}.");
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split_whitespace().skip(1))
        .find_map(|name| name.strip_prefix(&prefix))
        .filter(|d| !d.is_empty())
        .map(str::to_string)
}

/// What holds in every environment: a rank of a world, and the pod the
/// seed's host names is rank 0's.
fn check(plan: &Plan, get: &dyn Fn(&str) -> Option<String>) -> Result<()> {
    if plan.world == 0 || plan.rank >= plan.world {
        return Err(Error::InvalidArgument(format!(
            "{}: rank {} is not in a world of {}",
            plan.launcher, plan.rank, plan.world
        )));
    }
    let hostname = get("HOSTNAME").unwrap_or_default();
    let seed_pod = plan.host.split('.').next().unwrap_or("");
    if plan.one_a_pod && plan.rank != 0 && !seed_pod.is_empty() && hostname.trim() == seed_pod {
        return Err(bad(
            plan.host_from,
            &plan.host,
            &format!(
                "names this pod ({seed_pod}), which is rank {}; the seed is rank 0's",
                plan.rank
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan_of(vars: &[(&str, &str)], hosts: &str) -> Result<Option<Plan>> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        plan(&|n: &str| env.get(n).cloned(), hosts)
    }

    fn seed_rank_world(vars: &[(&str, &str)], hosts: &str) -> (String, u32, u32) {
        let p = plan_of(vars, hosts).unwrap().expect("recognised");
        (p.seed(), p.rank, p.world)
    }

    const KUBELET_HOSTS: &str = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.1.2.3\ttrain-2.train-svc.ml.svc.cluster.local\ttrain-2\n";

    #[test]
    fn an_indexed_job_seeds_at_index_0_in_its_service() {
        let env = [
            ("JOB_COMPLETION_INDEX", "2"),
            ("HOSTNAME", "train-2"),
            ("WORLD", "4"),
        ];
        assert_eq!(
            seed_rank_world(&env, KUBELET_HOSTS),
            ("train-0.train-svc.ml.svc.cluster.local:29400".into(), 2, 4)
        );
        let named = [
            &env[..],
            &[
                ("MESHWORK_K8S_SERVICE", "svc"),
                ("MESHWORK_SEED_PORT", "7000"),
            ],
        ]
        .concat();
        assert_eq!(
            seed_rank_world(&named, ""),
            ("train-0.svc:7000".into(), 2, 4)
        );
        // WORLD_SIZE is WORLD's alias.
        let sized = [
            ("JOB_COMPLETION_INDEX", "2"),
            ("HOSTNAME", "train-2"),
            ("WORLD_SIZE", "4"),
        ];
        assert_eq!(seed_rank_world(&sized, KUBELET_HOSTS).2, 4);
        // What is missing is named.
        let e = plan_of(&env[..2], KUBELET_HOSTS).unwrap_err().to_string();
        assert!(e.contains("WORLD") && e.contains("completions"), "{e}");
        let e = plan_of(&env, "").unwrap_err().to_string();
        assert!(
            e.contains("MESHWORK_K8S_SERVICE") && e.contains("subdomain"),
            "{e}"
        );
        let e = plan_of(&[env[0], ("HOSTNAME", "other"), env[2]], "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("HOSTNAME"), "{e}");
    }

    #[test]
    fn a_jobset_ranks_by_job_then_pod_and_seeds_at_the_first() {
        let env = [
            ("JOBSET_NAME", "js"),
            ("REPLICATED_JOB_NAME", "workers"),
            ("JOB_GLOBAL_INDEX", "1"),
            ("GLOBAL_REPLICAS", "2"),
            ("JOB_COMPLETION_INDEX", "1"),
            ("HOSTNAME", "js-workers-1-1"),
            ("WORLD", "4"),
        ];
        assert_eq!(
            seed_rank_world(&env, ""),
            ("js-workers-0-0.js:29400".into(), 3, 4)
        );
        let coordinated = [&env[..], &[("JOBSET_COORDINATOR", "js-driver-0-0.sub")]].concat();
        assert_eq!(
            seed_rank_world(&coordinated, "").0,
            "js-driver-0-0.sub:29400"
        );
        let e = plan_of(&[&env[..6], &[("WORLD", "5")]].concat(), "").unwrap_err();
        assert!(e.to_string().contains("GLOBAL_REPLICAS"), "{e}");
        // The coordinator's own pod must be rank 0.
        let wrong = [
            &env[..5],
            &[("HOSTNAME", "js-workers-0-0"), ("WORLD", "4")],
            &[("JOBSET_COORDINATOR", "js-workers-0-0.js")],
        ]
        .concat();
        let e = plan_of(&wrong, "").unwrap_err().to_string();
        assert!(e.contains("rank 0"), "{e}");
    }

    #[test]
    fn a_pytorchjob_pod_counts_its_processes_and_torchrun_leaves_its_store_the_port() {
        let pod = [
            ("MASTER_ADDR", "pt-master-0"),
            ("MASTER_PORT", "23456"),
            ("WORLD_SIZE", "4"),
            ("RANK", "1"),
            ("PET_NNODES", "2"),
            ("PET_NODE_RANK", "1"),
            ("PET_NPROC_PER_NODE", "2"),
        ];
        let local1 = [&pod[..], &[("LOCAL_RANK", "1")]].concat();
        assert_eq!(
            seed_rank_world(&local1, ""),
            ("pt-master-0:23456".into(), 3, 4)
        );
        let e = plan_of(&pod, "").unwrap_err().to_string();
        assert!(e.contains("LOCAL_RANK"), "{e}");
        // One process a pod ("auto" or absent).
        let one = [
            ("MASTER_ADDR", "pt-master-0"),
            ("MASTER_PORT", "23456"),
            ("WORLD_SIZE", "2"),
            ("RANK", "1"),
            ("PET_NNODES", "2"),
        ];
        assert_eq!(seed_rank_world(&one, "").1, 1);
        // Under torchrun, RANK and WORLD_SIZE are already the process's.
        let torch = [
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("WORLD_SIZE", "8"),
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "x"),
        ];
        let p = plan_of(&torch, "").unwrap().unwrap();
        assert_eq!(
            (p.seed(), p.rank, p.world, p.needs_token),
            ("10.0.0.1:29501".into(), 5, 8, false)
        );
        let pinned = [&torch[..], &[("MESHWORK_SEED_PORT", "40000")]].concat();
        assert_eq!(seed_rank_world(&pinned, "").0, "10.0.0.1:40000");
    }

    #[test]
    fn a_leader_worker_set_group_is_a_job() {
        let env = [
            ("LWS_LEADER_ADDRESS", "lws-0.lws.default"),
            ("LWS_GROUP_SIZE", "4"),
            ("LWS_WORKER_INDEX", "3"),
            ("HOSTNAME", "lws-0-3"),
        ];
        assert_eq!(
            seed_rank_world(&env, ""),
            ("lws-0.lws.default:29400".into(), 3, 4)
        );
        let e = plan_of(
            &[env[0], ("LWS_GROUP_SIZE", "4"), ("LWS_WORKER_INDEX", "4")],
            "",
        )
        .unwrap_err();
        assert!(e.to_string().contains("world of 4"), "{e}");
    }

    #[test]
    fn meshwork_s_own_variables_or_no_controller_leave_the_environment_alone() {
        assert_eq!(plan_of(&[], "").unwrap(), None);
        assert_eq!(plan_of(&[("RANK", "1"), ("WORLD", "2")], "").unwrap(), None);
        // Plain MASTER_ADDR + MASTER_PORT stay the seed as before.
        assert_eq!(
            plan_of(&[("MASTER_ADDR", "h"), ("MASTER_PORT", "1")], "").unwrap(),
            None
        );
        let lws = [
            ("LWS_LEADER_ADDRESS", "l"),
            ("LWS_GROUP_SIZE", "2"),
            ("LWS_WORKER_INDEX", "0"),
        ];
        let off = [&lws[..], &[("DISCOVER", "0")]].concat();
        assert!(plan_of(&off, "").unwrap().is_some());
        for explicit in [("SEED", "h:1"), ("PEERS", "h:1,h:2"), ("DISCOVER", "1")] {
            let env = [
                ("LWS_LEADER_ADDRESS", "l"),
                ("LWS_GROUP_SIZE", "2"),
                ("LWS_WORKER_INDEX", "1"),
                explicit,
            ];
            assert_eq!(plan_of(&env, "").unwrap(), None, "{explicit:?}");
        }
    }

    #[test]
    fn the_pod_s_domain_is_what_follows_its_hostname() {
        assert_eq!(
            pod_domain(KUBELET_HOSTS, "train-2").as_deref(),
            Some("train-svc.ml.svc.cluster.local")
        );
        assert_eq!(pod_domain(KUBELET_HOSTS, "train"), None);
        assert_eq!(pod_domain("# 10.0.0.1 a.b\n", "a"), None);
    }

    #[test]
    fn a_name_that_never_resolves_is_named_at_the_deadline() {
        let started = Instant::now();
        // No port: it fails before any lookup (no DNS traffic from a test).
        let e = wait_until_resolved(
            "no-such-pod",
            "LWS_LEADER_ADDRESS",
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300));
        let e = e.to_string();
        assert!(
            e.contains("no-such-pod") && e.contains("LWS_LEADER_ADDRESS"),
            "{e}"
        );
        wait_until_resolved("127.0.0.1:1", "SEED", Duration::from_millis(1)).unwrap();
    }
}
