"""A benchmark harness: k chat calls through the gateway with heavy-tailed "tool" time between them (stdlib only).

It knows only the harness contract (OPENAI_BASE_URL, OPENAI_API_KEY, HARNESSRL_TASK). Its member index in the group
is the last part of its rollout id, read from OPENAI_BASE_URL ({gateway}/r/{rollout_id}/v1). The total sleep is drawn
from a log-normal seeded by (task seed, member), so every schedule sees the same durations for the same task; it is
split over the gaps between the calls (the first call comes at once, as an agent's first model turn does). It writes
`member.txt` for the grader.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import urllib.request

CALL_TIMEOUT_S = 600.0  # a call can be held by the gateway through a whole update


def member_of(base_url: str) -> int:
    """The member index: the last '-' part of the rollout id in `{gateway}/r/{rollout_id}/v1`."""
    rollout_id = base_url.rstrip("/").split("/r/", 1)[1].rsplit("/v1", 1)[0]
    return int(rollout_id.rsplit("-", 1)[1])


def harness_sleeps_s(seed: int, member: int, calls: int, median_s: float, sigma: float, cap: float) -> list[float]:
    """The sleeps between the `calls` chat calls: a log-normal total (median `median_s`, capped at cap x median)."""
    rng = random.Random(f"{seed}-{member}")
    total_s = min(rng.lognormvariate(math.log(median_s), sigma), cap * median_s)
    weights = [rng.uniform(0.5, 1.5) for _ in range(max(calls - 1, 0))]
    return [total_s * w / sum(weights) for w in weights]


def chat(base_url: str, key: str, messages: list[dict], max_tokens: int, seed: int) -> str:
    """One chat completion; the answer's text."""
    body = {"model": "policy", "messages": messages, "max_tokens": max_tokens, "temperature": 1.0, "seed": seed}
    request = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
        return json.load(response)["choices"][0]["message"]["content"] or ""


def main() -> int:
    base_url, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
    with open(os.environ["HARNESSRL_TASK"]) as f:
        task = json.load(f)
    member = member_of(base_url)
    with open("member.txt", "w") as f:
        f.write(str(member))
    sleeps_s = harness_sleeps_s(task["seed"], member, task["calls"], task["median_s"], task["sigma"], task["cap"])
    messages = [{"role": "user", "content": f"Task {task['id']}: fix the failing test in module {member}."}]
    for turn in range(task["calls"]):
        answer = chat(base_url, key, messages, task["max_tokens"], seed=task["seed"] * 100 + member * 10 + turn)
        print(f"turn {turn}: {len(answer)} chars", flush=True)
        if turn < len(sleeps_s):
            time.sleep(sleeps_s[turn])  # the "tool" runs: tests, a build, a search
            messages += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": f"Observation {turn}: command finished after "
                                                     f"{sleeps_s[turn]:.1f} s with exit code {turn % 2}."}]
    return 0


if __name__ == "__main__":
    sys.exit(main())
