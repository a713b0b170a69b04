//! `meshrun` and the examples: every example at world sizes 2..=4 in mesh,
//! star, on QUIC and TCP; a failing rank stops the others; malformed environment
//! variables are errors that name them.

use crate::netlab::skip;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn meshrun() -> Command {
    Command::new(env!("CARGO_BIN_EXE_meshrun"))
}

/// `target/<profile>/examples/<name>`, built by `cargo test` / nextest.
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("examples").join(name);
    p.exists().then_some(p)
}

#[test]
fn every_example_passes_at_world_sizes_2_to_4() {
    for name in [
        "send_recv",
        "all_reduce",
        "broadcast",
        "barrier",
        "rpc",
        "star_worker",
        "counter",
    ] {
        let Some(bin) = example(name) else {
            skip(&format!(
                "example {name} is not built (cargo test builds examples)"
            ));
            return;
        };
        for (n, topology, transport) in (2..=4).flat_map(|n| {
            ["mesh", "star"]
                .into_iter()
                .flat_map(move |t| ["quic", "tcp"].map(|x| (n, t, x)))
        }) {
            {
                let mut cmd = meshrun();
                cmd.args([
                    "-n",
                    &n.to_string(),
                    "--topology",
                    topology,
                    "--transport",
                    transport,
                    "--timeout",
                    "30",
                    "--",
                ])
                .arg(&bin);
                if name == "all_reduce" {
                    cmd.arg("4"); // MiB: keep the test quick
                }
                if name == "counter" {
                    cmd.arg("2000"); // items
                }
                let out = cmd.output().expect("run meshrun");
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "{name} n={n} {topology} {transport}: {}\n{stdout}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    stdout.contains("OK"),
                    "{name} n={n} {topology} {transport}: {stdout}"
                );
                assert!(
                    stdout.lines().all(|l| l.starts_with('[')),
                    "every line carries its rank: {stdout}"
                );
            }
        }
    }
}

