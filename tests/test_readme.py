"""The README works as written: every ```bash block of README.md is run here, or checked mechanically where it cannot
run inside the suite (the reason is with its check). A block is known by its heading and its first command; a new or
changed block without an entry in TESTED_BY fails, naming itself.

- "Run the pieces by hand" (both blocks): run as written, in a temporary directory, by one bash, with real processes;
  only the fixed ports 8001 (engine) and 8100 (gateway) become free ports, so that a server already on them (a real
  gateway on this machine, another test) cannot answer instead.
- "Two commands": `make test` is the suite itself but this module's runs (`.ci/run` runs them after it, `make
  test-e2e`), `make train` a ten-minute job; checked: the targets
  expand (`make -n`) to the commands the README describes; the flows they run are tested end to end elsewhere.
- "Train your own agent" (every block): run as written, in a temporary directory, by one bash with the venv's bin
  first on PATH (the README says to activate it), MLflow in the temporary directory; SmolLM2 trains the recipe file's
  agent for one iteration, which must update the policy once.
- "Run the services": needs `make services` in another terminal; checked: the deployments exist in prefect.yaml,
  `--params` fit the flow and the run config, the CLI has the options. tests/flows/test_deployment.py runs
  `prefect deployment run train-swe/default --watch` against `make services`' own script (deploy/services.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from engines.server_process import STOP_GRACE_S, stop_process_group
from gateway.client import GatewayClient
from gateway.records import RolloutState
from tests.gateway.support import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_LANGUAGES = {"sh", "shell", "console", "zsh", "bash"}
BY_HAND_PORTS = {"8001": "engine", "8100": "gateway"}
BY_HAND_TIMEOUT_S = 420


@dataclass(frozen=True)
class Block:
    """One fenced ```bash block: the heading above it, its first command (without its comment), its text."""

    heading: str
    first_command: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        return self.heading, self.first_command


def bash_blocks(markdown: str) -> list[Block]:
    """The ```bash blocks of `markdown`, each with the nearest heading above it."""
    blocks, heading, fence, lines = [], "", None, []
    for line in markdown.splitlines():
        if fence is None and line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif fence is None and line.startswith("```"):
            fence, lines = line[3:].strip(), []
        elif fence is not None and line.startswith("```"):
            if fence == "bash":
                blocks.append(Block(heading, first_command(lines), "\n".join(lines) + "\n"))
            fence = None
        elif fence is not None:
            lines.append(line)
    return blocks


def fence_languages(markdown: str) -> list[str]:
    """The info string of every opening fence."""
    languages, inside = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            if not inside:
                languages.append(line[3:].strip())
            inside = not inside
    return languages


def first_command(lines: list[str]) -> str:
    """The block's first non-empty line without its trailing comment."""
    first = next(line for line in lines if line.strip())
    return re.split(r"\s+#\s", first, maxsplit=1)[0].strip()


def readme_blocks() -> dict[tuple[str, str], Block]:
    """README.md's bash blocks by key."""
    return {block.key: block for block in bash_blocks(README.read_text())}


# ---------------------------------------------------------------- "Two commands": make targets (checked)

MAKE_TARGETS = {  # target -> a command its recipe must run (make -n), and the tests running the same thing
    "test": ("-m pytest", ".ci/run runs `make test` (this very suite) and `make test-e2e`"),
    "train": ("harnessrl train swe", "tests/flows/test_train_flow.py, tests/flows/test_deployment.py (train-swe)"),
}


def check_make_targets(block: Block) -> None:
    """Each `make TARGET` line names a target whose dry run shows the README's command."""
    targets = [shlex.split(line)[1] for line in command_lines(block) if line.startswith("make ")]
    assert targets == list(MAKE_TARGETS), f"README's make targets {targets}; update MAKE_TARGETS in {__file__}"
    for target, (expected, _tested_by) in MAKE_TARGETS.items():
        result = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"`make -n {target}` failed:\n{result.stderr}"
        assert expected in result.stdout, f"`make -n {target}` does not run {expected!r}:\n{result.stdout}"


