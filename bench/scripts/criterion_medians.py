#!/usr/bin/env python3
"""Print criterion's median per benchmark as a Markdown table: time per iteration, elements
(operations, requests) per second from the benchmark's declared throughput, and each function's
speed-up over a baseline function in the same group and size.

    cargo bench -p ortree --bench ortree
    python3 bench/scripts/criterion_medians.py --baseline binary
"""
import argparse
import json
import pathlib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="target/criterion", help="criterion's output folder")
    parser.add_argument("--baseline", default=None, help="function name to compare against")
    args = parser.parse_args()
    rows = {}
    root = pathlib.Path(args.root)
    for path in sorted(root.glob("**/new/estimates.json")):
        parts = path.relative_to(root).parts[:-2]  # group/function[/size]
        if len(parts) not in (2, 3) or "report" in parts:
            continue
        group, function, size = parts[0], parts[1], parts[2] if len(parts) == 3 else "-"
        median = json.loads(path.read_text())["median"]["point_estimate"]
        declared = json.loads((path.parent / "benchmark.json").read_text()).get("throughput") or {}
        rows[(group, size, function)] = (median, declared.get("Elements", 1))
    if not rows:
        raise SystemExit(f"no criterion results under {args.root}: run cargo bench first")
    print("| group | size | function | median per iteration | elements/s | speed-up vs baseline |")
    print("|---|---|---|---|---|---|")
    for (group, size, function), (ns, elements) in sorted(rows.items()):
        base = rows.get((group, size, args.baseline)) if args.baseline else None
        ratio = f"{base[0] / ns:,.1f}x" if base and function != args.baseline else ""
        shown = f"{ns:,.1f} ns" if ns < 10_000 else f"{ns / 1000:,.1f} us"
        print(f"| {group} | {size} | {function} | {shown} | {elements * 1e9 / ns:,.0f} | {ratio} |")


if __name__ == "__main__":
    main()
