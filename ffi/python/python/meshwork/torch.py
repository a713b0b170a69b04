"""torch.distributed over meshwork: the backend ``"meshwork"``.

::

    import torch.distributed as dist
    dist.init_process_group("meshwork")       # under torchrun: nothing else to set

``dist.init_process_group("meshwork")`` finds the backend through the
package's entry point (``torch.distributed.backends``); ``import
meshwork.torch`` registers it too. Under ``torchrun`` (env:// rendezvous:
``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``) every rank
binds a port, publishes its address through the store torch passes, and
forms a meshwork group with the others: ranks of one host talk through
shared memory, others over QUIC (``TRANSPORT`` or ``MESHWORK_TRANSPORT``:
``quic`` or ``tcp``). Ranks on several hosts need ``CLUSTER_TOKEN`` set
to one secret on every rank; a job all on loopback forms without one
(torch's store has no authentication, so no secret goes through it). ``dist.new_group(ranks)``
makes a meshwork sub-group of the members over the same links.

Every op is started at once and runs on meshwork's own thread for the
group, in issue order, with no Python and no GIL while it runs; the
``Work`` it returns waits with the GIL released and raises the meshwork
error (naming the rank) if the op failed; ``get_future()`` completes with
the output tensors, so DDP overlaps communication with the backward pass.
Inputs are read when the op is issued; outputs are written when it is
waited for (``wait()``, or the future) — unless
``meshwork.set_torch_in_place(True)``: then ops waited for at once and
asynchronous all-reduces work on the tensors themselves, under torch's
contract that a tensor is left alone while an op on it is in flight
(docs/torch.md, "In place").

CUDA tensors (devices ``["cpu", "cuda"]``) are staged: each op copies
its CUDA inputs to host memory when it is issued and its results back
into the CUDA tensors when it is waited for; the op itself runs on host
copies over meshwork (docs/gpu.md, docs/torch.md "CUDA tensors").

Reductions: SUM, PRODUCT, MIN, MAX, AVG (floating point), PREMUL_SUM, on
float32, float64, float16, bfloat16, int8, int32, int64, uint8 (and bool
for MIN and MAX); BAND, BOR and BXOR are refused by name. Data movement
(broadcast, gathers, scatters, all-to-all, send/recv) takes any dtype.
See docs/torch.md.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import ipaddress
import os
import queue
import socket
import threading
from typing import Callable, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import OpType, ReduceOp
from torch._C._distributed_c10d import Work as _C10dWork

import meshwork

NAME = "meshwork"

__all__ = ["NAME", "register"]

# Reduce ops by torch's type, with the dtypes each takes.
_OPS = {
    ReduceOp.SUM: "sum",
    ReduceOp.PRODUCT: "prod",
    ReduceOp.MIN: "min",
    ReduceOp.MAX: "max",
    ReduceOp.AVG: "avg",
    ReduceOp.PREMUL_SUM: "sum",
}
_REDUCED = {
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.uint8,
}
_FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
# (op, dtype) that go to meshwork as they are: SUM, PRODUCT, MIN and MAX of
# every dtype meshwork reduces, AVG of floating point.
_DIRECT = {
    (op, dt): _OPS[op]
    for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG)
    for dt in _REDUCED
    if op != ReduceOp.AVG or dt in _FLOATS
}


def register() -> None:
    """Register the backend ``"meshwork"`` (CPU and CUDA tensors) with
    torch.distributed; idempotent. ``init_process_group("meshwork")``
    calls it through the package's entry point."""
    if NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])


# The process's world group (the default process group's), from which
# sub-groups are made.
_world: Optional[meshwork.ProcessGroup] = None
_world_lock = threading.Lock()


def _create(opts, backend_options=None) -> "_Backend":
    global _world
    rank, size = opts.group_rank, opts.group_size
    seconds = _seconds(opts.timeout)
    members = list(opts.global_ranks_in_group)
    with _world_lock:
        world = _world
    if members and world is not None and world.world_size == dist.get_world_size():
        group = world.subgroup(members, _key(opts.group_id))
        group.set_timeout(seconds)
    else:
        group = _form(opts.store, rank, size, seconds)
        if not members:
            with _world_lock:
                _world = group
    return _Backend(group, rank, size, opts.timeout, world_group=not members)


