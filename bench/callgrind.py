"""Instructions counted by callgrind, for the `*_cost.py` benchmarks: per stage of a script, or per thread of a
process counted only while told to.

A counted script marks the end of each stage by calling ``os.getppid()`` (called nowhere else), where callgrind
(``--dump-before=getppid``) writes out what it counted so far: part N holds stage N's instructions. A process run
under `command` (`threads=True`) counts nothing until `instrument(pid)`; `dump(pid)` writes out what it counted
then (the thread it found running, the event loop's when all wait), the rest is written out as it ends
(`thread_counts`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_PART = re.compile(r"^part: (\d+)$.*?^totals: (\d+)$", re.MULTILINE | re.DOTALL)


_THREAD = re.compile(r"^part: (\d+)$.*?^thread: (\d+)$.*?^summary: (\d+)$", re.MULTILINE | re.DOTALL)
_OBJECT = re.compile(r"^c?ob=\(\d+\) (.+)$", re.MULTILINE)


def command(folder: Path, threads: bool = False) -> list[str]:
    """valgrind counting instructions into `folder`: per `parts` of a script, or (`threads`) per thread of a
    process, from `instrument(pid)` on."""
    if threads:
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes", "--fair-sched=yes",
                f"--callgrind-out-file={folder}/counts"]
    return ["valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={folder}/counts"]


def instrument(pid: int) -> None:
    """Start counting in a process run under `command(threads=True)` (counting cannot stop: turned off, callgrind
    forgets what it counted)."""
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True, check=True)


def dump(pid: int) -> None:
    """Have a process run under `command(threads=True)` write out what it counted so far: only the thread it
    stopped, the event loop's where all threads wait."""
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)


def thread_counts(folder: Path) -> dict[int, tuple[int, bool, set[str]]]:
    """Each thread's instructions (its first count written out), whether that count was written out as the process
    ended, and the objects (libraries) it ran code of, for a process run under `command(folder, threads=True)`."""
    found: dict[int, tuple[int, int, set[str]]] = {}  # thread -> part, instructions, objects
    for path in folder.glob("counts*-*"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if match := _THREAD.search(text):
            part, thread, count = map(int, match.groups())
            if thread not in found or part < found[thread][0]:
                found[thread] = part, count, set(_OBJECT.findall(text))
    last = max((part for part, _, _ in found.values()), default=0)
    return {thread: (count, part == last and part > 1, objects) for thread, (part, count, objects) in found.items()}


def tree_env(src: Path) -> dict[str, str]:
    """The environment of a counted script using the bot's modules from `src` and the project's own (the tests'
    fakes): a fixed hash seed, so that two trees run alike."""
    return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}", "PYTHONHASHSEED": "0"}


def parts(script: str, args: Sequence[str], folder: Path, parts: int, **run: Any) -> list[int]:
    """The instructions of the first `parts` parts of `script` (run by this Python with `args`), counted in `folder`;
    `run` goes to `subprocess.run` (env, cwd)."""
    subprocess.run(
        [*command(folder), sys.executable, "-c", script, *args], capture_output=True, text=True, check=True, **run
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


def compare(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    measure: Callable[[Path, Path, argparse.Namespace], list[int]],
    stages: Sequence[str],
    unit: str,
    scale: float,
) -> int:
    """A `*_cost.py` benchmark's command: `measure(src, folder, arguments)` for this checkout's src/ and each other
    tree's given with `--src` (added to `parser`), printed side by side (`print_table`); 2 without valgrind."""
    parser.add_argument("--src", type=Path, action="append", default=[], help="another tree's src/ to count too")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    trees = [ROOT / "src", *(path.resolve() for path in args.src)]
    with tempfile.TemporaryDirectory(prefix="myao2-callgrind-") as tmp:
        counts = count_trees(trees, Path(tmp), lambda tree, folder: measure(tree, folder, args))
    print_table(trees, stages, counts, unit, scale)
    return 0
