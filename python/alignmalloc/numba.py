"""Numba on alignmalloc: device arrays in managed memory from the arena.

``enable()`` sets Numba's External Memory Management plugin (``numba.cuda.set_memory_manager``)
to :class:`ArenaMemoryManager`, before Numba makes its CUDA context (as Numba requires): every
``cuda.device_array`` and ``cuda.to_device`` is then one allocation of the arena's pool, freed
when Numba releases it (in stream order: once the work queued so far is done). The arena, its
settings and its report are the process's one.
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import _native
from .errors import AlignmallocError
from .settings import Settings

_enabled = False


def _manager_class():
    from numba import cuda
    from numba.cuda.cudadrv import driver

    class ArenaMemoryManager(cuda.HostOnlyCUDAMemoryManager):
        """Device memory from the alignmalloc arena; host (pinned) memory as Numba's own."""

        def initialize(self):
            self._library = _native.loaded()

        def memalloc(self, size):
            library = self._library
            device = self.context.device.id
            pointer = library.alignmalloc_torch_alloc(size, device, None)
            if not pointer:
                raise driver.CudaAPIError(
                    library.alignmalloc_last_result() or 2,
                    f"alignmalloc: {size} bytes could not be allocated",
                )

            def finalizer(pointer=pointer, size=size, device=device):
                library.alignmalloc_torch_free(pointer, size, device, None)

            handle = (
                driver.binding.CUdeviceptr(pointer)
                if getattr(driver, "USE_NV_BINDING", False)
                else ctypes.c_void_p(pointer)
            )
            return driver.MemoryPointer(self.context, handle, size, finalizer=finalizer)

        def get_memory_info(self):
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            libcuda = ctypes.CDLL("libcuda.so.1")
            if libcuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
                raise AlignmallocError("cuMemGetInfo failed: no current CUDA context")
            return driver.MemoryInfo(free=free.value, total=total.value)

        def get_ipc_handle(self, memory):
            raise AlignmallocError("arena memory cannot be shared with another process (IPC)")

        @property
        def interface_version(self):
            return 1

    return ArenaMemoryManager


def enable(settings: Settings = Settings(), **options: Any) -> None:
    """Make the arena Numba's device memory (settings as :func:`alignmalloc.torch.enable`).

    Raises :class:`AlignmallocError` after Numba made its CUDA context.
    """
    global _enabled
    settings = settings.updated(**options)
    _native.load(settings.environment())
    if _enabled:
        return
    from numba import cuda

    manager = _manager_class()
    cuda.set_memory_manager(manager)
    # A context Numba made before keeps its own memory manager: say so rather than run there.
    if not isinstance(cuda.current_context().memory_manager, manager):
        raise AlignmallocError(
            "alignmalloc.numba.enable() came after Numba made its CUDA context: call it at the "
            "start of the program"
        )
    _enabled = True


def enabled() -> bool:
    """Whether :func:`enable` made the arena Numba's device memory."""
    return _enabled
