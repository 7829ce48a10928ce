"""The link's speed between host and GPU, as the oversubscribed workloads' reads are judged.

    python link.py [--gib 4] [--json out.json]

Copies a pinned host buffer to GPU memory and back (PyTorch's own allocator, copy engines),
five times each way; prints one JSON line with the card and the median GB/s (1e9 bytes/s) of
each direction.
"""

import argparse
import statistics
import sys
import time

from common import emit


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    count = int(args.gib * (1 << 30))
    host = torch.empty(count, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(count, dtype=torch.uint8, device="cuda")
    speeds = {"htod_gbps": [], "dtoh_gbps": []}
    for _ in range(5):
        for key, (dst, src) in (("htod_gbps", (gpu, host)), ("dtoh_gbps", (host, gpu))):
            torch.cuda.synchronize()
            started = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            speeds[key].append(count / (time.perf_counter() - started) / 1e9)
    result = {"device": torch.cuda.get_device_name(), "bytes": count}
    result.update({key: statistics.median(v) for key, v in speeds.items()})
    return emit(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