def _seconds(timeout: datetime.timedelta) -> float:
    s = timeout.total_seconds()
    return s if s > 0 else 1800.0


def _key(name: str) -> int:
    """A sub-group's key from torch's name for it (the same on every
    member: torch numbers groups in the order they are made)."""
    return int.from_bytes(hashlib.sha256(f"torch group {name}".encode()).digest()[:8], "little")


def _host() -> str:
    """The address this rank listens on: ``MESHWORK_ADDR`` if set; else
    the one the route to ``MASTER_ADDR`` leaves from (loopback for a
    single-host job)."""
    if os.environ.get("MESHWORK_ADDR"):
        return os.environ["MESHWORK_ADDR"]
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        infos = socket.getaddrinfo(master, None, type=socket.SOCK_DGRAM)
    except OSError:
        return "127.0.0.1"
    for family, _, _, _, addr in infos:
        ip = ipaddress.ip_address(addr[0])
        if ip.is_loopback:
            return str(ip)
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                # No packet is sent: this asks the kernel for the route.
                s.connect((addr[0], int(os.environ.get("MASTER_PORT", "29500"))))
                return s.getsockname()[0]
            except OSError:
                continue
    return "127.0.0.1"


def _form(store, rank: int, size: int, seconds: float) -> meshwork.ProcessGroup:
    """Form a group of ``size`` ranks through ``store``: each binds a port
    and publishes its address, reads everyone's, and all form with the
    token ``_token`` gives."""
    store.set_timeout(datetime.timedelta(seconds=seconds))
    listener = meshwork.Listener(_host())
    store.set(f"meshwork/addr/{rank}", listener.address)
    peers = [store.get(f"meshwork/addr/{r}").decode() for r in range(size)]
    token = _token(listener.address, peers)
    transport = os.environ.get("MESHWORK_TRANSPORT") or os.environ.get("TRANSPORT")
    return meshwork.form(
        rank, size, peers, listener=listener, token=token, timeout=seconds, transport=transport
    )


def _token(mine: str, peers: Sequence[str]) -> Optional[str]:
    """The cluster token to form with: ``CLUSTER_TOKEN`` where it is set;
    else none when this rank's address (``mine``) and every address in
    the store (``peers``) are loopback, the one case meshwork forms
    without a token; else ``meshwork.TokenRequired`` saying how to set
    one.

    No token is ever made here and passed through the store: torch's
    store has no authentication, so whoever reaches its port could read
    it. The addresses in it may be rewritten by such a stranger too: with
    a token every link's handshake proves it, so a rank redirected to the
    stranger fails to form; without one, this rank forms only with
    loopback addresses, its own included: every process it reaches is on
    this host (as with any meshwork group on loopback, other users of the
    host can reach it too: set a token on shared hosts)."""
    token = os.environ.get("CLUSTER_TOKEN")
    if token is not None:
        return token
    off = [a for a in [mine, *peers] if not _loopback(a)]
    if not off:
        return None
    raise meshwork.TokenRequired(
        f"meshwork: ranks off loopback ({off[0]}) need a cluster token, and torch's store "
        "cannot carry one (it has no authentication: whoever reaches its port reads it). "
        "Make one and export it to every rank: CLUSTER_TOKEN=$(meshrun token), or "
        "CLUSTER_TOKEN=$(python -c \"import meshwork; print(meshwork.random_token())\"). "
        "A job on one host needs none over loopback (MASTER_ADDR=127.0.0.1, or "
        "MESHWORK_ADDR=127.0.0.1 on every rank)."
    )


def _loopback(address: str) -> bool:
    """Whether ``address`` ("host:port", "[v6]:port") is a loopback IP;
    anything else, unreadable included, is not."""
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _in_torch_words(e: meshwork.Timeout) -> meshwork.Timeout:
    """``e`` (changed in place) with torch's way to raise the deadline:
    the group's is ``init_process_group``'s (or ``new_group``'s)
    ``timeout``, not a meshwork setting."""
    e.args = (
        f"{e.op} timed out waiting on ranks {e.waiting_on}{e.detail}; if they are only slow, "
        "raise the deadline: init_process_group(timeout=...) (new_group(timeout=...) for a "
        "sub-group)",
    )
    return e


