//! C programs against `include/meshwork.h` and the static library: the
//! example `examples/collectives.c` compiled with the README's line and run
//! by `meshrun -n 4` (as C, on QUIC and TCP, and as C++), and
//! `tests/c/local_threads.c`, a world of two ranks on two threads of one
//! process (`mw_local`), linked statically and against `libmeshwork.so`.
//!
//! The library is this test's own build of the crate (cargo builds the
//! rlib, the staticlib and the cdylib together, next to the test
//! executable); `meshrun` is the root crate's binary in `target/<profile>/`,
//! which `cargo nextest run --workspace` builds.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{deps_dir, meshrun, show, skip};

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// `libmeshwork.a` of this build.
fn static_lib() -> PathBuf {
    let lib = deps_dir().join("libmeshwork.a");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds it with this test (crate-type staticlib)",
        lib.display()
    );
    lib
}

/// How a program links libmeshwork.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    /// `libmeshwork.a -lpthread -ldl -lm`, as the README's line.
    Static,
    /// `-L dir -lmeshwork -Wl,-rpath,dir`, the README's alternative.
    Shared,
}

/// Compile `src` with `compiler` (`cc`, or `c++` to compile as C++) and
/// the README's flags into the test's scratch directory; `None` (after
/// `skip`) when the compiler is not installed.
fn compile(compiler: &str, std: &str, src: &Path, name: &str, link: Link) -> Option<PathBuf> {
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut cmd = Command::new(compiler);
    if compiler == "c++" {
        cmd.args(["-x", "c++"]);
    }
    // The README's line, with -Werror.
    cmd.arg(format!("-std={std}"))
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(Path::new(CRATE).join("include"))
        .arg(src);
    if compiler == "c++" {
        // A C++ program links the C library the same way.
        cmd.args(["-x", "none"]);
    }
    match link {
        Link::Static => cmd.arg(static_lib()).args(["-lpthread", "-ldl", "-lm"]),
        Link::Shared => {
            let dir = deps_dir();
            assert!(
                dir.join("libmeshwork.so").exists(),
                "libmeshwork.so is missing in {}",
                dir.display()
            );
            cmd.arg("-L")
                .arg(&dir)
                .arg("-lmeshwork")
                .arg(format!("-Wl,-rpath,{}", dir.display()))
        }
    };
    cmd.arg("-o").arg(&exe);
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => {
            skip(&format!("no C compiler `{compiler}` ({e})"));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "{compiler} {} failed: {}",
        src.display(),
        show(&out)
    );
    Some(exe)
}

/// Run `exe` under `meshrun -n 4` with `extra` options; every rank must
/// print `RESULT ok`.
fn run_in_four(meshrun: &Path, exe: &Path, extra: &[&str]) {
    let out = Command::new(meshrun)
        .args(["-n", "4", "--timeout", "20"])
        .args(extra)
        .arg("--")
        .arg(exe)
        .output()
        .expect("run meshrun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{extra:?}: {}", show(&out));
    for rank in 0..4 {
        assert!(
            stdout.contains(&format!("[{rank}] RESULT ok rank {rank} of 4")),
            "{extra:?}: rank {rank}: {}",
            show(&out)
        );
    }
}

#[test]
fn the_c_example_runs_every_collective_in_four_processes() {
    let Some(meshrun) = meshrun() else {
        skip("target/<profile>/meshrun is not built (cargo nextest run --workspace builds it)");
        return;
    };
    let src = Path::new(CRATE).join("examples/collectives.c");
    let Some(exe) = compile("cc", "c11", &src, "collectives", Link::Static) else {
        return;
    };
    run_in_four(&meshrun, &exe, &[]);
    run_in_four(&meshrun, &exe, &["--transport", "tcp"]);
    // The header and the example are valid C++ too.
    let Some(exe) = compile("c++", "c++11", &src, "collectives_cpp", Link::Static) else {
        return;
    };
    run_in_four(&meshrun, &exe, &[]);
}

#[test]
fn a_c_program_runs_two_ranks_on_threads_and_every_bad_argument_is_refused() {
    let src = Path::new(CRATE).join("tests/c/local_threads.c");
    // Linked statically and against the shared library.
    for (link, name) in [
        (Link::Static, "local_threads"),
        (Link::Shared, "local_threads_so"),
    ] {
        let Some(exe) = compile("cc", "c11", &src, name, link) else {
            return;
        };
        let out = Command::new(&exe).output().expect("run local_threads");
        assert!(out.status.success(), "{name}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("RESULT ok"),
            "{name}: {}",
            show(&out)
        );
    }
}
