//! `include/meshwork.h` is what cbindgen generates from the source now.
//! `MESHWORK_WRITE_HEADER=1` writes it instead of comparing.

use std::path::Path;

fn generate() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("ffi/cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen cannot parse ffi/src");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn header_is_fresh() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/meshwork.h");
    let fresh = generate();
    if std::env::var_os("MESHWORK_WRITE_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("write ffi/include/meshwork.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "ffi/include/meshwork.h is stale: regenerate it with \
         `MESHWORK_WRITE_HEADER=1 cargo test -p meshwork-ffi --test header` and commit it"
    );
}
