"""Arrays are used in place, never copied; arrays meshwork cannot use in
place (non-contiguous, read-only where written, unaligned, of a dtype it
does not reduce, not arrays at all) are a meshwork.InvalidArgument (also a
ValueError) naming the argument, and the group stays usable."""

from __future__ import annotations

import array

import numpy as np
import pytest

import meshwork
from conftest import np_dtype, run_world


def refused_then_usable(n, bad_call, match):
    """Every rank's ``bad_call(g)`` raises InvalidArgument matching
    ``match``; then an all_reduce on the same group still works."""

    def body(g):
        with pytest.raises(meshwork.InvalidArgument, match=match) as info:
            bad_call(g)
        assert isinstance(info.value, ValueError)
        a = np.full(3, g.rank + 1, dtype=np.int32)
        g.all_reduce(a)
        return a

    for a in run_world(n, body):
        assert np.all(a == n * (n + 1) // 2)


# --- in place -------------------------------------------------------------


def test_all_reduce_writes_the_callers_memory():
    def body(g):
        big = np.zeros(10, dtype=np.float64)
        view = big[2:6]  # a contiguous view into a larger array
        view[:] = g.rank + 1
        address = view.ctypes.data
        g.all_reduce(view)
        assert view.ctypes.data == address
        return big

    for big in run_world(3, body):
        assert list(big) == [0, 0, 6, 6, 6, 6, 0, 0, 0, 0]


def test_recv_and_collectives_write_into_views_and_nothing_else():
    def body(g):
        out = np.full(12, -1, dtype=np.int64)
        g.all_gather(np.array([g.rank, g.rank], dtype=np.int64), out[2:2 + 2 * g.world_size])
        buf = bytearray(b"........")
        if g.rank == 0:
            g.send(b"abcd", dst=1, tag=9)
        else:
            g.recv(memoryview(buf)[2:6], src=0, tag=9)
        return out, bytes(buf)

    (out0, _), (out1, buf1) = run_world(2, body)
    assert list(out0) == [-1, -1, 0, 0, 1, 1, -1, -1, -1, -1, -1, -1]
    assert np.array_equal(out0, out1)
    assert buf1 == b"..abcd.."


def test_point_to_point_takes_any_buffer_and_dtype():
    def body(g):
        if g.rank == 0:
            g.send(np.array([True, False, True]), dst=1)  # bool: any bytes go
            g.send(array.array("h", [1, -2, 3]), dst=1, tag=2**64 - 1)
            g.send(b"", dst=1, tag=5)
            return None
        flags = np.zeros(3, dtype=bool)
        g.recv(flags, src=0)
        shorts = np.zeros(3, dtype=np.int16)
        g.recv(shorts, src=0, tag=2**64 - 1)
        g.recv(bytearray(), src=0, tag=5)
        return flags, shorts

    _, (flags, shorts) = run_world(2, body)
    assert list(flags) == [True, False, True] and list(shorts) == [1, -2, 3]


def test_a_receive_of_the_wrong_size_leaves_the_message_queued():
    def body(g):
        if g.rank == 0:
            g.send(np.arange(4, dtype=np.int32), dst=1, tag=3)
            return None
        with pytest.raises(meshwork.InvalidArgument, match="16 bytes"):
            g.recv(np.zeros(3, dtype=np.int32), src=0, tag=3)
        got = np.zeros(4, dtype=np.int32)
        g.recv(got, src=0, tag=3)
        return got

    assert list(run_world(2, body)[1]) == [0, 1, 2, 3]


# --- refused ----------------------------------------------------------------


def test_non_contiguous_arrays_are_refused():
    refused_then_usable(2, lambda g: g.all_reduce(np.zeros(8)[::2]), "a is not C-contiguous")
    refused_then_usable(2, lambda g: g.broadcast(np.zeros((3, 4)).T), "a is not C-contiguous")
    refused_then_usable(
        2,
        lambda g: g.all_gather(np.zeros(4)[::2], np.zeros(2 * g.world_size)),
        "send is not C-contiguous",
    )
    refused_then_usable(2, lambda g: g.recv(np.zeros(8)[::2], src=0), "a is not C-contiguous")


def test_read_only_arrays_are_refused_where_written():
    def frozen(n, dtype=np.float32):
        a = np.zeros(n, dtype=dtype)
        a.setflags(write=False)
        return a

    refused_then_usable(2, lambda g: g.all_reduce(frozen(3)), "a is read-only")
    refused_then_usable(2, lambda g: g.scan(frozen(3)), "a is read-only")
    refused_then_usable(2, lambda g: g.recv(b"abc", src=0), "a is read-only")
    refused_then_usable(
        2, lambda g: g.all_gather(np.zeros(1, np.float32), frozen(g.world_size)), "recv is read-only"
    )

    # Read-only is fine where the call only reads.
    def body(g):
        recv = np.zeros(2, dtype=np.float32)
        g.all_gather(frozen(1) + g.rank, recv)  # a fresh writable sum
        send = frozen(1)
        g.all_gather(send, recv)
        return recv

    assert all(list(r) == [0, 0] for r in run_world(2, body))


@pytest.mark.parametrize(
    "dtype", ["bool", "complex64", ">f4", ">i8", "float128", "object", "U3"]
)
def test_dtypes_meshwork_does_not_reduce_are_refused(dtype):
    try:
        a = np.zeros(4, dtype=np.dtype(dtype))
    except TypeError:
        pytest.skip(f"numpy has no {dtype} here")
    refused_then_usable(2, lambda g: g.all_reduce(a), "is not supported")


def test_sixteen_bit_integers_reduce_and_wrap():
    def body(g):
        a = np.array([30000, -5, 7], dtype=np.int16)
        b = np.array([60000, 3, g.rank + 1], dtype=np.uint16)
        g.all_reduce(a)
        g.all_reduce(b, op="max")
        return a, b

    for a, b in run_world(2, body):
        assert list(a) == [-5536, -10, 14] and list(b) == [60000, 3, 2]


def test_send_and_recv_of_different_dtypes_are_refused():
    refused_then_usable(
        2,
        lambda g: g.all_gather(np.zeros(1, np.float32), np.zeros(g.world_size, np.float64)),
        "send is float32 but recv is float64",
    )


def test_overlapping_send_and_recv_are_refused():
    def same(g):
        a = np.zeros(2 * g.world_size, dtype=np.int32)
        g.all_to_all(a, a)

    refused_then_usable(2, same, "share memory")

    def overlapping(g):
        a = np.zeros(3 * g.world_size, dtype=np.int32)
        g.all_gather(a[:2], a[1 : 1 + 2 * g.world_size])

    refused_then_usable(2, overlapping, "share memory")


def test_unaligned_arrays_are_refused():
    def unaligned(g):
        raw = bytearray(4 * 4 + 1)
        a = np.frombuffer(raw, dtype=np.float32, count=4, offset=1)
        g.all_reduce(a)

    refused_then_usable(2, unaligned, "not aligned")


@pytest.mark.parametrize("thing", [[1.0, 2.0], None, "abc", 3, object()])
def test_non_arrays_are_refused(thing):
    refused_then_usable(1, lambda g: g.all_reduce(thing), "expected a numpy array")


def test_wrong_sizes_are_refused_by_the_collective():
    refused_then_usable(
        2, lambda g: g.all_gather(np.zeros(2), np.zeros(3)), "all_gather: recv has 3 elements"
    )
    refused_then_usable(
        2, lambda g: g.reduce_scatter(np.zeros(3), np.zeros(1)), "reduce_scatter"
    )


def test_bad_operators_roots_ranks_and_tags_are_refused():
    a = lambda: np.zeros(2, dtype=np.float32)  # noqa: E731
    refused_then_usable(2, lambda g: g.all_reduce(a(), op="mean"), "unknown op 'mean'|unknown op \"mean\"")
    refused_then_usable(2, lambda g: g.broadcast(a(), root=2), "root 2 is out of range")
    refused_then_usable(2, lambda g: g.reduce(a(), root=-1), "root -1 is out of range")
    refused_then_usable(2, lambda g: g.send(a(), dst=5), "dst 5 is out of range")
    refused_then_usable(2, lambda g: g.recv(a(), src=-3), "src -3 is out of range")
    refused_then_usable(2, lambda g: g.send(a(), dst=0, tag=-1), "tag -1")
    refused_then_usable(2, lambda g: g.send(a(), dst=0, tag=2**64), "tag")
    refused_then_usable(2, lambda g: g.set_timeout(0), "timeout")
    refused_then_usable(2, lambda g: g.set_timeout(float("nan")), "timeout")


def test_gather_and_scatter_need_their_buffers_at_the_root_only():
    refused_then_usable(2, lambda g: g.gather(np.zeros(1), None, root=g.rank), "the root needs a recv")
    refused_then_usable(2, lambda g: g.scatter(None, np.zeros(1), root=g.rank), "the root needs a send")


def test_bfloat16_goes_in_place_through_a_numpy_view():
    bf16 = np_dtype("bfloat16")

    def body(g):
        a = np.full(3, 1.5, dtype=bf16)
        address = a.ctypes.data
        g.all_reduce(a)
        assert a.ctypes.data == address
        return a

    for a in run_world(2, body):
        assert a.dtype == bf16 and list(a.astype(np.float32)) == [3.0, 3.0, 3.0]
    refused_then_usable(2, lambda g: g.all_reduce(np.zeros(8, dtype=bf16)[::2]), "not C-contiguous")

    def frozen(g):
        a = np.zeros(2, dtype=bf16)
        a.setflags(write=False)
        g.all_reduce(a)

    refused_then_usable(2, frozen, "read-only")
