"""Environment backends: the generated store (real git bases) and an OCI registry (a local server answering so)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.swe.environments import (
    EnvironmentBackend,
    ImageReference,
    LocalStoreEnvironment,
    RegistryError,
    RegistryImageEnvironment,
    parse_challenge,
    parse_image_reference,
    swebench_image_name,
)
from agents.swe.generator import store_base, write_instances
from tests.agents.swe.conftest import write_tiny_project


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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
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
