"""An offline SWE-smith-style task generator: inject `ast` bugs into a real project that ships its tests, keep those
that break some tests, and write instances in the SWE-smith schema.

Store layout (everything a task needs later, without network):
  <store>/repos/<repo_key>/   the pristine base: the project's source as a git repository (one commit, `base_commit`)
  <store>/instances.jsonl     one SWE-smith instance per line
`repo_key` is `<owner>__<name>.<commit[:8]>` as in SWE-smith (`owner` is `pypi` for sdists, `local` for paths).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from recipes.swe import boundary_wire, bugs, ladder, process_boundary, testrun
from recipes.swe.bugs import Mutation, apply_mutation, candidate_mutations
from recipes.swe.diffs import copy_tree, matches_any
from recipes.swe.ladder import (
    SINGLE_LINE_LEVELS,
    TODAY,
    BugSite,
    LadderMix,
    bug_site,
    instance_level,
    ladder_statement,
    level_sequence,
)
from recipes.swe.testrun import TestRun, run_tests

# Files the generator never mutates (the grader's patch policy refuses the agent's changes to them, and more): tests,
# test folders at any depth, conftest files, test configuration.
TEST_PATTERNS = ("test_*.py", "*_test.py", "conftest.py", "tests/*", "test/*", "testing/*", "*/tests/*", "*/test/*",
                 "*/testing/*")
TEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml")
NOT_SOURCE = ("setup.py", "docs/*", "doc/*", "examples/*", "benchmarks/*", "*.egg-info/*")
SWE_SMITH_FIELDS = ("instance_id", "repo", "patch", "FAIL_TO_PASS", "PASS_TO_PASS", "created_at", "image_name",
                    "base_commit", "problem_statement")
STORED_FIELDS = (*SWE_SMITH_FIELDS, "level")  # the ladder level (ladder.py) is stored beside the schema's fields
INSTANCES_FILE = "instances.jsonl"  # the store's instances, one JSON object a line
GENERATED_DIR = "generated"  # <store>/generated/<key>.json: the instance ids one `generate_or_reuse` call produced
SHOWN_FAILURES = 5  # failing tests quoted in a problem statement
# A fixed identity and date make the base commit (and so every instance id) reproducible.
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "harnessrl", "GIT_AUTHOR_EMAIL": "harnessrl@localhost",
                "GIT_COMMITTER_NAME": "harnessrl", "GIT_COMMITTER_EMAIL": "harnessrl@localhost",
                "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}


@dataclass(frozen=True)
class Base:
    """A pristine project checkout kept in the store."""

    repo_key: str  # `<owner>__<name>.<commit[:8]>`
    path: Path  # the git repository holding the base
    commit: str  # the base commit's full hash


def fetch_sdist(name: str, destination: Path) -> Path:
    """Download `name`'s source distribution from the package index and extract it; returns the project directory."""
    destination.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet", "-d",
            str(destination), name]
    result = subprocess.run(argv, capture_output=True, text=True)
    archives = sorted(destination.glob("*.tar.gz"))
    if result.returncode != 0 or not archives:
        raise RuntimeError(f"could not download an sdist of {name!r}: {result.stderr.strip()[-500:]}; "
                           f"check the name and that the package index is reachable")
    with tarfile.open(archives[-1]) as archive:
        archive.extractall(destination, filter="data")
    return destination / archives[-1].name.removesuffix(".tar.gz")


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_IDENTITY, "GIT_CEILING_DIRECTORIES": str(repo.parent)}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def store_base(project: Path, store: Path, owner: str) -> Base:
    """Copy `project` into the store as a one-commit git repository (reused when already there)."""
    name = project.name.split("-")[0].lower()
    staging = Path(tempfile.mkdtemp(prefix="harnessrl-base-", dir=store))
    copy_tree(project, staging / "repo")
    _git(staging / "repo", "init", "--quiet", "--initial-branch=main")
    _git(staging / "repo", "add", "--all")
    _git(staging / "repo", "commit", "--quiet", "--message", f"base of {project.name}")
    commit = _git(staging / "repo", "rev-parse", "HEAD")
    repo_key = f"{owner}__{name}.{commit[:8]}"
    path = store / "repos" / repo_key
    if path.exists():
        shutil.rmtree(staging)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        (staging / "repo").rename(path)
        shutil.rmtree(staging)
    return Base(repo_key=repo_key, path=path, commit=commit)


