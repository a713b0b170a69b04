//! Bad arguments: a typed error on the calling rank that says what was
//! expected, before any message moves; the group stays usable.

use crate::support::run_world;
use meshwork::{Error, ReduceOp};

fn invalid(r: meshwork::Result<()>, needle: &str) {
    match r {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains(needle), "{msg:?} lacks {needle:?}")
        }
        other => panic!("expected InvalidArgument containing {needle:?}, got {other:?}"),
    }
}

#[test]
fn wrong_lengths_and_roots_are_refused_and_the_group_carries_on() {
    run_world(3, |g| {
        let mut small = [0f32; 5];
        invalid(
            g.all_gather(&[1.0f32; 2], &mut small),
            "recv has 5 elements, expected 6",
        );
        invalid(
            g.reduce_scatter(&[1.0f32; 5], &mut [0.0; 2], ReduceOp::Sum),
            "send has 5 elements, expected 6",
        );
        invalid(
            g.all_to_all(&[1u8; 6], &mut [0u8; 5]),
            "recv has 5 elements, expected 6",
        );
        invalid(
            g.all_to_all(&[1u8; 4], &mut [0u8; 4]),
            "not a multiple of the world size 3",
        );
        invalid(g.broadcast(&mut [1i32], 3), "root 3 is out of range");
        invalid(
            g.reduce(&mut [1i32], ReduceOp::Sum, 7),
            "root 7 is out of range",
        );
        invalid(g.gather(&[1i64], &mut [], 4), "root 4 is out of range");
        invalid(g.scatter(&[], &mut [1i64], 3), "root 3 is out of range");
        invalid(
            g.all_reduce(&mut [1u32], ReduceOp::Avg),
            "Avg needs a float element type, not u32",
        );
        invalid(g.scan(&mut [1i8], ReduceOp::Avg), "not i8");
        // At the root the unused-elsewhere buffers are checked...
        if g.rank() == 1 {
            invalid(g.gather(&[1i64; 2], &mut [0; 5], 1), "expected 6");
            invalid(g.scatter(&[1i64; 5], &mut [0; 2], 1), "expected 6");
        }
        // ...and nothing moved, so every rank is still in step.
        let mut x = [g.rank() as f32; 4];
        g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
        assert_eq!(x, [3.0; 4]);
        // Off the root those buffers may be empty.
        let mut recv = if g.rank() == 1 {
            vec![0i64; 3]
        } else {
            Vec::new()
        };
        g.gather(&[g.rank() as i64], &mut recv, 1).unwrap();
        if g.rank() == 1 {
            assert_eq!(recv, [0, 1, 2]);
        }
        let send = if g.rank() == 1 {
            vec![5i64, 6, 7]
        } else {
            Vec::new()
        };
        let mut mine = [0i64];
        g.scatter(&send, &mut mine, 1).unwrap();
        assert_eq!(mine, [5 + g.rank() as i64]);
    });
}

#[test]
fn unknown_algorithms_are_refused() {
    let g = meshwork::local(1).unwrap().remove(0);
    assert!(
        matches!(g.set_algorithm("all_reduce", Some("chain")), Err(Error::InvalidArgument(m)) if m.contains("ring_pipelined"))
    );
    assert!(
        matches!(g.set_algorithm("allreduce", Some("ring")), Err(Error::InvalidArgument(m)) if m.contains("all_reduce"))
    );
    g.set_algorithm("ALL_REDUCE", Some("Ring")).unwrap();
    g.set_algorithm("all_reduce", None).unwrap();
    assert!(matches!(meshwork::local(0), Err(Error::InvalidArgument(_))));
}
