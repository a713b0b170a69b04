"""Federated training with meshwork's rounds: rank 0 holds the model of a
linear regression, each worker holds data of its own (a different number
of samples each) and, when a round is offered, takes a few gradient steps
on it and answers with its model and its sample count. A round ends at its
deadline with the weighted average of the workers that answered in time;
a worker that is late is told so and simply joins the next round. Every
other round is secure (``secure=2``): rank 0 learns only the sum of the
workers' weighted models, never one worker's.

    meshrun -n 5 -- python examples/python/federated.py

Each rank prints ``RESULT ok ...``; rank 0 checks that the model found the
true weights.
"""

import numpy as np

import meshwork

ROUNDS = 30
TRUE_W = np.array([2.0, -3.0, 0.5, 1.0], dtype=np.float32)

g = meshwork.connect()
if g.rank == 0:
    model = np.zeros(TRUE_W.size, dtype=np.float32)
    took_part = 0
    for r in range(ROUNDS):
        report = g.round(model, deadline=5.0, min_updates=1, secure=2 if r % 2 else 0)
        took_part += len(report["participants"])
    g.finish_rounds()
    error = float(np.abs(model - TRUE_W).max())
    assert error < 0.05, (model, TRUE_W)
    print(f"RESULT ok coordinator {ROUNDS} rounds, {took_part} updates, max error {error:.4f}")
else:
    rng = np.random.default_rng(g.rank)
    n = 50 * g.rank  # workers hold different amounts of data
    x = rng.normal(size=(n, TRUE_W.size)).astype(np.float32)
    y = x @ TRUE_W + rng.normal(scale=0.01, size=n).astype(np.float32)
    rounds = 0
    while (offer := g.next_round(timeout=60.0)) is not None:
        w = offer.model
        for _ in range(5):  # local steps of gradient descent
            w = w - 0.1 * (2.0 / n) * (x.T @ (x @ w - y))
        outcome = g.submit_update(offer, w.astype(np.float32), float(n))
        rounds += outcome["outcome"] == "done"
    print(f"RESULT ok worker {g.rank} took part in {rounds} rounds")
g.shutdown()