def command_lines(block: Block) -> list[str]:
    """The block's commands, one per line, comments and blank lines dropped."""
    lines = (re.split(r"\s+#\s", line, maxsplit=1)[0].strip() for line in block.text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


# ---------------------------------------------------------------- "Run the services": prefect deployment run (checked)

def check_deployment_runs(block: Block) -> None:
    """PREFECT_API_URL is `make services`' default; each run names a deployment of prefect.yaml with fitting params."""
    lines = command_lines(block)
    port = re.search(r"^PREFECT_PORT \?= (\d+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert lines[0] == f"export PREFECT_API_URL=http://127.0.0.1:{port}/api", (lines[0], port)
    deployments = prefect_deployments()
    for line in lines[1:]:
        words = shlex.split(line)
        assert words[:3] == [".venv/bin/prefect", "deployment", "run"], f"not a deployment run: {line}"
        assert words[3] in deployments, f"{words[3]} is not a deployment of prefect.yaml ({sorted(deployments)})"
        check_params(words[3], deployments[words[3]], words[4:])
    check_prefect_options({word for line in lines[1:] for word in shlex.split(line) if word.startswith("--")})


def prefect_deployments() -> dict[str, dict]:
    """'flow-name/deployment-name' -> its prefect.yaml entry; the flow name as Prefect loads it from the entrypoint."""
    project = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {f"{flow_name(entry['entrypoint'])}/{entry['name']}": entry for entry in project["deployments"]}


def flow_name(entrypoint: str) -> str:
    """The name of the flow the entrypoint loads (a @flow function, or a flow renamed with Flow.with_options)."""
    from prefect.flows import load_flow_from_entrypoint

    return load_flow_from_entrypoint(str(ROOT / entrypoint)).name


def check_params(name: str, deployment: dict, args: list[str]) -> None:
    """`--params` is JSON of the deployment's parameters, and its overrides load with the deployment's profile."""
    from flows.config import load_run_config

    params = json.loads(args[args.index("--params") + 1]) if "--params" in args else {}
    unknown = set(params) - set(deployment["parameters"])
    assert not unknown, f"{name}: --params {sorted(unknown)} are not parameters of the flow"
    parameters = deployment["parameters"]
    load_run_config(parameters["profile"], params.get("overrides"), parameters.get("recipe"))


def check_prefect_options(options: set[str]) -> None:
    """The options the README passes are options of `prefect deployment run`."""
    result = subprocess.run([str(Path(sys.executable).parent / "prefect"), "deployment", "run", "--help"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    missing = {option for option in options if option not in result.stdout}
    assert not missing, f"`prefect deployment run` has no {sorted(missing)}:\n{result.stdout}"


# ---------------------------------------------------------------- the table

TESTED_BY: dict[tuple[str, str], tuple[str, Callable[[Block], None] | None]] = {
    ("Two commands", "make test"): ("checked: make -n; `make test` is the suite itself", check_make_targets),
    ("Run the services", "export PREFECT_API_URL=http://127.0.0.1:4200/api"):
        ("checked: deployments and params; run by tests/flows/test_deployment.py", check_deployment_runs),
    ("Run the pieces by hand", ". .venv/bin/activate"): ("run: test_the_pieces_by_hand_run_as_written", None),
    ("Run the pieces by hand", "harnessrl controller run --gateway http://127.0.0.1:8100 --runner local "
                               "--concurrency 8 --recipe instruction_following \\"):
        ("run: test_the_pieces_by_hand_run_as_written", None),
}
OWN_AGENT = "Train your own agent"
TESTED_BY |= {(OWN_AGENT, command): ("run: test_train_your_own_agent_runs_as_written", None) for command in (
    "mkdir my-agent && cd my-agent", "cat > tasks.jsonl <<'EOF'", "cat > grade.py <<'EOF'",
    "cat > my_recipe.yaml <<'EOF'", "harnessrl train --recipe-file my_recipe.yaml")}
BY_HAND = [key for key in TESTED_BY if key[0] == "Run the pieces by hand"]


def test_every_bash_block_is_run_or_checked() -> None:
    found = readme_blocks()
    unknown = [f"under '{heading}': {command}" for heading, command in found if (heading, command) not in TESTED_BY]
    stale = [f"under '{heading}': {command}" for heading, command in TESTED_BY if (heading, command) not in found]
    assert not unknown, f"README.md bash blocks that no test runs or checks: {unknown}; add each to TESTED_BY"
    assert not stale, f"TESTED_BY names blocks README.md no longer has: {stale}; update TESTED_BY"


def test_every_shell_block_is_marked_bash() -> None:
    hidden = [language for language in fence_languages(README.read_text())
              if language in SHELL_LANGUAGES - {"bash"}]
    assert not hidden, f"README.md has shell blocks marked {hidden}; mark them ```bash so that this module sees them"


@pytest.mark.parametrize("key", [key for key, (_, check) in TESTED_BY.items() if check is not None],
                         ids=lambda key: key[0])
def test_checked_blocks_hold(key: tuple[str, str]) -> None:
    _, check = TESTED_BY[key]
    check(readme_blocks()[key])


def test_bash_blocks_are_found_with_their_heading_and_first_command() -> None:
    markdown = "# A\n```bash\n\nmake x   # note\nmore\n```\n## B\n```\nnot bash\n```\n```bash\necho hi\n```\n"
    assert [block.key for block in bash_blocks(markdown)] == [("A", "make x"), ("B", "echo hi")]
    assert fence_languages(markdown) == ["bash", "", "bash"]


# ---------------------------------------------------------------- "Run the pieces by hand" (run)

def by_hand_script(ports: dict[str, int]) -> str:
    """Both blocks, in README order, in one shell session; 8001 and 8100 replaced by `ports`."""
    blocks = readme_blocks()
    script = "".join(blocks[key].text for key in BY_HAND)
    for fixed, port in ports.items():
        assert re.search(rf"\b{fixed}\b", script), f"README's by-hand blocks no longer use port {fixed}"
        script = re.sub(rf"\b{fixed}\b", str(port), script)
    return script


def created_comment(script: str) -> dict:
    """The rollout the README says the creation answers (its `# -> [...]` line)."""
    (line,) = [line for line in script.splitlines() if line.startswith("# -> ")]
    (created,) = json.loads(line.removeprefix("# -> "))
    return created


@pytest.mark.slow
@pytest.mark.e2e
def test_the_pieces_by_hand_run_as_written(tmp_path: Path) -> None:
    ports = {fixed: free_port() for fixed in BY_HAND_PORTS}
    script, workdir, log_path = by_hand_script(ports), tmp_path / "project", tmp_path / "output.log"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(Path(sys.prefix))  # the README runs from the project root, .venv there
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HARNESSRL_ADMIN", "HARNESSRL_GRADER"))}
    with open(log_path, "w") as log:  # a file, not a pipe: the `&` servers keep their stdout open after the shell
        proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=workdir, env=env, start_new_session=True,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            proc.wait(timeout=BY_HAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the README's by-hand blocks did not finish in {BY_HAND_TIMEOUT_S} s:\n{tail(log_path)}")
        assert proc.returncode == 0, f"the README's by-hand blocks failed ({proc.returncode}):\n{tail(log_path)}"
        check_by_hand_results(workdir, f"http://127.0.0.1:{ports['8100']}", created_comment(script),
                              log_path.read_text())
    finally:
        stop_process_group(proc, STOP_GRACE_S)


def tail(path: Path, chars: int = 6000) -> str:
    """The end of a log file."""
    return path.read_text(errors="replace")[-chars:]


def check_by_hand_results(workdir: Path, gateway_url: str, comment: dict, output: str) -> None:
    """What the blocks say happens: the creation answer, the hand-run call, the controller's graded attempt."""
    (created,) = json.loads((workdir / "r1.json").read_text())
    assert {**created, "api_key": "hrl.…"} == comment, (created, comment)
    assert created["api_key"].startswith("hrl."), created
    assert (workdir / "gateway.db").exists(), "the gateway's store is not where --db says"
    with GatewayClient(gateway_url, "change-me") as admin:
        rollout, calls = admin.get_rollout("r1"), admin.calls("r1")
    assert rollout.state == RolloutState.SUCCEEDED and rollout.reward is not None, (rollout, output[-4000:])
    assert [call.attempt for call in calls] == [0, 1], "one call by hand, one by the controller's attempt"
    assert all(call.status == "ok" and call.response_token_ids and call.response_logprobs for call in calls), calls
    assert (calls[0].response_text or "").strip() in output, "the hand-run harness prints its answer"


# ---------------------------------------------------------------- "Train your own agent" (run)

OWN_AGENT_TIMEOUT_S = 900


@pytest.mark.slow
@pytest.mark.e2e
def test_train_your_own_agent_runs_as_written(tmp_path: Path) -> None:
    script = "".join(block.text for block in bash_blocks(README.read_text()) if block.heading == OWN_AGENT)
    log_path = tmp_path / "output.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HARNESSRL_", "MLFLOW_TRACKING"))}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=tmp_path, env=env, start_new_session=True,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            proc.wait(timeout=OWN_AGENT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the README's own-agent blocks did not finish in {OWN_AGENT_TIMEOUT_S} s:\n{tail(log_path)}")
        output = log_path.read_text(errors="replace")
        assert proc.returncode == 0, f"the README's own-agent blocks failed ({proc.returncode}):\n{tail(log_path)}"
        assert re.search(r"run adder-[0-9-]+: 1 iterations, 1 updates", output), tail(log_path)
    finally:
        stop_process_group(proc, STOP_GRACE_S)
        for name in set(re.findall(r"run (adder-[0-9-]+): ", log_path.read_text(errors="replace"))):
            for folder in (ROOT / "runs" / name, ROOT / "checkpoints" / name):  # the defaults: the project's
                shutil.rmtree(folder, ignore_errors=True)
