"""The gateways an A/B benchmark runs side by side: the working tree's, and other commits' (each checked out by the
benchmark into a git worktree of its own, removed at the end), and the paired summary of their measurements.

A variant's gateway is started with that checkout as its working directory and first import path, so
`python -m gateway.cli serve` runs that commit's gateway with this venv's packages; the load, the scripted upstream
and the stores' servers stay the working tree's, the same for every variant.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = "tree"
"""The name of the working tree's own variant (uncommitted changes included)."""


@dataclass(frozen=True)
class Variant:
    """One gateway build: its name in the results and the folder its `gateway` package is imported from."""

    name: str
    root: Path


def tree_variant() -> Variant:
    """The working tree's gateway, as it is now."""
    return Variant(TREE, ROOT)


def commit_variant(commit: str, cleanup: contextlib.ExitStack) -> Variant:
    """`commit`'s gateway in a fresh git worktree (detached), removed by `cleanup`; named by its short hash."""
    short = _git("rev-parse", "--short", f"{commit}^{{commit}}")
    parent = Path(tempfile.mkdtemp(prefix=f"harnessrl-bench-{short}-"))
    path = parent / "tree"
    _git("worktree", "add", "--detach", str(path), short)
    cleanup.callback(_remove_worktree, path, parent)
    return Variant(short, path)


def _remove_worktree(path: Path, parent: Path) -> None:
    with contextlib.suppress(subprocess.CalledProcessError):
        _git("worktree", "remove", "--force", str(path))
    with contextlib.suppress(subprocess.CalledProcessError):
        _git("worktree", "prune")
    with contextlib.suppress(OSError):
        parent.rmdir()


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def gateway_env_and_cwd(variant: Variant, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """The environment and working directory that make `python -m gateway.cli` import `variant`'s gateway."""
    path = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": str(variant.root) + (f":{path}" if path else "")}, variant.root


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max of `values`."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


MEASURES = {"added_p50_ms": lambda p: p["added_p50_ms"], "calls_per_s": lambda p: p["gateway"]["calls_per_s"],
            "cpu_ms_per_call": lambda p: p["gateway"]["cpu_ms_per_call"],
            "direct_calls_per_s": lambda p: p["direct"]["calls_per_s"]}
"""What the summary reports per (store, protocol, clients, variant), read from one measured point."""


def summarize_variants(points: list[dict], tree: str = TREE) -> list[dict]:
    """Per (store, protocol, clients, variant): each measure's median and range over rounds; for the other
    variants also the tree's calls/s and CPU per call divided by theirs in the same round (paired), and the tree's
    calls/s as a share of the direct upstream's."""
    by_key: dict[tuple, dict[int, dict]] = {}
    for point in points:
        key = (point["store"], point["protocol"], point["clients"], point["variant"])
        by_key.setdefault(key, {})[point["round"]] = point
    rows = []
    for (store, protocol, clients, variant), rounds in by_key.items():
        row = {"store": store, "protocol": protocol, "clients": clients, "variant": variant,
               **{name: spread([read(p) for p in rounds.values()]) for name, read in MEASURES.items()}}
        row["share_of_direct"] = spread([p["gateway"]["calls_per_s"] / p["direct"]["calls_per_s"]
                                         for p in rounds.values()])
        mine = by_key.get((store, protocol, clients, tree), {})
        paired = [r for r in rounds if r in mine]
        if variant != tree and paired:
            row["tree_over_this_calls_per_s"] = spread([MEASURES["calls_per_s"](mine[r])
                                                        / MEASURES["calls_per_s"](rounds[r]) for r in paired])
            row["tree_over_this_cpu"] = spread([MEASURES["cpu_ms_per_call"](mine[r])
                                                / MEASURES["cpu_ms_per_call"](rounds[r]) for r in paired])
        rows.append(row)
    return rows


def print_summary(rows: list[dict]) -> None:
    """One line per row: medians with [min-max] over rounds."""
    def fmt(s: dict, digits: int) -> str:
        return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"

    print("summary (median [min-max] over rounds):", flush=True)
    for row in rows:
        paired = ""
        if "tree_over_this_calls_per_s" in row:
            paired = (f" | tree/this calls/s {fmt(row['tree_over_this_calls_per_s'], 2)}, "
                      f"CPU {fmt(row['tree_over_this_cpu'], 2)}")
        print(f"{row['store']:>13} {row['protocol']:>9} {row['clients']:>3} {row['variant']:>9} | added p50 "
              f"{fmt(row['added_p50_ms'], 2)} ms | {fmt(row['calls_per_s'], 0)} calls/s | CPU "
              f"{fmt(row['cpu_ms_per_call'], 3)} ms/call | {fmt(row['share_of_direct'], 2)} of direct{paired}",
              flush=True)
