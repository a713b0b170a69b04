//! What the ffi and mpi crates' integration tests (and the Slurm tests)
//! share: skipping, finding this build's outputs, running a command with a
//! deadline, and whether Slurm can run a step here.
#![allow(dead_code, reason = "each test binary uses a part")]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Skip (or, under `CI=true`, fail) a test that cannot run here.
pub fn skip(reason: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("cannot run under CI: {reason}");
    }
    #[allow(clippy::print_stdout, reason = "the SKIPPED line is the test's report")]
    {
        println!("SKIPPED: {reason}");
    }
}

/// `target/<profile>/deps`, where cargo put this test and the library.
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.parent().expect("target/<profile>/deps").to_path_buf()
}

/// `target/<profile>/meshrun`, if built.
pub fn meshrun() -> Option<PathBuf> {
    let p = deps_dir().parent()?.join("meshrun");
    p.exists().then_some(p)
}

pub fn show(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `cmd` to completion, or kill it and everything it started (its
/// own process group) after `limit` and panic with what it printed.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id();
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("piped stderr")));
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(limit) {
        Ok(status) => Some(status.expect("wait for the child")),
        Err(_) => {
            // The whole group: a launcher's ranks too.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            None
        }
    };
    waiter.join().expect("the waiting thread");
    let out = Output {
        status: status.unwrap_or_else(|| {
            // Reaped by the waiter after the kill; report it as killed.
            use std::os::unix::process::ExitStatusExt;
            std::process::ExitStatus::from_raw(9)
        }),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    assert!(
        status.is_some(),
        "{cmd:?} ran past {limit:?} and was killed: {}",
        show(&out)
    );
    out
}

/// Why Slurm cannot run a step here, if it cannot: no `srun`, or no node
/// that answers and is idle or partly used.
pub fn slurm_unavailable() -> Option<String> {
    let out = match Command::new("sinfo")
        .args(["-h", "-N", "-o", "%T"])
        .output()
    {
        Err(e) => return Some(format!("no Slurm here (sinfo: {e}); .ci/run starts one")),
        Ok(out) => out,
    };
    let states = String::from_utf8_lossy(&out.stdout);
    let usable = states
        .lines()
        .any(|s| matches!(s.trim().trim_end_matches('*'), "idle" | "mixed"));
    (!out.status.success() || !usable).then(|| {
        format!(
            "no idle Slurm node (sinfo: {} {}{}); .ci/run starts one",
            out.status,
            states.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// `srun -n <tasks>` of `exe` as the tests run it: at once or not at all
/// (`--immediate`), the step killed if a task fails, output labelled by
/// task, and none of the formation settings of the test's own environment
/// (each task forms from what Slurm gives it; `TIMEOUT_S` 30).
pub fn srun(tasks: u32, job_name: &str, exe: &Path) -> Command {
    let mut srun = Command::new("srun");
    srun.args(["-n", &tasks.to_string(), "--label"])
        // Fail at once rather than queue behind other jobs.
        .args(["--immediate=60", "--kill-on-bad-exit=1", "--time=5"])
        .arg(format!("--job-name={job_name}"))
        .arg(exe)
        .env("TIMEOUT_S", "30");
    for name in [
        "RANK",
        "WORLD",
        "WORLD_SIZE",
        "PEERS",
        "SEED",
        "MASTER_ADDR",
        "DISCOVER",
        "CLUSTER_TOKEN",
    ] {
        srun.env_remove(name);
    }
    srun
}