#[test]
fn meshrun_stops_the_others_when_a_rank_fails() {
    // Rank 1 exits at once with status 3; the others would wait a minute
    // for it to connect. meshrun must stop them and exit non-zero at once.
    let started = Instant::now();
    let out = meshrun()
        .args(["-n", "3", "--timeout", "60", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "scenarios::rank_process_entry",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("MESHWORK_TEST_SCENARIO", "exit_rank1")
        .output()
        .expect("run meshrun");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank 1 failed"));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// `meshrun seed` serves a job's bootstrap as its own process; the ranks
/// join it (two let it pick, one asks for rank 2), and it exits 0 once the
/// job has formed.
#[test]
fn meshrun_seed_bootstraps_a_job_as_its_own_process() {
    let at = crate::support::free_ports(1)[0].to_string();
    let mut seed = meshrun()
        .args(["seed", "--world", "3", "--bind", &at, "--timeout", "20"])
        .env("CLUSTER_TOKEN", "own seed token, long enough")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start meshrun seed");
    let mut l = crate::procs::Launch::loopback(3, "mesh", 20.0);
    l.env.push(("SEED".into(), at));
    l.env
        .push(("CLUSTER_TOKEN".into(), "own seed token, long enough".into()));
    let per_rank = vec![
        vec![("RANK".to_string(), String::new())],
        vec![("RANK".to_string(), String::new())],
        vec![("RANK".to_string(), "2".to_string())],
    ];
    let mut ranks = crate::procs::spawn_with(&l, "all_reduce_small", &per_rank);
    let results = ranks.results(Duration::from_secs(60));
    assert!(
        results.iter().all(|(_, l)| l.starts_with("RESULT ok rank")),
        "{results:#?}"
    );
    let status = seed.wait().expect("meshrun seed exits");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut seed.stdout.take().expect("stdout"), &mut out).ok();
    assert!(
        status.success() && out.contains("3 ranks formed"),
        "{status} {out}"
    );
}

#[test]
fn meshrun_refuses_bad_usage() {
    for args in [
        &["-n", "0", "--", "true"][..],
        &["--", "true"],
        &["-n", "2"],
        &["-n", "2", "--topology", "ring", "--", "true"],
        &["seed", "--world", "2"],
        &["seed", "--bind", "127.0.0.1:1", "--world", "x"],
    ] {
        let out = meshrun().args(args).output().expect("run meshrun");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("usage"),
            "{args:?}"
        );
    }
}

#[test]
fn malformed_environment_variables_are_named() {
    let cases: &[(&str, &str)] = &[
        ("WORLD", "abc"),
        ("TOPOLOGY", "ring"),
        ("TIMEOUT_S", "-1"),
        ("PEERS", "no-such-host.invalid:1,127.0.0.1:2"),
        ("TRANSPORT", "carrier-pigeon"),
        ("ALGO_ALL_REDUCE", "bogus"),
        ("SEED", "no-such-host.invalid:29400"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("ADVERTISE", "not-an-address"),
        ("ENCRYPT_BULK", "2"),
        ("SIDECAR_THRESHOLD", "big"),
        ("MAX_MESSAGE_BYTES", "lots"),
        ("LANE_DEPTH", "0"),
        ("PEER_BUDGET_BYTES", "-5"),
    ];
    for (name, value) in cases {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "scenarios::rank_process_entry",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("MESHWORK_TEST_SCENARIO", "connect")
            .env("RANK", "0")
            .env("WORLD", "2")
            .env(name, value)
            .output()
            .expect("run a rank");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("RESULT "))
            .unwrap_or("");
        assert!(
            line.starts_with("RESULT err InvalidArgument") && line.contains(name),
            "{name}={value}: {line}"
        );
    }
}

#[test]
fn open_mpi_and_slurm_names_work_as_aliases() {
    let peers: Vec<String> = crate::support::free_ports(2)
        .iter()
        .map(|a| a.to_string())
        .collect();
    let spawn = |rank: &str, alias: (&str, &str)| {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "scenarios::rank_process_entry",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("MESHWORK_TEST_SCENARIO", "all_reduce_small")
            .env(alias.0, rank)
            .env(alias.1, "2")
            .env("PEERS", peers.join(","))
            .env("TIMEOUT_S", "20")
            .env_remove("RANK")
            .env_remove("WORLD")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let a = spawn("0", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
    let b = spawn("1", ("SLURM_PROCID", "SLURM_NTASKS"));
    for child in [a, b] {
        let out = child.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("RESULT ok"), "{stdout}");
    }
}

#[test]
fn meshrun_token_prints_a_fresh_random_token() {
    let token = || {
        let out = meshrun().arg("token").output().expect("run meshrun token");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let (a, b) = (token(), token());
    for t in [&a, &b] {
        assert_eq!(t.len(), 64, "{t}");
        assert!(t.chars().all(|c| c.is_ascii_hexdigit()), "{t}");
    }
    assert_ne!(a, b);
}

/// Each launch gives its ranks one fresh token (so another user of the
/// host cannot join or disturb the job); a token given to meshrun is
/// passed on instead.
#[test]
fn meshrun_gives_its_ranks_a_fresh_token_unless_given_one() {
    let tokens = |given: Option<&str>| -> Vec<String> {
        let mut cmd = meshrun();
        cmd.args([
            "-n",
            "2",
            "--",
            "/bin/sh",
            "-c",
            "echo \"token=$CLUSTER_TOKEN\"",
        ]);
        cmd.env_remove("CLUSTER_TOKEN");
        if let Some(t) = given {
            cmd.env("CLUSTER_TOKEN", t);
        }
        let out = cmd.output().expect("run meshrun");
        assert!(out.status.success(), "{out:?}");
        let mut seen: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once("token=").map(|(_, t)| t.to_string()))
            .collect();
        seen.sort();
        assert_eq!(seen.len(), 2, "{seen:?}");
        seen
    };
    let first = tokens(None);
    assert_eq!(first[0], first[1], "one token per launch");
    assert_eq!(first[0].len(), 64);
    let second = tokens(None);
    assert_ne!(first[0], second[0], "a fresh token per launch");
    let given = tokens(Some("a token given to meshrun"));
    assert!(given.iter().all(|t| t == "a token given to meshrun"));
}

/// `meshrun` binds each rank's port before it starts the rank and hands it
/// the sockets (`MESHRUN_SOCKETS`): from its first instruction, the rank
/// holds a listening TCP socket and a UDP socket on its own address, so no
/// other program can take the port in between. (Formation listens on
/// them: every example above runs that way.)
#[test]
fn meshrun_hands_each_rank_its_bound_sockets() {
    let script = "import os, socket\n\
tcp, udp = (int(f) for f in os.environ['MESHRUN_SOCKETS'].split(','))\n\
host, port = os.environ['PEERS'].split(',')[int(os.environ['RANK'])].rsplit(':', 1)\n\
t = socket.socket(fileno=tcp)\n\
u = socket.socket(fileno=udp)\n\
ok = (t.type == socket.SOCK_STREAM and u.type == socket.SOCK_DGRAM\n\
      and t.getsockname() == (host, int(port)) and u.getsockname() == (host, int(port))\n\
      and t.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1)\n\
print('held', os.environ['RANK'], ok)\n";
    let out = meshrun()
        .args(["-n", "3", "--", "python3", "-c", script])
        .output()
        .expect("run meshrun");
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("cannot start") {
        skip("python3 is not installed");
        return;
    }
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for rank in 0..3 {
        assert!(
            stdout.contains(&format!("held {rank} True")),
            "rank {rank}: {stdout}"
        );
    }
}

/// The socket inodes `MESHRUN_SOCKETS` names in this process.
fn handed_over_sockets() -> Option<Vec<u64>> {
    use std::os::unix::fs::MetadataExt;
    let fds = std::env::var("MESHRUN_SOCKETS").ok()?;
    fds.split(',')
        .map(|fd| std::fs::metadata(format!("/proc/self/fd/{}", fd.trim())).map(|m| m.ino()))
        .collect::<std::io::Result<_>>()
        .ok()
}

/// A rank of `meshrun_sockets_are_not_inherited_by_what_a_rank_runs`: it
/// forms (taking over its sockets), runs a shell that lists its own
/// descriptors, and says which of its sockets the shell held.
#[test]
#[ignore = "a rank of meshrun_sockets_are_not_inherited_by_what_a_rank_runs"]
fn meshrun_rank_that_runs_a_child() {
    let Some(sockets) = handed_over_sockets() else {
        return;
    };
    let g = meshwork::Node::from_env()
        .and_then(|n| n.connect())
        .expect("the rank forms");
    let out = Command::new("/bin/sh")
        .args(["-c", "ls -l /proc/self/fd"])
        .output()
        .expect("run a shell");
    let listing = String::from_utf8_lossy(&out.stdout);
    let leaked: Vec<u64> = sockets
        .into_iter()
        .filter(|ino| listing.contains(&format!("socket:[{ino}]")))
        .collect();
    #[allow(
        clippy::print_stdout,
        reason = "the line is the rank's report to the test"
    )]
    {
        println!("CHILD_HELD {leaked:?}");
    }
    g.barrier().expect("barrier");
    assert!(leaked.is_empty(), "the shell held {leaked:?}:\n{listing}");
}

/// The sockets `meshrun` hands a rank are the rank's, not its children's:
/// once the rank has taken them over, a program it runs (here a shell
/// listing its descriptors) holds neither.
#[test]
fn meshrun_sockets_are_not_inherited_by_what_a_rank_runs() {
    let out = meshrun()
        .args(["-n", "2", "--timeout", "30", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "launcher::meshrun_rank_that_runs_a_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .expect("run meshrun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("[{rank}] CHILD_HELD []")),
            "rank {rank}: {stdout}"
        );
    }
}