class _Work(dist._Work):
    """What a backend op returns: waits on the meshwork calls it started,
    then runs ``finish`` (copies into the output tensors) once; the
    outcome (or the exception) is kept for every later wait."""

    def __init__(self, backend: "_Backend", waits: Sequence, finishes: Sequence[Callable[[], None]], outputs: List):
        super().__init__()
        self._backend = backend
        self._waits = list(waits)
        self._finishes = [f for f in finishes if f is not None]
        self._outputs = outputs
        self._lock = threading.Lock()
        self._done = False
        self._error: Optional[BaseException] = None
        self._future = None

    def _complete(self, timeout: Optional[float] = None) -> None:
        with self._lock:
            if not self._done:
                try:
                    for w in self._waits:
                        w.wait(timeout) if timeout is not None else w.wait()
                    for finish in self._finishes:
                        finish()
                except meshwork.Timeout as e:
                    self._error = _in_torch_words(e)
                except (TimeoutError, KeyboardInterrupt):
                    # wait(timeout) ran out, or Ctrl-C: not done yet (the
                    # op goes on; wait again).
                    raise
                except BaseException as e:  # noqa: BLE001 — kept and raised to every waiter
                    self._error = e
                self._done = True
                self._waits = []
        if self._error is not None:
            raise self._error

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        seconds = timeout.total_seconds() if timeout is not None else 0
        self._complete(seconds if seconds > 0 else None)
        return True

    def is_completed(self) -> bool:
        return self._done or all(w.is_completed() for w in self._waits)

    def is_success(self) -> bool:
        return self._done and self._error is None

    def exception(self):
        return self._error

    def result(self):
        return self._outputs

    def get_future(self):
        if getattr(_asking, "who", None) is not None:
            # `_behind` asks which work this is (see there): say, and
            # start nothing.
            _asking.who.append(self)
            return torch.futures.Future()
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                self._backend._completer.put((self, self._future))
            return self._future


# Which `_Work` is behind a work torch hands the program (`_behind`).
_asking = threading.local()


def _behind(work) -> Optional[_Work]:
    """The backend's `_Work` behind ``work``, a work torch returned to the
    program, or None if it is not one of this backend's.

    torch wraps what a Python backend returns in a holder (c10d's
    ``PyWorkHolder``) that passes on ``wait()`` and ``get_future()`` and
    nothing else; so the holder's ``get_future()`` is asked, with
    `_asking` set for `_Work.get_future` to answer who it is. Works of
    torch's own backends name their op and are not asked."""
    op_type = getattr(work, "_get_op_type", None)
    if op_type is not None and int(op_type()) != int(OpType.UNKNOWN):
        return None
    _asking.who = []
    try:
        work.get_future()
    except Exception:  # noqa: BLE001 — a work without a future is not ours
        return None
    finally:
        who, _asking.who = _asking.who, None
    return who[0] if who else None


def _is_completed(work) -> bool:
    """torch's ``Work.is_completed()``, for this backend's works too.

    A Python backend's work reaches the program inside torch's holder,
    whose ``is_completed()`` reads a flag of its own that nothing sets:
    it stays False, even after ``wait()``, so a loop that polls it never
    ends. This asks the work behind the holder instead (the meshwork
    calls it started, without blocking); torch's own works answer as
    before."""
    if _c10d_is_completed(work):
        return True
    mine = _behind(work)
    return mine is not None and mine.is_completed()


# torch's own (also when this module is imported again).
_c10d_is_completed = getattr(_C10dWork.is_completed, "__wrapped__", _C10dWork.is_completed)
_is_completed.__wrapped__ = _c10d_is_completed
_C10dWork.is_completed = _is_completed


class _Completer:
    """Completes futures in the order their ops were issued: one thread
    waits (GIL released), and callbacks (``Future.then``, which may block
    on other ops of the group) run on a pool, never on that thread."""

    def __init__(self, name: str):
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix=f"{name}-done")
        self._thread: Optional[threading.Thread] = None
        self._name = name
        self._start_lock = threading.Lock()

    def put(self, item) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, fut = item
            try:
                work._complete()
                self._pool.submit(fut.set_result, work._outputs)
            except BaseException as e:  # noqa: BLE001 — handed to the future
                self._pool.submit(fut.set_exception, e)

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
        self._pool.shutdown(wait=False)


