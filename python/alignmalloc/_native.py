"""The native library: ``libalignmalloc_preload.so``, which holds the arena and its pool.

The same library serves ``alignmalloc wrap`` (preloaded) and Python programs (loaded here, and
by PyTorch's pluggable allocator, which finds the same loaded copy). Its settings are the
``ALIGNMALLOC_WRAP_*`` environment variables, read once when it loads: :func:`load` sets them
from checked options first.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

from .errors import AlignmallocError

LIBRARY_NAME = "libalignmalloc_preload.so"
LIBRARY_ENV = "ALIGNMALLOC_LIBRARY"

_library: Optional[ctypes.CDLL] = None
_path: Optional[Path] = None
_settings: dict[str, str] = {}


def library_path() -> Path:
    """Where the library is: ``$ALIGNMALLOC_LIBRARY``, else the copy installed with the package."""
    given = os.environ.get(LIBRARY_ENV)
    if given:
        path = Path(given)
        if not path.is_file():
            raise AlignmallocError(
                f"{LIBRARY_ENV}={given} is not a file: point it at {LIBRARY_NAME} "
                "(cargo build --release -p alignmalloc-preload puts it in target/release/)"
            )
        return path.resolve()
    path = Path(__file__).with_name(LIBRARY_NAME)
    if not path.is_file():
        raise AlignmallocError(
            f"{path} is missing: install the package with `pip install ./python` from the "
            f"repository (it builds {LIBRARY_NAME}), or set {LIBRARY_ENV}"
        )
    return path


def load(settings: Mapping[str, str]) -> ctypes.CDLL:
    """Load the library with ``settings`` (``ALIGNMALLOC_WRAP_*`` values), once per process.

    A second call with other settings is refused: the library read its settings when it loaded.
    """
    global _library, _path, _settings
    if _library is not None:
        if dict(settings) != _settings:
            raise AlignmallocError(
                "alignmalloc is already loaded with other settings "
                f"({_settings}); settings apply once per process, before the first allocation"
            )
        return _library
    for name in [n for n in os.environ if n.startswith("ALIGNMALLOC_WRAP_")]:
        del os.environ[name]
    os.environ.update(settings)
    path = library_path()
    library = ctypes.CDLL(str(path))
    _declare(library)
    _library, _path, _settings = library, path, dict(settings)
    return library


def loaded() -> Optional[ctypes.CDLL]:
    """The library if :func:`load` loaded it."""
    return _library


def loaded_path() -> Optional[Path]:
    return _path


def _declare(library: ctypes.CDLL) -> None:
    library.alignmalloc_torch_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    library.alignmalloc_torch_alloc.restype = ctypes.c_void_p
    library.alignmalloc_torch_free.argtypes = [
        ctypes.c_void_p,
        ctypes.c_ssize_t,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    library.alignmalloc_torch_free.restype = None
    library.alignmalloc_last_result.argtypes = []
    library.alignmalloc_last_result.restype = ctypes.c_int
    library.alignmalloc_failures.argtypes = [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64),
    ]
    library.alignmalloc_failures.restype = None
    library.alignmalloc_report_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    library.alignmalloc_report_json.restype = ctypes.c_size_t


def report(library: ctypes.CDLL) -> dict[str, Any]:
    """The library's report so far, parsed."""
    needed = library.alignmalloc_report_json(None, 0)
    while True:
        buffer = ctypes.create_string_buffer(needed + 1)
        written = library.alignmalloc_report_json(buffer, needed + 1)
        if written <= needed:
            return json.loads(buffer.value[:written].decode())
        needed = written


def failures(library: ctypes.CDLL) -> tuple[int, int]:
    """Hook calls that failed so far: (allocations, frees)."""
    allocations, frees = ctypes.c_uint64(0), ctypes.c_uint64(0)
    library.alignmalloc_failures(ctypes.byref(allocations), ctypes.byref(frees))
    return allocations.value, frees.value
