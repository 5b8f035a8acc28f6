"""A test harness: knows only the harness contract. The task's "mode" says how it behaves.

ok: one chat call through OPENAI_BASE_URL, prints the answer, exits 0.  exit3: one chat call, exits 3.
crash: aborts (SIGABRT).  hang: sleeps forever.  call_then_fail: one chat call (its error status is the gateway's),
exits 1.  post_then_fail: POSTs the task's `body` to `<OPENAI_BASE_URL><path>` with the stdlib (no SDK to import),
prints the status, exits 1 whatever the answer.  env: prints its environment's variable names, exits 0.  once: like
ok, but first creates `<marker_dir>/<rollout key>` exclusively (a second start of the same rollout fails loudly).
"""

import json
import os
import sys
import time


def chat(task_model: str) -> str:
    from openai import OpenAI

    client = OpenAI(max_retries=0, timeout=30)
    answer = client.chat.completions.create(model=task_model, messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=4)
    return answer.choices[0].message.content


def post(path: str, body: dict) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + path, data=json.dumps(body).encode(), headers={
        "authorization": f"Bearer {os.environ['OPENAI_API_KEY']}", "content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def main() -> int:
    with open(os.environ["HARNESSRL_TASK"]) as f:
        task = json.load(f)
    mode = task["mode"]
    if mode == "once":
        marker = os.path.join(task["marker_dir"], task["name"])
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        time.sleep(task.get("sleep_s", 0))
    if mode in ("ok", "once", "exit3"):
        print(chat(task.get("model", "policy")))
        return 3 if mode == "exit3" else 0
    if mode == "call_then_fail":
        try:
            chat(task.get("model", "policy"))
        except Exception as exc:  # noqa: BLE001 - the test wants the failure to end the harness
            print(f"call failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if mode == "post_then_fail":
        print(f"HTTP {post(task['path'], task['body'])}")
        return 1
    if mode == "crash":
        os.abort()
    if mode == "hang":
        time.sleep(10_000)
    if mode == "env":
        print(" ".join(sorted(os.environ)))
        return 0
    print(f"unknown mode {mode!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
