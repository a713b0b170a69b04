//! Forming under Slurm's `srun` with nothing else set (docs/launchers.md):
//! rank processes given the environment srun gives the tasks of a step on
//! one host, alone and two steps of one job at once; and `srun -n 4` of
//! the main example on a real Slurm when there is one (`.ci/run` starts a
//! single-node cluster; without one the test says `SKIPPED`, and fails
//! under `CI=true`).

use crate::netlab::skip;
#[path = "../../ffi/tests/support/mod.rs"]
mod shared;
use crate::procs::{spawn_with, Launch, Ranks};
use shared::slurm_unavailable;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

/// The seed's port for step `step` of job `job`, as docs/launchers.md
/// gives it.
fn slurm_port(job: u64, step: u64) -> u16 {
    20_000 + ((job * 16 + step) % 8192) as u16
}

/// A job id whose steps `0..steps` all have their seed's port free on
/// loopback now: the derived port is what the ranks use, and another
/// test's socket must not hold it.
fn job_with_free_ports(steps: u64) -> u64 {
    let start = u64::from(std::process::id()) * 7;
    (start..start + 4096)
        .find(|&job| {
            let held: Vec<_> = (0..steps)
                .map_while(|s| std::net::TcpListener::bind(("127.0.0.1", slurm_port(job, s))).ok())
                .collect();
            held.len() as u64 == steps
        })
        .expect("a job id whose seed ports are free")
}

/// Start the `tasks` tasks of step `step` of job `job` on this host,
/// each with only what srun sets (and the test's own scenario): no
/// `RANK`, `WORLD`, `PEERS`, `SEED` or token.
fn srun_on_loopback(job: u64, step: u64, tasks: u32) -> Ranks {
    let blank = [
        "RANK",
        "WORLD",
        "PEERS",
        "SEED",
        "MASTER_ADDR",
        "DISCOVER",
        "CLUSTER_TOKEN",
    ];
    let mut env: Vec<(String, String)> = blank
        .iter()
        .map(|n| (n.to_string(), String::new()))
        .collect();
    for (name, value) in [
        ("SLURM_JOB_ID", job.to_string()),
        ("SLURM_STEP_ID", step.to_string()),
        ("SLURM_NTASKS", tasks.to_string()),
        ("SLURM_STEP_NUM_TASKS", tasks.to_string()),
        ("SLURM_STEP_NODELIST", "localhost".into()),
        ("SLURM_STEP_NUM_NODES", "1".into()),
        ("SLURM_STEP_TASKS_PER_NODE", tasks.to_string()),
        ("SLURM_DISTRIBUTION", "block".into()),
        ("SLURMD_NODENAME", "localhost".into()),
        ("SLURM_NODEID", "0".into()),
        ("TIMEOUT_S", "30".into()),
    ] {
        env.push((name.into(), value));
    }
    let launch = Launch {
        world: tasks,
        env,
        wrap: Vec::new(),
        sockets: Mutex::new(Vec::new()),
    };
    let per_task: Vec<Vec<(String, String)>> = (0..tasks)
        .map(|r| {
            vec![
                ("SLURM_PROCID".to_string(), r.to_string()),
                ("SLURM_LOCALID".to_string(), r.to_string()),
            ]
        })
        .collect();
    spawn_with(&launch, "all_reduce_small", &per_task)
}

/// Every task reported its own rank, from `SLURM_PROCID`, in a world of
/// `tasks`, and a correct sum.
fn every_task_ok(ranks: &mut Ranks, tasks: u32) {
    let mut results = ranks.results(Duration::from_secs(90));
    results.sort();
    let want: Vec<(u32, String)> = (0..tasks)
        .map(|r| (r, format!("RESULT ok rank {r} of {tasks}")))
        .collect();
    assert_eq!(results, want);
}

#[test]
fn srun_tasks_on_one_host_form_with_nothing_else_set() {
    let job = job_with_free_ports(1);
    let mut ranks = srun_on_loopback(job, 0, 4);
    every_task_ok(&mut ranks, 4);
}

/// Two steps of one job at once, of different sizes: were their seeds on
/// one port, one step's ranks would meet the other's seed and fail
/// (a world mismatch) instead of forming.
#[test]
fn two_steps_of_one_job_form_side_by_side() {
    let job = job_with_free_ports(2);
    assert_ne!(slurm_port(job, 0), slurm_port(job, 1));
    let mut first = srun_on_loopback(job, 0, 3);
    let mut second = srun_on_loopback(job, 1, 2);
    every_task_ok(&mut first, 3);
    every_task_ok(&mut second, 2);
}

/// `target/<profile>/examples/<name>`, built by `cargo test` / nextest.
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("examples").join(name);
    p.exists().then_some(p)
}

/// The README's main example under a real `srun -n 4`: four tasks, each
/// with Slurm's environment and nothing else, form through the seed and
/// check their all_reduce; srun exits 0 only if every task did.
#[test]
fn srun_forms_the_main_example() {
    let Some(bin) = example("all_reduce") else {
        skip("example all_reduce is not built (cargo test builds examples)");
        return;
    };
    if let Some(reason) = slurm_unavailable() {
        skip(&reason);
        return;
    }
    let mut srun = shared::srun(4, "meshwork-test", &bin);
    srun.arg("4") // MiB: keep the test quick
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = srun.spawn().expect("start srun");
    let pid = child.id() as i32;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = match rx.recv_timeout(Duration::from_secs(180)) {
        Ok(out) => out.expect("srun's output"),
        Err(_) => {
            // SAFETY: kill(2) on srun, our child, not yet reaped (its
            // waiter has not returned); srun passes the signal to the step.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            panic!("srun -n 4 did not finish in 180 s");
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "srun: {}\n{stdout}\n{stderr}",
        out.status
    );
    // Rank 0 reports for the group, once every rank's sum was checked.
    assert!(
        stdout
            .lines()
            .any(|l| l.trim_start().starts_with("0: all_reduce OK: 4 processes")),
        "{stdout}\n{stderr}"
    );
}
