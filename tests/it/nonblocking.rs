//! Non-blocking operations: many in flight, waited in any order, mixed with
//! blocking calls, and completing even when their handle is dropped.

use crate::support::run_world;
use meshwork::{Error, ReduceOp, Work};

#[test]
fn many_in_flight_waited_in_reverse() {
    for p in [1, 2, 3, 5] {
        run_world(p, |g| {
            let pu = p as usize;
            let r = g.rank() as usize;
            let mut ar: Vec<Work<Vec<i64>>> = Vec::new();
            for k in 0..40 {
                ar.push(g.all_reduce_nb(vec![k as i64 + r as i64; 33], ReduceOp::Sum));
            }
            let bc = g.broadcast_nb(vec![r as u32; 7], 0);
            let ag = g.all_gather_nb(vec![r as u8; 2]);
            let rs = g.reduce_scatter_nb(vec![1.5f32; 3 * pu], ReduceOp::Max);
            let red = g.reduce_nb(vec![2u64; 4], ReduceOp::Prod, p - 1);
            let a2a = g.all_to_all_nb((0..pu as i32).map(|j| j * 10 + r as i32).collect());
            let ga = g.gather_nb(vec![r as i8], 0);
            let sc = g.scatter_nb((0..pu as u32 * 2).collect(), 2, 0);
            let sn = g.scan_nb(vec![1i32; 3], ReduceOp::Sum);
            let ex = g.exclusive_scan_nb(vec![1i32; 3], ReduceOp::Sum);
            let bar = g.barrier_nb();
            // A blocking call between them takes the next sequence number.
            let mut mid = [r as f64];
            g.all_reduce(&mut mid, ReduceOp::Max).unwrap();
            assert_eq!(mid, [(p - 1) as f64]);

            bar.wait().unwrap();
            assert_eq!(ex.wait().unwrap(), vec![r as i32; 3]);
            assert_eq!(sn.wait().unwrap(), vec![r as i32 + 1; 3]);
            assert_eq!(sc.wait().unwrap(), vec![2 * r as u32, 2 * r as u32 + 1]);
            let gathered = ga.wait().unwrap();
            if r == 0 {
                assert_eq!(gathered, (0..pu as i8).collect::<Vec<_>>());
            } else {
                assert!(gathered.is_empty());
            }
            assert_eq!(
                a2a.wait().unwrap(),
                (0..pu as i32)
                    .map(|q| r as i32 * 10 + q)
                    .collect::<Vec<_>>()
            );
            let reduced = red.wait().unwrap();
            if r == pu - 1 {
                assert_eq!(reduced, vec![2u64.pow(p); 4]);
            }
            assert_eq!(rs.wait().unwrap(), vec![1.5; 3]);
            assert_eq!(
                ag.wait().unwrap(),
                (0..pu).flat_map(|q| [q as u8; 2]).collect::<Vec<_>>()
            );
            assert_eq!(bc.wait().unwrap(), vec![0; 7]);
            let base = (0..pu as i64).sum::<i64>();
            for (k, w) in ar.into_iter().enumerate().rev() {
                assert_eq!(w.wait().unwrap(), vec![k as i64 * p as i64 + base; 33]);
            }
        });
    }
}

#[test]
fn a_dropped_handle_still_completes() {
    run_world(3, |g| {
        let w = g.all_reduce_nb(vec![1u32; 100], ReduceOp::Sum);
        if g.rank() == 0 {
            drop(w);
        } else {
            // Only possible if rank 0's part ran without anyone waiting.
            assert_eq!(w.wait().unwrap(), vec![3; 100]);
        }
        let mut x = [g.rank()];
        g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
        assert_eq!(x, [3]);
    });
}

#[test]
fn progress_needs_no_wait() {
    run_world(2, |g| {
        let w = g.broadcast_nb(vec![g.rank(); 10], 1);
        // The other rank's blocking call can only return if this rank's
        // operation progresses while nobody waits on `w`.
        g.barrier().unwrap();
        let mut seen = [0u32];
        g.broadcast(&mut seen, 0).unwrap();
        assert_eq!(w.wait().unwrap(), vec![1; 10]);
    });
}

#[test]
fn argument_errors_complete_at_once() {
    run_world(2, |g| {
        let w = g.reduce_scatter_nb(vec![1.0f32; 3], ReduceOp::Sum);
        assert!(w.is_complete());
        assert!(matches!(w.wait(), Err(Error::InvalidArgument(_))));
        let w = g.all_reduce_nb(vec![1i32], ReduceOp::Avg);
        assert!(matches!(w.wait(), Err(Error::InvalidArgument(_))));
        let w = g.broadcast_nb(vec![1i32], 9);
        assert!(matches!(w.wait(), Err(Error::InvalidArgument(_))));
        // Nothing was consumed: the group carries on.
        assert_eq!(
            g.all_reduce_nb(vec![1i32], ReduceOp::Sum).wait().unwrap(),
            vec![2]
        );
    });
}
