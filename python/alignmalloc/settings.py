"""The arena's settings for a Python program, checked before the library sees them.

Each maps to one ``ALIGNMALLOC_WRAP_*`` variable of ``alignmalloc wrap`` (docs/wrap.md); the
library reads them once, when it loads. A bad value is an :class:`AlignmallocError` here, never a
library that stops the interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Union

from .errors import AlignmallocError

ADVICE = ("read-mostly", "preferred-gpu")
PAST_CAP = ("driver", "fail")
PLACEMENT = ("migrate", "tiered")


@dataclass(frozen=True)
class Settings:
    """How the arena serves a program's allocations.

    - ``oversubscribe``: let the arena grow past the GPU's free memory (data larger than the
      GPU pages in and out); off, it stops at the GPU's free memory when it starts.
    - ``max_arena_bytes``: the most the arena reserves in all (default: as above).
    - ``arena_bytes``: the arena's first reservation (default 256 MiB).
    - ``prefetch``: prefetch each new allocation to the GPU.
    - ``advise``: ``"read-mostly"`` or ``"preferred-gpu"`` advice for each new allocation.
    - ``past_cap``: ``"driver"`` (plain managed memory past the cap, warned once) or ``"fail"``.
    - ``placement``: ``"migrate"`` (pages go where they are used) or ``"tiered"`` (each
      allocation of 64 MiB or more split: as much as the device tier has left on the GPU, the rest
      in host memory, read over the link); default ``"tiered"`` with ``oversubscribe``.
      ``prefetch`` and ``advise`` apply to the allocations it does not split.
    - ``device_tier_bytes``: what the device tier holds (default: the GPU's free memory when the
      arena starts, less a sixteenth and at least 2 GiB).
    - ``counters``: count unified-memory traffic (CUPTI) for the report.
    - ``report``: a file for the JSON report at exit (default: a table on stderr).
    """

    oversubscribe: bool = False
    max_arena_bytes: Optional[int] = None
    arena_bytes: Optional[int] = None
    prefetch: bool = False
    advise: Optional[str] = None
    past_cap: str = "driver"
    placement: Optional[str] = None
    device_tier_bytes: Optional[int] = None
    counters: bool = True
    report: Optional[Union[str, Path]] = None

    def updated(self, **options: object) -> "Settings":
        """These settings with ``options`` changed (an unknown name is an error naming it)."""
        unknown = sorted(set(options) - set(self.__dataclass_fields__))
        if unknown:
            raise AlignmallocError(
                f"unknown setting {', '.join(unknown)}: the settings are "
                f"{', '.join(self.__dataclass_fields__)}"
            )
        return replace(self, **options)

    def environment(self) -> dict[str, str]:
        """The ``ALIGNMALLOC_WRAP_*`` variables these settings are, after checking each."""
        env = {
            "ALIGNMALLOC_WRAP_POOL": "1",
            "ALIGNMALLOC_WRAP_OVERSUBSCRIBE": _flag("oversubscribe", self.oversubscribe),
            "ALIGNMALLOC_WRAP_PREFETCH": _flag("prefetch", self.prefetch),
            "ALIGNMALLOC_WRAP_COUNTERS": _flag("counters", self.counters),
        }
        for name, value in (("max_arena_bytes", self.max_arena_bytes), ("arena_bytes", self.arena_bytes)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise AlignmallocError(f"{name}={value!r}: give a positive number of bytes")
                env[f"ALIGNMALLOC_WRAP_{name.upper()}"] = str(value)
        if self.advise is not None:
            if self.advise not in ADVICE:
                raise AlignmallocError(f"advise={self.advise!r}: give one of {', '.join(ADVICE)} or None")
            env["ALIGNMALLOC_WRAP_ADVISE"] = self.advise
        if self.placement is not None:
            if self.placement not in PLACEMENT:
                raise AlignmallocError(
                    f"placement={self.placement!r}: give one of {', '.join(PLACEMENT)} or None"
                )
            env["ALIGNMALLOC_WRAP_PLACEMENT"] = self.placement
        if self.device_tier_bytes is not None:
            value = self.device_tier_bytes
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise AlignmallocError(f"device_tier_bytes={value!r}: give a number of bytes, 0 or more")
            env["ALIGNMALLOC_WRAP_DEVICE_TIER_BYTES"] = str(value)
        if self.past_cap not in PAST_CAP:
            raise AlignmallocError(f"past_cap={self.past_cap!r}: give one of {', '.join(PAST_CAP)}")
        env["ALIGNMALLOC_WRAP_PAST_CAP"] = self.past_cap
        if self.report is not None:
            path = Path(self.report)
            if path.is_dir() or not path.parent.is_dir():
                raise AlignmallocError(f"report={self.report!r}: give a file in an existing directory")
            env["ALIGNMALLOC_WRAP_REPORT"] = str(path.resolve())
        return env


def _flag(name: str, value: bool) -> str:
    if not isinstance(value, bool):
        raise AlignmallocError(f"{name}={value!r}: give True or False")
    return "1" if value else "0"
