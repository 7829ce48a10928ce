"""alignmalloc for Python: CUDA Unified Memory from an alignmalloc arena.

``alignmalloc.torch.enable()`` routes PyTorch's CUDA tensors to managed memory from the arena,
``alignmalloc.cupy.enable()`` CuPy's arrays and ``alignmalloc.numba.enable()`` Numba's
(docs/python.md). The arena is the host-side pool of ``alignmalloc wrap``: objects up to 4 KiB
from size-class slabs, larger ones packed, those over 64 KiB on 2 MiB VA blocks of their own,
growing to a cap. :func:`report` gives every allocation with its size, lifetime and traffic.
"""

from __future__ import annotations

from typing import Any

from . import _native
from .errors import AlignmallocError
from .settings import Settings

__all__ = ["AlignmallocError", "Settings", "failures", "load", "report"]


def load(settings: Settings = Settings()) -> None:
    """Load the native library with ``settings`` (once per process; each framework module's
    ``enable`` calls this)."""
    _native.load(settings.environment())


def _library():
    library = _native.loaded()
    if library is None:
        raise AlignmallocError(
            "alignmalloc is not enabled: call alignmalloc.torch.enable() (or alignmalloc.load()) first"
        )
    return library


def report() -> dict[str, Any]:
    """The report so far: ``allocations`` (each with ``bytes``, ``lifetime_ns``, ``origin`` and
    its ``counts`` of HtoD/DtoH bytes, GPU fault groups and CPU faults), the ``pool`` and the
    ``total`` traffic, as ``alignmalloc wrap`` writes it (docs/wrap.md)."""
    return _native.report(_library())


def failures() -> tuple[int, int]:
    """Allocations and frees the allocator hooks refused or could not serve, so far."""
    return _native.failures(_library())
