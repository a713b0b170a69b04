//! The Python package (`ffi/python`) end to end: built and installed into
//! a virtual environment under `target/python/` with the README's command
//! (`pip install ./ffi/python`, through maturin), then
//! - its pytest suite in one process: every collective on every dtype
//!   over `meshwork.local`, in-place semantics, refused arrays, every
//!   exception, the GIL released while calls block, torch tensors, and
//!   small worlds of processes it starts itself;
//! - the suite's multi-process part under `meshrun -n 4` (QUIC and TCP);
//! - the examples under `meshrun`: the mpi4py-style program, the torch
//!   training whose parameters must match torch.distributed with gloo,
//!   and the overhead benchmark (a quick pass).
//!
//! The build uses the dev profile (opt-level 2, as the workspace's test
//! profile) and this workspace's target directory, so it reuses what
//! `cargo nextest run --workspace` compiled (BoringSSL included) instead
//! of a release build from scratch; it is skipped when nothing it is built
//! from changed since the last install (a stamp in the environment).
//! Without python3, numpy, pytest or maturin (`pip install -r
//! .ci/python-requirements.txt`) the tests print SKIPPED, and without
//! torch (`.ci/torch-cpu.txt`) the torch test does; under `CI=true` they
//! fail instead.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use support::{deps_dir, meshrun, run_bounded, show, skip};

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

fn repo() -> &'static Path {
    Path::new(CRATE)
        .parent()
        .expect("ffi/ is inside the repository")
}

fn package_dir() -> PathBuf {
    repo().join("ffi/python")
}

/// The interpreter the environment is made from: `$PYTHON` or `python3`.
fn interpreter() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// What the Python commands of these tests share: no bytecode or pytest
/// cache written into the source tree.
fn python_cmd(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    cmd
}

/// The newest modification time and the number of files under `dirs`
/// (recursively, skipping `__pycache__`): what the package is built from.
fn fingerprint(dirs: &[PathBuf]) -> (SystemTime, usize) {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut count = 0;
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if p.file_name().is_some_and(|n| n == "__pycache__") {
                continue;
            }
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else {
            count += 1;
            newest = newest.max(meta.modified().unwrap_or(SystemTime::UNIX_EPOCH));
        }
    }
    (newest, count)
}

/// The Python of a virtual environment under `target/python/venv` with
/// the package installed and up to date, or `None` (after `skip`).
fn venv_python() -> Option<PathBuf> {
    // `cargo test` runs these tests as threads of one process; nextest
    // runs them one at a time (the serial group).
    static SETUP: Mutex<()> = Mutex::new(());
    let _one_at_a_time = SETUP.lock().unwrap_or_else(|e| e.into_inner());
    let python = interpreter();
    let probe = Command::new(&python)
        .args([
            "-c",
            "import importlib.util as u, sys\n\
             assert sys.version_info >= (3, 9), sys.version\n\
             print(' '.join(m for m in ('numpy', 'pytest', 'maturin') if u.find_spec(m) is None))",
        ])
        .output();
    let missing = match probe {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => {
            skip(&format!(
                "{python} is not a usable Python 3.9+: {}",
                show(&out)
            ));
            return None;
        }
        Err(e) => {
            skip(&format!("no Python interpreter `{python}` ({e})"));
            return None;
        }
    };
    if !missing.is_empty() {
        skip(&format!(
            "{python} lacks {missing} (pip install -r .ci/python-requirements.txt)"
        ));
        return None;
    }
    // target/<profile>/deps/<this test> -> target/
    let target = deps_dir()
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf();
    let venv = target.join("python/venv");
    let venv_python = venv.join("bin/python");
    if !venv_python.exists() {
        let out = run_bounded(
            Command::new(&python)
                .args(["-m", "venv", "--system-site-packages"])
                .arg(&venv),
            Duration::from_secs(120),
        );
        assert!(out.status.success(), "python -m venv: {}", show(&out));
    }
    // Rebuild and reinstall only when a source changed (cargo would find
    // the build fresh, but pip would still repack and reinstall it).
    let sources: Vec<PathBuf> = [
        "ffi/python/src",
        "ffi/python/python",
        "ffi/python/Cargo.toml",
        "ffi/python/Cargo.lock",
        "ffi/python/pyproject.toml",
        "src",
        "transport/src",
        "transport/Cargo.toml",
        "collectives/src",
        "collectives/Cargo.toml",
        "Cargo.toml",
    ]
    .iter()
    .map(|p| repo().join(p))
    .collect();
    let stamp = venv.join("meshwork-installed.stamp");
    let want = format!("{:?} {python}", fingerprint(&sources));
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) {
        // The README's command, with the dev profile and this target
        // directory; no network (`--no-build-isolation --no-index`: the
        // build backend and numpy are already installed).
        let out = run_bounded(
            python_cmd(&venv_python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-build-isolation",
                    "--no-deps",
                    "--no-index",
                    "--disable-pip-version-check",
                ])
                .arg(package_dir())
                .env("CARGO_TARGET_DIR", &target)
                .env("MATURIN_PEP517_ARGS", "--profile dev"),
            Duration::from_secs(1200),
        );
        assert!(
            out.status.success(),
            "pip install ./ffi/python: {}",
            show(&out)
        );
        std::fs::write(&stamp, want).expect("write the install stamp");
    }
    Some(venv_python)
}

