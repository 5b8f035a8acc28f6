"""SWE datasets through `datasets`: rows in SWE-bench Verified's and SWE-smith's exact formats as local parquet and
JSONL files, the hub path (same loader), the generated store, and the errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import datasets
import huggingface_hub.constants
import pyarrow.parquet as pq
import pytest

from recipes.swe.datasets import HUB, SweDatasetError, load_raw_swe_rows, load_swe_dataset, stage_store
from recipes.swe.generator import load_instances
from recipes.swe.instances import InstanceError, normalize_instance
from rollouts.task_data import TaskDataError, load_source_rows

VERIFIED_PATCH = """\
diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py
index a308e27..45bea36 100644
--- a/astropy/modeling/separable.py
+++ b/astropy/modeling/separable.py
@@ -242,7 +242,7 @@ def _cstack(left, right):
         cright = _coord_matrix(right, 'right', noutp)
     else:
         cright = np.zeros((noutp, right.shape[1]))
-        cright[-right.shape[0]:, -right.shape[1]:] = 1
+        cright[-right.shape[0]:, -right.shape[1]:] = right
 
     return np.hstack([cleft, cright])
 
"""
VERIFIED_TEST_PATCH = """\
diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py
--- a/astropy/modeling/tests/test_separable.py
+++ b/astropy/modeling/tests/test_separable.py
@@ -28,6 +28,7 @@
 p1 = models.Polynomial1D(1, name='p1')
 
 
