"""Environment backends: the generated store (real git bases), an OCI registry (a local server answering so), git
mirrors (local bare repositories reached as file:// URLs) and their combination."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recipes.swe.environments import (
    AllOf,
    EnvironmentBackend,
    GitBranchEnvironment,
    GitRemoteError,
    ImageReference,
    LocalStoreEnvironment,
    RegistryError,
    RegistryImageEnvironment,
    parse_challenge,
    parse_image_reference,
    swebench_image_name,
)
from recipes.swe.generator import store_base, write_instances
from tests.recipes.swe.conftest import write_tiny_project


@pytest.mark.parametrize(("instance_id", "image"), [
    ("django__django-11099", "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"),
    ("astropy__astropy-12907", "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"),
    ("sphinx-doc__sphinx-8551", "swebench/sweb.eval.x86_64.sphinx-doc_1776_sphinx-8551:latest"),
    ("Org__Repo-1", "swebench/sweb.eval.x86_64.org_1776_repo-1:latest"),
])
def test_official_swebench_image_names(instance_id, image):
    assert swebench_image_name(instance_id) == image


def test_swebench_image_name_options():
    assert swebench_image_name("a__b-1", namespace="mirror", arch="arm64", tag="v2") == \
        "mirror/sweb.eval.arm64.a_1776_b-1:v2"


@pytest.mark.parametrize(("image", "expected"), [
    ("swebench/sweb.eval.x86_64.a_1776_b-1:latest", ImageReference(None, "swebench/sweb.eval.x86_64.a_1776_b-1",
                                                                   "latest")),
    ("ubuntu", ImageReference(None, "library/ubuntu", "latest")),
    ("localhost:5000/team/img:1.0", ImageReference("localhost:5000", "team/img", "1.0")),
    ("ghcr.io/org/img@sha256:abc", ImageReference("ghcr.io", "org/img", "sha256:abc")),
    ("registry.local/img", ImageReference("registry.local", "img", "latest")),
])
def test_image_references(image, expected):
    assert parse_image_reference(image) == expected


def test_bearer_challenge_fields():
    header = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull"'
    assert parse_challenge(header) == {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                                       "scope": "repository:a/b:pull"}


# --- the local store -------------------------------------------------------------------------------------------


def local_instance(instance_id: str, repo_key: str, commit: str | None) -> dict:
    return {"instance_id": instance_id, "source": "swe-smith", "repo": f"harnessrl/{repo_key}", "base_commit": commit,
            "problem_statement": "broken", "FAIL_TO_PASS": ["t::a"], "PASS_TO_PASS": [],
            "image_name": f"local:repos/{repo_key}", "patch": "", "created_at": None}


def test_local_store_needs_the_listed_instance_and_its_base_commit(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    base = store_base(write_tiny_project(tmp_path / "tinymath"), store, owner="local")
    good = local_instance("good", base.repo_key, base.commit)
    wrong_commit = local_instance("wrong-commit", base.repo_key, "f" * 40)
    no_repo = local_instance("no-repo", "local__gone.12345678", base.commit)
    no_commit = local_instance("no-commit", base.repo_key, None)
    write_instances(store, [good, wrong_commit, no_repo, no_commit])
    unlisted = local_instance("unlisted", base.repo_key, base.commit)
    backend: EnvironmentBackend = LocalStoreEnvironment(store)
    answers = backend.available([good, wrong_commit, no_repo, no_commit, unlisted])
    assert answers == {"good": True, "wrong-commit": False, "no-repo": False, "no-commit": False, "unlisted": False}
    assert set(backend.last_reasons) == {"wrong-commit", "no-repo", "no-commit", "unlisted"}
    assert f"does not hold commit {'f' * 40}" in backend.last_reasons["wrong-commit"]
    assert "instances.jsonl" in backend.last_reasons["unlisted"]
    assert "local__gone.12345678 does not exist" in backend.last_reasons["no-repo"]


# --- an OCI registry ---------------------------------------------------------------------------------------------


class Registry:
    """What the fake registry holds and how it answers."""

    def __init__(self) -> None:
        self.present = {("swebench/sweb.eval.x86_64.django_1776_django-11099", "latest"),
                        ("jyangballin/swesmith.x86_64.owner_1776_repo.abc123", "latest")}
        self.token_required = False
        self.fail_next: list[int] = []  # statuses answered before the real answer (5xx, 429)
        self.heads: list[str] = []
        self.token_requests: list[str] = []


@pytest.fixture
def registry() -> Iterator[tuple[str, Registry]]:
    state = Registry()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            state.heads.append(self.path)
            if state.fail_next:
                self._answer(state.fail_next.pop(0))
                return
            if state.token_required and self.headers.get("Authorization") != "Bearer good-token":
                realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
                self._answer(401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="fake-registry"'})
                return
            name, _, tag = self.path.removeprefix("/v2/").rpartition("/manifests/")
            if "manifest" not in self.headers.get("Accept", ""):
                self._answer(400)
            else:
                self._answer(200 if (name, tag) in state.present else 404)

        def do_GET(self) -> None:  # noqa: N802
            state.token_requests.append(self.path)
            body = json.dumps({"token": "good-token"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _answer(self, status: int, headers: dict | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()
    server.server_close()


ROWS = [
    {"instance_id": "django__django-11099", "source": "swe-bench-verified", "image_name": None},
    {"instance_id": "django__django-99999", "source": "swe-bench-verified", "image_name": None},
    {"instance_id": "owner__repo.abc123.lm_rewrite__1", "source": "swe-smith",
     "image_name": "jyangballin/swesmith.x86_64.owner_1776_repo.abc123"},
    {"instance_id": "owner__repo.abc123.lm_rewrite__2", "source": "swe-smith",
     "image_name": "jyangballin/swesmith.x86_64.owner_1776_repo.abc123"},
    {"instance_id": "local-1", "source": "swe-smith", "image_name": "local:repos/local__tiny.0123abcd"},
    {"instance_id": "no-image", "source": "swe-smith", "image_name": None},
]
EXPECTED = {"django__django-11099": True, "django__django-99999": False, "owner__repo.abc123.lm_rewrite__1": True,
            "owner__repo.abc123.lm_rewrite__2": True, "local-1": False, "no-image": False}


def test_registry_answers_per_instance_asking_each_image_once(registry):
    url, state = registry
    backend = RegistryImageEnvironment(url, timeout_s=5)
    assert backend.available(ROWS) == EXPECTED
    assert sorted(state.heads) == sorted([
        "/v2/swebench/sweb.eval.x86_64.django_1776_django-11099/manifests/latest",
        "/v2/swebench/sweb.eval.x86_64.django_1776_django-99999/manifests/latest",
        "/v2/jyangballin/swesmith.x86_64.owner_1776_repo.abc123/manifests/latest"])
    assert "is not in http://127.0.0.1" in backend.last_reasons["django__django-99999"]
    assert "local" in backend.last_reasons["local-1"] and set(backend.last_reasons) == {
        "django__django-99999", "local-1", "no-image"}


def test_registry_bearer_challenge_is_followed_anonymously(registry):
    url, state = registry
    state.token_required = True
    assert RegistryImageEnvironment(url, timeout_s=5, max_workers=1).available(ROWS) == EXPECTED
    assert len(state.token_requests) == 3  # one token per repository
    assert all("service=fake-registry" in path and "scope=repository" in path for path in state.token_requests)


def test_registry_retries_server_errors_then_names_the_registry(registry):
    url, state = registry
    state.fail_next = [503, 429]
    assert RegistryImageEnvironment(url, timeout_s=5, retries=2, backoff_s=0.01).manifest_exists(
        "swebench/sweb.eval.x86_64.django_1776_django-11099:latest")
    state.fail_next = [500, 500, 500]
    with pytest.raises(RegistryError, match=r"answered HTTP 500 for swebench/x:latest; check the registry URL"):
        RegistryImageEnvironment(url, timeout_s=5, retries=2, backoff_s=0.01).manifest_exists("swebench/x:latest")


def test_unreachable_registry_is_an_error_not_a_missing_image(tmp_path):
    backend = RegistryImageEnvironment("http://127.0.0.1:9", timeout_s=1, retries=0)
    with pytest.raises(RegistryError, match="cannot reach http://127.0.0.1:9"):
        backend.available(ROWS[:1])


# --- git mirrors (SWE-smith task branches) -----------------------------------------------------------------------

GIT_ENV = {"PATH": "/usr/bin:/bin:/usr/local/bin", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


def make_mirror(root: Path, repo: str, branches: list[str]) -> None:
    """A bare repository at root/<repo>.git whose heads are main and `branches` (as SWE-smith's mirrors are)."""
    bare = root / f"{repo}.git"
    bare.mkdir(parents=True)
    git(bare, "init", "--quiet", "--bare")
    work = root / "work" / repo
    work.mkdir(parents=True)
    git(work, "init", "--quiet", "--initial-branch=main")
    (work / "code.py").write_text("x = 1\n")
    git(work, "add", "code.py")
    git(work, "commit", "--quiet", "-m", "base")
    for branch in branches:
        git(work, "branch", branch)
    git(work, "push", "--quiet", bare.as_uri(), "main", *branches)


MIRROR_A, MIRROR_B = "swesmith/owner__proj.abc12345", "swesmith/other__lib.deadbeef"


def smith_row(instance_id: str, repo: str, image: str | None = "swebench/swesmith.x86_64.img") -> dict:
    return {"instance_id": instance_id, "source": "swe-smith", "repo": repo, "image_name": image}


@pytest.fixture
def mirrors(tmp_path) -> str:
    make_mirror(tmp_path, MIRROR_A, ["owner__proj.abc12345.func_pm__1", "owner__proj.abc12345.lm_rewrite__2"])
    make_mirror(tmp_path, MIRROR_B, ["other__lib.deadbeef.combine__3"])
    return f"{tmp_path.as_uri()}/{{repo}}.git"


def test_git_branches_are_found_per_instance_listing_each_remote_once(mirrors, monkeypatch):
    rows = [smith_row("owner__proj.abc12345.func_pm__1", MIRROR_A),
            smith_row("owner__proj.abc12345.lm_rewrite__2", MIRROR_A),
            smith_row("owner__proj.abc12345.gone__9", MIRROR_A),
            smith_row("other__lib.deadbeef.combine__3", MIRROR_B),
            smith_row("local-1", "harnessrl/local__tiny.0123abcd", "local:repos/local__tiny.0123abcd"),
            smith_row("no-repo", "")]
    backend: EnvironmentBackend = GitBranchEnvironment(mirrors, timeout_s=30)
    listed: list[str] = []
    heads = GitBranchEnvironment.heads
    monkeypatch.setattr(GitBranchEnvironment, "heads",
                        lambda self, remote: listed.append(remote) or heads(self, remote))
    assert backend.available(rows) == {
        "owner__proj.abc12345.func_pm__1": True, "owner__proj.abc12345.lm_rewrite__2": True,
        "owner__proj.abc12345.gone__9": False, "other__lib.deadbeef.combine__3": True, "local-1": False,
        "no-repo": False}
    assert sorted(listed) == sorted(mirrors.format(repo=repo) for repo in (MIRROR_A, MIRROR_B))
    assert backend.last_reasons["owner__proj.abc12345.gone__9"] == \
        f"branch owner__proj.abc12345.gone__9 is not in {mirrors.format(repo=MIRROR_A)}"
    assert set(backend.last_reasons) == {"owner__proj.abc12345.gone__9", "local-1", "no-repo"}
    assert "local" in backend.last_reasons["local-1"]


def test_github_is_the_default_remote_of_swesmith_mirrors():
    row = smith_row("owner__proj.abc12345.func_pm__1", MIRROR_A)
    assert GitBranchEnvironment().remote_of(row) == "https://github.com/swesmith/owner__proj.abc12345.git"
    with pytest.raises(ValueError, match=r"no \{repo\} placeholder"):
        GitBranchEnvironment("https://github.com/swesmith.git")


def test_unreachable_remote_is_an_error_not_a_missing_branch(tmp_path, mirrors):
    absent = f"{(tmp_path / 'nowhere').as_uri()}/{{repo}}.git"
    with pytest.raises(GitRemoteError, match=r"ls-remote file://.*nowhere/swesmith/owner__proj.abc12345.git failed"):
        GitBranchEnvironment(absent, timeout_s=30).available([smith_row("owner__proj.abc12345.func_pm__1", MIRROR_A)])


def test_silent_remote_times_out_as_an_error():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        template = f"git://127.0.0.1:{server.getsockname()[1]}/{{repo}}"
        with pytest.raises(GitRemoteError, match=r"no answer within 0.3 s"):
            GitBranchEnvironment(template, timeout_s=0.3).available([smith_row("a.b__1", MIRROR_A)])


class Fixed:
    """A backend answering from a fixed set, recording what it was asked."""

    def __init__(self, present: set[str], reason: str) -> None:
        self.present, self.reason = present, reason
        self.asked: list[str] = []
        self.last_reasons: dict[str, str] = {}

    def available(self, instances: Sequence[Mapping]) -> dict[str, bool]:
        self.asked = [instance["instance_id"] for instance in instances]
        answers = {iid: iid in self.present for iid in self.asked}
        self.last_reasons = {iid: f"{self.reason} {iid}" for iid, ok in answers.items() if not ok}
        return answers


def test_all_of_needs_every_backend_and_joins_their_reasons():
    rows = [{"instance_id": iid} for iid in ("both", "image-only", "branch-only", "neither")]
    images, branches = Fixed({"both", "image-only"}, "no image for"), Fixed({"both", "branch-only"}, "no branch for")
    backend: EnvironmentBackend = AllOf(images, branches)
    assert backend.available(rows) == {"both": True, "image-only": False, "branch-only": False, "neither": False}
    assert images.asked == branches.asked == ["both", "image-only", "branch-only", "neither"]
    assert backend.last_reasons == {"image-only": "no branch for image-only", "branch-only": "no image for branch-only",
                                    "neither": "no image for neither; no branch for neither"}
    with pytest.raises(ValueError, match="at least one"):
        AllOf()


def test_all_of_registry_and_git_on_real_servers(registry, mirrors):
    url, _ = registry
    image = "jyangballin/swesmith.x86_64.owner_1776_repo.abc123"
    rows = [smith_row("owner__proj.abc12345.func_pm__1", MIRROR_A, image),
            smith_row("owner__proj.abc12345.gone__9", MIRROR_A, image),
            smith_row("owner__proj.abc12345.lm_rewrite__2", MIRROR_A, "jyangballin/absent")]
    backend = AllOf(RegistryImageEnvironment(url, timeout_s=5), GitBranchEnvironment(mirrors, timeout_s=30))
    assert backend.available(rows) == {"owner__proj.abc12345.func_pm__1": True, "owner__proj.abc12345.gone__9": False,
                                       "owner__proj.abc12345.lm_rewrite__2": False}
    assert "branch owner__proj.abc12345.gone__9 is not in" in backend.last_reasons["owner__proj.abc12345.gone__9"]
    assert "image jyangballin/absent is not in" in backend.last_reasons["owner__proj.abc12345.lm_rewrite__2"]
    backend.close()
