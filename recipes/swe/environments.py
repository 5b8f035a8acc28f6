"""Where a SWE task can run: environment backends answer, per instance, whether its environment exists.

- `LocalStoreEnvironment`: the local sandbox. An instance is available when the generated store holds it
  (`instances.jsonl`) and its base repository (`repos/<key>`) contains the base commit.
- `RegistryImageEnvironment`: Kubernetes. An instance is available when its image is in the registry the cluster
  pulls from, asked with the OCI distribution API (`HEAD /v2/<name>/manifests/<tag>`; 200 present, 404 absent),
  following the registry's Bearer token challenge (Docker Hub) anonymously or with credentials.
- `GitBranchEnvironment`: SWE-smith's task branches. Every SWE-smith instance is a branch named after its
  instance_id in the mirror repository its `repo` names (`swesmith/<owner>__<name>.<commit[:8]>` on GitHub); one
  `git ls-remote --heads` per repository lists them.
- `AllOf`: available where every backend it combines says so (Kubernetes SWE-smith: image and branch).
Instances are rows of the normalised schema (`recipes.swe.instances`).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from recipes.swe.generator import load_instances

LOCAL_IMAGE_PREFIX = "local:"  # image_name of generated instances: "local:repos/<key>"
DOCKER_HUB_URL = "https://registry-1.docker.io"
GITHUB_REMOTE_TEMPLATE = "https://github.com/{repo}.git"  # SWE-smith mirrors: repo = swesmith/<name>
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json"))


class EnvironmentBackend(Protocol):
    """Answers which instances have their environment."""

    last_reasons: dict[str, str]
    """Why each instance the last `available` call found missing is missing, by instance id."""

    def available(self, instances: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
        """instance_id -> whether its environment exists, for every instance given."""
        ...


def swebench_image_name(instance_id: str, *, namespace: str = "swebench", arch: str = "x86_64",
                        tag: str = "latest") -> str:
    """SWE-bench's official instance image: `<namespace>/sweb.eval.<arch>.<id lowercased>:<tag>`, every `__` of
    which is written `_1776_` (registries refuse double underscores)."""
    return f"{namespace}/sweb.eval.{arch}.{instance_id.lower()}:{tag}".replace("__", "_1776_")


def instance_image(instance: Mapping[str, Any], *, namespace: str = "swebench", arch: str = "x86_64") -> str | None:
    """The instance's container image: its image_name; SWE-bench's official image for a SWE-bench Verified row
    without one; None for instances of the local store (and image-less rows of other sources)."""
    image = instance.get("image_name")
    if image:
        return None if str(image).startswith(LOCAL_IMAGE_PREFIX) else str(image)
    if instance.get("source") == "swe-bench-verified":
        return swebench_image_name(instance["instance_id"], namespace=namespace, arch=arch)
    return None


@dataclass(frozen=True)
class ImageReference:
    """An image name split as a registry sees it."""

    host: str | None  # the registry host named in the reference (None: the default registry)
    repository: str  # the repository path, e.g. "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907"
    reference: str  # the tag or the digest


def parse_image_reference(image: str) -> ImageReference:
    """Splits `[host/]path[:tag|@digest]`; one-component Docker Hub names get `library/`, no tag means latest."""
    name, _, digest = image.partition("@")
    first, _, rest = name.partition("/")
    host = None
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, name = first, rest
    if digest:
        repository, reference = name, digest
    else:
        slash = name.rfind("/")
        colon = name.rfind(":")
        repository, reference = (name[:colon], name[colon + 1:]) if colon > slash else (name, "latest")
    if not repository or not reference:
        raise ValueError(f"image name {image!r} has no repository or tag; write it as [host/]path[:tag]")
    if host is None and "/" not in repository:
        repository = f"library/{repository}"
    return ImageReference(host, repository, reference)


class LocalStoreEnvironment:
    """Instances of the generated store whose base repository holds their base commit."""

    def __init__(self, store: Path) -> None:
        self.store = Path(store)
        self.last_reasons: dict[str, str] = {}

    def available(self, instances: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
        """instance_id -> present in the store with its base at the base commit."""
        listed = {instance["instance_id"] for instance in load_instances(self.store)}
        bases: dict[tuple[Path, str], bool] = {}
        self.last_reasons = {}
        answers: dict[str, bool] = {}
        for instance in instances:
            reason = self._missing(instance, listed, bases)
            answers[instance["instance_id"]] = reason is None
            if reason is not None:
                self.last_reasons[instance["instance_id"]] = reason
        return answers

    def _missing(self, instance: Mapping[str, Any], listed: set[str],
                 bases: dict[tuple[Path, str], bool]) -> str | None:
        if instance["instance_id"] not in listed:
            return f"not in {self.store / 'instances.jsonl'}"
        repo, commit = str(instance.get("repo") or ""), instance.get("base_commit")
        if "/" not in repo or not commit:
            return f"repo {repo!r} / base_commit {commit!r} do not name a base in the store"
        path = self.store / "repos" / repo.split("/", 1)[1]
        if not path.is_dir():
            return f"its base repository {path} does not exist"
        if (path, commit) not in bases:
            bases[(path, commit)] = has_commit(path, commit)
        return None if bases[(path, commit)] else f"{path} does not hold commit {commit}"


def has_commit(repository: Path, commit: str) -> bool:
    """Whether git repository `repository` (its own, not an enclosing one) contains commit `commit`."""
    if not (repository / ".git").exists():
        return False
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "GIT_CEILING_DIRECTORIES": str(repository.parent)}
    result = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=repository, env=env,
                            capture_output=True)
    return result.returncode == 0


class RegistryError(RuntimeError):
    """The registry could not answer; the message names the registry, the image and the fix."""


class RegistryImageEnvironment:
    """Instances whose image is in the registry at `registry_url` (what the cluster pulls)."""

    def __init__(self, registry_url: str = DOCKER_HUB_URL, timeout_s: float = 10.0, *, namespace: str = "swebench",
                 arch: str = "x86_64", max_workers: int = 8, retries: int = 2, backoff_s: float = 0.5,
                 username: str | None = None, password: str | None = None) -> None:
        self.registry_url = registry_url.rstrip("/")
        self.namespace, self.arch = namespace, arch
        self.max_workers, self.retries, self.backoff_s = max_workers, retries, backoff_s
        self._auth = (username, password) if username is not None else None
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=True)
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()
        self.last_reasons: dict[str, str] = {}

    def image_of(self, instance: Mapping[str, Any]) -> str | None:
        """The row's image under this registry's namespace and architecture (see `instance_image`)."""
        return instance_image(instance, namespace=self.namespace, arch=self.arch)

    def available(self, instances: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
        """instance_id -> whether its image's manifest is in the registry (each image asked once)."""
        images = {instance["instance_id"]: self.image_of(instance) for instance in instances}
        unique = sorted({image for image in images.values() if image is not None})
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            found = dict(zip(unique, pool.map(self.manifest_exists, unique), strict=True))
        self.last_reasons = {iid: (f"image {image} is not in {self.registry_url}" if image else
                                   "no registry image (a local or image-less instance)")
                             for iid, image in images.items() if image is None or not found[image]}
        return {iid: image is not None and found[image] for iid, image in images.items()}

    def manifest_exists(self, image: str) -> bool:
        """HEAD the image's manifest: True on 200, False on 404 (or 401/403 once authenticated: not pullable)."""
        ref = parse_image_reference(image)
        url = f"{self.registry_url}/v2/{ref.repository}/manifests/{ref.reference}"
        response = self._head(url, image, self._headers(ref.repository))
        if response.status_code == 401 and "bearer" in response.headers.get("www-authenticate", "").lower():
            self._fetch_token(response.headers["www-authenticate"], ref.repository, image)
            response = self._head(url, image, self._headers(ref.repository))
        elif response.status_code == 401 and self._auth is not None:
            response = self._head(url, image, self._headers(ref.repository), auth=self._auth)
        if response.status_code == 200:
            return True
        if response.status_code == 404 or (response.status_code in (401, 403) and self._authenticated(ref)):
            return False
        raise RegistryError(f"{self.registry_url} answered HTTP {response.status_code} for {image}; "
                            "check the registry URL and credentials (username/password)")

    def _authenticated(self, ref: ImageReference) -> bool:
        return ref.repository in self._tokens or self._auth is not None

    def _headers(self, repository: str) -> dict[str, str]:
        headers = {"Accept": MANIFEST_TYPES}
        with self._lock:
            token = self._tokens.get(repository)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _head(self, url: str, image: str, headers: dict[str, str], auth: Any = None) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                response = self._client.head(url, headers=headers, auth=auth)
            except httpx.TransportError as error:
                if attempt == self.retries:
                    raise RegistryError(f"cannot reach {self.registry_url} for {image}: {error}; check the "
                                        "registry URL and that this machine can reach it") from error
            else:
                if (response.status_code < 500 and response.status_code != 429) or attempt == self.retries:
                    return response
            time.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    def _fetch_token(self, challenge: str, repository: str, image: str) -> None:
        fields = parse_challenge(challenge)
        if "realm" not in fields:
            raise RegistryError(f"{self.registry_url} asked for a Bearer token for {image} without a realm: "
                                f"{challenge!r}")
        params = {"service": fields.get("service", ""), "scope": fields.get("scope", f"repository:{repository}:pull")}
        response = self._client.get(fields["realm"], params=params, auth=self._auth)
        if response.status_code != 200:
            raise RegistryError(f"the token service {fields['realm']} answered HTTP {response.status_code} for "
                                f"{image}; check the registry credentials")
        body = response.json()
        with self._lock:
            self._tokens[repository] = body.get("token") or body.get("access_token") or ""

    def close(self) -> None:
        """Closes the HTTP connections."""
        self._client.close()


