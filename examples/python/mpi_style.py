"""An mpi4py program, written for meshwork: each call's mpi4py spelling is
in the comment beside it. Every rank runs this file:

    meshrun -n 4 -- python examples/python/mpi_style.py

It computes pi by the midpoint rule split over the ranks, passes a token
around a ring, scatters the rows of a matrix and gathers their norms, and
checks every result. Each rank prints ``RESULT ok rank R of N``.
"""

import numpy as np

import meshwork

comm = meshwork.connect()  # comm = MPI.COMM_WORLD
rank = comm.rank  # comm.Get_rank()
size = comm.world_size  # comm.Get_size()

# --- pi = integral of 4 / (1 + x^2) over [0, 1], rank r takes every size-th step
steps = np.array([1_000_000 if rank == 0 else 0], dtype=np.int64)
comm.broadcast(steps, root=0)  # comm.Bcast(steps, root=0)
h = 1.0 / steps[0]
x = h * (np.arange(rank, steps[0], size) + 0.5)
pi = np.array([h * np.sum(4.0 / (1.0 + x * x))])
comm.all_reduce(pi, op="sum")  # comm.Allreduce(MPI.IN_PLACE, pi, op=MPI.SUM)
assert abs(pi[0] - np.pi) < 1e-10, pi[0]

# --- a token around the ring: rank 0 starts it, each rank adds its rank
token = np.zeros(1, dtype=np.int64)
right, left = (rank + 1) % size, (rank - 1) % size
if rank == 0:
    comm.send(token, dst=right, tag=11)  # comm.Send(token, dest=right, tag=11)
    comm.recv(token, src=left, tag=11)  # comm.Recv(token, source=left, tag=11)
    assert token[0] == sum(range(size)), token
else:
    comm.recv(token, src=left, tag=11)
    token += rank
    comm.send(token, dst=right, tag=11)

# --- scatter the rows of a matrix, gather their norms at the root
cols = 8
matrix = np.arange(size * cols, dtype=np.float64).reshape(size, cols) if rank == 0 else None
row = np.empty(cols)
comm.scatter(matrix, row, root=0)  # comm.Scatter(matrix, row, root=0)
norm = np.array([np.linalg.norm(row)])
norms = np.empty(size) if rank == 0 else None
comm.gather(norm, norms, root=0)  # comm.Gather(norm, norms, root=0)
if rank == 0:
    assert np.allclose(norms, np.linalg.norm(matrix, axis=1)), norms

# --- everyone's rank everywhere, a prefix sum, and a personalised exchange
ranks = np.empty(size, dtype=np.int32)
comm.all_gather(np.array([rank], dtype=np.int32), ranks)  # comm.Allgather(...)
assert list(ranks) == list(range(size))
prefix = np.array([rank + 1], dtype=np.int64)
comm.scan(prefix, op="sum")  # comm.Scan(MPI.IN_PLACE, prefix, op=MPI.SUM)
assert prefix[0] == (rank + 1) * (rank + 2) // 2
before = np.array([rank + 1], dtype=np.int64)
comm.exclusive_scan(before, op="sum")  # comm.Exscan(...); rank 0 gets 0 here
assert before[0] == rank * (rank + 1) // 2
outbox = np.array([100 * rank + j for j in range(size)], dtype=np.int64)
inbox = np.empty(size, dtype=np.int64)
comm.all_to_all(outbox, inbox)  # comm.Alltoall(outbox, inbox)
assert list(inbox) == [100 * j + rank for j in range(size)]
total = np.array([rank], dtype=np.int64)
comm.reduce(total, op="max", root=size - 1)  # comm.Reduce(MPI.IN_PLACE, total, op=MPI.MAX, root=...)
if rank == size - 1:
    assert total[0] == size - 1
mine = np.zeros(size, dtype=np.float32)
comm.reduce_scatter(np.ones(size, dtype=np.float32), mine[:1])  # comm.Reduce_scatter_block(...)
assert mine[0] == size

comm.barrier()  # comm.Barrier()
print(f"RESULT ok rank {rank} of {size}: pi = {pi[0]:.12f}", flush=True)
comm.shutdown()
