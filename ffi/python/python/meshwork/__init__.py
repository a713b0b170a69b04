"""meshwork from Python: tagged point-to-point messages and eleven
collectives between processes and machines, with no MPI library and no
``mpirun``.

::

    import meshwork, numpy as np
    g = meshwork.connect()               # the group `meshrun -n 4 -- python prog.py` describes
    grads = np.full(1 << 20, g.rank, dtype=np.float32)
    g.all_reduce(grads, op="sum")        # in place: 0+1+2+3 everywhere
    g.shutdown()

``meshwork.local(n)`` makes a world of ``n`` ranks inside one process
(drive each from its own thread). Arrays are numpy arrays (used in
place) or CPU torch tensors (through a copy, written back once the call
succeeds and the tensor is checked unchanged; used in place after
``meshwork.set_torch_in_place(True)``, under torch's contract that a
tensor is left alone while a call uses it): C-contiguous, writable
where the call writes them, of dtype float16, bfloat16 (``ml_dtypes``),
float32, float64, int8, int32, int64, uint8, uint32 or uint64. Every
call blocks with the GIL released. Failures raise ``meshwork.Error``
subclasses, one per kind; ``InvalidArgument`` is also a ``ValueError``
and ``Timeout`` a ``TimeoutError``.
"""

from ._errors import *  # noqa: F401,F403  (the exception classes)
from ._errors import __all__ as _error_names
from ._meshwork import (
    Compressor,
    Listener,
    Offer,
    ProcessGroup,
    Work,
    __version__,
    connect,
    form,
    join_running,
    local,
    random_token,
    set_torch_in_place,
    torch_in_place,
)

# ``Offer`` is only ever returned (by ``next_round``), never made by a
# program: importable, not exported by ``from meshwork import *``.
__all__ = [
    "Compressor",
    "Listener",
    "ProcessGroup",
    "Work",
    "connect",
    "form",
    "join_running",
    "local",
    "random_token",
    "set_torch_in_place",
    "torch_in_place",
    "__version__",
    *_error_names,
]
