//! Compressed all_reduce (`Compressor::top_k`, `Compressor::random_k`):
//! exact at fraction 1, the same result on every rank, the residual what
//! was not sent, bad input refused; a data-parallel least-squares problem
//! trained with top-k at 5 % against the uncompressed run (loss and bytes,
//! from `stats()`); and the same checks in 4 processes over TCP and QUIC.

use crate::multiprocess::launch;
use crate::procs::{all_ok, spawn};
use meshwork::{Compressor, Error, ProcessGroup, ReduceOp};
use std::time::Duration;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// About normal (sum of uniforms), mean 0, deviation about 1.
    fn normal(&mut self) -> f32 {
        (0..6).map(|_| self.unit()).sum::<f32>() / 1.414
    }
}

/// Rank `r`'s input for call `call`: values of many magnitudes, signed
/// zeros among them.
fn input(r: u32, call: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng(0x5EED ^ u64::from(r + 1) << 20 ^ call);
    (0..n)
        .map(|i| match i % 17 {
            0 => -0.0,
            5 => 0.0,
            _ => rng.unit() * 10f32.powi((rng.next() % 5) as i32 - 2),
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// What every rank checks, in a group of any size (in process or not):
/// returns a line that must be the same on every rank.
pub(crate) fn scenario(g: &ProcessGroup) -> meshwork::Result<String> {
    let (me, p) = (g.rank(), g.world_size());
    let bad = |m: String| Error::InvalidArgument(m);
    let n = 1000;
    // Fraction 1 is all_reduce, bit for bit, call after call.
    for op in [ReduceOp::Sum, ReduceOp::Avg] {
        let mut c = Compressor::top_k(1.0);
        let mut r = Compressor::random_k(1.0, 7);
        for call in 0..3 {
            let mut want = input(me, call, n);
            g.all_reduce(&mut want, op)?;
            for comp in [&mut c, &mut r] {
                let mut got = input(me, call, n);
                g.all_reduce_compressed(&mut got, op, comp)?;
                if bits(&got) != bits(&want) {
                    return Err(bad(format!("{op:?} at fraction 1 is not all_reduce")));
                }
            }
        }
    }
    // Random-k and top-k at 5 %: the same result everywhere; the residual
    // is what was not sent; the result is the sum of what was.
    let mut digest = Vec::new();
    for (name, mut c) in [
        ("random", Compressor::random_k(0.05, 99)),
        ("top", Compressor::top_k(0.05)),
    ] {
        for call in 0..3 {
            let before = c.residual().to_vec();
            let mut buf = input(me, call, n);
            let mut acc = buf.clone();
            for (a, r) in acc.iter_mut().zip(&before) {
                if *r != 0.0 {
                    *a += *r;
                }
            }
            g.all_reduce_compressed(&mut buf, ReduceOp::Sum, &mut c)?;
            let sent: Vec<usize> = (0..n)
                .filter(|&i| c.residual()[i] == 0.0 && acc[i] != 0.0)
                .collect();
            let kept = (n as f64 * 0.05).ceil() as usize;
            if sent.len() > kept {
                return Err(bad(format!(
                    "{name}-k sent {} of {n}, at most {kept}",
                    sent.len()
                )));
            }
            for (i, (&r, a)) in c.residual().iter().zip(&acc).enumerate() {
                if r != 0.0 && r.to_bits() != a.to_bits() {
                    return Err(bad(format!(
                        "{name}-k: the residual at {i} is not what was kept back"
                    )));
                }
            }
            // Everyone's sent values, summed in rank order, are the result
            // at top-k; random-k reduces the same indices everywhere.
            let mut sent_vals = vec![0f32; n];
            for &i in &sent {
                sent_vals[i] = acc[i];
            }
            let mut everyone = vec![0f32; n * p as usize];
            g.all_gather(&sent_vals, &mut everyone)?;
            let nonzero = buf.iter().filter(|v| **v != 0.0).count();
            if name == "top" {
                let mut want = vec![0f32; n];
                for part in everyone.chunks(n) {
                    for (w, v) in want.iter_mut().zip(part) {
                        if *v != 0.0 {
                            *w += *v;
                        }
                    }
                }
                if bits(&want) != bits(&buf) {
                    return Err(bad("top-k: not the sum of what was sent".into()));
                }
            } else if nonzero > kept {
                return Err(bad(format!("random-k: {nonzero} entries set, kept {kept}")));
            }
            digest.push(bits(&buf).iter().fold(0u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
            }));
        }
    }
    // The same everywhere.
    let mut all = vec![0u64; digest.len() * p as usize];
    g.all_gather(&digest, &mut all)?;
    if all.chunks(digest.len()).any(|d| d != digest) {
        return Err(bad("the compressed results differ between ranks".into()));
    }
    // Bad input.
    let mut buf = vec![1.0f32; 8];
    let refused = |r: meshwork::Result<()>, what: &str| match r {
        Err(Error::InvalidArgument(_)) => Ok(()),
        other => Err(bad(format!("{what}: {other:?}"))),
    };
    refused(
        g.all_reduce_compressed(&mut buf, ReduceOp::Max, &mut Compressor::top_k(0.5)),
        "Max",
    )?;
    refused(
        g.all_reduce_compressed(&mut buf, ReduceOp::Sum, &mut Compressor::top_k(0.0)),
        "fraction 0",
    )?;
    refused(
        g.all_reduce_compressed(&mut buf, ReduceOp::Sum, &mut Compressor::random_k(2.0, 1)),
        "fraction 2",
    )?;
    let mut c = Compressor::top_k(0.5);
    g.all_reduce_compressed(&mut buf, ReduceOp::Sum, &mut c)?;
    refused(
        g.all_reduce_compressed(&mut [1.0; 9], ReduceOp::Sum, &mut c),
        "another length",
    )?;
    Ok(format!("compressed {:x}", digest[0]))
}

#[test]
fn compressed_all_reduce_in_process_worlds_of_3_and_4() {
    for p in [3, 4] {
        let world = meshwork::local(p).unwrap();
        let lines: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = world.iter().map(|g| s.spawn(move || scenario(g))).collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        assert!(lines.iter().all(|l| *l == lines[0]), "{lines:?}");
    }
}

fn multiprocess(link: &str) {
    let l = launch(4, "mesh", 30.0, link);
    let mut ranks = spawn(&l, "compressed");
    let results = ranks.results(Duration::from_secs(120));
    all_ok(&results);
    let first = &results[0].1;
    assert!(first.starts_with("RESULT ok compressed"), "{results:#?}");
    assert!(results.iter().all(|(_, l)| l == first), "{results:#?}");
}

#[test]
fn multiprocess_compressed_all_reduce_over_tcp() {
    multiprocess("tcp");
}

#[test]
fn multiprocess_compressed_all_reduce_over_quic() {
    multiprocess("quic");
}

/// A run's final loss and the bytes one rank sent per step.
type Trained = (f64, f64);

/// Data-parallel least squares, well posed (4096 rows of 1000 unit
/// normal features): rank r holds 1024 rows of X and y = X·w* + noise (σ
/// 0.1, the loss's floor about σ²); the model is trained by gradient
/// descent on the all-reduced (averaged) gradient. Returns (final loss over all data, bytes this
/// rank sent per step).
fn train(g: &ProcessGroup, compress: Option<Compressor>, steps: usize) -> Trained {
    const D: usize = 1000;
    const ROWS: usize = 1024;
    let me = g.rank();
    let mut truth = Rng(7);
    let w_star: Vec<f32> = (0..D).map(|_| truth.normal()).collect();
    let mut rng = Rng(1000 + u64::from(me));
    let x: Vec<Vec<f32>> = (0..ROWS)
        .map(|_| (0..D).map(|_| rng.normal()).collect())
        .collect();
    let y: Vec<f32> = x
        .iter()
        .map(|row| row.iter().zip(&w_star).map(|(a, b)| a * b).sum::<f32>() + 0.1 * rng.normal())
        .collect();
    let loss = |w: &[f32]| -> f64 {
        let local: f64 = x
            .iter()
            .zip(&y)
            .map(|(row, t)| {
                let e = row.iter().zip(w).map(|(a, b)| a * b).sum::<f32>() - t;
                f64::from(e * e)
            })
            .sum();
        let mut all = [local];
        g.all_reduce(&mut all, ReduceOp::Sum).unwrap();
        all[0] / (ROWS as f64 * f64::from(g.world_size()))
    };
    let mut w = vec![0f32; D];
    let mut c = compress;
    let sent = |g: &ProcessGroup| g.stats().iter().map(|s| s.sent_bytes).sum::<u64>();
    let mut bytes = 0u64;
    // The same schedule for every run, over its own steps: 0.2, then a
    // tenth of it, then a hundredth (error feedback's late updates are
    // stale: a smaller step settles them).
    let lr = |t: usize| match (t * 10) / steps.max(1) {
        0..=5 => 0.2f32,
        6..=7 => 0.02,
        _ => 0.002,
    };
    for t in 0..steps {
        let mut grad = vec![0f32; D];
        for (row, t) in x.iter().zip(&y) {
            let e = row.iter().zip(&w).map(|(a, b)| a * b).sum::<f32>() - t;
            for (gr, a) in grad.iter_mut().zip(row) {
                *gr += 2.0 * e * a / ROWS as f32;
            }
        }
        let before = sent(g);
        match c.as_mut() {
            Some(c) => g
                .all_reduce_compressed(&mut grad, ReduceOp::Avg, c)
                .unwrap(),
            None => g.all_reduce(&mut grad, ReduceOp::Avg).unwrap(),
        }
        bytes += sent(g) - before;
        for (wi, gi) in w.iter_mut().zip(&grad) {
            *wi -= lr(t) * gi;
        }
    }
    (loss(&w), bytes as f64 / steps as f64)
}

/// The bar: top-k at 5 % with error feedback, given 10× the
/// steps, ends within 5 % of the uncompressed loss, sending at most a
/// quarter of the bytes per step.
#[test]
#[allow(
    clippy::print_stdout,
    reason = "the figures docs/compression.md quotes"
)]
fn top_k_with_error_feedback_trains_as_well_on_a_quarter_of_the_bytes() {
    const STEPS: usize = 80;
    let world = meshwork::local(4).unwrap();
    let out: Vec<[Trained; 3]> = std::thread::scope(|s| {
        let hs: Vec<_> = world
            .iter()
            .map(|g| {
                s.spawn(move || {
                    let dense = train(g, None, STEPS);
                    let top = train(g, Some(Compressor::top_k(0.05)), 10 * STEPS);
                    let start = train(g, None, 0);
                    [dense, top, start]
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let [(dense_loss, dense_bytes), (top_loss, top_bytes), (start_loss, _)] = out[0];
    println!(
        "least squares, 4 ranks: loss {start_loss:.4} at the start; {dense_loss:.4} after {STEPS} dense steps ({dense_bytes:.0} B sent per step by rank 0); {top_loss:.4} after {} top-k 5 % steps ({top_bytes:.0} B per step, {:.3}× the bytes)",
        10 * STEPS,
        top_bytes / dense_bytes
    );
    assert!(dense_loss < 0.5 * start_loss, "the problem trains: {out:?}");
    assert!(top_loss <= 1.05 * dense_loss, "{out:?}");
    for [(_, dense), (_, top), _] in &out {
        assert!(*top <= 0.25 * dense, "{out:?}");
    }
}

/// Ranks that pass different lengths fail, naming the mismatch, and their
/// compressors keep what they held (the call changed nothing).
#[test]
fn a_failed_call_leaves_the_residual_as_it_was() {
    let world = meshwork::local(2).unwrap();
    let results: Vec<meshwork::Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = world
            .iter()
            .map(|g| {
                s.spawn(move || {
                    let me = g.rank();
                    // Rank 0's compressor holds a residual; rank 1's is new
                    // and gets one value more: k differs (10 against 11).
                    let mut c = Compressor::top_k(0.1);
                    if me == 0 {
                        let mut warm = input(0, 0, 100);
                        let mut solo = Compressor::top_k(0.1);
                        let alone = meshwork::local(1).unwrap();
                        alone[0].all_reduce_compressed(&mut warm, ReduceOp::Sum, &mut solo)?;
                        c = solo;
                    }
                    let held = c.residual().to_vec();
                    let mut buf = input(me, 1, 100 + me as usize);
                    let r = g.all_reduce_compressed(&mut buf, ReduceOp::Sum, &mut c);
                    assert_eq!(bits(c.residual()), bits(&held), "rank {me}");
                    r
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results {
        assert!(
            matches!(r, Err(Error::CollectiveMismatch { .. })),
            "{results:?}"
        );
    }
}