/// `meshrun`, or `None` (after `skip`).
fn launcher() -> Option<PathBuf> {
    let m = meshrun();
    if m.is_none() {
        skip("target/<profile>/meshrun is not built (cargo nextest run --workspace builds it)");
    }
    m
}

/// Run `args` of the venv's Python under `meshrun -n n` in `ffi/python`;
/// every rank's output must contain `expect(rank)`.
fn in_ranks(
    n: u32,
    extra: &[&str],
    args: &[&str],
    limit: Duration,
    expect: impl Fn(u32) -> String,
) -> Option<Output> {
    let python = venv_python()?;
    let meshrun = launcher()?;
    let out = run_bounded(
        python_cmd(&meshrun)
            .current_dir(package_dir())
            .args(["-n", &n.to_string(), "--timeout", "30"])
            .args(extra)
            .arg("--")
            .arg(&python)
            .args(args),
        limit,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{args:?} {extra:?}: {}", show(&out));
    for rank in 0..n {
        let want = format!("[{rank}] {}", expect(rank));
        assert!(
            stdout.contains(&want),
            "{args:?}: no {want:?}: {}",
            show(&out)
        );
    }
    Some(out)
}

/// pytest's "N passed" count from its summary line, if it ran any test
/// and none failed.
fn passed(text: &str) -> Option<u32> {
    let line = text.lines().rev().find(|l| l.contains(" passed"))?;
    if line.contains("failed") || line.contains("error") {
        return None;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| w.starts_with("passed"))?;
    words.get(i.checked_sub(1)?)?.parse().ok()
}

#[test]
fn python_package_passes_its_tests_in_one_process() {
    let Some(python) = venv_python() else {
        return;
    };
    let out = run_bounded(
        python_cmd(&python).current_dir(package_dir()).args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests",
        ]),
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "pytest: {}", show(&out));
    let n = passed(&stdout).unwrap_or_else(|| panic!("pytest ran no test: {}", show(&out)));
    assert!(n > 100, "only {n} tests passed: {}", show(&out));
    #[allow(clippy::print_stdout, reason = "the count is the test's report")]
    {
        println!("pytest: {n} passed");
    }
}

#[test]
fn python_collectives_pass_in_four_processes_under_meshrun() {
    let args = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_world.py",
    ];
    for transport in [&[][..], &["--transport", "tcp"][..]] {
        let Some(out) = in_ranks(4, transport, &args, Duration::from_secs(300), |_| {
            String::new()
        }) else {
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        for rank in 0..4 {
            let mine: String = stdout
                .lines()
                .filter_map(|l| l.strip_prefix(&format!("[{rank}] ")))
                .collect::<Vec<_>>()
                .join("\n");
            let n = passed(&mine).unwrap_or_else(|| panic!("rank {rank}: {}", show(&out)));
            assert!(n > 100, "rank {rank}: only {n} passed: {}", show(&out));
        }
    }
}

#[test]
fn python_mpi_style_example_runs_in_four_processes() {
    let example = repo().join("examples/python/mpi_style.py");
    let example = example.to_str().expect("a UTF-8 path");
    in_ranks(4, &[], &[example], Duration::from_secs(120), |r| {
        format!("RESULT ok rank {r} of 4")
    });
}

#[test]
fn python_federated_example_runs_in_five_processes() {
    let example = repo().join("examples/python/federated.py");
    let example = example.to_str().expect("a UTF-8 path");
    in_ranks(5, &[], &[example], Duration::from_secs(120), |r| {
        if r == 0 {
            "RESULT ok coordinator 30 rounds".into()
        } else {
            format!("RESULT ok worker {r} took part in ")
        }
    });
}

