//! The modules of the transport and of the facade import one another
//! without a circle (a module reached from itself through `crate::` or
//! `super::` paths). The last one open, the heap built on RPC whose server
//! handed the heap's requests back to it by name, was opened by
//! `rpc::Sideline`: the server is given what takes them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles known and not yet opened, as their modules, sorted.
const KNOWN: &[&[&str]] = &[];

type Module = Vec<String>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !(name == "tests.rs" || name.ends_with("_tests.rs")) {
                out.push(path);
            }
        }
    }
}

fn module_of(root: &Path, file: &Path) -> Module {
    let rel = file
        .strip_prefix(root)
        .expect("under the root")
        .with_extension("");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Every `crate::a::b` or `super::a` path in `code`, as module names
/// (lower-case segments).
fn paths(code: &str, prefix: &str) -> Vec<Module> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let segments: Module = rest[..end]
            .split("::")
            .take_while(|s| s.starts_with(|c: char| c.is_ascii_lowercase()))
            .map(str::to_string)
            .collect();
        found.push(segments);
    }
    found
}

/// The module each module's code names, resolved to the longest known
/// module prefix.
fn imports(root: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(root, f), f.clone()))
        .collect();
    let resolve = |path: Module| -> Option<Module> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| modules.contains_key(m))
    };
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let mut code = std::fs::read_to_string(file).expect("a source file");
        if let Some(i) = code.find("#[cfg(test)]\nmod tests {") {
            code.truncate(i);
        }
        let code: String = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let parent: Module = module[..module.len().saturating_sub(1)].to_vec();
        let named =
            paths(&code, "crate::")
                .into_iter()
                .chain(paths(&code, "super::").into_iter().map(|p| {
                    let mut full = parent.clone();
                    full.extend(p);
                    full
                }));
        let to: BTreeSet<Module> = named
            .filter_map(resolve)
            .filter(|m| m != module && !m.is_empty())
            .collect();
        edges.insert(module.clone(), to);
    }
    edges
}

/// The circles: strongly connected sets of more than one module.
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    let reach = |from: &Module| -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&Module, BTreeSet<Module>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut out: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, r) in &reached {
        let mut circle: Vec<String> = r
            .iter()
            .filter(|o| reached.get(o).is_some_and(|back| back.contains(*m)))
            .map(|o| o.join("/"))
            .collect();
        if circle.len() > 1 {
            circle.sort();
            circle.dedup();
            out.insert(circle);
        }
    }
    out.into_iter().collect()
}

#[test]
fn the_modules_import_one_another_without_a_circle() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for root in [here.join("transport/src"), here.join("src")] {
        let found = circles(&imports(&root));
        let new: Vec<&Vec<String>> = found
            .iter()
            .filter(|c| {
                !KNOWN
                    .iter()
                    .any(|k| k.iter().copied().eq(c.iter().map(String::as_str)))
            })
            .collect();
        assert!(new.is_empty(), "circles in {}: {new:?}", root.display());
    }
    // The list stays honest: a known circle once opened leaves it.
    let facade = circles(&imports(&here.join("src")));
    for known in KNOWN {
        assert!(
            facade
                .iter()
                .any(|c| known.iter().copied().eq(c.iter().map(String::as_str))),
            "{known:?} is open now: take it off KNOWN"
        );
    }
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let a: Module = vec!["a".into()];
    let b: Module = vec!["b".into()];
    let c: Module = vec!["c".into()];
    let mut edges = BTreeMap::new();
    edges.insert(a.clone(), BTreeSet::from([b.clone()]));
    edges.insert(b.clone(), BTreeSet::from([a.clone(), c.clone()]));
    edges.insert(c.clone(), BTreeSet::new());
    assert_eq!(
        circles(&edges),
        vec![vec!["a".to_string(), "b".to_string()]]
    );
    assert_eq!(
        paths(
            "use crate::link::Core; mycrate::no; super::heap::X",
            "crate::"
        ),
        vec![vec!["link".to_string()]]
    );
}
