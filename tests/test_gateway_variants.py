"""The A/B summary of benchmarks/gateway_overhead.py --baseline (benchmarks/gateway_variants.py): medians and ranges
per gateway, the working tree's calls/s and CPU per call over each baseline's paired by round, share of direct."""

from __future__ import annotations

import pytest

from benchmarks.gateway_variants import TREE, summarize_variants


def point(variant: str, round_: int, calls_per_s: float, cpu_ms: float, direct: float = 1000.0) -> dict:
    return {"store": "s", "protocol": "chat", "clients": 64, "variant": variant, "round": round_,
            "added_p50_ms": 1.0 + round_, "direct": {"calls_per_s": direct},
            "gateway": {"calls_per_s": calls_per_s, "cpu_ms_per_call": cpu_ms}}


def test_the_tree_is_paired_with_each_baseline_round_by_round() -> None:
    points = [point(TREE, 0, 200, 0.5), point("old", 0, 100, 1.0), point(TREE, 1, 300, 0.4),
              point("old", 1, 100, 0.5), point("old", 2, 50, 2.0)]
    rows = {row["variant"]: row for row in summarize_variants(points)}
    tree, old = rows[TREE], rows["old"]
    assert tree["calls_per_s"] == {"median": 250, "min": 200, "max": 300, "n": 2}
    assert "tree_over_this_cpu" not in tree
    assert old["tree_over_this_calls_per_s"]["min"] == 2.0 and old["tree_over_this_calls_per_s"]["max"] == 3.0
    assert old["tree_over_this_cpu"]["median"] == pytest.approx(0.65)  # rounds 0 and 1 only: 0.5 and 0.8
    assert old["share_of_direct"]["median"] == pytest.approx(0.1) and old["added_p50_ms"]["n"] == 3
