"""Screenshots of the MLflow UI after a run, taken by a real headless Chromium (benchmarks/browser.py).

Against a running MLflow server, for one experiment: the trace list (every traced rollout a row), the trace of one
rollout (its span tree: calls and tool spans), one of its calls selected (the conversation as the harness sent it,
tool calls and results), its group in the Sessions view, and the metric charts of the
experiment's runs (the two latest, in the Training runs chart view, its chart filter set to the loss and reward charts:
CHARTS_FILTER). Each page is captured only once its DOM text shows
the content asked for (the UI is a single-page app: a loaded page is not yet a rendered one). Run:
`.venv/bin/python benchmarks/mlflow_screenshots.py --tracking-uri http://127.0.0.1:5000 --experiment <name>
[--out docs/images]`; it prints what it captured as JSON. The README's images under docs/images come from it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Trace, TraceState

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.browser import Page, headless_chromium  # noqa: E402

SESSION_METADATA_KEY = "mlflow.trace.session"
ROLLOUT_TAG = "harnessrl.rollout_id"
SIZE_STATS_KEY = "mlflow.trace.sizeStats"
FILES = {"traces": "mlflow-traces.png", "trace": "mlflow-trace.png", "call": "mlflow-call.png",
         "session": "mlflow-session.png", "charts": "mlflow-charts.png"}
DISMISS_JS = """(() => {
  for (const b of document.querySelectorAll('button')) { if (b.innerText.trim() === 'Got it') b.click(); }
  const close = document.querySelector('[data-component-id="mlflow.assistant.chat_panel.close"]');
  if (close) close.click();
  return !!close;
})()"""
"""Closes what covers the content on a first visit (the assistant side panel, the 'Detect issues' tip); true while
the panel was still open."""
SELECT_SPAN_JS = """((name) => {
  const node = [...document.querySelectorAll('span,div,p')]
    .find(e => e.children.length === 0 && e.innerText.trim() === name);
  if (node) node.click();
  return !!node;
})(%s)"""
"""Clicks the span named by the argument (a JSON string) in a trace's span tree."""
CHARTS_FILTER = r"^(loss/total|loss/pg|rollout/reward_mean|val/reward_mean)$"
"""The charts page shows only these (the UI's chart filter is a case-insensitive regex over metric names): a real run
logs dozens of metrics, and the loss charts would be below the fold."""
CHARTS_SEARCH = 'input[placeholder="Search metric charts"]'
CALL_SPAN = re.compile(r"^(chat|completion|messages|responses) \d+$")
"""A call span's name in the trace of a rollout (tracking.traces: `<kind> <seq>`)."""


@dataclass(frozen=True)
class Subject:
    """What to show: the experiment, a trace (its rollout id and session), the traces, and the runs to chart."""

    experiment_id: str
    trace_id: str
    rollout_id: str
    session_id: str
    traced_rollouts: tuple[str, ...]
    session_size: int
    run_names: tuple[str, ...]


@dataclass(frozen=True)
class Captured:
    """The files written and the text each page showed when it was captured."""

    files: dict[str, str]
    texts: dict[str, str]
    subject: Subject


def ui_urls(tracking_uri: str, subject: Subject) -> dict[str, str]:
    """The UI's pages for `subject` (hash routes of MLflow 3.17's single-page app)."""
    base = f"{tracking_uri.rstrip('/')}/#/experiments/{subject.experiment_id}"
    return {"traces": f"{base}/traces", "trace": f"{base}/traces/{subject.trace_id}",
            "session": f"{base}/chat-sessions/{subject.session_id}", "charts": f"{base}/runs?compareRunsMode=CHART"}


