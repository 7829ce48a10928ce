"""PyTorch on the arena (needs torch with CUDA; skipped otherwise, with the reason)."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the PyTorch tests need a GPU", allow_module_level=True)


def test_tensors_live_in_the_arena_and_compute_as_usual(fresh):
    out = fresh(
        """
        import json, torch, alignmalloc, alignmalloc.torch
        alignmalloc.torch.enable()
        a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        b = (a * 2).sum().item()
        small = [torch.ones(17, device="cuda") for _ in range(100)]
        del small
        torch.cuda.synchronize()
        report = alignmalloc.torch.report()
        print(json.dumps({"sum": b, "report": report, "failures": alignmalloc.failures()}))
        """
    )
    n = 1 << 20
    assert out["sum"] == float(n * (n - 1))
    rows = out["report"]["allocations"]
    assert any(r["bytes"] == 4 * n and r["origin"] == "arena" for r in rows)
    assert out["failures"] == [0, 0]


def test_tiered_placement_splits_a_large_tensor_and_keeps_its_values(fresh):
    # A 192 MiB tensor with a 64 MiB device tier: 64 MiB on the GPU, 128 MiB in host memory,
    # written and read by kernels on both sides of the split; freed, then made again (its
    # advice taken off, its device part given back, both set anew). Small tensors are not split.
    out = fresh(
        """
        import json, torch, alignmalloc, alignmalloc.torch
        alignmalloc.torch.enable(placement="tiered", device_tier_bytes=64 << 20)
        n = 48 << 20
        sums = []
        for round in range(2):
            y = torch.full((n,), 3.0, device="cuda")
            y[: n // 2] += 1.0
            y[n // 2 :] *= 2.0
            sums.append(y.double().sum().item())
            del y
            # The frees pass their stream's event before the next round allocates.
            torch.cuda.synchronize()
        small = torch.ones(1 << 18, device="cuda")
        torch.cuda.synchronize()
        report = alignmalloc.torch.report()
        print(json.dumps({"sums": sums, "report": report, "failures": alignmalloc.failures()}))
        """
    )
    n = 48 << 20
    assert out["sums"] == [5.0 * n, 5.0 * n]
    allocations = out["report"]["allocations"]
    tensors = [r for r in allocations if r["bytes"] == 4 * n]
    assert [r["split"] for r in tensors] == [{"device_bytes": 64 << 20, "host_bytes": 128 << 20}] * 2
    assert all(r["split"] is None for r in allocations if r["bytes"] < 64 << 20)
    tiers = out["report"]["pool"]["tiers"]
    assert tiers["budget_bytes"] == 64 << 20 and tiers["peak_device_bytes"] == 64 << 20
    assert out["failures"] == [0, 0]


def test_enable_after_cuda_allocated_is_refused(refused):
    message = refused(
        'import torch, alignmalloc.torch\nx = torch.ones(4, device="cuda")',
        "alignmalloc.torch.enable()",
    )
    assert "before the first CUDA allocation" in message


def test_memory_freed_on_a_stream_is_reused_only_after_its_work(fresh):
    out = fresh(
        """
        import ctypes, json, torch, alignmalloc, alignmalloc.torch
        from alignmalloc import _native
        alignmalloc.torch.enable()
        torch.manual_seed(0)
        a = torch.randn(2048, 2048, device="cuda")
        expected = None
        sums = []
        for i in range(50):
            # A big product whose inputs die as soon as it is queued; their memory goes back
            # to the pool only after it ran, while new tensors are made meanwhile.
            x = a.clone()
            y = (x @ x).sum()
            del x
            z = torch.full((2048, 2048), float(i), device="cuda")
            sums.append(y.item())
            del z
        torch.cuda.synchronize()
        lib = _native.loaded()
        p = lib.alignmalloc_torch_alloc(1 << 20, 0, None)
        lib.alignmalloc_torch_free(p, 1 << 20, 0, None)
        lib.alignmalloc_torch_free(p, 1 << 20, 0, None)
        torch.cuda.synchronize()
        report = alignmalloc.report()
        print(json.dumps({"sums": sums, "failures": alignmalloc.failures(), "pool": report["pool"]}))
        """
    )
    # Every product over the same input gives the same sum: no input was overwritten early.
    assert len(set(out["sums"])) == 1
    # The second free of the same allocation is refused and counted, nothing else failed.
    assert out["failures"] == [0, 1]
    assert out["pool"]["counters"]["arena_frees"] > 100


def test_past_the_cap_allocations_come_from_the_driver_and_are_counted(fresh):
    out = fresh(
        """
        import json, torch, alignmalloc, alignmalloc.torch
        alignmalloc.torch.enable(max_arena_bytes=64 << 20, arena_bytes=64 << 20)
        small = torch.ones(1 << 20, device="cuda")
        big = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
        total = int(big.sum().item()) + int(small.sum().item())
        print(json.dumps({"total": total, "failures": alignmalloc.failures(),
                          "pool": alignmalloc.report()["pool"]}))
        """
    )
    assert out["total"] == (256 << 20) + (1 << 20)
    assert out["failures"] == [0, 0]
    # The big tensor at least (its reduction's buffers may follow it past the cap).
    assert out["pool"]["counters"]["past_cap_allocations"] >= 1
    assert out["pool"]["counters"]["refused_past_cap"] == 0
