"""PyTorch on alignmalloc: every CUDA tensor in managed memory from the arena.

``enable()`` must run before the process's first CUDA allocation (PyTorch allows one allocator
per process, chosen before it allocates): it loads the library with the settings, then makes a
``torch.cuda.memory.CUDAPluggableAllocator`` of its ``alignmalloc_torch_alloc`` and
``alignmalloc_torch_free`` the current allocator. PyTorch's caching allocator is then out of the
way: each tensor's storage is one allocation of the arena's pool, freed when the storage dies
(once its stream's work is done).
"""

from __future__ import annotations

from typing import Any

from . import _native
from .errors import AlignmallocError
from .settings import Settings

_enabled = False


def enable(settings: Settings = Settings(), **options: Any) -> None:
    """Route PyTorch's CUDA allocations to the arena.

    ``settings`` or keyword options (those of :class:`alignmalloc.Settings`, for example
    ``enable(oversubscribe=True)`` for tensors larger than the GPU). Raises
    :class:`AlignmallocError` when it is too late (CUDA already allocated in this process) or a
    setting is wrong; calling it again with the same settings does nothing.
    """
    global _enabled
    settings = settings.updated(**options)
    if settings.past_cap == "fail":
        raise AlignmallocError(
            "past_cap='fail' cannot be kept with PyTorch: its pluggable allocator takes a null "
            "answer as a tensor at address 0 instead of raising; use past_cap='driver' (the "
            "default: plain managed memory past the cap, counted in the report's pool)"
        )
    env = settings.environment()
    if _enabled:
        _native.load(env)  # refuses other settings
        return
    import torch

    if not torch.cuda.is_available():
        raise AlignmallocError("alignmalloc.torch.enable() needs CUDA: torch.cuda.is_available() is False")
    if torch.cuda.is_initialized() and torch.cuda.memory_allocated() > 0:
        raise AlignmallocError(
            "alignmalloc.torch.enable() came after CUDA tensors were made: call it at the start "
            "of the program, before the first CUDA allocation"
        )
    _native.load(env)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        str(_native.loaded_path()), "alignmalloc_torch_alloc", "alignmalloc_torch_free"
    )
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise AlignmallocError(
            f"PyTorch refused the allocator ({e}): call alignmalloc.torch.enable() before the "
            "first CUDA allocation of the process"
        ) from e
    _enabled = True


def enabled() -> bool:
    """Whether :func:`enable` routed PyTorch's allocations to the arena."""
    return _enabled


def report() -> dict[str, Any]:
    """The report so far (see :func:`alignmalloc.report`)."""
    if not _enabled:
        raise AlignmallocError("alignmalloc.torch.enable() was not called")
    from . import report as whole

    return whole()
