"""The package without a GPU: settings, the library's hooks through ctypes, the report.

Each test that loads the library runs in a fresh interpreter (the library reads its settings
once per process).
"""

import tempfile
from pathlib import Path

import pytest

from alignmalloc import AlignmallocError, Settings


def test_settings_become_the_wrappers_variables():
    env = Settings(oversubscribe=True, max_arena_bytes=1 << 30, advise="read-mostly").environment()
    assert env["ALIGNMALLOC_WRAP_OVERSUBSCRIBE"] == "1"
    assert env["ALIGNMALLOC_WRAP_MAX_ARENA_BYTES"] == str(1 << 30)
    assert env["ALIGNMALLOC_WRAP_ADVISE"] == "read-mostly"
    assert env["ALIGNMALLOC_WRAP_PAST_CAP"] == "driver"


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(oversubscribe=True, max_arena_bytes=3 << 30, arena_bytes=64 << 20),
        Settings(prefetch=True, advise="preferred-gpu", past_cap="fail", counters=False),
        Settings(advise="read-mostly", report="alignmalloc-report.json"),
        Settings(placement="tiered", device_tier_bytes=1 << 30),
        Settings(oversubscribe=True, placement="migrate"),
    ],
)
def test_the_library_reads_each_setting_as_the_package_means_it(fresh, settings):
    # The settings are checked twice, here and by the library (WrapOptions::from_env); the
    # library's own reading, as its report gives it, must be what the package asked for.
    out = fresh(
        f"""
        import json, alignmalloc
        alignmalloc.load(alignmalloc.{settings!r})
        print(json.dumps(alignmalloc.report()["options"]))
        """
    )
    read = {
        "oversubscribe": out["oversubscribe"],
        "max_arena_bytes": out["max_arena_bytes"],
        "arena_bytes": out["arena_bytes"],
        "prefetch": out["prefetch"],
        "advise": out["advise"],
        "past_cap": out["past_cap"],
        "counters": out["counters"],
        "report": out["report"],
        "placement": out["placement"],
        "device_tier_bytes": out["device_tier_bytes"],
    }
    default_arena = read["arena_bytes"] if settings.arena_bytes is None else settings.arena_bytes
    report = settings.report and str(Path(tempfile.gettempdir(), settings.report).resolve())
    assert read == {
        "oversubscribe": settings.oversubscribe,
        "max_arena_bytes": settings.max_arena_bytes,
        "arena_bytes": default_arena,
        "prefetch": settings.prefetch,
        "advise": settings.advise,
        "past_cap": settings.past_cap,
        "counters": settings.counters,
        "report": report,
        # Unset, the library places in tiers exactly when oversubscribing.
        "placement": settings.placement or ("tiered" if settings.oversubscribe else "migrate"),
        "device_tier_bytes": settings.device_tier_bytes,
    }
    assert out["pool"] is True


@pytest.mark.parametrize(
    "bad, named",
    [
        (dict(max_arena_bytes=0), "max_arena_bytes"),
        (dict(arena_bytes=-5), "arena_bytes"),
        (dict(arena_bytes=True), "arena_bytes"),
        (dict(advise="everywhere"), "read-mostly"),
        (dict(past_cap="never"), "fail"),
        (dict(prefetch="yes"), "prefetch"),
        (dict(placement="gpu"), "migrate, tiered"),
        (dict(device_tier_bytes=-1), "device_tier_bytes"),
        (dict(report="/no/such/dir/r.json"), "existing directory"),
    ],
)
def test_a_bad_setting_is_an_exception_naming_it(bad, named):
    with pytest.raises(AlignmallocError, match=named):
        Settings(**bad).environment()


def test_an_unknown_setting_is_named():
    with pytest.raises(AlignmallocError, match="unknown setting overcommit"):
        Settings().updated(overcommit=True)
    assert Settings().updated(prefetch=True).prefetch is True


def test_pytorch_refuses_failing_past_the_cap(refused):
    # PyTorch's pluggable allocator takes a null answer as a tensor at address 0: it cannot be
    # told that an allocation failed, so the setting that fails allocations is refused (before
    # PyTorch is even imported).
    message = refused("import alignmalloc.torch", 'alignmalloc.torch.enable(past_cap="fail")')
    assert "past_cap='driver'" in message


def test_the_report_before_loading_is_refused(refused):
    assert "enable()" in refused("", "alignmalloc.report()")


def test_without_a_cuda_context_the_hooks_fail_cleanly_and_count(fresh):
    out = fresh(
        """
        import ctypes, json, alignmalloc
        from alignmalloc import _native
        alignmalloc.load()
        lib = _native.loaded()
        pointer = lib.alignmalloc_torch_alloc(4096, 0, None)
        result = lib.alignmalloc_last_result()
        again = lib.alignmalloc_last_result()
        empty = lib.alignmalloc_torch_alloc(0, 0, None)
        negative = lib.alignmalloc_torch_alloc(-1, 0, None)
        negative_result = lib.alignmalloc_last_result()
        lib.alignmalloc_torch_free(ctypes.c_void_p(0x1234000), 4096, 0, None)
        lib.alignmalloc_torch_free(None, 0, 0, None)
        report = alignmalloc.report()
        print(json.dumps({
            "pointer": pointer, "result": result, "again": again, "empty": empty,
            "negative": negative, "negative_result": negative_result,
            "failures": alignmalloc.failures(), "report": report,
        }))
        """
    )
    # No driver (CUDA_ERROR_NOT_FOUND, 500) or a driver with no context made yet
    # (CUDA_ERROR_NOT_INITIALIZED, 3): a null answer and the reason, read once.
    assert out["pointer"] is None
    assert out["result"] in (3, 500) and out["again"] == 0
    assert out["empty"] is None
    assert out["negative"] is None and out["negative_result"] == 1
    # The failed allocation, the negative one; the free of an unknown pointer (null is ignored).
    assert out["failures"] == [2, 1]
    report = out["report"]
    assert report["allocations"] == []
    assert report["counted"] is False and report["counters"].startswith("unavailable")
    assert report["options"]["pool"] is True


def test_a_second_load_with_other_settings_is_refused(refused):
    # The same settings again: nothing to do; other settings: refused.
    message = refused(
        "alignmalloc.load()\nalignmalloc.load()",
        "alignmalloc.load(alignmalloc.Settings(prefetch=True))",
    )
    assert "once per process" in message