+cm_4d_expected = (np.array([False, True]), np.array([[True, False], [False, True]]))
 compound_models = {
     'cm1': (map3 & sh1 | rot & sh1 | sh1 & sh2 & sh1,
             (np.array([False, False, True]),
"""
# SWE-bench Verified's columns and types: every column a string, the test lists JSON text.
VERIFIED_ROWS = [
    {"repo": "astropy/astropy", "instance_id": "astropy__astropy-12907",
     "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607", "patch": VERIFIED_PATCH,
     "test_patch": VERIFIED_TEST_PATCH, "problem_statement": "Modeling's `separability_matrix` does not compute "
     "separability correctly for nested CompoundModels\n\nConsider the following model: ...",
     "hints_text": "", "created_at": "2022-03-03T15:14:54Z", "version": "4.3",
     "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]", '
                     '"astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]"]',
     "PASS_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_coord_matrix"]',
     "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752", "difficulty": "15 min - 1 hour"},
    {"repo": "django/django", "instance_id": "django__django-11099",
     "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c", "patch": VERIFIED_PATCH.replace("right\n", "right \n"),
     "test_patch": VERIFIED_TEST_PATCH, "problem_statement": "UsernameValidator allows trailing newline",
     "hints_text": "See the regex.", "created_at": "2019-03-20T03:46:18Z", "version": "3.0",
     "FAIL_TO_PASS": '["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]',
     "PASS_TO_PASS": "[]", "environment_setup_commit": "419a78300f7cd27611196e1e464d50fd0385ff27",
     "difficulty": "<15 min fix"},
]
SMITH_PATCH = """\
diff --git a/tinymath.py b/tinymath.py
index 1b2c3d4..5e6f7a8 100644
--- a/tinymath.py
+++ b/tinymath.py
@@ -4,7 +4,7 @@
 def clamp(value, low, high):
     if value < low:
         return low
-    if value > high:
+    if value >= high + 1:
         return high
     return value
 
"""
SMITH_FIX = """\
diff --git a/tinymath.py b/tinymath.py
index 5e6f7a8..1b2c3d4 100644
--- a/tinymath.py
+++ b/tinymath.py
@@ -4,7 +4,7 @@
 def clamp(value, low, high):
     if value < low:
         return low
-    if value >= high + 1:
+    if value > high:
         return high
     return value
 
"""
# SWE-smith's columns and types: the test lists are lists of strings.
SMITH_ROWS = [
    {"instance_id": "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc",
     "repo": "swesmith/oauthlib__oauthlib.1fd52536", "patch": SMITH_PATCH,
     "FAIL_TO_PASS": ["tests/test_tinymath.py::test_clamp_high"],
     "PASS_TO_PASS": ["tests/test_tinymath.py::test_clamp_low", "tests/test_tinymath.py::test_total"],
     "created_at": "2025-03-14T22:49:27.906744", "image_name": "swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
     "base_commit": "1fd52536c2b8bc2e4e1b5dd3a4ad7dfe6c0e2d58", "problem_statement": "clamp() returns the wrong bound"},
    {"instance_id": "oauthlib__oauthlib.1fd52536.func_pm_op_swap__x1", "repo": "swesmith/oauthlib__oauthlib.1fd52536",
     "patch": SMITH_PATCH, "FAIL_TO_PASS": ["tests/test_tinymath.py::test_clamp_high",
                                            "tests/test_tinymath.py::test_clamp_inside"],
     "PASS_TO_PASS": [], "created_at": "2025-03-15T01:02:03.000001",
     "image_name": "swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
     "base_commit": "1fd52536c2b8bc2e4e1b5dd3a4ad7dfe6c0e2d58", "problem_statement": "clamp() at the bound"},
]
VERIFIED_EXPECTED = [
    {"instance_id": "astropy__astropy-12907", "source": "swe-bench-verified", "repo": "astropy/astropy",
     "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
     "problem_statement": VERIFIED_ROWS[0]["problem_statement"],
     "FAIL_TO_PASS": ["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",
                      "astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]"],
     "PASS_TO_PASS": ["astropy/modeling/tests/test_separable.py::test_coord_matrix"], "image_name": None,
     "bug_patch": None, "fix_patch": VERIFIED_PATCH, "test_patch": VERIFIED_TEST_PATCH,
     "created_at": "2022-03-03T15:14:54Z", "version": "4.3",
     "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752", "level": None},
    {"instance_id": "django__django-11099", "source": "swe-bench-verified", "repo": "django/django",
     "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
     "problem_statement": "UsernameValidator allows trailing newline",
     "FAIL_TO_PASS": ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"], "PASS_TO_PASS": [],
     "image_name": None, "bug_patch": None, "fix_patch": VERIFIED_PATCH.replace("right\n", "right \n"),
     "test_patch": VERIFIED_TEST_PATCH, "created_at": "2019-03-20T03:46:18Z", "version": "3.0",
     "environment_setup_commit": "419a78300f7cd27611196e1e464d50fd0385ff27", "level": None},
]
SMITH_EXPECTED = [
    {"instance_id": "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc", "source": "swe-smith",
     "repo": "swesmith/oauthlib__oauthlib.1fd52536", "base_commit": "1fd52536c2b8bc2e4e1b5dd3a4ad7dfe6c0e2d58",
     "problem_statement": "clamp() returns the wrong bound",
     "FAIL_TO_PASS": ["tests/test_tinymath.py::test_clamp_high"],
     "PASS_TO_PASS": ["tests/test_tinymath.py::test_clamp_low", "tests/test_tinymath.py::test_total"],
     "image_name": "swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536", "bug_patch": SMITH_PATCH,
     "fix_patch": SMITH_FIX,
     "test_patch": None, "created_at": "2025-03-14T22:49:27.906744", "version": None,
     "environment_setup_commit": None, "level": None},
    {"instance_id": "oauthlib__oauthlib.1fd52536.func_pm_op_swap__x1", "source": "swe-smith",
     "repo": "swesmith/oauthlib__oauthlib.1fd52536", "base_commit": "1fd52536c2b8bc2e4e1b5dd3a4ad7dfe6c0e2d58",
     "problem_statement": "clamp() at the bound",
     "FAIL_TO_PASS": ["tests/test_tinymath.py::test_clamp_high", "tests/test_tinymath.py::test_clamp_inside"],
     "PASS_TO_PASS": [], "image_name": "swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536", "bug_patch": SMITH_PATCH,
     "fix_patch": SMITH_FIX, "test_patch": None, "created_at": "2025-03-15T01:02:03.000001", "version": None,
     "environment_setup_commit": None, "level": None},
]
CASES = {"swe-bench-verified": (VERIFIED_ROWS, VERIFIED_EXPECTED), "swe-smith": (SMITH_ROWS, SMITH_EXPECTED)}


def write_rows(rows: list[dict], path: Path) -> Path:
    """Rows in a file as the dataset publishes them (no task_data encoding): parquet or JSON Lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_the_files_hold_the_datasets_own_column_types(tmp_path):
    verified = pq.read_schema(write_rows(VERIFIED_ROWS, tmp_path / "v.parquet"))
    assert {str(verified.field(name).type) for name in verified.names} == {"string"}
    assert verified.names == list(VERIFIED_ROWS[0])
    smith = pq.read_schema(write_rows(SMITH_ROWS, tmp_path / "s.parquet"))
    assert str(smith.field("FAIL_TO_PASS").type) == str(smith.field("PASS_TO_PASS").type) == "list<element: string>"
    assert smith.names == list(SMITH_ROWS[0])


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("kind", ["swe-bench-verified", "swe-smith"])
def test_local_files_in_each_datasets_format_load_normalised_exactly(kind, suffix, tmp_path):
    rows, expected = CASES[kind]
    path = write_rows(rows, tmp_path / f"{kind}{suffix}")
    assert load_swe_dataset(str(path), kind, cache_dir=tmp_path / "cache") == expected


def test_directories_and_json_arrays_load_too(tmp_path):
    write_rows(VERIFIED_ROWS[:1], tmp_path / "dir" / "part-0.jsonl")
    write_rows(VERIFIED_ROWS[1:], tmp_path / "dir" / "part-1.jsonl")
    assert load_swe_dataset(str(tmp_path / "dir"), "swe-bench-verified", cache_dir=tmp_path / "c") == \
        VERIFIED_EXPECTED
    (tmp_path / "smith.json").write_text(json.dumps(SMITH_ROWS))
    assert load_swe_dataset(str(tmp_path / "smith.json"), "swe-smith", cache_dir=tmp_path / "c") == SMITH_EXPECTED


def test_limit_keeps_the_first_rows_and_raw_rows_keep_the_datasets_columns(tmp_path):
    path = write_rows(VERIFIED_ROWS, tmp_path / "v.parquet")
    assert load_swe_dataset(str(path), "swe-bench-verified", cache_dir=tmp_path, limit=1) == VERIFIED_EXPECTED[:1]
    assert load_raw_swe_rows(str(path), "swe-bench-verified", cache_dir=tmp_path) == VERIFIED_ROWS


@pytest.fixture
def hub_from_files(tmp_path, monkeypatch):
    """`datasets.load_dataset` serving each kind's hub id (any split) from a local parquet file; records calls."""
    files = {"SWE-bench/SWE-bench_Verified": write_rows(VERIFIED_ROWS, tmp_path / "hub" / "verified.parquet"),
             "SWE-bench/SWE-smith": write_rows(SMITH_ROWS, tmp_path / "hub" / "smith.parquet")}
    real_load_dataset = datasets.load_dataset
    calls = []

    def load_dataset(name, **kwargs):
        if name not in files:
            return real_load_dataset(name, **kwargs)
        calls.append((name, kwargs["split"]))
        return real_load_dataset("parquet", data_files=[str(files[name])], split="train",
                                 cache_dir=kwargs["cache_dir"])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


@pytest.mark.parametrize(("source", "kind", "split", "called"), [
    (HUB, "swe-bench-verified", None, ("SWE-bench/SWE-bench_Verified", "test")),
    ("SWE-bench/SWE-bench_Verified", "swe-bench-verified", None, ("SWE-bench/SWE-bench_Verified", "test")),
    (HUB, "swe-smith", None, ("SWE-bench/SWE-smith", "train")),
    ("SWE-bench/SWE-smith", "swe-smith", "dev", ("SWE-bench/SWE-smith", "dev")),
    ("SWE-bench/SWE-smith:other", "swe-smith", None, ("SWE-bench/SWE-smith", "other")),
])
def test_hub_ids_go_through_the_same_loader_with_each_kinds_default_split(source, kind, split, called,
                                                                          hub_from_files, tmp_path):
    assert load_swe_dataset(source, kind, cache_dir=tmp_path / "cache", split=split) == CASES[kind][1]
    assert hub_from_files == [called]


def test_an_unreachable_hub_names_the_id_and_says_to_pass_a_local_path(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(TaskDataError, match=r"'SWE-bench/SWE-bench_Verified' \(split 'test'\).*pass a local path"):
        load_swe_dataset(HUB, "swe-bench-verified", cache_dir=tmp_path)


def test_generated_instances_load_from_the_store_through_the_same_path(tiny_store, tmp_path, monkeypatch):
    store, instances = tiny_store
    expected = [normalize_instance(instance, "swe-smith") for instance in load_instances(store)]
    assert len(expected) == 3 and all(i["created_at"].endswith("+00:00") for i in expected), "kept exactly"
    assert load_swe_dataset("generated", "swe-smith", cache_dir=tmp_path, store=store) == expected
    assert len(list((tmp_path / "generated").glob("swe-store-*.jsonl"))) == 1, "staged as a JSONL file"
    monkeypatch.setenv("HARNESSRL_SWE_STORE", str(store))
    assert load_swe_dataset("generated", "swe-smith", cache_dir=tmp_path / "other", limit=2) == expected[:2]


def test_the_store_file_is_read_once_and_staged_as_the_bytes_its_digest_names(tiny_store, tmp_path, monkeypatch):
    store, _ = tiny_store
    instances_file = store / "instances.jsonl"
    reads = []
    for method in ("read_text", "read_bytes"):
        real = getattr(Path, method)

        def counting(self, *args, _real=real, _method=method, **kwargs):
            if self == instances_file:
                reads.append(_method)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Path, method, counting)
    staged = stage_store(store, tmp_path)
    assert reads == ["read_bytes"]
    monkeypatch.undo()
    digest = hashlib.sha256(instances_file.read_bytes()).hexdigest()[:16]
    assert staged.name == f"swe-store-{digest}.jsonl"
    assert [normalize_instance(row, "swe-smith") for row in load_source_rows(str(staged), cache_dir=tmp_path)] == [
        normalize_instance(row, "swe-smith") for row in load_instances(store)]


def test_generated_needs_a_store_with_instances_and_the_swe_smith_kind(tmp_path):
    with pytest.raises(SweDatasetError, match=r"no generated SWE instances in .*instances.jsonl; generate them"):
        load_swe_dataset("generated", "swe-smith", cache_dir=tmp_path, store=tmp_path / "empty")
    with pytest.raises(SweDatasetError, match="load them as kind 'swe-smith'"):
        load_swe_dataset("generated", "swe-bench-verified", cache_dir=tmp_path, store=tmp_path)
    with pytest.raises(SweDatasetError, match="unknown SWE dataset kind 'swe-bench'"):
        load_swe_dataset("generated", "swe-bench", cache_dir=tmp_path)  # type: ignore[arg-type]


def test_a_malformed_test_list_names_the_instance_and_the_field(tmp_path):
    rows = [VERIFIED_ROWS[0], {**VERIFIED_ROWS[1], "PASS_TO_PASS": "test_a, test_b"}]
    path = write_rows(rows, tmp_path / "bad.jsonl")
    with pytest.raises(InstanceError, match="'django__django-11099': PASS_TO_PASS is not valid JSON"):
        load_swe_dataset(str(path), "swe-bench-verified", cache_dir=tmp_path)