def parse_challenge(header: str) -> dict[str, str]:
    """The key="value" fields of a `WWW-Authenticate: Bearer ...` header."""
    _, _, params = header.partition(" ")
    fields: dict[str, str] = {}
    for part in _split_params(params):
        key, _, value = part.partition("=")
        fields[key.strip().lower()] = value.strip().strip('"')
    return fields


def _split_params(text: str) -> list[str]:
    parts, current, quoted = [], "", False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part for part in [*parts, current] if part.strip()]


class GitRemoteError(RuntimeError):
    """A git remote could not answer; the message names the remote and the fix."""


class GitBranchEnvironment:
    """SWE-smith instances whose branch (named after the instance_id) is in their mirror repository."""

    def __init__(self, remote_template: str = GITHUB_REMOTE_TEMPLATE, timeout_s: float = 60.0, *,
                 max_workers: int = 8) -> None:
        if "{repo}" not in remote_template:
            raise ValueError(f"remote_template {remote_template!r} has no {{repo}} placeholder; write it like "
                             f"{GITHUB_REMOTE_TEMPLATE!r}")
        self.remote_template, self.timeout_s, self.max_workers = remote_template, timeout_s, max_workers
        self.last_reasons: dict[str, str] = {}

    def remote_of(self, instance: Mapping[str, Any]) -> str | None:
        """The URL of the instance's mirror repository; None for local (generated) or repository-less rows."""
        repo = str(instance.get("repo") or "")
        if not repo or str(instance.get("image_name") or "").startswith(LOCAL_IMAGE_PREFIX):
            return None
        return self.remote_template.format(repo=repo)

    def available(self, instances: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
        """instance_id -> whether branch `instance_id` is a head of its remote (each remote listed once)."""
        remotes = {instance["instance_id"]: self.remote_of(instance) for instance in instances}
        unique = sorted({remote for remote in remotes.values() if remote is not None})
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            heads = dict(zip(unique, pool.map(self.heads, unique), strict=True))
        answers = {iid: remote is not None and iid in heads[remote] for iid, remote in remotes.items()}
        self.last_reasons = {iid: (f"branch {iid} is not in {remote}" if remote else
                                   "no mirror repository (a local or repository-less instance)")
                             for iid, remote in remotes.items() if not answers[iid]}
        return answers

    def heads(self, remote: str) -> frozenset[str]:
        """The branch names of `remote` (`git ls-remote --heads`); GitRemoteError when it cannot answer."""
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        try:
            result = subprocess.run(["git", "ls-remote", "--heads", remote], env=env, capture_output=True,
                                    text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as error:
            raise GitRemoteError(f"git ls-remote {remote} gave no answer within {self.timeout_s} s; check that "
                                 "this machine can reach it, or raise timeout_s") from error
        if result.returncode != 0:
            raise GitRemoteError(f"git ls-remote {remote} failed ({result.stderr.strip()}); check the remote "
                                 "template (git_remote_template), the network and git's credentials")
        return frozenset(line.split("\trefs/heads/", 1)[1] for line in result.stdout.splitlines()
                         if "\trefs/heads/" in line)


class AllOf:
    """Available where every backend says so; the reasons of all backends that said no, joined."""

    def __init__(self, *backends: EnvironmentBackend) -> None:
        if not backends:
            raise ValueError("AllOf needs at least one environment backend")
        self.backends = backends
        self.last_reasons: dict[str, str] = {}

    def available(self, instances: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
        """instance_id -> whether every backend has its environment (every backend asked about every one)."""
        answers = {instance["instance_id"]: True for instance in instances}
        reasons: dict[str, list[str]] = {}
        for backend in self.backends:
            for iid, present in backend.available(instances).items():
                if not present:
                    answers[iid] = False
                    reason = backend.last_reasons.get(iid, f"{type(backend).__name__}: missing")
                    reasons.setdefault(iid, []).append(reason)
        self.last_reasons = {iid: "; ".join(parts) for iid, parts in reasons.items()}
        return answers

    def close(self) -> None:
        """Closes the backends that hold connections."""
        for backend in self.backends:
            close = getattr(backend, "close", None)
            if close is not None:
                close()