#[test]
fn python_torch_training_through_meshwork_matches_gloo_in_four_processes() {
    let Some(python) = venv_python() else {
        return;
    };
    let has_torch = python_cmd(&python)
        .args([
            "-c",
            "import torch, torch.distributed as d; assert d.is_gloo_available()",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        skip("torch with gloo is not installed (pip install --no-deps -r .ci/torch-cpu.txt)");
        return;
    }
    let example = repo().join("examples/python/train_torch.py");
    let example = example.to_str().expect("a UTF-8 path");
    let Some(out) = in_ranks(
        4,
        &[],
        &[example, "--compare-gloo"],
        Duration::from_secs(300),
        |r| format!("RESULT ok rank {r} of 4"),
    ) else {
        return;
    };
    // The script asserts the match; its report is in rank 0's output.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("max |meshwork - gloo| ="), "{}", show(&out));
}

#[test]
fn python_overhead_bench_runs_in_two_processes() {
    let bench = repo().join("examples/python/bench.py");
    let bench = bench.to_str().expect("a UTF-8 path");
    in_ranks(2, &[], &[bench, "--quick"], Duration::from_secs(120), |r| {
        format!("RESULT ok rank {r} of 2")
    });
}

/// The venv's Python if torch with gloo is there (else `None`, after
/// `skip`).
fn torch_python() -> Option<PathBuf> {
    let python = venv_python()?;
    let has_torch = python_cmd(&python)
        .args([
            "-c",
            "import torch, torch.distributed as d; assert d.is_gloo_available()",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        skip("torch with gloo is not installed (pip install --no-deps -r .ci/torch-cpu.txt)");
        return None;
    }
    Some(python)
}

/// `torchrun --standalone --nproc-per-node n tests/torchrun/check_backend.py
/// parts` with `env`; every rank's report (its file under a fresh
/// directory: torchrun interleaves their output).
fn torchrun_check(
    n: u32,
    parts: &[&str],
    torchrun_args: &[&str],
    env: &[(&str, &str)],
) -> Option<Vec<String>> {
    let python = torch_python()?;
    let dir = std::env::temp_dir().join(format!(
        "meshwork-torchrun-{}-{}",
        std::process::id(),
        parts.join("-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the reports");
    let out = run_bounded(
        python_cmd(&python)
            .current_dir(package_dir())
            .args([
                "-W",
                "ignore",
                "-m",
                "torch.distributed.run",
                "--standalone",
            ])
            .args(["--nproc-per-node", &n.to_string()])
            .args(torchrun_args)
            .arg("tests/torchrun/check_backend.py")
            .args(parts)
            .env("RESULT_DIR", &dir)
            .env("OMP_NUM_THREADS", "1")
            .envs(env.iter().copied()),
        Duration::from_secs(600),
    );
    let reports: Vec<String> = (0..n)
        .map(|r| std::fs::read_to_string(dir.join(format!("rank{r}"))).unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    if reports.iter().all(String::is_empty) {
        panic!("torchrun {parts:?}: no rank reported: {}", show(&out));
    }
    Some(reports)
}

/// torch's own API over meshwork under torchrun with 4 processes: every
/// op on every dtype exact, then again with every tensor staged through a
/// host copy as CUDA tensors are (forced on CPU tensors: each op's copy
/// out and copy back runs here, with no GPU), sub-groups, DDP with
/// several buckets and FSDP2 ending with the parameters gloo gives (max
/// |diff| <= 1e-5).
#[test]
fn python_torch_backend_runs_every_op_ddp_and_fsdp_under_torchrun() {
    let Some(reports) = torchrun_check(4, &["ops", "staged", "ddp", "fsdp"], &[], &[]) else {
        return;
    };
    for (r, report) in reports.iter().enumerate() {
        assert!(
            report.contains(&format!("RESULT ok rank {r} of 4")),
            "rank {r}: {report}"
        );
    }
    assert!(
        reports[0].contains("DDP: max |meshwork - gloo| ="),
        "{}",
        reports[0]
    );
    assert!(
        reports[0].contains("FSDP2: max |meshwork - gloo| ="),
        "{}",
        reports[0]
    );
}

/// A rank killed between all-reduces under torchrun: every survivor's
/// next call raises `PeerDisconnected` naming it, well within the
/// deadline (10 s). torchrun is told to look at its workers only every
/// 60 s, so it does not stop the survivors before they report; rank 0
/// stops it once all have.
#[test]
fn python_torch_backend_killed_rank_raises_on_every_survivor() {
    let Some(reports) = torchrun_check(
        4,
        &["killed"],
        &["--monitor-interval", "60"],
        &[("DEADLINE_S", "10"), ("STOP_AGENT", "1")],
    ) else {
        return;
    };
    for (r, report) in reports.iter().enumerate().take(3) {
        assert!(
            report.contains(&format!("RESULT ok rank {r} of 4: PeerDisconnected after")),
            "rank {r}: {report}"
        );
        assert!(report.contains("rank 3 disconnected"), "rank {r}: {report}");
        let took: f64 = report
            .split(" after ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::MAX);
        assert!(took < 12.0, "rank {r} took {took} s: {report}");
    }
    assert!(
        reports[3].is_empty(),
        "the killed rank reported: {}",
        reports[3]
    );
}

/// The same with torch tensors used in place (`MESHWORK_TORCH_IN_PLACE=1`:
/// torch's own contract, as gloo's, instead of the checked copies).
#[test]
fn python_torch_backend_in_place_runs_every_op_ddp_and_fsdp_under_torchrun() {
    let Some(reports) = torchrun_check(
        4,
        &["ops", "ddp", "fsdp"],
        &[],
        &[("MESHWORK_TORCH_IN_PLACE", "1")],
    ) else {
        return;
    };
    for (r, report) in reports.iter().enumerate() {
        assert!(
            report.contains(&format!("RESULT ok rank {r} of 4")),
            "rank {r}: {report}"
        );
    }
    assert!(
        reports[0].contains("DDP: max |meshwork - gloo| ="),
        "{}",
        reports[0]
    );
    assert!(
        reports[0].contains("FSDP2: max |meshwork - gloo| ="),
        "{}",
        reports[0]
    );
}