def source_files(repo: Path) -> list[str]:
    """The project's Python source files (tests, configuration and packaging left out), sorted."""
    files = []
    for path in sorted(repo.rglob("*.py")):
        relative = path.relative_to(repo).as_posix()
        if ".git/" not in relative and not matches_any(relative, TEST_PATTERNS + NOT_SOURCE):
            files.append(relative)
    return files


def bug_patch(relative: str, before: str, after: str) -> str:
    """The git-style diff of one mutated file."""
    body = "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        f"a/{relative}", f"b/{relative}"))
    return f"diff --git a/{relative} b/{relative}\n{body}"


def problem_statement(project: str, failing: list[str], run: TestRun) -> str:
    """An issue-style description from the failing behaviour only (test names and failure messages, no patch)."""
    lines = [f"Something is broken in {project}: {len(failing)} test(s) that used to pass now fail.", ""]
    for node in failing[:SHOWN_FAILURES]:
        message = run.messages.get(node, "").strip().replace("\n", " ")
        lines.append(f"- `{node}`" + (f": {message}" if message else ""))
    if len(failing) > SHOWN_FAILURES:
        lines.append(f"- ... and {len(failing) - SHOWN_FAILURES} more")
    lines += ["", "Find the cause in the library's source and fix it. Do not change the tests; the other tests must "
              "keep passing."]
    return "\n".join(lines)


def bug_id(instance: dict[str, Any]) -> str:
    """The bug an instance states, whatever its ladder level: its id without the level suffix (one bug stated at two
    levels is two instances of one bug; a validation set must not hold a bug the training set holds)."""
    iid, level = str(instance["instance_id"]), instance_level(instance)
    suffix = "" if level == TODAY else f"__l{level}"
    return iid[: len(iid) - len(suffix)] if suffix and iid.endswith(suffix) else iid


def _instance(base: Base, mutation: Mutation, patch: str, failing: list[str], passing: list[str],
              statement: str, level: int) -> dict[str, Any]:
    digest = hashlib.sha256(patch.encode()).hexdigest()[:8]
    suffix = "" if level == TODAY else f"__l{level}"  # one bug stated at two levels is two instances
    return {
        "instance_id": f"{base.repo_key}.{mutation.kind}__{digest}{suffix}",
        "repo": f"harnessrl/{base.repo_key}",
        "patch": patch,
        "FAIL_TO_PASS": failing,
        "PASS_TO_PASS": passing,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "image_name": f"local:repos/{base.repo_key}",
        "base_commit": base.commit,
        "problem_statement": statement,
        "level": level,
    }


def generate_instances(base: Base, count: int, seed: int, *, max_candidates: int = 60, timeout_s: float = 300.0,
                       mix: LadderMix | None = None) -> list[dict[str, Any]]:
    """Up to `count` instances from bugs drawn with `seed`; kept when it fails a test that passed at base. `mix`
    (default: every task at the original level) gives each task its ladder level; a level that names one line only
    takes bugs that change one line (others are passed over without running the tests)."""
    levels = level_sequence(mix or LadderMix(), count, seed)
    with tempfile.TemporaryDirectory(prefix="harnessrl-gen-") as scratch:
        work = Path(scratch) / "repo"
        copy_tree(base.path, work)
        baseline = run_tests(work, timeout_s=timeout_s)
        passing_at_base = sorted(baseline.with_outcome("passed"))
        if not passing_at_base:
            raise RuntimeError(f"no test passes at the base of {base.repo_key}; pytest said:\n{baseline.output_tail}")
        candidates = [(relative, m) for relative in source_files(work)
                      for m in candidate_mutations((work / relative).read_text(encoding="utf-8"))]
        random.Random(seed).shuffle(candidates)
        instances: list[dict[str, Any]] = []
        tried = 0
        for relative, mutation in candidates:
            if len(instances) == count or tried == max_candidates:
                break
            level = levels[len(instances)]
            original = (work / relative).read_text(encoding="utf-8")
            site = bug_site(relative, original, apply_mutation(original, mutation), mutation.kind)
            if site is None and level in SINGLE_LINE_LEVELS:
                continue
            tried += 1
            instance = _try_bug(base, work, relative, mutation, passing_at_base, timeout_s, level, site)
            if instance is not None:
                instances.append(instance)
    return instances


