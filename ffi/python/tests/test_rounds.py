"""Federated rounds from Python: rank 0's ``round`` averages exactly the
updates in by the deadline (checked against numpy in float64), a late
update is answered ``"late"`` naming its round and the worker counts again
in the next round, and ``finish_rounds`` ends every worker's loop."""

import threading

import numpy as np
import pytest

import meshwork
from conftest import run_world


def update(rank, rnd, model):
    return (model + rank * 0.25 + rnd - np.arange(model.size) * 0.125).astype(np.float32)


def weight(rank):
    return rank * 1.5


def expected(ranks, rnd, model):
    total = sum(weight(r) for r in ranks)
    s = sum(weight(r) * update(r, rnd, model).astype(np.float64) for r in ranks)
    return (s / total).astype(np.float32)


def test_rounds_average_their_participants_and_answer_late_updates():
    closed = threading.Event()

    def body(g):
        if g.rank == 0:
            model = np.ones(8, dtype=np.float32)
            reports = []
            for _ in range(3):
                before = model.copy()
                r = g.round(model, deadline=0.5, min_updates=2)
                assert np.array_equal(model, expected(r["participants"], r["round"], before))
                reports.append((r["round"], r["participants"], r["late"]))
                if r["round"] == 1:
                    closed.set()
            g.finish_rounds()
            return reports
        outcomes = []
        while True:
            offer = g.next_round(timeout=5.0)
            if offer is None:
                return outcomes
            mine = update(g.rank, offer.round, offer.model)
            if g.rank == 3 and offer.round == 1:
                closed.wait(10)
            got = g.submit_update(offer, mine, weight(g.rank))
            outcomes.append((got["outcome"], got["round"]))
            if got["outcome"] == "done":
                assert got["model"].dtype == np.float32
                assert 3 in got["participants"] or got["late"] == [3]

    out = run_world(4, body)
    assert out[0] == [(0, [1, 2, 3], []), (1, [1, 2], [3]), (2, [1, 2, 3], [])]
    assert out[3] == [("done", 0), ("late", 1), ("done", 2)]
    assert out[1] == out[2] == [("done", 0), ("done", 1), ("done", 2)]


def test_a_secure_round_is_the_plain_average_to_within_the_fixed_point_step():
    def body(g):
        if g.rank == 0:
            model = np.linspace(-1, 1, 64).astype(np.float32)
            before = model.copy()
            r = g.round(model, deadline=5.0, secure=2)
            g.finish_rounds()
            want = expected(r["participants"], r["round"], before)
            total = sum(weight(w) for w in r["participants"])
            step = len(r["participants"]) * 0.5 / 2**24 / total
            assert np.all(np.abs(model.astype(np.float64) - want) <= step + 2e-7 * np.abs(want))
            return r["participants"], r["applied"]
        offer = g.next_round(timeout=5.0)
        assert offer.threshold == 2
        got = g.submit_update(offer, update(g.rank, offer.round, offer.model), weight(g.rank))
        assert g.next_round(timeout=5.0) is None
        return got["outcome"]

    out = run_world(4, body)
    assert out[0] == ([1, 2, 3], True)
    assert out[1:] == ["done"] * 3


def test_bad_round_arguments_raise_invalid_argument():
    def body(g):
        if g.rank == 0:
            with pytest.raises(meshwork.InvalidArgument):
                g.round(np.zeros(4, dtype=np.float64), deadline=1.0)
            with pytest.raises(meshwork.InvalidArgument):
                g.round(np.zeros(4, dtype=np.float32), deadline=0.0)
            with pytest.raises(meshwork.InvalidArgument):
                g.next_round()
            model = np.zeros(4, dtype=np.float32)
            r = g.round(model, deadline=5.0)
            g.finish_rounds()
            return r["participants"]
        offer = g.next_round(timeout=5.0)
        with pytest.raises(meshwork.InvalidArgument):
            g.submit_update(offer, np.zeros(3, dtype=np.float32), 1.0)
        with pytest.raises(meshwork.InvalidArgument):
            g.submit_update(offer, np.zeros(4, dtype=np.float32), -1.0)
        assert g.submit_update(offer, np.ones(4, dtype=np.float32), 1.0)["outcome"] == "done"
        assert g.next_round(timeout=5.0) is None
        return None

    assert run_world(2, body)[0] == [1]
