"""Summarise py-spy collapsed stacks (`--format raw`): the functions with the
most samples of their own, and those most often on the stack.

    bench/.venv-peers/bin/python bench/profile_summary.py PROFILE.txt [--top 25] [--thread NAME]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--grep", help="only stacks that contain this text")
    args = parser.parse_args()
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for path in args.files:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or (args.grep and args.grep not in stack):
                continue
            n = int(count)
            frames = stack.split(";")
            samples += n
            own[frames[-1]] += n
            for frame in set(frames):
                total[frame] += n
    print(f"{samples} samples")
    print("\nown time:")
    for frame, n in own.most_common(args.top):
        print(f"{n / samples:6.1%}  {frame}")
    print("\non the stack:")
    for frame, n in total.most_common(args.top):
        print(f"{n / samples:6.1%}  {frame}")


if __name__ == "__main__":
    main()
