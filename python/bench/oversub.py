"""A tensor larger than the GPU, filled then summed, on one allocator per process.

    python oversub.py --allocator managed|alignmalloc [--gib 99] [--sums 2] [--advise ...] [--json out.json]

The workload of a program whose data does not fit: ``torch.ones`` of GIB GiB (float32), then
``x.sum()`` SUMS times, each timed after a synchronize. Prints one JSON line: the allocator,
the card, the fill's and each sum's seconds, the sum's relative error, and for alignmalloc the
report's pool and the traffic of the tensor's allocation (HtoD, DtoH, GPU fault groups).
"""

import argparse
import sys
import time
from pathlib import Path

from common import emit, use_allocator


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--allocator", choices=["alignmalloc", "managed"], required=True)
    parser.add_argument("--gib", type=float, default=99.0)
    parser.add_argument("--sums", type=int, default=2)
    parser.add_argument("--advise", choices=["read-mostly", "preferred-gpu"])
    parser.add_argument("--prefetch", action="store_true")
    parser.add_argument("--plain-library", default=str(Path(__file__).with_name("plain_managed.so")))
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    use_allocator(
        args.allocator,
        args.plain_library,
        oversubscribe=True,
        advise=args.advise,
        prefetch=args.prefetch,
    )
    elements = int(args.gib * (1 << 30)) // 4
    torch.cuda.synchronize()
    started = time.perf_counter()
    x = torch.ones(elements, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    fill_s = time.perf_counter() - started
    sums = []
    for _ in range(args.sums):
        started = time.perf_counter()
        total = x.sum().item()  # float32, as a program would (a float64 sum would copy x)
        sums.append(time.perf_counter() - started)
    result = {
        "allocator": args.allocator,
        "advise": args.advise,
        "prefetch": args.prefetch,
        "device": torch.cuda.get_device_name(),
        "card_gib": torch.cuda.get_device_properties(0).total_memory / (1 << 30),
        "tensor_gib": elements * 4 / (1 << 30),
        "fill_s": fill_s,
        "sum_s": sums,
        # A float32 reduction of this many ones is close to, not exactly, their count.
        "sum_relative_error": abs(total - elements) / elements,
    }
    if args.allocator == "alignmalloc":
        import alignmalloc

        report = alignmalloc.report()
        result["pool"] = report["pool"]
        result["largest"] = max(report["allocations"], key=lambda r: r["bytes"], default=None)
    return emit(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
