//! A stranger's process (the `siege` scenario): from a host of its own, it
//! strikes every address in `SIEGE_TARGETS` (a hello of another version;
//! the right version with wrong settings and a proof of nothing), then
//! besieges each (50 idle connections and a dribbler, redialling when
//! cut off) for `SIEGE_S` seconds. It says READY once every target has
//! been struck, and `RESULT ok …` at the end, or `RESULT err …` if a
//! target ever told it more than its version and a nonce.
#![allow(
    clippy::print_stdout,
    reason = "the stranger's process reports to the test on stdout"
)]

use meshwork::WIRE_PROTOCOL_VERSION;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const CHALLENGE: usize = 36;
const STEP: Duration = Duration::from_secs(2);

fn hello(version: u32, transport: u64) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[..8].copy_from_slice(b"MESHWORK");
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..16].copy_from_slice(&3u32.to_le_bytes());
    h[24..32].copy_from_slice(&transport.to_le_bytes());
    h
}

fn dial(addr: SocketAddr, until: Instant) -> Option<TcpStream> {
    while Instant::now() < until {
        if let Ok(s) = TcpStream::connect_timeout(&addr, STEP) {
            let _ = s.set_read_timeout(Some(STEP));
            let _ = s.set_write_timeout(Some(STEP));
            return Some(s);
        }
        std::thread::yield_now();
    }
    None
}

/// The two single-shot strikes; what the target said to each.
fn strike(addr: SocketAddr, until: Instant) -> Result<(), String> {
    for (version, settings, proof) in [(999, 0u64, false), (WIRE_PROTOCOL_VERSION, 1 << 62, true)] {
        let mut s = dial(addr, until).ok_or(format!("{addr} never listened"))?;
        s.write_all(&hello(version, settings))
            .map_err(|e| e.to_string())?;
        let mut got = vec![0u8; CHALLENGE];
        // A target that has formed and gone may answer nothing at all;
        // one that says more than its version and a nonce leaks.
        if s.read_exact(&mut got).is_err() {
            continue;
        }
        if proof {
            let _ = s.write_all(&[0u8; 32]);
        }
        let _ = s.read_to_end(&mut got);
        if got.len() != CHALLENGE || got[8..12] != WIRE_PROTOCOL_VERSION.to_le_bytes() {
            return Err(format!("{addr} answered {} bytes", got.len()));
        }
    }
    Ok(())
}

pub fn run() {
    let targets: Vec<SocketAddr> = std::env::var("SIEGE_TARGETS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|a| a.parse().ok())
        .collect();
    let secs: u64 = std::env::var("SIEGE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let until = Instant::now() + Duration::from_secs(secs);
    for &t in &targets {
        if let Err(e) = strike(t, until) {
            println!("RESULT err Siege {e}");
            return;
        }
    }
    let idle: Vec<TcpStream> = targets
        .iter()
        .flat_map(|&t| (0..50).filter_map(move |_| dial(t, until)))
        .collect();
    println!("READY");
    let _ = std::io::stdout().flush();
    let dribblers: Vec<_> = targets
        .iter()
        .map(|&t| {
            std::thread::spawn(move || {
                let h = hello(WIRE_PROTOCOL_VERSION, 0);
                let mut cut = 0u32;
                while let Some(mut s) = dial(t, until) {
                    for b in h.iter().cycle() {
                        if Instant::now() >= until || s.write_all(&[*b]).is_err() {
                            break;
                        }
                        #[allow(clippy::disallowed_methods, reason = "the attacker's pacing")]
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    if Instant::now() >= until {
                        break;
                    }
                    cut += 1;
                }
                cut
            })
        })
        .collect();
    let cut: u32 = dribblers.into_iter().map(|d| d.join().unwrap_or(0)).sum();
    drop(idle);
    println!(
        "RESULT ok siege held {} idle connections, dribblers cut off {cut} times",
        targets.len() * 50
    );
}
