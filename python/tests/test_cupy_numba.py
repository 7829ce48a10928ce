"""CuPy and Numba on the arena (each needs its package and a GPU; skipped otherwise, with the
reason). Each runs in a fresh interpreter: a framework takes its allocator once per process."""

import importlib.util

import pytest


def needs(module: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


def cuda_present(fresh) -> None:
    out = fresh("import ctypes, json\ntry:\n    ok = ctypes.CDLL('libcuda.so.1').cuInit(0) == 0\nexcept OSError:\n    ok = False\nprint(json.dumps({'ok': ok}))")
    if not out["ok"]:
        pytest.skip("no CUDA device")


def plain_and_ours(fresh, program: str, framework: str) -> tuple[dict, dict]:
    """``program`` (with ``{enable}`` and ``{report}`` slots) run plain, then with
    ``alignmalloc.FRAMEWORK.enable()`` and the arena's pool and failures added to its result."""
    plain = fresh(program.format(enable="", report=""))
    ours = fresh(
        program.format(
            enable=f"import alignmalloc, alignmalloc.{framework}; alignmalloc.{framework}.enable()",
            report='r = alignmalloc.report(); result["pool"] = r["pool"]; '
            'result["failures"] = alignmalloc.failures()',
        )
    )
    return plain, ours


def test_cupy_arrays_live_in_the_arena_and_compute_as_with_cupys_own(fresh):
    needs("cupy")
    cuda_present(fresh)
    program = """
        import json, cupy
        {enable}
        rng = cupy.random.default_rng(7)
        a = rng.standard_normal((1024, 1024), dtype=cupy.float64)
        b = (a @ a.T).sum(axis=0)
        pieces = [cupy.arange(n) * 3 for n in range(1, 300)]
        total = float(sum(p.sum() for p in pieces))
        del pieces
        result = {{"b": cupy.asnumpy(b).tolist(), "total": total}}
        {report}
        print(json.dumps(result))
    """
    plain, ours = plain_and_ours(fresh, program, "cupy")
    assert ours["b"] == plain["b"] and ours["total"] == plain["total"]
    assert ours["pool"]["counters"]["arena_allocations"] >= 300
    assert ours["failures"] == [0, 0]


def test_a_numba_kernel_on_arena_arrays_computes_as_on_numbas_own(fresh):
    needs("numba")
    cuda_present(fresh)
    program = """
        import json
        import numpy as np
        # numba-cuda releases that name numpy.row_stack, which numpy 2.3 removed, fail to compile
        # any kernel; the alias (numpy's own vstack) lets them, for both runs alike.
        if not hasattr(np, "row_stack"):
            np.row_stack = np.vstack
        {enable}
        from numba import cuda

        @cuda.jit
        def axpy(a, x, y, out):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = a * x[i] + y[i]

        n = 1 << 20
        x = cuda.to_device(np.arange(n, dtype=np.float32))
        y = cuda.to_device(np.ones(n, dtype=np.float32))
        out = cuda.device_array(n, dtype=np.float32)
        axpy[(n + 255) // 256, 256](2.0, x, y, out)
        host = out.copy_to_host()
        result = {{"sum": float(host.astype(np.float64).sum()), "head": host[:4].tolist()}}
        {report}
        print(json.dumps(result))
    """
    plain, ours = plain_and_ours(fresh, program, "numba")
    assert ours["sum"] == plain["sum"] and ours["head"] == plain["head"]
    assert ours["pool"]["counters"]["arena_allocations"] >= 3
    assert ours["failures"] == [0, 0]


def test_numba_after_its_context_is_refused(fresh, refused):
    needs("numba")
    cuda_present(fresh)
    message = refused(
        "import alignmalloc.numba\nfrom numba import cuda\ncuda.current_context()",
        "alignmalloc.numba.enable()",
    )
    assert "after Numba made its CUDA context" in message
