"""A tree the policy wrote, read as hostile input: no link followed, nothing but files and directories opened, caps
checked from metadata before any content is read (`sandbox.hostile_tree`)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from sandbox.hostile_tree import TreeLimits, TreeRefused, read_file, resolves_inside, special_kind, survey_tree

SECRET = "the-secret-marker-7f3a"


@pytest.fixture
def secret_dir(tmp_path) -> Path:
    folder = tmp_path / "secret"
    folder.mkdir()
    (folder / "key.txt").write_text(SECRET)
    return folder


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "work"
    (root / "repo" / "pkg").mkdir(parents=True)
    (root / "repo" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "task.json").write_text("{}")
    return root


@pytest.mark.parametrize("link, target, links, inside", [
    ("repo/a", "b.py", {}, True),
    ("repo/a", "../task.json", {}, True),
    ("repo/a", "../../x", {}, False),
    ("a", "..", {}, False),
    ("repo/a", "/etc/passwd", {}, False),
    ("repo/a", "/root/tree/repo/b.py", {}, True),  # absolute, but under the tree's own path
    ("repo/a", "/root/treeX/b", {}, False),
    # through another link of the tree: `c` points at `/`, so `c/../etc` is `/etc`, not the tree's `etc`
    ("repo/a", "c/../etc", {"repo/c": "/"}, False),
    ("repo/a", "c/x", {"repo/c": "sub"}, True),
    ("repo/a", "c/x", {"repo/c": "../.."}, False),
    ("a", "b", {"a": "b", "b": "a"}, False),  # a loop never resolves
])
def test_resolution_follows_the_trees_own_links_as_the_kernel_would(link, target, links, inside):
    assert resolves_inside(link, target, {link: target, **links}, absolute_root="/root/tree") is inside


def test_a_plain_tree_is_listed_without_reading_contents(tree):
    survey = survey_tree(tree)
    assert survey.problem is None
    assert {(e.path, e.kind) for e in survey.entries} == {
        ("repo", "dir"), ("repo/pkg", "dir"), ("repo/pkg/mod.py", "file"), ("task.json", "file")}
    assert survey.total_bytes == len("x = 1\n") + 2


@pytest.mark.parametrize("make", [
    lambda tree, secret: [(tree / "repo").rename(tree / "old"), os.symlink(secret, tree / "repo")],
    lambda tree, secret: os.symlink(secret / "key.txt", tree / "repo" / "pkg" / "key.py"),
    lambda tree, secret: os.symlink(secret, tree / "repo" / "pkg" / "data"),
    lambda tree, secret: os.symlink(os.path.relpath(secret, tree / "repo" / "pkg"), tree / "repo" / "pkg" / "rel"),
    lambda tree, secret: [os.symlink("/", tree / "repo" / "up"),
                          os.symlink(f"../up/..{secret}", tree / "repo" / "pkg" / "chained")],
])
def test_any_link_out_of_the_tree_is_tampering_and_its_target_is_not_read(tree, secret_dir, make):
    make(tree, secret_dir)
    survey = survey_tree(tree)
    assert survey.problem is not None and survey.problem.kind == "tamper"
    assert "resolves outside the tree" in survey.problem.reason
    assert SECRET not in repr(survey) and "key.txt" not in {e.path.rsplit("/", 1)[-1] for e in survey.entries}


def test_the_root_itself_as_a_link_is_refused(tmp_path, secret_dir):
    os.symlink(secret_dir, tmp_path / "work")
    survey = survey_tree(tmp_path / "work")
    assert survey.problem is not None and survey.problem.kind == "tamper" and not survey.entries
    with pytest.raises(TreeRefused):
        read_file(tmp_path / "work", "key.txt", 100)


def test_links_that_stay_inside_are_listed_as_links(tree):
    os.symlink("mod.py", tree / "repo" / "pkg" / "alias.py")
    os.symlink("../task.json", tree / "repo" / "task")
    survey = survey_tree(tree)
    assert survey.problem is None
    assert survey.links == {"repo/pkg/alias.py": "mod.py", "repo/task": "../task.json"}


LIMITS = TreeLimits(max_entries=10, max_total_bytes=1_000, max_file_bytes=400, max_depth=4)


def _entries(tree: Path, count: int) -> None:
    for index in range(count):
        (tree / f"f{index}").write_text("")


@pytest.mark.parametrize("cap, at_cap, over_cap", [
    ("max_entries", lambda t: _entries(t, 10), lambda t: _entries(t, 11)),
    ("max_file_bytes", lambda t: (t / "big").write_bytes(b"a" * 400), lambda t: (t / "big").write_bytes(b"a" * 401)),
    ("max_total_bytes", lambda t: [(t / f"b{i}").write_bytes(b"a" * 250) for i in range(4)],
     lambda t: [*[(t / f"b{i}").write_bytes(b"a" * 250) for i in range(4)], (t / "one").write_bytes(b"a")]),
    ("max_depth", lambda t: [(t / "a" / "b" / "c").mkdir(parents=True), (t / "a/b/c/d").write_text("")],
     lambda t: [(t / "a" / "b" / "c" / "d").mkdir(parents=True), (t / "a/b/c/d/e").write_text("")]),
])
def test_a_tree_just_over_each_cap_is_refused_naming_it_and_one_at_it_is_not(tmp_path, cap, at_cap, over_cap):
    (at := tmp_path / "at").mkdir()
    (over := tmp_path / "over").mkdir()
    at_cap(at)
    over_cap(over)
    assert survey_tree(at, LIMITS).problem is None
    problem = survey_tree(over, LIMITS).problem
    assert problem is not None and problem.kind == "limit" and problem.cap == cap and cap in problem.reason


def test_a_sparse_file_counts_by_its_size_and_is_never_read(tmp_path):
    with open(tmp_path / "sparse", "wb") as handle:
        handle.truncate(1 << 40)  # a terabyte that takes no disk: reading it would take the grader down
    problem = survey_tree(tmp_path, LIMITS).problem
    assert problem is not None and problem.cap == "max_file_bytes"
    with pytest.raises(TreeRefused, match="max_file_bytes"):
        read_file(tmp_path, "sparse", 1_000)


def test_a_name_that_is_not_utf8_is_refused_as_unreadable(tree):
    with open(os.fsencode(tree / "repo") + b"/bad\xff\xfename.py", "w") as handle:
        handle.write("x")
    problem = survey_tree(tree).problem
    assert problem is not None and problem.kind == "unreadable" and "not UTF-8" in problem.reason
    problem.reason.encode("utf-8")  # the reason itself can be posted


def test_fifos_are_refused_by_the_survey_and_never_opened(tree):
    os.mkfifo(tree / "repo" / "pipe")  # opening it for reading would block a reader without O_NONBLOCK
    problem = survey_tree(tree).problem
    assert problem is not None and problem.kind == "unreadable" and "'repo/pipe' is a FIFO" in problem.reason
    with pytest.raises(TreeRefused) as refused:
        read_file(tree, "repo/pipe", 100)
    assert refused.value.problem.kind == "unreadable"


def test_sockets_are_refused_by_the_survey(tree):
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tree / "repo" / "sock"))
        problem = survey_tree(tree).problem
    assert problem is not None and problem.kind == "unreadable" and "'repo/sock' is a socket" in problem.reason


def test_device_files_are_named_as_such():
    assert special_kind(stat.S_IFCHR | 0o666) == "device file" and special_kind(stat.S_IFBLK) == "device file"
    assert special_kind(stat.S_IFIFO) == "FIFO"


def test_read_file_reads_a_regular_file_and_follows_no_link(tree, secret_dir):
    assert read_file(tree, "repo/pkg/mod.py", 100) == b"x = 1\n"
    os.symlink(secret_dir / "key.txt", tree / "model.patch")
    os.symlink(secret_dir, tree / "repo" / "linked")
    for relative in ("model.patch", "repo/linked/key.txt"):
        with pytest.raises(TreeRefused) as refused:
            read_file(tree, relative, 100)
        assert refused.value.problem.kind == "tamper" and SECRET not in str(refused.value)
    with pytest.raises(TreeRefused, match="max_file_bytes"):
        read_file(tree, "repo/pkg/mod.py", 3)
    with pytest.raises(FileNotFoundError):
        read_file(tree, "absent.txt", 100)
    with pytest.raises(TreeRefused):
        read_file(tree, "../secret/key.txt", 100)


def test_link_chains_that_multiply_resolution_work_are_a_cap_not_hours_of_work(tmp_path):
    """40 chained links with 4 KB targets each, then links to the chain: every link resolves inside the tree, but
    resolving them all was hours of CPU in the controller (attack review); the work is capped and named."""
    for k in range(40):
        os.symlink((f"c{k + 1}/" if k < 39 else "") + "./" * 2030 + ".", tmp_path / f"c{k}")
    for index in range(20):
        os.symlink("c0", tmp_path / f"l{index}")
    problem = survey_tree(tmp_path).problem
    assert problem is not None and problem.kind == "limit" and problem.cap == "max_link_steps"


def test_many_ordinary_links_are_well_within_the_link_work_cap(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("")
    for index in range(2_000):  # a node_modules/.bin or a venv's worth of relative links
        os.symlink("../pkg/mod.py", tmp_path / "pkg" / f"alias{index}.py")
    assert survey_tree(tmp_path).problem is None
