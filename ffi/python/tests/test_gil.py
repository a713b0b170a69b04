"""Every blocking call releases the GIL for as long as it blocks: other
Python threads keep running, and the rank that completes the call can be
a Python thread of the same process.

A call that held the GIL while it waited would stop every other thread of
the interpreter, and each test below would end in meshwork.Timeout
instead of passing: their completion needs Python code to run on another
thread while the call waits."""

from __future__ import annotations

import threading

import numpy as np

from conftest import run_world

# Iterations of pure-Python work another thread does while a call waits.
WORK = 50_000


def spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i & 7
    return total


def test_a_blocked_recv_lets_the_sending_thread_run_python():
    def body(g):
        g.set_timeout(5)
        if g.rank == 0:
            got = np.zeros(1, dtype=np.int64)
            g.recv(got, src=1)  # waits for rank 1's Python work
            return int(got[0])
        # Whichever rank gets the GIL first, this Python loop must run
        # while rank 0 is blocked inside recv (or before it enters).
        g.send(np.array([spin(WORK)], dtype=np.int64), dst=0)
        return None

    assert run_world(2, body)[0] == spin(WORK)


def test_every_collective_lets_other_threads_run():
    """For each call, rank 0 enters and waits; rank 1 joins only after a
    third Python thread, a ticker, has moved on 100 ticks. With a call that
    held the GIL, neither rank 1 nor the ticker could run once rank 0 (or
    rank 1) was inside it, and rank 0 would time out."""
    ticks = [0]
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks[0] += 1

    calls = {
        "all_reduce": lambda g: g.all_reduce(np.ones(4, np.float32)),
        "broadcast": lambda g: g.broadcast(np.ones(4, np.float32), root=1),
        "all_gather": lambda g: g.all_gather(np.ones(2, np.float32), np.ones(4, np.float32)),
        "reduce_scatter": lambda g: g.reduce_scatter(np.ones(4, np.float32), np.ones(2, np.float32)),
        "reduce": lambda g: g.reduce(np.ones(4, np.float32), root=1),
        "all_to_all": lambda g: g.all_to_all(np.ones(4, np.float32), np.ones(4, np.float32)),
        "gather": lambda g: g.gather(np.ones(2, np.float32), np.ones(4, np.float32) if g.rank == 1 else None, root=1),
        "scatter": lambda g: g.scatter(np.ones(4, np.float32) if g.rank == 1 else None, np.ones(2, np.float32), root=1),
        "scan": lambda g: g.scan(np.ones(4, np.float32)),
        "exclusive_scan": lambda g: g.exclusive_scan(np.ones(4, np.float32)),
        "barrier": lambda g: g.barrier(),
        "recv": lambda g: g.recv(np.ones(1), src=1) if g.rank == 0 else g.send(np.ones(1), dst=0),
    }
    t = threading.Thread(target=ticker)
    t.start()
    try:
        for name, call in calls.items():
            entered = threading.Event()

            def body(g, call=call, entered=entered):
                g.set_timeout(5)
                if g.rank == 0:
                    entered.set()
                    call(g)
                    return None
                entered.wait(5)
                before = ticks[0]
                while ticks[0] < before + 100:
                    spin(100)
                call(g)
                return ticks[0] - before

            ran = run_world(2, body)[1]
            assert ran >= 100, name
    finally:
        stop.set()
        t.join(10)
