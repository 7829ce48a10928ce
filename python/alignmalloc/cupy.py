"""CuPy on alignmalloc: arrays in managed memory from the arena.

``enable()`` makes the arena CuPy's allocator (``cupy.cuda.set_allocator``): each allocation is
one of the pool's, freed when CuPy releases the memory, once the work queued on the stream it was
made on is done. Arrays made before ``enable()`` stay with the allocator that made them. The
arena, its settings and its report are the process's one (shared with ``alignmalloc.torch``).
"""

from __future__ import annotations

import weakref
from typing import Any

from . import _native
from .errors import AlignmallocError
from .settings import Settings

_enabled = False


class _Allocation:
    """Owns one arena allocation for CuPy; freeing it is its finalizer's job."""

    __slots__ = ("__weakref__",)


def enable(settings: Settings = Settings(), **options: Any) -> None:
    """Make the arena CuPy's allocator (settings as :func:`alignmalloc.torch.enable`)."""
    global _enabled
    settings = settings.updated(**options)
    library = _native.load(settings.environment())
    if _enabled:
        return
    import cupy

    alloc, free = library.alignmalloc_torch_alloc, library.alignmalloc_torch_free
    started: set[int] = set()

    def allocate(size: int) -> "cupy.cuda.MemoryPointer":
        device = cupy.cuda.runtime.getDevice()
        if device not in started:
            # The arena allocates through the driver, which needs the device's context current;
            # CuPy makes it current lazily, at its first runtime call that needs it.
            cupy.cuda.runtime.free(0)
            started.add(device)
        stream = cupy.cuda.get_current_stream().ptr
        pointer = alloc(size, device, stream)
        if not pointer:
            if size == 0:
                return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0, 0, None), 0)
            result = library.alignmalloc_last_result()
            if result == 2:  # CUDA_ERROR_OUT_OF_MEMORY
                raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0)
            raise AlignmallocError(f"allocating {size} bytes failed: CUDA error {result}")
        owner = _Allocation()
        weakref.finalize(owner, free, pointer, size, device, stream)
        memory = cupy.cuda.UnownedMemory(pointer, size, owner, device)
        return cupy.cuda.MemoryPointer(memory, 0)

    cupy.cuda.set_allocator(allocate)
    _enabled = True


def enabled() -> bool:
    """Whether :func:`enable` made the arena CuPy's allocator."""
    return _enabled
