"""Instructions counted by callgrind per stage of a script, for the `*_cost.py` benchmarks.

A counted script marks the end of each stage by calling ``os.getppid()`` (called nowhere else), where callgrind
(``--dump-before=getppid``) writes out what it counted so far: part N holds stage N's instructions.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_PART = re.compile(r"^part: (\d+)$.*?^totals: (\d+)$", re.MULTILINE | re.DOTALL)


def parts(script: str, args: Sequence[str], folder: Path, parts: int, **run: Any) -> list[int]:
    """The instructions of the first `parts` parts of `script` (run by this Python with `args`), counted in `folder`;
    `run` goes to `subprocess.run` (env, cwd)."""
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={folder}/counts",
         sys.executable, "-c", script, *args],
        capture_output=True, text=True, check=True, **run,
    )
    counted: dict[int, int] = {}
    for path in folder.glob("counts.*"):
        for number, total in _PART.findall(path.read_text(encoding="utf-8", errors="replace")):
            counted[int(number)] = int(total)
    if len(counted) < parts:
        raise RuntimeError(f"callgrind wrote {len(counted)} parts, not {parts}")
    return [counted[i + 1] for i in range(parts)]


def count_trees(trees: Sequence[Path], folder: Path, measure: Callable[[Path, Path], list[int]]) -> list[list[int]]:
    """`measure(tree, its folder)` for every tree, two at a time (each in a folder of its own under `folder`)."""
    def one(i: int) -> list[int]:
        (folder / str(i)).mkdir()
        return measure(trees[i], folder / str(i))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(one, range(len(trees))))


def print_table(trees: Sequence[Path], stages: Sequence[str], counts: Sequence[list[int]], unit: str, scale: float) -> None:
    """Each tree's count per stage, and their total, in `unit` (the counts divided by `scale`)."""
    for i, tree in enumerate(trees):
        print(f"[{i}] {tree}")
    width = max(len(stage) for stage in (*stages, "total"))
    print(f"{f'instructions {unit}':<{width}}  " + "  ".join(f"{f'[{i}]':>8}" for i in range(len(trees))))
    for i, stage in enumerate(stages):
        print(f"{stage:<{width}}  " + "  ".join(f"{count[i] / scale:8,.0f}" for count in counts))
    print(f"{'total':<{width}}  " + "  ".join(f"{sum(count) / scale:8,.0f}" for count in counts))
