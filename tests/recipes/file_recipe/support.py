"""A recipe folder as the README's "Train your own agent" lays it out (agent, tasks, grader, recipe file)."""

from __future__ import annotations

import json
from pathlib import Path

AGENT = '''import json, os
from openai import OpenAI

task = json.load(open(os.environ["HARNESSRL_TASK"]))
reply = OpenAI().chat.completions.create(model="policy", max_tokens=8, messages=[
    {"role": "user", "content": task["question"] + " Reply with the number only."}])
answer = reply.choices[0].message.content or ""
open("answer.txt", "w").write(answer)
'''
GRADER = '''import json, os, re

task = json.load(open(os.environ["HARNESSRL_TASK"]))
answer = open(os.environ["HARNESSRL_ANSWER"]).read()
numbers = re.findall(r"-?[0-9]+", answer)
correct = bool(numbers) and int(numbers[-1]) == task["answer"]
print(json.dumps({"reward": float(correct), "details": {"answer": answer[:100]}}))
'''
RECIPE = '''name: sums
tasks: tasks.jsonl
hidden: [answer]
harness:
  command: [python, agent.py]
grader:
  command: [python, grade.py]
  timeout_s: 30
'''


def recipe_folder(root: Path, recipe: str = RECIPE, grader: str = GRADER, tasks: int = 10) -> Path:
    """`root` (made world-readable: the sandboxes run as other users) holding the four files; returns the YAML."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / "agent.py").write_text(AGENT)
    (root / "grade.py").write_text(grader)
    (root / "tasks.jsonl").write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?", "answer": 2 * i + 1})
                                              + "\n" for i in range(tasks)))
    (root / "my_recipe.yaml").write_text(recipe)
    for path in root.iterdir():
        path.chmod(0o644)
    return root / "my_recipe.yaml"
