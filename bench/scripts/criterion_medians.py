#!/usr/bin/env python3
"""Print criterion's median per benchmark as a Markdown table, with each function's ratio to a
baseline function in the same group and size.

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
    for path in sorted(pathlib.Path(args.root).glob("*/*/*/new/estimates.json")):
        group, function, size = path.parts[-5], path.parts[-4], path.parts[-3]
        rows[(group, size, function)] = json.loads(path.read_text())["median"]["point_estimate"]
    if not rows:
        raise SystemExit(f"no criterion results under {args.root}: run cargo bench first")
    print("| group | size | function | median per op | ops/s | speed-up vs baseline |")
    print("|---|---|---|---|---|---|")
    for (group, size, function), ns in sorted(rows.items()):
        base = rows.get((group, size, args.baseline)) if args.baseline else None
        ratio = f"{base / ns:,.1f}x" if base and function != args.baseline else ""
        shown = f"{ns:,.1f} ns" if ns < 10_000 else f"{ns / 1000:,.1f} us"
        print(f"| {group} | {size} | {function} | {shown} | {1e9 / ns:,.0f} | {ratio} |")


if __name__ == "__main__":
    main()
