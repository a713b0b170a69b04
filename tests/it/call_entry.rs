//! The one call entry (`ProcessGroup::call`, `call_nb`, `call_bytes`):
//! every collective described as a `Call` on `Buffers` gives what its
//! named method gives; the forms a call does not take, and raw bytes that
//! do not hold whole aligned elements, are refused on the calling rank
//! before anything moves, and the group carries on.

use crate::support::run_world;
use meshwork::{Buffers, Call, DType, Error, OwnedBuffers, ProcessGroup, ReduceOp};

fn invalid(r: meshwork::Result<()>, needle: &str) {
    match r {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains(needle), "{msg:?} lacks {needle:?}")
        }
        other => panic!("expected InvalidArgument containing {needle:?}, got {other:?}"),
    }
}

/// This rank's input: distinct per rank and element.
fn input(g: &ProcessGroup, n: usize) -> Vec<i64> {
    (0..n as i64)
        .map(|i| 100 * i64::from(g.rank()) + i + 1)
        .collect()
}

#[test]
fn every_collective_through_the_entry_matches_its_named_method() {
    const W: usize = 3;
    run_world(W as u32, |g| {
        let op = ReduceOp::Sum;
        for call in [
            Call::AllReduce { op },
            Call::Broadcast { root: 1 },
            Call::Reduce { op, root: 2 },
            Call::Scan { op },
            Call::ExclusiveScan { op: ReduceOp::Max },
        ] {
            let (mut named, mut entry) = (input(g, 4), input(g, 4));
            match call {
                Call::AllReduce { op } => g.all_reduce(&mut named, op),
                Call::Broadcast { root } => g.broadcast(&mut named, root),
                Call::Reduce { op, root } => g.reduce(&mut named, op, root),
                Call::Scan { op } => g.scan(&mut named, op),
                Call::ExclusiveScan { op } => g.exclusive_scan(&mut named, op),
                _ => unreachable!("in-place calls only"),
            }
            .unwrap();
            g.call(call, Buffers::InPlace(&mut entry[..])).unwrap();
            if call.root().is_none_or(|r| r == g.rank()) {
                assert_eq!(entry, named, "{}", call.name());
            }
            // The same call from a send buffer into a receive buffer: the
            // send buffer is left as it was.
            let send = input(g, 4);
            let mut recv = vec![0i64; 4];
            let bufs = Buffers::SendRecv {
                send: &send[..],
                recv: &mut recv[..],
            };
            g.call(call, bufs).unwrap();
            assert_eq!(send, input(g, 4));
            if call.root().is_none_or(|r| r == g.rank()) {
                assert_eq!(recv, named, "{} out of place", call.name());
            }
        }
        let send = input(g, 2);
        for call in [
            Call::AllGather,
            Call::ReduceScatter { op },
            Call::AllToAll,
            Call::Gather { root: 0 },
            Call::Scatter { root: 1 },
        ] {
            let (send, recv_len) = match call {
                Call::AllGather | Call::Gather { .. } => (send.clone(), 2 * W),
                Call::Scatter { .. } | Call::ReduceScatter { .. } => (input(g, 2 * W), 2),
                _ => (input(g, 2 * W), 2 * W),
            };
            let (mut named, mut entry) = (vec![0i64; recv_len], vec![0i64; recv_len]);
            match call {
                Call::AllGather => g.all_gather(&send, &mut named),
                Call::ReduceScatter { op } => g.reduce_scatter(&send, &mut named, op),
                Call::AllToAll => g.all_to_all(&send, &mut named),
                Call::Gather { root } => g.gather(&send, &mut named, root),
                Call::Scatter { root } => g.scatter(&send, &mut named, root),
                _ => unreachable!("send and receive calls only"),
            }
            .unwrap();
            let bufs = Buffers::SendRecv {
                send: &send[..],
                recv: &mut entry[..],
            };
            g.call(call, bufs).unwrap();
            assert_eq!(entry, named, "{}", call.name());
            // Not blocking, on buffers handed over and handed back.
            let work = g.call_nb(
                call,
                OwnedBuffers::SendRecv {
                    send: send.clone(),
                    recv: vec![0i64; recv_len],
                },
            );
            assert_eq!(work.wait().unwrap(), named, "{} nb", call.name());
        }
        g.call::<u8>(Call::Barrier, Buffers::InPlace(&mut []))
            .unwrap();
    });
}

#[test]
fn forms_a_call_does_not_take_are_refused_and_the_group_carries_on() {
    run_world(3, |g| {
        let op = ReduceOp::Sum;
        let mut one = [1.0f32; 6];
        invalid(
            g.call(Call::AllGather, Buffers::InPlace(&mut one[..])),
            "all_gather: needs a send and a receive buffer",
        );
        let send = [1.0f32; 4];
        let mut recv = [0.0f32; 3];
        let bufs = Buffers::SendRecv {
            send: &send[..],
            recv: &mut recv[..],
        };
        invalid(
            g.call(Call::AllReduce { op }, bufs),
            "all_reduce: recv has 3 elements, expected 4 (equal to send length)",
        );
        invalid(
            g.call(Call::Barrier, Buffers::InPlace(&mut one[..])),
            "barrier: takes no buffer",
        );
        // Non-blocking: the refusal is the work's, at once.
        let work = g.call_nb(
            Call::AllGather,
            OwnedBuffers::SendRecv {
                send: vec![1u8; 2],
                recv: vec![0u8; 5],
            },
        );
        assert!(work.is_complete());
        invalid(work.wait().map(drop), "recv has 5 elements, expected 6");
        // Nothing moved: every rank is still in step.
        let mut x = [g.rank() as f32; 4];
        g.call(Call::AllReduce { op }, Buffers::InPlace(&mut x[..]))
            .unwrap();
        assert_eq!(x, [3.0; 4]);
    });
}

#[test]
fn raw_bytes_run_as_their_dtype_and_misfits_are_refused() {
    run_world(2, |g| {
        let op = ReduceOp::Sum;
        // Eight f64 values in bytes, through the byte entry: the typed
        // result, bit for bit.
        let values: Vec<f64> = (0..8)
            .map(|i| f64::from(g.rank()) * 0.5 + f64::from(i))
            .collect();
        let mut typed = values.clone();
        g.all_reduce(&mut typed, op).unwrap();
        let mut words = values.clone();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut words[..]);
        g.call_bytes(Call::AllReduce { op }, DType::F64, Buffers::InPlace(bytes))
            .unwrap();
        assert_eq!(words, typed);
        // Not a whole number of f64s, and not aligned for them.
        let mut words = [0u64; 3];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut words[..]);
        invalid(
            g.call_bytes(
                Call::AllReduce { op },
                DType::F64,
                Buffers::InPlace(&mut bytes[..20]),
            ),
            "buf holds 20 bytes, not a whole number of f64 elements (8 bytes each)",
        );
        invalid(
            g.call_bytes(
                Call::AllReduce { op },
                DType::F64,
                Buffers::InPlace(&mut bytes[1..17]),
            ),
            "buf is not aligned to 8 bytes (f64)",
        );
        // Integers cannot be averaged, whichever entry.
        invalid(
            g.call_bytes(
                Call::AllReduce { op: ReduceOp::Avg },
                DType::I32,
                Buffers::InPlace(&mut bytes[..8]),
            ),
            "Avg needs a float element type, not i32",
        );
        // The group is still in step.
        let mut x = [1u32; 2];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut x[..]);
        g.call_bytes(Call::AllReduce { op }, DType::U32, Buffers::InPlace(bytes))
            .unwrap();
        assert_eq!(x, [2, 2]);
    });
}