def span_count(trace_metadata: dict[str, str]) -> int:
    """The number of spans MLflow recorded for a trace (its size statistics; 0 when absent), read without
    downloading the spans."""
    try:
        return int(json.loads(trace_metadata.get(SIZE_STATS_KEY, "{}")).get("num_spans", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _succeeded(trace: Trace) -> bool:
    """Whether the rollout of `trace` ended OK (a failed or timed-out rollout's trace is in state ERROR)."""
    return trace.info.state == TraceState.OK


def choose(client: MlflowClient, experiment: str) -> Subject:
    """The subject of the screenshots in `experiment`: the rollout trace with the most spans (a SWE episode shows its
    calls and tools; ties: the longer rollout), the session with the most members (a whole group; ties: more of them
    ended OK, then more spans), and the experiment's two latest runs. ValueError naming what is missing."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"no experiment {experiment!r} at {client.tracking_uri}; pass the name a run logged to")
    traces = [t for t in client.search_traces(locations=[found.experiment_id], max_results=200, include_spans=False)
              if ROLLOUT_TAG in t.info.tags]
    if not traces:
        raise ValueError(f"experiment {experiment!r} has no rollout traces (tag {ROLLOUT_TAG}); run training with "
                         "tracing on first")
    shown = max(traces, key=lambda t: (span_count(t.info.trace_metadata), t.info.execution_duration or 0))
    members: dict[str, list[Trace]] = {}
    for trace in traces:
        members.setdefault(trace.info.trace_metadata.get(SESSION_METADATA_KEY, ""), []).append(trace)
    session = max(members, key=lambda sid: (len(members[sid]), sum(map(_succeeded, members[sid])),
                                            sum(span_count(t.info.trace_metadata) for t in members[sid])))
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time DESC"], max_results=2)
    return Subject(experiment_id=found.experiment_id, trace_id=shown.info.trace_id,
                   rollout_id=shown.info.tags[ROLLOUT_TAG], session_id=session,
                   traced_rollouts=tuple(sorted(t.info.tags[ROLLOUT_TAG] for t in traces)),
                   session_size=len(members[session]),
                   run_names=tuple(r.info.run_name for r in runs))


def _capture(page: Page, url: str, expected: list[str], path: Path, timeout_s: float) -> str:
    """Navigate, wait for the `expected` texts, close what covers the content, capture; the page's text."""
    page.navigate(url)
    page.wait_for(lambda text: all(e in text for e in expected), f"{expected} at {url}", timeout_s, settle_s=0.5)
    for _ in range(20):
        if not page.evaluate(DISMISS_JS):
            break
        time.sleep(0.25)
    text = page.wait_for(lambda text: all(e in text for e in expected), f"{expected} at {url}", timeout_s,
                         settle_s=1.5)
    page.screenshot(path)
    return text


def _capture_call(page: Page, trace_text: str, path: Path, timeout_s: float) -> str:
    """In an open trace, select the last call span but one (a call whose request shows the tools' results) and
    capture its conversation; the page's text."""
    calls = [line for line in trace_text.splitlines() if CALL_SPAN.match(line.strip())]
    if not calls:
        raise ValueError(f"the trace shows no call span (`<kind> <seq>`): {trace_text[:500]!r}")
    chosen = calls[-2] if len(calls) > 1 else calls[-1]
    page.evaluate(SELECT_SPAN_JS % json.dumps(chosen))
    text = page.wait_for(lambda text: text.count(chosen) >= 2 and "Inputs" in text, f"span {chosen!r} selected",
                         timeout_s, settle_s=1.5)
    page.screenshot(path)
    return text


def _capture_charts(page: Page, unfiltered: str, chart_filter: str, expected: list[str], path: Path,
                    timeout_s: float) -> str:
    """On the open charts page (its text `unfiltered`), type `chart_filter` into the chart search and capture once
    the filtered charts show the `expected` texts; the page's text."""
    page.type_into(CHARTS_SEARCH, chart_filter)
    text = page.wait_for(lambda text: text != unfiltered and all(e in text for e in expected),
                         f"the charts filtered by {chart_filter!r} showing {expected}", timeout_s, settle_s=2.0)
    page.screenshot(path)
    return text


TRACE_LIST_ROWS = 25
"""Rows on the trace list's first page (MLflow's default page size): its footer reads "25 of 72" beyond that."""


def expected_texts(subject: Subject) -> dict[str, list[str]]:
    """What each page must show before it is captured."""
    count = len(subject.traced_rollouts)
    return {"traces": ["Session", "reward", f"{min(count, TRACE_LIST_ROWS)} of {count}"],
            "trace": [f"rollout {subject.rollout_id}", "chat 0"],
            "session": [subject.session_id, f"Turn {subject.session_size}"],
            "charts": [*subject.run_names, "loss"]}


CHARTS_SHOWN = ["loss/total", "rollout/reward_mean"]
"""What the filtered charts page must show (every run logs both)."""


def take_screenshots(tracking_uri: str, experiment: str, out: Path, *, width_px: int = 1600,
                     height_px: int = 1000, timeout_s: float = 90.0, chart_filter: str = CHARTS_FILTER,
                     charts_height_px: int | None = None, pages: Collection[str] = tuple(FILES)) -> Captured:
    """Capture the five pages of `experiment` into `out` (FILES); the text of each page as it was captured. The charts
    page shows the charts `chart_filter` matches ("": all of them), in a viewport `charts_height_px` tall (None:
    `height_px`; the UI stacks a section per metric prefix, so two sections need about 1,400 px). `pages`: which
    of FILES to capture (the call is selected in the trace page, so "call" needs "trace")."""
    unknown = set(pages) - set(FILES)
    if unknown or ("call" in pages and "trace" not in pages):
        raise ValueError(f"pages {sorted(pages)}: name pages of {sorted(FILES)}, and 'trace' with 'call'")
    subject = choose(MlflowClient(tracking_uri), experiment)
    urls, expected = ui_urls(tracking_uri, subject), expected_texts(subject)
    files, texts = {}, {}
    with headless_chromium(width_px=width_px, height_px=height_px) as page:
        for name, url in urls.items():
            if name not in pages:
                continue
            path = out / FILES[name]
            if name == "charts" and charts_height_px:
                page.set_viewport(width_px, charts_height_px)
            texts[name] = _capture(page, url, expected[name], path, timeout_s)
            files[name] = str(path)
            if name == "charts" and chart_filter:
                texts[name] = _capture_charts(page, texts[name], chart_filter, CHARTS_SHOWN, path, timeout_s)
            if name == "trace" and "call" in pages:
                files["call"] = str(out / FILES["call"])
                texts["call"] = _capture_call(page, texts[name], out / FILES["call"], timeout_s)
    return Captured(files, texts, subject)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--chart-filter", default=CHARTS_FILTER, help="regex of the charts shown ('': all)")
    parser.add_argument("--charts-height", type=int, default=None, help="the charts page's height (default: --height)")
    parser.add_argument("--pages", nargs="+", default=list(FILES), choices=list(FILES), help="the pages captured")
    args = parser.parse_args()
    captured = take_screenshots(args.tracking_uri, args.experiment, args.out, width_px=args.width,
                                height_px=args.height, chart_filter=args.chart_filter,
                                charts_height_px=args.charts_height, pages=args.pages)
    print(json.dumps({"files": captured.files, "subject": asdict(captured.subject)}, indent=1))


if __name__ == "__main__":
    main()
