"""CPU torch tensors are taken like numpy arrays: results land in the
tensor's own storage (through meshwork's copy: test_held_buffers.py),
every dtype, refused when non-contiguous, sparse, or requiring grad where
written with autograd on."""

from __future__ import annotations

import numpy as np
import pytest

import meshwork
from conftest import run_world, need

torch = need("torch")

TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint32": getattr(torch, "uint32", None),
    "uint64": getattr(torch, "uint64", None),
}


@pytest.mark.parametrize("name", list(TORCH_DTYPES))
def test_every_dtype_in_place(name):
    dtype = TORCH_DTYPES[name]
    if dtype is None:
        pytest.skip(f"this torch has no {name}")

    def body(g):
        t = torch.full((2, 3), g.rank + 1, dtype=dtype)
        address = t.data_ptr()
        g.all_reduce(t, op="sum")
        assert t.data_ptr() == address
        out = torch.zeros(2 * g.world_size, dtype=dtype)
        g.all_gather(torch.full((2,), g.rank, dtype=dtype), out)
        return t, out

    for t, out in run_world(3, body):
        assert t.dtype == dtype and bool((t.to(torch.float64) == 6).all())
        assert out.to(torch.float64).tolist() == [0, 0, 1, 1, 2, 2]


def test_gradients_and_parameters():
    def body(g):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        with torch.no_grad():
            model.weight.fill_(g.rank)
        # A parameter requires grad: written under no_grad it is fine.
        with torch.no_grad():
            g.broadcast(model.weight, root=1)
        loss = model(torch.ones(1, 3) * (g.rank + 1)).sum()
        loss.backward()
        for p in model.parameters():
            g.all_reduce(p.grad, op="avg")
        return model.weight.detach().clone(), model.weight.grad.clone()

    results = run_world(2, body)
    for weight, grad in results:
        assert bool((weight == 1).all())
        # d(sum)/dW = input = rank + 1 per row; the average of 1 and 2.
        assert torch.allclose(grad, torch.full((2, 3), 1.5))


def test_a_tensor_that_requires_grad_is_refused_where_written_with_autograd_on():
    def body(g):
        w = torch.zeros(3, requires_grad=True)
        with pytest.raises(meshwork.InvalidArgument, match="requires grad"):
            g.all_reduce(w)
        g.send(w, dst=g.rank)  # read-only use is fine
        g.recv(w.detach(), src=g.rank)
        return True

    assert run_world(1, body) == [True]


def test_non_contiguous_and_sparse_tensors_are_refused():
    def body(g):
        with pytest.raises(meshwork.InvalidArgument, match="not C-contiguous"):
            g.all_reduce(torch.zeros(3, 4).t())
        with pytest.raises(meshwork.InvalidArgument, match="sparse"):
            g.all_reduce(torch.zeros(3, 4).to_sparse())
        with pytest.raises(meshwork.InvalidArgument, match="not supported"):
            g.all_reduce(torch.zeros(3, dtype=torch.bool))
        with pytest.raises(meshwork.InvalidArgument, match="not supported"):
            g.all_reduce(torch.zeros(3, dtype=torch.complex64))
        return True

    assert run_world(1, body) == [True]


def test_torch_and_numpy_share_the_memory_they_view():
    def body(g):
        t = torch.zeros(4)
        g.all_reduce(t.numpy())  # a numpy view of the tensor's storage
        a = np.zeros(4, dtype=np.float32)
        view = torch.from_numpy(a)
        view += g.rank + 1
        g.all_reduce(view)
        return a

    for a in run_world(2, body):
        assert list(a) == [3.0] * 4
