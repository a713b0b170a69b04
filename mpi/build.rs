//! The profiling interface (MPI-5 §15.2): every `MPI_` function
//! `libmpi_abi.so` exports is exported as `PMPI_` too, at the same
//! address, so a tool (mpiP, Score-P, a program's own wrapper) can define
//! `MPI_Send` and reach meshwork's through `PMPI_Send`.
//!
//! The names are those of the functions `src/` defines: every identifier
//! of code (comments and strings left out) that starts with `MPI_` and is
//! not a constant's (all capitals). A linker script gives each its second
//! name, and a version script exports those; the test
//! `every_function_has_its_profiling_name` holds the two lists to what
//! the library exports.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut names = BTreeSet::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("a source file of src/");
        names.extend(function_names(&code_of(&text)));
    }
    assert!(
        names.len() > 600,
        "only {} MPI functions found in src/",
        names.len()
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut aliases = String::new();
    for name in &names {
        writeln!(aliases, "P{name} = {name};").expect("a String takes writes");
    }
    let (script, exports) = (out.join("pmpi.ld"), out.join("pmpi.map"));
    std::fs::write(&script, aliases).expect("OUT_DIR is writable");
    std::fs::write(&exports, "{ global: PMPI_*; };\n").expect("OUT_DIR is writable");
    // Only the shared library: the rlib (this crate's tests) has no link.
    println!("cargo:rustc-cdylib-link-arg={}", script.display());
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        exports.display()
    );
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `text` without its comments (`//` to the end of the line) and with its
/// string literals emptied.
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        code.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                code.push_str("\"\"");
            }
            // A character literal ('"', '\'', '\"') is passed over, so
            // that no quote in it opens a string; a lifetime is code.
            '\'' => {
                let mut ahead = chars.clone();
                let len = match (ahead.next(), ahead.next(), ahead.next()) {
                    (Some('\\'), Some(_), Some('\'')) => 3,
                    (Some(_), Some('\''), _) => 2,
                    _ => 0,
                };
                for _ in 0..len {
                    chars.next();
                }
                code.push_str(if len > 0 { "' '" } else { "'" });
            }
            c => code.push(c),
        }
    }
    code
}

/// The identifiers of `code` that name MPI functions: `MPI_` and a name
/// with a small letter (`MPI_Send`, `MPI_T_init_thread`), not a constant
/// (`MPI_BYTE`).
fn function_names(code: &str) -> impl Iterator<Item = String> + '_ {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            w.strip_prefix("MPI_")
                .is_some_and(|rest| rest.chars().any(|c| c.is_ascii_lowercase()))
        })
        .map(String::from)
}
