"""Data larger than the GPU, on one allocator per process.

    python oversub.py --allocator managed|alignmalloc --workload fill-sum|chain [--gib 99]
                      [--placement migrate|tiered] [--json out.json]

Two workloads of a program whose data does not fit:

- ``fill-sum``: ``torch.ones`` of GIB GiB (float32), then ``x.sum()`` ``--sums`` times: one
  tensor written once and read in full, again and again;
- ``chain``: weights of GIB GiB as square float32 matrices of ``--width`` (each its own tensor,
  filled from a seeded normal distribution), then ``--passes`` passes of ``y = y @ W`` through
  all of them for a ``--batch x --width`` activation (``--layout features-first``: ``y = W @ y``
  on its transpose): reuse of many tensors, each read once a pass.

Each phase is timed after a synchronize. Prints one JSON line: the allocator and its settings,
the card, each phase's seconds, a check of the result (the sum's relative error; the chain's
digest, equal on every allocator), and for alignmalloc the report's pool and tiers and the
traffic of the largest allocations (HtoD, DtoH, GPU fault groups, where each one's bytes live).
"""

import argparse
import hashlib
import sys
import time
from pathlib import Path

from common import emit, use_allocator


def timed(torch, work):
    torch.cuda.synchronize()
    started = time.perf_counter()
    value = work()
    torch.cuda.synchronize()
    return time.perf_counter() - started, value


def fill_sum(torch, args, elements):
    fill_s, x = timed(torch, lambda: torch.ones(elements, dtype=torch.float32, device="cuda"))
    sums = []
    for _ in range(args.sums):
        # float32, as a program would (a float64 sum would copy x).
        seconds, total = timed(torch, lambda: x.sum().item())
        sums.append(seconds)
    return {
        "fill_s": fill_s,
        "sum_s": sums,
        # A float32 reduction of this many ones is close to, not exactly, their count.
        "sum_relative_error": abs(total - elements) / elements,
    }


def chain(torch, args, elements):
    n = args.width
    count = max(1, elements // (n * n))
    generator = torch.Generator(device="cuda").manual_seed(0)

    def make():
        return [
            torch.empty(n, n, device="cuda").normal_(0.0, n**-0.5, generator=generator)
            for _ in range(count)
        ]

    fill_s, weights = timed(torch, make)
    batch_first = args.layout == "batch-first"
    shape = (args.batch, n) if batch_first else (n, args.batch)
    y0 = torch.randn(*shape, device="cuda", generator=generator)

    def run_pass():
        y = y0
        for w in weights:
            y = y @ w if batch_first else w @ y
            y = y / y.norm()  # keeps the chain in range however deep
        return y

    passes = []
    for _ in range(args.passes):
        seconds, y = timed(torch, run_pass)
        passes.append(seconds)
    return {
        "matrices": count,
        "width": n,
        "layout": args.layout,
        "fill_s": fill_s,
        "pass_s": passes,
        "digest": hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest()[:16],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--allocator", choices=["alignmalloc", "managed"], required=True)
    parser.add_argument("--workload", choices=["fill-sum", "chain"], default="fill-sum")
    parser.add_argument("--gib", type=float, default=99.0)
    parser.add_argument("--sums", type=int, default=2)
    parser.add_argument("--width", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--layout", choices=["batch-first", "features-first"], default="batch-first")
    parser.add_argument("--placement", choices=["migrate", "tiered"])
    parser.add_argument("--advise", choices=["read-mostly", "preferred-gpu"])
    parser.add_argument("--prefetch", action="store_true")
    parser.add_argument("--no-counters", action="store_true")
    parser.add_argument("--plain-library", default=str(Path(__file__).with_name("plain_managed.so")))
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    use_allocator(
        args.allocator,
        args.plain_library,
        oversubscribe=True,
        placement=args.placement,
        advise=args.advise,
        prefetch=args.prefetch,
        counters=not args.no_counters,
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    elements = int(args.gib * (1 << 30)) // 4
    # The kernels' first launches (module loading, library handles) are not the allocator's.
    warm = torch.ones(1024, 1024, device="cuda")
    (warm @ warm[:, :16]).norm().item()
    warm.sum().item()
    del warm
    work = fill_sum if args.workload == "fill-sum" else chain
    started = time.perf_counter()
    result = {
        "allocator": args.allocator,
        "workload": args.workload,
        "placement": args.placement,
        "advise": args.advise,
        "prefetch": args.prefetch,
        "counters": not args.no_counters if args.allocator == "alignmalloc" else None,
        "device": torch.cuda.get_device_name(),
        "card_gib": torch.cuda.get_device_properties(0).total_memory / (1 << 30),
        "data_gib": elements * 4 / (1 << 30),
        **work(torch, args, elements),
    }
    result["end_to_end_s"] = time.perf_counter() - started
    if args.allocator == "alignmalloc":
        import alignmalloc

        report = alignmalloc.report()
        result["options"] = report["options"]
        result["pool"] = report["pool"]
        result["total"] = report["total"]
        result["largest"] = sorted(report["allocations"], key=lambda r: -r["bytes"])[:3]
    return emit(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