class _Serial:
    """Point-to-point ops, one thread per (direction, peer): in order per
    peer, none waiting behind another peer's."""

    def __init__(self):
        self._lanes = {}
        self._lock = threading.Lock()

    def run(self, key, fn: Callable[[], None]) -> concurrent.futures.Future:
        with self._lock:
            ex = self._lanes.get(key)
            if ex is None:
                ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"meshwork-p2p-{key[0]}{key[1]}")
                self._lanes[key] = ex
        return ex.submit(fn)

    def stop(self) -> None:
        with self._lock:
            for ex in self._lanes.values():
                ex.shutdown(wait=False)
            self._lanes.clear()


class _Done:
    """A ``concurrent.futures.Future`` seen as a meshwork Work (for
    ``_Work``)."""

    def __init__(self, fut: concurrent.futures.Future):
        self._fut = fut

    def wait(self, timeout: Optional[float] = None):
        try:
            return self._fut.result(timeout)
        except concurrent.futures.TimeoutError as e:
            raise TimeoutError("the operation is not done yet; wait again") from e

    def is_completed(self) -> bool:
        return self._fut.done()


class _Ready:
    """A call that ran to its end already (as a meshwork Work)."""

    def wait(self, timeout: Optional[float] = None):
        return None

    def is_completed(self) -> bool:
        return True


_READY = _Ready()


class _Now:
    """The group's calls, run here: blocking, with the GIL released, on
    the caller's thread (torch waits for a synchronous op at once, so the
    hand-off to meshwork's thread and back would only add two wake-ups).
    Each returns a finished wait."""

    def __init__(self, group: meshwork.ProcessGroup):
        self._g = group

    def __getattr__(self, name: str):
        blocking = getattr(self._g, name)

        def call(*args, **kwargs):
            try:
                blocking(*args, **kwargs)
            except meshwork.Timeout as e:
                _in_torch_words(e)
                raise
            return _READY

        return call


class _Later:
    """The group's calls, started on meshwork's thread for the group
    (``*_nb``); each returns a ``meshwork.Work``."""

    def __init__(self, group: meshwork.ProcessGroup):
        self._g = group

    def __getattr__(self, name: str):
        return getattr(self._g, name + "_nb")


def _staged(t: torch.Tensor) -> bool:
    """Whether ``t``'s memory is out of meshwork's reach (a CUDA tensor),
    so ops go through a host copy of it. (The torchrun check sets this to
    always-true to run every op's staging on CPU tensors.)"""
    return t.device.type != "cpu"


