//! Elastic training: the job keeps its size through a lost worker. Every
//! step all-reduces a gradient and federated-averages a weighted value
//! (both checked exact); when a member dies the
//! survivors' step fails with `GroupShrunk` (`Recovery::Shrink`), they
//! call `grow` to take in as many new processes as were lost, and the
//! newcomers — started with `--join` — receive the model and the step
//! from rank 0 and train on with them.
//!
//! ```text
//! # the job, through a seed hosted by rank 0 (one line per process):
//! SEED=127.0.0.1:29400 RANK=r WORLD=4 CLUSTER_TOKEN=… elastic [--steps N]
//! # a replacement for a lost worker, at any time:
//! SEED=127.0.0.1:29400 CLUSTER_TOKEN=… elastic --join
//! ```
//!
//! With `--manual` the survivors recover by hand, as a program that
//! wants to decide does (`Recovery::Manual`): the step that met the
//! failure fails naming it; each survivor revokes the group (so every
//! other member's call fails at once), agrees on what failed, and
//! replaces its group: `g = g.shrink()?`, then `g = g.grow(lost)?`.
//!
//! Rank 0 hosts the seed, so it is the one member the job cannot lose;
//! run the seed as its own process (`meshrun seed --elastic`) to lose
//! any. Each process prints `READY` after its tenth step, and
//! `elastic OK …` at the end.
#![allow(clippy::print_stdout, reason = "an example reports its progress")]

use meshwork::{Error, Node, ProcessGroup, Recovery, ReduceOp};
use std::io::Write;
use std::sync::Arc;

const MODEL: usize = 256;

fn main() -> meshwork::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let joining = args.iter().any(|a| a == "--join");
    let steps: u64 = match args.iter().position(|a| a == "--steps") {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::InvalidArgument("--steps needs a number".into()))?,
        None => 2000,
    };
    let node = if joining {
        Node::join_running()
    } else {
        Node::from_env()?
    };
    let manual = args.iter().any(|a| a == "--manual");
    let recovery = if manual {
        Recovery::Manual
    } else {
        Recovery::Shrink
    };
    let mut g: Arc<ProcessGroup> = node.recovery(recovery).connect()?;
    // The size to keep the job at (a newcomer joins a job already grown back).
    let size = g.world_size();
    let (mut step, mut model) = (0u64, vec![0f32; MODEL]);
    let mut growths = 0;
    catch_up(&g, &mut step, &mut model)?;
    while step < steps {
        match train(&g, step, &mut model) {
            Ok(()) => {
                step += 1;
                if step == 10 {
                    say("READY");
                }
            }
            Err(Error::GroupShrunk { failed }) => {
                let lost = size - g.world_size();
                say(&format!(
                    "lost ranks {failed:?} at step {step}: {} left, waiting for {lost} new process(es)",
                    g.world_size()
                ));
                g = g.grow(lost)?;
                growths += 1;
                catch_up(&g, &mut step, &mut model)?;
            }
            Err(Error::PeerDisconnected { .. } | Error::Timeout { .. } | Error::Revoked)
                if manual =>
            {
                // Every member's pending call fails now, not at its deadline.
                g.revoke();
                let (_, failed) = g.agree(u64::MAX)?;
                // The old groups are dropped as they are replaced; the new
                // ones go on over their links.
                g = g.shrink()?;
                let lost = size - g.world_size();
                say(&format!(
                    "lost ranks {failed:?} at step {step}: {} left, waiting for {lost} new process(es)",
                    g.world_size()
                ));
                g = g.grow(lost)?;
                growths += 1;
                catch_up(&g, &mut step, &mut model)?;
            }
            Err(e) => return Err(e),
        }
    }
    // Every member holds the same model.
    let mut theirs = model.clone();
    g.broadcast(&mut theirs, 0)?;
    if theirs != model {
        return Err(Error::InvalidArgument(format!(
            "rank {} holds another model than rank 0",
            g.rank()
        )));
    }
    say(&format!(
        "elastic OK: rank {} of {} after {steps} steps, {growths} growth(s), model[1] = {}",
        g.rank(),
        g.world_size(),
        model[1]
    ));
    g.shutdown()
}

/// One step: the gradient of rank r is (r + 1)·((step + i) mod 7), whose
/// sum over a world of w is exact in f32; the model adds it. Then a
/// federated average, checked against the same mean computed here.
fn train(g: &ProcessGroup, step: u64, model: &mut [f32]) -> meshwork::Result<()> {
    let r = g.rank() as f32 + 1.0;
    let mut grad: Vec<f32> = (0..MODEL as u64)
        .map(|i| r * ((step + i) % 7) as f32)
        .collect();
    g.all_reduce(&mut grad, ReduceOp::Sum)?;
    let w = g.world_size() as f32;
    for (i, (m, s)) in model.iter_mut().zip(&grad).enumerate() {
        let want = w * (w + 1.0) / 2.0 * ((step + i as u64) % 7) as f32;
        if *s != want {
            return Err(Error::InvalidArgument(format!(
                "step {step}: gradient sum {s} at {i}, {want} expected"
            )));
        }
        *m += s;
    }
    // And the star's way: a mean weighted by each rank's samples, r + 1
    // of them, over whoever is in the group.
    let mut local = [r; 8];
    g.federated_average(&mut local, r)?;
    let (num, den) = (1..=g.world_size()).fold((0f64, 0f64), |(n, d), k| {
        (n + f64::from(k) * f64::from(k), d + f64::from(k))
    });
    if local != [(num / den) as f32; 8] {
        return Err(Error::InvalidArgument(format!(
            "step {step}: weighted mean {}, {} expected",
            local[0],
            num / den
        )));
    }
    Ok(())
}

/// Everyone takes rank 0's step and model (a newcomer has neither; a
/// survivor may have finished the step the failure interrupted).
fn catch_up(g: &ProcessGroup, step: &mut u64, model: &mut [f32]) -> meshwork::Result<()> {
    let mut s = [*step];
    g.broadcast(&mut s, 0)?;
    *step = s[0];
    g.broadcast(model, 0)
}

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}
