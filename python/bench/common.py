"""What the Python benchmarks share: the allocator a run uses, and how a run's result is given."""

import json
from pathlib import Path


def use_allocator(allocator: str, plain_library: str, **settings) -> None:
    """Make ``allocator`` PyTorch's: ``torch`` (its own, nothing to do), ``alignmalloc`` (the
    arena, with ``settings``) or ``managed`` (``plain_library``'s pluggable allocator, which calls
    ``cudaMallocManaged`` and ``cudaFree`` per tensor)."""
    import torch

    if allocator == "alignmalloc":
        import alignmalloc.torch

        alignmalloc.torch.enable(**settings)
    elif allocator == "managed":
        plain = torch.cuda.memory.CUDAPluggableAllocator(
            plain_library, "plain_managed_alloc", "plain_managed_free"
        )
        torch.cuda.memory.change_current_allocator(plain)


def emit(result: dict, path) -> int:
    """Print ``result`` as one JSON line, and write it to ``path`` when given."""
    print(json.dumps(result))
    if path:
        Path(path).write_text(json.dumps(result, indent=1))
    return 0