def _on_host(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself in host memory, or a host copy of it (a CUDA tensor:
    the copy waits for the work queued on the tensor's stream)."""
    return t.detach().to("cpu", copy=True) if _staged(t) else t


def _flat(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a flat contiguous host tensor: ``t`` itself (a view) when
    it is contiguous host memory, else a copy (written back by the
    caller: its memory differs from ``t``'s)."""
    t = _on_host(t.detach())
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _empty(n: int, dtype: torch.dtype) -> torch.Tensor:
    """A host tensor of ``n`` elements (on the CPU whatever torch's
    default device)."""
    return torch.empty(n, dtype=dtype, device="cpu")


def _apart(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``src``, or a copy of it where it shares memory with ``dst`` (an
    all-gather in place: FSDP2's input is its shard of the output)."""
    a, b = src.data_ptr(), dst.data_ptr()
    na, nb = src.numel() * src.element_size(), dst.numel() * dst.element_size()
    if na and nb and a < b + nb and b < a + na:
        return src.clone()
    return src


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat contiguous tensor's bytes, as a uint8 view of it."""
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


class _Backend(_C10dBackend):
    def __init__(self, group: meshwork.ProcessGroup, rank: int, size: int, timeout, world_group: bool):
        super().__init__(rank, size)
        self._g = group
        self._now, self._later = _Now(group), _Later(group)
        self._rank, self._size = rank, size
        self._options = _C10dBackend.Options(NAME, timeout=timeout)
        self._completer = _Completer(f"meshwork-{rank}")
        self._p2p = _Serial()
        # Uneven all-to-all travels point to point on a communicator of
        # its own, each call under the next tag.
        self._aux: Optional[meshwork.ProcessGroup] = None
        self._a2a_calls = 0
        self._world_group = world_group

    # What torch asks of every backend.
    def getBackendName(self) -> str:
        return NAME

    @property
    def options(self):
        return self._options

    supports_splitting = property(lambda self: False)
    supports_coalescing = property(lambda self: False)
    supports_shrinking = property(lambda self: False)
    supports_window = property(lambda self: False)
    supports_reconfigure = property(lambda self: False)
    _supports_time_estimate = property(lambda self: False)

    def shutdown(self) -> None:
        global _world
        self._completer.stop()
        self._p2p.stop()
        if self._aux is not None:
            self._aux.shutdown()
        self._g.shutdown()
        if self._world_group:
            with _world_lock:
                if _world is self._g:
                    _world = None

    # Helpers.
    def _via(self, opts):
        """How to run an op: here and now when torch waits for it at once
        (``async_op=False``), else on meshwork's thread. Either way it
        takes its place in the group's order when it is issued."""
        return self._later if getattr(opts, "asyncOp", True) else self._now

    def _work(self, parts, outputs) -> _Work:
        """A work of ``parts``: (meshwork work, finish or None) pairs."""
        return _Work(self, [w for w, _ in parts], [f for _, f in parts], outputs)

    @staticmethod
    def _op(op, dtype: torch.dtype) -> str:
        kind = op.op if hasattr(op, "op") else op
        name = _OPS.get(kind)
        if name is None:
            raise ValueError(
                f"meshwork: {kind} is not supported; use SUM, PRODUCT, MIN, MAX, AVG or PREMUL_SUM"
            )
        if dtype == torch.bool and name in ("min", "max"):
            return name
        if dtype not in _REDUCED:
            raise ValueError(
                f"meshwork: {dtype} cannot be reduced; meshwork reduces float32, float64, "
                "float16, bfloat16, int8, int32, int64 and uint8 (bool with MIN and MAX)"
            )
        if name == "avg" and dtype not in _FLOATS:
            raise ValueError(f"meshwork: AVG needs a floating-point tensor, not {dtype}")
        return name

    @staticmethod
    def _scaled(t: torch.Tensor, op) -> torch.Tensor:
        """PREMUL_SUM's input: ``t`` times its factor (a new tensor);
        other ops: ``t``."""
        kind = op.op if hasattr(op, "op") else op
        if kind == ReduceOp.PREMUL_SUM:
            factor = op.factor
            return t * (factor.item() if isinstance(factor, torch.Tensor) else factor)
        return t

    def _reduced(self, t: torch.Tensor, op, start):
        """Start an in-place reduction of ``t`` (``start(flat, name)``),
        written back into ``t``: (the meshwork work, a finish)."""
        name = self._op(op, t.dtype)
        flat = _flat(self._scaled(t, op))
        if t.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        w = start(flat, name)
        same = flat.data_ptr() == t.data_ptr() and flat.numel() == t.numel()

        def finish():
            if not same:
                t.copy_(flat.view(t.dtype).view(t.shape) if t.dtype == torch.bool else flat.view(t.shape))

        return w, finish

    # Collectives.
    def allreduce(self, tensors, opts):
        # The common case in as few Python steps as it takes (a 4 KiB
        # all-reduce costs tens of microseconds; torch's own dispatch about
        # ten): one contiguous tensor, waited for at once, an op meshwork
        # takes as it is.
        if len(tensors) == 1 and not opts.asyncOp:
            t = tensors[0]
            name = _DIRECT.get((opts.reduceOp.op, t.dtype))
            if name is not None and t.is_contiguous() and not _staged(t):
                try:
                    self._g.all_reduce(t.detach(), op=name)
                except meshwork.Timeout as e:
                    _in_torch_words(e)
                    raise
                return _Work(self, (), (), tensors)
        c = self._via(opts)
        parts = [self._reduced(t, opts.reduceOp, lambda f, n: c.all_reduce(f, op=n)) for t in tensors]
        return self._work(parts, list(tensors))

    def allreduce_coalesced(self, tensors, opts):
        c = self._via(opts)
        if not tensors:
            return self._work([], [])
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) != 1:
            raise ValueError(f"meshwork: allreduce_coalesced of several dtypes {sorted(map(str, dtypes))}")
        name = self._op(opts.reduceOp, tensors[0].dtype)
        flat = _flat(torch.cat([self._scaled(t, opts.reduceOp).reshape(-1) for t in tensors]))
        w = c.all_reduce(flat, op=name)

        def finish():
            at = 0
            for t in tensors:
                t.copy_(flat[at : at + t.numel()].view(t.shape))
                at += t.numel()

        return self._work([(w, finish)], list(tensors))

    def broadcast(self, tensors, opts):
        c = self._via(opts)
        parts = []
        for t in tensors:
            flat = _flat(t)
            parts.append((c.broadcast(_bytes(flat), root=opts.rootRank), self._copier(flat, t)))
        return self._work(parts, list(tensors))

    @staticmethod
    def _copier(flat: torch.Tensor, t: torch.Tensor):
        """Copy ``flat`` into ``t`` unless it is ``t``'s own memory."""
        if flat.data_ptr() == t.data_ptr() and t.is_contiguous():
            return None
        return lambda: t.copy_(flat.view(t.shape))

    def reduce(self, tensors, opts):
        c = self._via(opts)
        root = opts.rootRank
        parts = [
            self._reduced(t, opts.reduceOp, lambda f, n: c.reduce(f, op=n, root=root)) for t in tensors
        ]
        return self._work(parts, list(tensors))

    def _all_gather_flat(self, c, out: torch.Tensor, inp: torch.Tensor):
        """Start an all-gather of ``inp`` into ``out`` (``size`` × ``inp``'s
        elements, any shape); (the meshwork work, a finish)."""
        flat_out = _flat(out)
        w = c.all_gather(_bytes(_apart(_flat(inp), flat_out)), _bytes(flat_out))
        return w, self._copier(flat_out, out)

    def allgather(self, out_lists, inputs, opts):
        c = self._via(opts)
        parts = []
        for outs, inp in zip(out_lists, inputs):
            flat = _empty(self._size * inp.numel(), inp.dtype)
            w = c.all_gather(_bytes(_flat(inp)), _bytes(flat))

            def finish(outs=outs, flat=flat, n=inp.numel()):
                for i, o in enumerate(outs):
                    o.copy_(flat[i * n : (i + 1) * n].view(o.shape))

            parts.append((w, finish))
        return self._work(parts, [o for outs in out_lists for o in outs])

    def all_gather_single(self, out, inp, opts):
        return self._work([self._all_gather_flat(self._via(opts), out, inp)], [out])

    # The names of older torch releases.
    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outs, inps, opts):
        c = self._via(opts)
        return self._work([self._all_gather_flat(c, o, i) for o, i in zip(outs, inps)], list(outs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _reduce_scatter_flat(self, c, out: torch.Tensor, inp: torch.Tensor, op):
        name = self._op(op, inp.dtype)
        src = _flat(self._scaled(inp, op))
        flat_out = _flat(out)
        w = c.reduce_scatter(_apart(src, flat_out), flat_out, op=name)
        return w, self._copier(flat_out, out)

    def reduce_scatter_single(self, out, inp, opts):
        return self._work([self._reduce_scatter_flat(self._via(opts), out, inp, opts.reduceOp)], [out])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outs, inps, opts):
        c = self._via(opts)
        parts = [self._reduce_scatter_flat(c, o, i, opts.reduceOp) for o, i in zip(outs, inps)]
        return self._work(parts, list(outs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def reduce_scatter(self, outs, in_lists, opts):
        c = self._via(opts)
        parts = []
        for out, ins in zip(outs, in_lists):
            flat_in = torch.cat([t.reshape(-1) for t in ins])
            parts.append(self._reduce_scatter_flat(c, out, flat_in, opts.reduceOp))
        return self._work(parts, list(outs))

    def gather(self, out_lists, inputs, opts):
        c = self._via(opts)
        root, inp = opts.rootRank, inputs[0]
        here = self._rank == root
        flat = _empty(self._size * inp.numel(), inp.dtype) if here else None
        w = c.gather(_bytes(_flat(inp)), _bytes(flat) if here else None, root=root)
        outs = out_lists[0] if here else []

        def finish():
            n = inp.numel()
            for i, o in enumerate(outs):
                o.copy_(flat[i * n : (i + 1) * n].view(o.shape))

        return self._work([(w, finish if here else None)], outs)

    def scatter(self, outs, in_lists, opts):
        c = self._via(opts)
        root, out = opts.rootRank, outs[0]
        here = self._rank == root
        send = _bytes(_flat(torch.cat([t.reshape(-1) for t in in_lists[0]]))) if here else None
        flat = _flat(out)
        w = c.scatter(send, _bytes(flat), root=root)
        return self._work([(w, self._copier(flat, out))], [out])

    def alltoall(self, outs, ins, opts):
        c = self._via(opts)
        sizes = {t.numel() for t in list(outs) + list(ins)}
        if len(sizes) == 1:
            send = _flat(torch.cat([t.reshape(-1) for t in ins]))
            flat = torch.empty_like(send)
            w = c.all_to_all(_bytes(send), _bytes(flat))
            n = next(iter(sizes))

            def finish():
                for i, o in enumerate(outs):
                    o.copy_(flat[i * n : (i + 1) * n].view(o.shape))

            return self._work([(w, finish)], list(outs))
        return self._uneven(list(ins), list(outs))

    def all_to_all_single(self, out, inp, out_splits, in_splits, opts):
        c = self._via(opts)
        n = self._size
        if not out_splits and not in_splits:
            flat_out = _flat(out)
            w = c.all_to_all(_bytes(_apart(_flat(inp), flat_out)), _bytes(flat_out))
            return self._work([(w, self._copier(flat_out, out))], [out])
        rows_in = inp.size(0) if inp.dim() else 1
        rows_out = out.size(0) if out.dim() else 1
        in_splits = list(in_splits) or [rows_in // n] * n
        out_splits = list(out_splits) or [rows_out // n] * n
        return self._uneven(list(inp.split(in_splits)), list(out.split(out_splits)), out)

    alltoall_base = all_to_all_single

    def _uneven(self, ins: List[torch.Tensor], outs: List[torch.Tensor], whole=None) -> _Work:
        """All-to-all of blocks of any sizes: point to point on the
        group's own auxiliary communicator, under the call's tag; block
        ``i`` to rank ``i``, received into ``outs[i]``. Sends go on one
        thread, receives on another, so blocks over the byte budget
        cannot deadlock."""
        if self._aux is None:
            self._aux = self._g.subgroup(list(range(self._size)), 0x6132_6176)
        aux, me, n = self._aux, self._rank, self._size
        tag = self._a2a_calls
        self._a2a_calls += 1
        blocks = [_flat(t).clone() for t in ins]
        order = [(me + i) % n for i in range(1, n)]

        def sends():
            for dst in order:
                aux.send(_bytes(blocks[dst]), dst, tag)

        def recvs():
            for i in range(1, n):
                src = (me - i) % n
                got = _empty(outs[src].numel(), outs[src].dtype)
                aux.recv(_bytes(got), src, tag)
                outs[src].copy_(got.view(outs[src].shape))
            outs[me].copy_(blocks[me].view(outs[me].shape))

        s = self._p2p.run(("a2a-send", 0), sends)
        r = self._p2p.run(("a2a-recv", 0), recvs)
        return self._work([(_Done(s), None), (_Done(r), None)], [whole] if whole is not None else outs)

    def barrier(self, opts):
        return self._work([(self._via(opts).barrier(), None)], [])

    # Point to point.
    def send(self, tensors, dst, tag):
        t = tensors[0]
        data = _bytes(_flat(t).clone())
        fut = self._p2p.run(("send", dst), lambda: self._g.send(data, dst, tag))
        return self._work([(_Done(fut), None)], list(tensors))

    def recv(self, tensors, src, tag):
        t = tensors[0]
        got = _empty(t.numel(), t.dtype)
        fut = self._p2p.run(("recv", src), lambda: self._g.recv(_bytes(got), src, tag))
        return self._work([(_Done(fut), lambda: t.copy_(got.view(t.shape)))], list(tensors))

    def recv_anysource(self, tensors, tag):
        raise ValueError(
            "meshwork: a receive names its source (dist.recv(t, src=...)); "
            "meshwork has no wildcard receive"
        )


register()
