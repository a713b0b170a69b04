"""An array is held for the whole of a call, though the call releases the
GIL: another Python thread that resizes, re-points or drops it meanwhile
gets a refusal (numpy), or the call raises meshwork.InvalidArgument and
leaves the tensor alone (torch); meshwork never writes into freed memory.
And meshwork takes memory only from its exporter's own C code: an object
that claims an address (a forged ``__array_interface__``, a tensor
subclass whose ``data_ptr`` lies) cannot point it anywhere.

Timing: rank 0 sets an event and enters the call; rank 1 waits for the
event, then meddles. ``gil_kept_until_blocked`` makes a thread keep the
GIL until it blocks, and once every way in has run (the fixture below)
meshwork does not release the GIL before the call blocks
(``test_taking_a_tensor_keeps_the_gil``): rank 1 runs only once rank 0
has released the GIL inside the blocking part of the call, so the
meddling always lands mid-call. The tensors are 4 MiB, above glibc's
mmap threshold, so the memory a resize frees is unmapped: a build that
wrote into it crashed these tests with SIGSEGV (checked)."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import sys
import threading

import numpy as np
import pytest

import meshwork
from conftest import need, np_dtype, run_world

N = 1 << 20  # elements: 4 MiB of float32


@contextlib.contextmanager
def gil_kept_until_blocked():
    """A thread keeps the GIL until it blocks: no switch every 5 ms, and no
    garbage collection, whose finalizers (a file closed, say, left over
    from an earlier test) may release the GIL anywhere."""
    old = sys.getswitchinterval()
    gc.collect()
    gc.disable()
    sys.setswitchinterval(60.0)
    try:
        yield
    finally:
        sys.setswitchinterval(old)
        gc.enable()


@pytest.fixture(autouse=True, scope="module")
def every_way_in_taken_once():
    """The first call that takes a tensor, a numpy array or a bfloat16
    array looks torch or numpy up and interns names, which releases the GIL
    once (PyO3's ``PyOnceLock`` and ``intern!`` do on first use; checked:
    without this, the first test below met rank 1's meddling before rank 0
    was inside its call, about one run in five after test_gil.py). So each
    way in runs once first."""
    g = meshwork.local(1)[0]
    makers = [lambda: np.zeros(4, np.float32)]
    if importlib.util.find_spec("ml_dtypes"):
        makers.append(lambda: np.zeros(4, np_dtype("bfloat16")))
    if importlib.util.find_spec("torch"):
        import torch

        makers += [lambda: torch.zeros(4), lambda: torch.zeros(4).numpy()]
    for make in makers:
        g.send(make(), dst=0)
        g.recv(make(), src=0)
        g.all_reduce(make())


def mid_call(call, meddle, n=2):
    """Rank 0 runs ``call(g, box, entered)`` and rank 1 ``meddle(g, box)``
    once rank 0 is blocked inside its call; ``box`` is a dict they share.
    ``call`` calls ``entered()`` right before the meshwork call, with
    nothing between them that could release the GIL. Returns the results
    in rank order."""
    box = {}
    entering = threading.Event()

    def body(g):
        if g.rank == 0:
            return call(g, box, entering.set)
        assert entering.wait(10)
        return meddle(g, box)

    with gil_kept_until_blocked():
        return run_world(n, body)


def still_usable(g):
    a = np.full(3, 1.0, dtype=np.float32)
    g.all_reduce(a)
    return float(a[0])


# --- torch ----------------------------------------------------------------


# Each frees the memory the tensor had.
MUTATIONS = {
    "resize_ (grow)": lambda torch, t: t.resize_(4 * N),
    "set_": lambda torch, t: t.set_(torch.zeros(N)),
    "untyped_storage().resize_(0)": lambda torch, t: t.untyped_storage().resize_(0),
    "share_memory_": lambda torch, t: t.share_memory_(),
}


@pytest.mark.parametrize("how", list(MUTATIONS))
def test_a_tensor_changed_during_a_recv_is_refused_and_not_written(how):
    torch = need("torch")

    def call(g, box, entered):
        t = box["t"] = torch.zeros(N)
        with pytest.raises(meshwork.InvalidArgument, match="changed during the call") as info:
            entered()
            g.recv(t, src=1)
        assert isinstance(info.value, ValueError)
        if how != "untyped_storage().resize_(0)":  # that one has no data left to look at
            assert float(t[:N].abs().sum()) == 0.0, "meshwork wrote the result into it"
        return still_usable(g)

    def meddle(g, box):
        MUTATIONS[how](torch, box["t"])
        g.send(torch.ones(N), dst=0)
        return still_usable(g)

    assert mid_call(call, meddle) == [2.0, 2.0]


def test_a_tensor_resized_during_an_all_reduce_is_refused_on_its_rank_only():
    torch = need("torch")

    def call(g, box, entered):
        t = box["t"] = torch.ones(N)
        with pytest.raises(meshwork.InvalidArgument, match="changed during the call"):
            entered()
            g.all_reduce(t)  # waits for rank 1, which resizes t first
        assert float(t[:N].sum()) == N  # ones, as before: not written
        return still_usable(g)

    def meddle(g, box):
        box["t"].resize_(4 * N)
        mine = torch.ones(N)
        g.all_reduce(mine)
        assert bool((mine == 2).all())
        return still_usable(g)

    assert mid_call(call, meddle) == [2.0, 2.0]


def test_a_numpy_view_of_a_tensor_is_checked_against_the_tensor():
    torch = need("torch")

    def call(g, box, entered):
        t = box["t"] = torch.zeros(N)
        a = t.numpy()  # numpy's memory is the tensor's
        with pytest.raises(meshwork.InvalidArgument, match="changed during the call"):
            entered()
            g.recv(a, src=1)
        return still_usable(g)

    def meddle(g, box):
        # Recent torch makes the storage non-resizable once it is exported
        # to numpy; set_ frees it all the same.
        with contextlib.suppress(RuntimeError):
            box["t"].resize_(4 * N)
        box["t"].set_(torch.zeros(N))
        g.send(np.ones(N, dtype=np.float32), dst=0)
        return still_usable(g)

    assert mid_call(call, meddle) == [2.0, 2.0]


def test_an_unchanged_tensor_gets_the_result_and_a_failed_call_leaves_it_alone():
    torch = need("torch")

    def body(g):
        t = torch.full((N,), float(g.rank + 1))
        g.all_reduce(t)
        assert bool((t == 3).all())
        g.set_timeout(0.2)
        u = torch.full((4,), 7.0)
        with pytest.raises(meshwork.Timeout):
            g.recv(u, src=1 - g.rank)  # nothing is sent
        assert u.tolist() == [7.0] * 4
        return True

    assert run_world(2, body) == [True, True]


def test_taking_a_tensor_keeps_the_gil():
    """What the timing of these tests rests on: between a rank's
    ``entering.set()`` and the blocking part of its call, meshwork does not
    release the GIL (a thread waiting for it would run there). The calls
    below take both arrays, then fail before blocking (dtypes differ)."""
    torch = need("torch")
    g = meshwork.local(1)[0]
    send, recv = torch.zeros(N), torch.zeros(N, dtype=torch.float64)
    with gil_kept_until_blocked():
        for _ in range(50):
            entering = threading.Event()
            ran = []
            waiter = threading.Thread(target=lambda: (entering.wait(), ran.append(1)))
            waiter.start()
            waiter.join(0.002)  # lets it reach wait()
            entering.set()
            with pytest.raises(meshwork.InvalidArgument, match="give both the same dtype"):
                g.all_gather(send, recv)
            assert not ran, "the GIL was released before the call blocked"
            waiter.join()


def test_a_conjugate_view_is_refused():
    torch = need("torch")

    def body(g):
        with pytest.raises(meshwork.InvalidArgument, match="resolve_conj"):
            g.send(torch.ones(2, dtype=torch.complex64).conj(), dst=0)
        return still_usable(g)

    assert run_world(1, body) == [1.0]


# --- numpy ----------------------------------------------------------------


@pytest.mark.parametrize("refcheck", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_numpy_refuses_to_resize_an_array_a_call_uses(dtype, refcheck):
    """With refcheck=False numpy skips its reference count; the weak
    reference meshwork holds makes it refuse anyway."""
    dt = np_dtype(dtype)

    def call(g, box, entered):
        a = box["a"] = np.zeros(N, dtype=dt)
        entered()
        g.recv(a, src=1)
        assert a.shape == (N,) and bool((a == 1).all())
        return still_usable(g)

    def meddle(g, box):
        with pytest.raises(ValueError, match="cannot resize"):
            box["a"].resize(4 * N, refcheck=refcheck)
        g.send(np.ones(N, dtype=dt), dst=0)
        return still_usable(g)

    assert mid_call(call, meddle) == [2.0, 2.0]


@pytest.mark.parametrize("how", list(MUTATIONS))
def test_numpy_memory_that_torch_views_is_used_in_place_and_outlives_what_torch_does(how):
    """The zero-copy route for torch users (docs/python.md): numpy owns the
    memory, torch views it, meshwork is given the numpy array."""
    torch = need("torch")

    def call(g, box, entered):
        a = np.zeros(N, dtype=np.float32)
        box["t"] = torch.from_numpy(a)
        address = a.ctypes.data
        entered()
        g.recv(a, src=1)
        assert a.ctypes.data == address and bool((a == 1).all())
        return still_usable(g)

    def meddle(g, box):
        # torch refuses to resize memory it does not own; set_ and
        # share_memory_ let go of it, which leaves it to numpy.
        with contextlib.suppress(RuntimeError):
            MUTATIONS[how](torch, box["t"])
        g.send(np.ones(N, dtype=np.float32), dst=0)
        return still_usable(g)

    assert mid_call(call, meddle) == [2.0, 2.0]


# --- forged addresses -----------------------------------------------------


class Forged:
    """Claims float32 memory at address 8."""

    __array_interface__ = {"data": (8, False), "shape": (4,), "typestr": "<f4", "version": 3}

    def data_ptr(self):
        return 8


def test_an_object_claiming_an_address_is_refused():
    def body(g):
        for call in (
            lambda: g.all_reduce(Forged()),
            lambda: g.recv(Forged(), src=0),
            lambda: g.send(Forged(), dst=0),
            lambda: g.all_gather(np.zeros(1, np.float32), Forged()),
        ):
            with pytest.raises(meshwork.InvalidArgument, match="expected a numpy array") as info:
                call()
            assert isinstance(info.value, ValueError)
        return still_usable(g)

    assert run_world(1, body) == [1.0]


def test_an_object_claiming_to_be_a_tensor_is_refused():
    torch = need("torch")

    class Impostor(Forged):
        @property
        def __class__(self):
            return torch.Tensor

    assert isinstance(Impostor(), torch.Tensor)  # what isinstance would believe

    def body(g):
        with pytest.raises(meshwork.InvalidArgument, match="expected a numpy array"):
            g.all_reduce(Impostor())
        return True

    assert run_world(1, body) == [True]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_numpy_subclass_that_lies_about_its_memory_is_used_by_its_real_memory(dtype):
    dt = np_dtype(dtype)

    class Liar(np.ndarray):
        @property
        def __array_interface__(self):
            return Forged.__array_interface__

        @property
        def dtype(self):
            return np.dtype("float64")  # 8-byte elements: twice the real size

    def body(g):
        a = np.full(4, g.rank + 1, dtype=dt).view(Liar)
        g.all_reduce(a)
        return np.asarray(a).view(dt).astype(np.float32).tolist()

    assert run_world(2, body) == [[3.0] * 4, [3.0] * 4]


def test_a_tensor_subclass_or_mode_that_lies_about_its_memory_is_used_by_its_real_memory():
    torch = need("torch")
    from torch.overrides import TorchFunctionMode

    lies = {"data_ptr": 8, "numel": 1 << 40, "is_contiguous": True, "untyped_storage": None}

    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in lies:
                return lies[name]
            return super().__torch_function__(func, types, args, kwargs or {})

        def data_ptr(self):
            return 8

    class LyingMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in lies:
                return lies[name]
            return func(*args, **(kwargs or {}))

    def body(g):
        t = torch.full((4,), float(g.rank + 1)).as_subclass(Liar)
        g.all_reduce(t)
        u = torch.full((4,), float(g.rank + 1))
        with LyingMode():
            g.all_reduce(u)
        return torch.Tensor.tolist(t.as_subclass(torch.Tensor)), u.tolist()

    for t, u in run_world(2, body):
        assert t == [3.0] * 4 and u == [3.0] * 4


def test_arrays_of_python_objects_are_refused_even_as_bytes():
    # recv would write raw bytes over object references.
    def body(g):
        for a in (np.empty(2, dtype=object), np.zeros(2, dtype=[("x", "O"), ("y", "f4")])):
            with pytest.raises(meshwork.InvalidArgument, match="references to Python objects"):
                g.recv(a, src=0)
            with pytest.raises(meshwork.InvalidArgument, match="references to Python objects"):
                g.send(a, dst=0)
        return still_usable(g)

    assert run_world(1, body) == [1.0]
