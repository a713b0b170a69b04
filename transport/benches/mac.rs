//! The MACs this CPU runs fastest, for the tag of authenticated frames
//! (`src/auth/frame_mac.rs`): GB/s on one core per size, best of 5, the
//! bytes in cache up to 1 MiB and not at 16 MiB; memcpy for scale.
//!
//! ```text
//! cargo bench -p meshwork-transport --bench mac
//! ```
//!
//! Columns: `aegis-128x4`, the tag as links make it (AEGISMAC-128X4,
//! libaegis, from protocol 12); `aegis-128l`, the one-lane AEGISMAC;
//! `gmac-boring`, GMAC (AES-256-GCM with nothing to encrypt) in BoringSSL,
//! which quiche links, a context per tag (protocol 11 took AWS-LC's GMAC);
//! `blake3`, keyed BLAKE3 (the tag until protocol 10); `aes-gcm`,
//! BoringSSL sealing the payload (`ENCRYPT_BULK`).

#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use boring::symm::{Cipher, Crypter, Mode};
use meshwork_transport::FrameMac;
use std::hint::black_box;
use std::time::Instant;

/// Seconds per call of `f` on `n` bytes: the best of 5 rounds of about
/// 64 MiB each.
fn per_call(n: usize, mut f: impl FnMut()) -> f64 {
    let reps = ((64 << 20) / n.max(64)).max(3);
    f();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let key = [7u8; 32];
    let iv = [1u8; 12];
    let mut frame_mac = FrameMac::new(&[7u8; 16]);
    let mut nonce = 0u64;
    println!("# one core; GB/s (64 B: ns per tag); in cache up to 1 MiB");
    println!(
        "{:>9} | {:>11} {:>10} {:>11} {:>8} {:>8} {:>8} | 128x4/gmac",
        "size(B)", "aegis-128x4", "aegis-128l", "gmac-boring", "blake3", "aes-gcm", "memcpy"
    );
    for n in [64usize, 4096, 65536, 1 << 20, 16 << 20] {
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut out = vec![0u8; n + 16];
        let mut copy = vec![0u8; n];
        let x4 = per_call(n, || {
            nonce += 1;
            black_box(frame_mac.tag(nonce, [&data[..]]).expect("tag"));
        });
        let l = per_call(n, || {
            let mut m = aegis::aegis128l::Aegis128LMac::<16>::new_with_nonce(&[7; 16], &[1; 16]);
            m.update(&data);
            black_box(m.finalize());
        });
        let boring = per_call(n, || {
            let mut c = Crypter::new(Cipher::aes_256_gcm(), Mode::Encrypt, &key, Some(&iv))
                .expect("BoringSSL's AES-256-GCM");
            c.aad_update(&data).expect("aad");
            c.finalize(&mut [0u8; 16]).expect("final");
            let mut tag = [0u8; 16];
            c.get_tag(&mut tag).expect("tag");
            black_box(tag);
        });
        let blake3 = per_call(n, || {
            let mut h = blake3::Hasher::new_keyed(&key);
            h.update(&data);
            black_box(h.finalize());
        });
        let gcm = per_call(n, || {
            let mut c = Crypter::new(Cipher::aes_256_gcm(), Mode::Encrypt, &key, Some(&iv))
                .expect("BoringSSL's AES-256-GCM");
            let k = c.update(&data, &mut out).expect("seal");
            c.finalize(&mut out[k..]).expect("final");
            let mut tag = [0u8; 16];
            c.get_tag(&mut tag).expect("tag");
            black_box(&out);
        });
        let memcpy = per_call(n, || {
            copy.copy_from_slice(&data);
            black_box(&copy);
        });
        let cell = |t: f64| {
            if n == 64 {
                format!("{:.0} ns", t * 1e9)
            } else {
                format!("{:.1}", n as f64 / t / 1e9)
            }
        };
        println!(
            "{n:>9} | {:>11} {:>10} {:>11} {:>8} {:>8} {:>8} | {:.1}",
            cell(x4),
            cell(l),
            cell(boring),
            cell(blake3),
            cell(gcm),
            cell(memcpy),
            boring / x4
        );
    }
}
