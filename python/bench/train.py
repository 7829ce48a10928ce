"""A training loop that fits the GPU, on one allocator per process.

    python train.py --allocator torch|alignmalloc|managed [--steps 60] [--json out.json]

An MLP of 8 layers of 2048 on synthetic data (fixed seeds, deterministic algorithms), with
temporaries of odd sizes each step as real code makes them. Prints one JSON line: the allocator,
every step's time (ms, after a synchronize), the median of the steps after the first 10, and a
digest of the losses (bitwise: equal digests are equal losses).
"""

import argparse
import hashlib
import statistics
import struct
import sys
import time
from pathlib import Path

from common import emit, use_allocator


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--allocator", choices=["torch", "alignmalloc", "managed"], required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--plain-library", default=str(Path(__file__).with_name("plain_managed.so")))
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    use_allocator(args.allocator, args.plain_library)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    width, depth, batch = 2048, 8, 512
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    generator = torch.Generator(device="cuda").manual_seed(1)
    losses, times = [], []
    for step in range(args.steps):
        torch.cuda.synchronize()
        started = time.perf_counter()
        x = torch.randn(batch, width, device="cuda", generator=generator)
        y = torch.randint(0, 10, (batch,), device="cuda", generator=generator)
        # Temporaries of odd sizes, as preprocessing makes them.
        noise = torch.randn(batch, width - 1 - step % 7, device="cuda", generator=generator)
        x = x + torch.nn.functional.pad(noise, (0, 1 + step % 7)) * 1e-3
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    digest = hashlib.sha256(b"".join(struct.pack("<d", l) for l in losses)).hexdigest()[:16]
    result = {
        "allocator": args.allocator,
        "device": torch.cuda.get_device_name(),
        "steps": args.steps,
        "step_ms_median": statistics.median(times[10:]) if len(times) > 10 else statistics.median(times),
        "step_ms": times,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "loss_digest": digest,
    }
    if args.allocator == "alignmalloc":
        import alignmalloc

        report = alignmalloc.report()
        result["pool"] = report["pool"]
        result["failures"] = alignmalloc.failures()
    return emit(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
