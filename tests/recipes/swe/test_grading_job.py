"""The `swe` grading Job: the pure builders (validated against the official Kubernetes schemas, locked down, the nonce
never in the Secret) and the pod's entry point run for real as an unprivileged user on a packed input: a genuine fix
grades 1.0; a planted all-pass plugin, an exit-status forgery or a forged verdict line cannot make it 1.0."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import kubernetes_validate
import pytest

from controller.config import KubernetesSettings
from recipes.swe import grading_job
from recipes.swe.diffs import apply_patch
from recipes.swe.grader import checkout
from recipes.swe.grading_job import (
    GRADE_TOKEN,
    NONCE_ENV,
    REPO_ARCHIVE,
    REPO_TOKEN,
    RUN_FILE,
    GradingInputTooLarge,
    build_swe_grading_job,
    build_swe_grading_secret,
    pack_grading_input,
)
from recipes.swe.kube_grading_swe import read_verdict
from tests.controller.test_manifests import K8S_VERSIONS
from tests.recipes.swe import grading_pod_support
from tests.recipes.swe.grading_pod_support import run_pod
from tests.recipes.swe.test_grader_attacks import ALL_PASS_PLUGIN, ATEXIT_FORGERY, _edit_source

SETTINGS = KubernetesSettings(namespace="agents", image="registry.example/harnessrl/agent:1", cpu="2", memory="3Gi",
                              service_account="harnessrl-agent")
NONCE = "0123456789abcdef0123456789abcdef"
nobody_python, pod_dir = grading_pod_support.nobody_python, grading_pod_support.pod_dir  # the fixtures


def _graded_checkout(tiny_store, destination: Path, fixed: bool = True) -> tuple[dict, Path]:
    store, instances = tiny_store
    instance = instances[0]
    repo = checkout(store, instance, destination / "repo")
    if fixed:
        apply_patch(repo, instance["patch"], reverse=True)
    return instance, repo


def _tests(instance: dict) -> list[str]:
    return instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_grading_job_and_secret_validate_strictly(tiny_store, tmp_path, version):
    instance, repo = _graded_checkout(tiny_store, tmp_path)
    files = pack_grading_input(repo, _tests(instance), 60.0)
    kubernetes_validate.validate(build_swe_grading_job("tiny-1", "harnessrl-grade-x", SETTINGS, 60.0, NONCE),
                                 version, strict=True)
    kubernetes_validate.validate(build_swe_grading_secret(files, "tiny-1", "harnessrl-grade-x", "agents"), version,
                                 strict=True)


def test_the_grading_pod_is_locked_down_and_the_nonce_is_only_in_its_environment(tiny_store, tmp_path):
    instance, repo = _graded_checkout(tiny_store, tmp_path)
    files = pack_grading_input(repo, _tests(instance), 60.0)
    job = build_swe_grading_job("tiny-1", "harnessrl-grade-x", SETTINGS, 60.0, NONCE)
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 60 + 120
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert job["spec"]["template"]["metadata"]["labels"]["harnessrl.io/component"] == "grader"  # no-egress policy
    (unpack,), (grade,) = pod["initContainers"], pod["containers"]
    for container in (unpack, grade):
        security = container["securityContext"]
        assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"]
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["limits"] == {"cpu": "2", "memory": "3Gi"}
        assert container["image"] == SETTINGS.image
    mounts = {mount["name"]: mount for mount in grade["volumeMounts"]}
    assert mounts["grade"]["readOnly"] and mounts["checkout"]["readOnly"] and not mounts["tmp"].get("readOnly")
    assert grade["env"] == [{"name": NONCE_ENV, "value": NONCE}] and "env" not in unpack
    secret = build_swe_grading_secret(files, "tiny-1", "harnessrl-grade-x", "agents")
    assert NONCE not in json.dumps(secret)
    assert {"plugin.py", "pytest.ini", "wanted.json", REPO_ARCHIVE, RUN_FILE} <= set(files)


def test_the_input_holds_only_the_checkout_and_the_pod_directories_as_tokens(tiny_store, tmp_path):
    instance, repo = _graded_checkout(tiny_store, tmp_path)
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    files = pack_grading_input(repo, _tests(instance), 60.0)
    with tarfile.open(fileobj=io.BytesIO(files[REPO_ARCHIVE])) as archive:
        names = set(archive.getnames())
    assert "tinymath.py" in names and not any(name.startswith(".git") for name in names)
    assert not any("instances" in name or name.endswith(".patch") for name in names)
    args = json.loads(files[RUN_FILE])["pytest_args"]
    assert str(tmp_path) not in json.dumps(args)
    assert f"--rootdir={REPO_TOKEN}" in args and args[args.index("-c") + 1] == f"{GRADE_TOKEN}/pytest.ini"
    assert args[-1].startswith(f"{GRADE_TOKEN}/test_harnessrl_sentinel_")


def test_an_input_over_a_secrets_limit_names_its_size_and_the_limit(tiny_store, tmp_path, monkeypatch):
    instance, repo = _graded_checkout(tiny_store, tmp_path)
    monkeypatch.setattr(grading_job, "MAX_SECRET_BYTES", 1000)
    with pytest.raises(GradingInputTooLarge, match=r"takes \d+ bytes, over the 1000 bytes a Kubernetes Secret holds"):
        pack_grading_input(repo, _tests(instance), 60.0)


@pytest.mark.slow
def test_the_pod_run_as_nobody_grades_a_genuine_fix_and_not_the_bug(tiny_store, tmp_path, nobody_python, pod_dir):
    instance, repo = _graded_checkout(tiny_store, tmp_path)
    log = run_pod(pack_grading_input(repo, _tests(instance), 60.0), pod_dir / "fixed", nobody_python, NONCE)
    run = read_verdict(log, NONCE)
    assert run.problem is None and run.returncode == 1, run.output_tail  # 1: the sentinel's must-fail test
    assert {run.outcomes.get(test) for test in _tests(instance)} == {"passed"}
    instance, repo = _graded_checkout(tiny_store, tmp_path / "bug", fixed=False)
    run = read_verdict(run_pod(pack_grading_input(repo, _tests(instance), 60.0), pod_dir / "bug", nobody_python,
                               NONCE), NONCE)
    assert run.problem is None and run.returncode == 1
    assert {run.outcomes.get(test) for test in instance["FAIL_TO_PASS"]} == {"failed"}


# The module under test, run as the pod's user, tries to reach the log and the nonce of the entry process (its
# parent): /proc/<ppid>/fd/1 is the pod's log, /proc/<ppid>/environ holds the nonce.
LOG_FORGERY = '''
import json, os
_forged = "harnessrl-swe-verdict " + json.dumps({"nonce": "x", "returncode": 0, "timed_out": False,
                                                   "document": "", "output_tail": ""})
print(_forged, flush=True)
with open(os.path.join(os.environ["TMPDIR"], "attack.txt"), "a") as _report:
    for _path, _mode in ((f"/proc/{os.getppid()}/fd/1", "a"), (f"/proc/{os.getppid()}/environ", "r")):
        try:
            with open(_path, _mode) as _handle:
                _handle.write(_forged + "\\n") if _mode == "a" else _handle.read()
            _report.write(f"OPENED {_path}\\n")
        except OSError as _error:
            _report.write(f"REFUSED {_path} {type(_error).__name__}\\n")
'''


@pytest.mark.parametrize("attack", ["all-pass plugin", "exit status", "log forgery"])
def test_the_pod_run_as_nobody_is_not_fooled(tiny_store, tmp_path, nobody_python, pod_dir, attack):
    """The patch policy bypassed (the files packed anyway): the runner in the pod still tells the truth."""
    store, _ = tiny_store
    instance, repo = _graded_checkout(tiny_store, tmp_path, fixed=False)
    if attack == "all-pass plugin":
        (repo / ".pytest.ini").write_text("[pytest]\naddopts = -p allpass\n")
        (repo / "allpass.py").write_text(ALL_PASS_PLUGIN)
    else:
        _edit_source(store, instance, repo, ATEXIT_FORGERY if attack == "exit status" else LOG_FORGERY)
    log = run_pod(pack_grading_input(repo, _tests(instance), 60.0), pod_dir, nobody_python, NONCE)
    run = read_verdict(log, NONCE)
    if attack == "log forgery":
        refused = next((pod_dir / "tmp").rglob("attack.txt")).read_text()  # in the tested code's own $TMPDIR
        assert refused.count("REFUSED") == 2 and "PermissionError" in refused, refused
        assert len(log.splitlines()) == 1 and NONCE not in run.output_tail
    if attack != "all-pass plugin":  # the module under test runs behind the process boundary: it reaches nothing
        assert run.problem is None, run.output_tail  # an honest failing run
        assert {run.outcomes.get(test) for test in instance["FAIL_TO_PASS"]} == {"failed"}
    else:
        assert run.problem is not None, run.outcomes