def _try_bug(base: Base, work: Path, relative: str, mutation: Mutation, passing_at_base: list[str],
             timeout_s: float, level: int, site: BugSite | None) -> dict[str, Any] | None:
    path = work / relative
    original = path.read_text(encoding="utf-8")
    mutated = apply_mutation(original, mutation)
    path.write_text(mutated, encoding="utf-8")
    try:
        run = run_tests(work, passing_at_base, timeout_s=timeout_s, rounds=1)  # our own bug: no canaries
    finally:
        path.write_text(original, encoding="utf-8")
    failing = [node for node in passing_at_base if run.outcomes.get(node) == "failed"]
    passing = [node for node in passing_at_base if run.outcomes.get(node) == "passed"]
    if not failing:
        return None
    behaviour = problem_statement(base.repo_key.split("__", 1)[1].split(".")[0], failing, run)
    statement = ladder_statement(level, behaviour, relative, site)
    return _instance(base, mutation, bug_patch(relative, original, mutated), failing, passing, statement, level)


def write_instances(store: Path, instances: list[dict[str, Any]]) -> Path:
    """Add instances to `<store>/instances.jsonl` (an instance id already there is replaced)."""
    path = store / INSTANCES_FILE
    kept = {i["instance_id"]: i for i in load_instances(store)}
    kept.update({i["instance_id"]: {k: i[k] for k in STORED_FIELDS if k in i} for i in instances})
    path.write_text("".join(json.dumps(i, sort_keys=False) + "\n" for i in kept.values()), encoding="utf-8")
    return path


def load_instances(store: Path) -> list[dict[str, Any]]:
    """The instances in `<store>/instances.jsonl` ([] when there are none)."""
    path = store / INSTANCES_FILE
    return parse_instances(path.read_bytes()) if path.exists() else []


def parse_instances(content: bytes) -> list[dict[str, Any]]:
    """The instances of an `instances.jsonl` file's bytes."""
    return [json.loads(line) for line in content.decode("utf-8").splitlines() if line.strip()]


def find_instance(store: Path, instance_id: str) -> dict[str, Any]:
    """The instance `instance_id` of the store; raises naming the store when absent."""
    for instance in load_instances(store):
        if instance["instance_id"] == instance_id:
            return instance
    raise KeyError(f"instance {instance_id!r} is not in {store / INSTANCES_FILE}; generate it first")


def base_path(store: Path, instance: dict[str, Any]) -> Path:
    """The pristine base directory of an instance."""
    return store / "repos" / instance["repo"].split("/", 1)[1]


def generate(source: str, store: Path, count: int, seed: int, **options: Any) -> list[dict[str, Any]]:
    """Generate and store `count` instances from `source`: `pypi:<name>` (an sdist) or a local project path
    (`options`: generate_instances' keywords, e.g. `mix`)."""
    store.mkdir(parents=True, exist_ok=True)
    if source.startswith("pypi:"):
        with tempfile.TemporaryDirectory(prefix="harnessrl-sdist-") as download:
            base = store_base(fetch_sdist(source.removeprefix("pypi:"), Path(download)), store, owner="pypi")
    else:
        base = store_base(Path(source), store, owner="local")
    instances = generate_instances(base, count, seed, **options)
    write_instances(store, instances)
    return instances


def generation_key(source: str, count: int, seed: int, mix: LadderMix) -> str:
    """What fixes a generation's outcome: the source, count, seed, mix and the code of the generator and of the test
    runs that decide which tests pass (the process boundary decides which tests can be graded at all)."""
    code = hashlib.sha256()
    for module in (sys.modules[__name__], bugs, ladder, testrun, process_boundary, boundary_wire):
        code.update(Path(module.__file__ or "").read_bytes())
    payload = {"source": source, "count": count, "seed": seed, "levels": sorted(mix.levels.items()),
               "code": code.hexdigest()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def generate_or_reuse(source: str, store: Path, count: int, seed: int, mix: LadderMix) -> list[dict[str, Any]]:
    """`generate`'s instances, reused from the store when the same source, count, seed, mix and generator code made
    them before (the bug search runs the project's tests per candidate: minutes on a busy machine); a local source
    is taken as unchanged, `pypi:` stays at the release first fetched. Delete `<store>/generated/` to search again."""
    index = store / GENERATED_DIR / f"{generation_key(source, count, seed, mix)}.json"
    if index.is_file():
        stored = {instance["instance_id"]: instance for instance in load_instances(store)}
        ids = json.loads(index.read_text(encoding="utf-8"))
        if all(iid in stored and base_path(store, stored[iid]).is_dir() for iid in ids):
            return [stored[iid] for iid in ids]
    instances = generate(source, store, count, seed, mix=mix)
    index.parent.mkdir(parents=True, exist_ok=True)
    staging = index.with_suffix(".tmp")
    staging.write_text(json.dumps([i["instance_id"] for i in instances]), encoding="utf-8")
    staging.replace(index)
    return instances
