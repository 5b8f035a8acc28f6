"""The process boundary's wire and rules, in one process: T's end (guarded) and U's end (a thread) over a socket pair.
What crosses by value comes back with exact built-in types; what U may do with the tests' objects is limited; a name
U sends resolves in T only to plain data types and exception classes."""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import importlib.machinery
import json
import math
import os
import pathlib
import socket
import subprocess
import sys
import threading
import types
import uuid
from pathlib import Path

import pytest

from recipes.swe import patch_policy
from recipes.swe.boundary_wire import BoundaryError, Peer, Remote
from recipes.swe.process_boundary import RemoteFinder, protected


@pytest.fixture
def pair():
    """(T's peer, a function that lends U-side callables and returns T's proxies of them); U serves in a thread."""
    ours, theirs = socket.socketpair()
    t_peer, u_peer = Peer(ours, guarded=True), Peer(theirs, guarded=False)
    thread = threading.Thread(target=u_peer.serve_forever, daemon=True)
    thread.start()

    def lend(function):
        return t_peer.decode({"r": u_peer._lend(function)})

    yield t_peer, lend
    ours.close()
    thread.join(timeout=5)
    theirs.close()


VALUES = [None, True, 0, -(2**70), 1.5, float("inf"), "text \udcff \u2028", b"\x00\xff", bytearray(b"ab"), 2 + 3j,
          [1, [2, (3, 4)]], (1,), {"a": {1: (2, 3)}, (1, "k"): None}, {1, 2}, frozenset({"x"}),
          collections.OrderedDict([("b", 1), ("a", 2)]), {"nested": [{"deep": ({"set"},)}]},
          datetime.date(2020, 1, 2), datetime.datetime(2020, 1, 2, 3, 4, 5, 6), datetime.time(1, 2, 3),
          datetime.timedelta(days=-1, seconds=5), decimal.Decimal("1.10"), fractions.Fraction(3, 7),
          uuid.UUID(int=5), pathlib.PurePosixPath("a/b"), pathlib.Path("/tmp/x")]


def _same(left, right) -> bool:
    """Equal and of exactly the same types, all the way down."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list | tuple):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    return left == right or (isinstance(left, float) and math.isnan(left) and math.isnan(right))


@pytest.mark.parametrize("value", VALUES, ids=[type(value).__name__ + str(i) for i, value in enumerate(VALUES)])
def test_plain_data_crosses_by_value_with_exact_types(pair, value):
    _, lend = pair
    echoed = lend(lambda item: item)(value)
    assert _same(echoed, value), (echoed, value)
    assert not isinstance(echoed, Remote)


def test_subclasses_of_plain_types_cross_by_reference_and_never_compare_by_the_tested_code(pair):
    _, lend = pair

    class Anything(dict):
        def __eq__(self, other):
            return True

        __hash__ = None

    class Magic:
        def __eq__(self, other):
            return True

    returned = lend(lambda: Anything(a=1))()
    assert isinstance(returned, Remote)
    assert returned == {"a": 1} and returned != {"a": 2}  # its plain value, compared here with dict's own ==
    magic = lend(lambda: Magic())()
    expected = {"x": 1}
    assert magic != expected and magic != "expected" and (expected == magic) is False  # either side first
    day = datetime.date(2020, 1, 2)
    assert magic != day and magic != decimal.Decimal("1.10") and magic != Helper()


class Helper:
    pass


def test_ordering_with_the_tests_values_is_decided_here(pair):
    _, lend = pair

    class Huge:
        def __ge__(self, other):
            return True

        __gt__ = __le__ = __lt__ = __ge__

    class Number(int):
        pass

    huge = lend(lambda: Huge())()
    for compare in (lambda: huge >= 9, lambda: huge < 9, lambda: huge > 9, lambda: huge <= 9, lambda: huge >= 9):
        with pytest.raises(TypeError):
            compare()
    seven = lend(lambda: Number(7))()
    assert isinstance(seven, Remote) and seven < 9 and seven >= 7 and not seven > 7


def test_the_tests_objects_reach_the_tested_code_only_through_their_public_surface(pair):
    _, lend = pair

    class Helper:  # a test's own class, lent to the tested code
        secret = "kept"

        def check(self):
            return False

    def read(obj, name):
        return getattr(obj, name)

    def write(obj, name, value):
        setattr(obj, name, value)

    helper = Helper()
    assert lend(read)(helper, "secret") == "kept"
    for name in ("_hidden", "__dict__", "__wrapped__"):
        with pytest.raises(AttributeError, match=f"private attribute '{name}'"):
            lend(read)(helper, name)
    with pytest.raises(AttributeError, match="private"):
        lend(read)(lambda: None, "__globals__")
    namespace, mapping = types.SimpleNamespace(slot=1), collections.defaultdict(int)
    for target in (helper, Helper, namespace):
        with pytest.raises(TypeError, match="may not change the tests'"):
            lend(write)(target, "check", "forged")
        with pytest.raises(TypeError, match="may not change the tests'"):
            lend(lambda obj: delattr(obj, "check"))(target)
    with pytest.raises(TypeError, match="may not change the tests'"):
        lend(lambda obj: obj.__setitem__("key", 1))(mapping)
    assert helper.check() is False and Helper.secret == "kept" and namespace.slot == 1 and not mapping


def test_a_test_double_is_used_through_what_it_stands_for_never_its_own_api(pair):
    from unittest import mock

    _, lend = pair
    double = mock.Mock()
    lend(lambda callback: callback(2))(double)
    assert lend(lambda handle: handle.read())(double) is not None  # a child: the interface the double stands for
    for name in ("assert_called_with", "reset_mock", "call_count", "configure_mock", "return_value"):
        with pytest.raises(AttributeError, match="test double's own"):
            lend(lambda callback, name: getattr(callback, name))(double, name)
    double.assert_any_call(2)
    assert double.call_count == 1


def test_frames_modules_and_the_runner_never_cross(pair):
    _, lend = pair

    holder = types.SimpleNamespace(frame=sys._getframe(), code=test_frames_modules_and_the_runner_never_cross.__code__)
    for name in ("frame", "code"):
        with pytest.raises(BoundaryError, match="cannot be lent"):
            lend(lambda obj, name: getattr(obj, name))(holder, name)
    with pytest.raises(BoundaryError, match="cannot be lent"):
        lend(lambda item: item)(pytest.MonkeyPatch())
    with pytest.raises(BoundaryError, match="cannot be lent"):
        lend(lambda item: item)(types.ModuleType("tests_module"))
    assert lend(lambda module: module.sep)(os.path) == os.path.sep  # a standard-library module goes by name


def test_names_the_tested_code_sends_resolve_only_to_data_types_and_exception_classes(pair):
    t_peer, _ = pair
    assert t_peer.decode({"n": "builtins:dict"}) is dict
    assert t_peer.decode({"x": {"n": "builtins:ValueError"}}) is ValueError
    for name in ("os:system", "builtins:exec", "builtins:__import__", "_pytest.reports:TestReport", "sys:"):
        with pytest.raises(BoundaryError):
            t_peer.decode({"n": name})


@pytest.mark.parametrize("data", [{"q": 1}, {"d": 1, "t": 2}, {"y": 99}, {"r": "1"}, {"c": ["1", 2]}, {"b": "***"},
                                  {"d": [[[1], 2]]}, {"x": []}, {"v": ["fraction", 1, 0]}, {"v": ["os", "x"]}])
def test_malformed_values_are_refused(pair, data):
    t_peer, _ = pair
    with pytest.raises(BoundaryError):
        t_peer.decode(data)


def test_exceptions_cross_with_their_classes_and_come_back_as_themselves(pair):
    _, lend = pair

    class LibraryError(ValueError):
        pass

    def raise_library():
        raise LibraryError("bad input")

    with pytest.raises(ValueError, match="bad input") as caught:
        lend(raise_library)()
    assert type(caught.value).__name__ == "LibraryError" and type(caught.value) is not LibraryError
    remote_class = lend(lambda: LibraryError)()
    assert remote_class is type(caught.value)  # one shadow class per class of the other side

    class TestsOwnError(Exception):
        pass

    def call(callback):
        callback()

    def failing():
        raise TestsOwnError("from the test")

    with pytest.raises(TestsOwnError) as caught:  # raised here, through the tested code, and back: the original
        lend(call)(failing)
    assert str(caught.value) == "from the test"


def test_a_swallowed_assertion_of_a_tests_callback_is_recorded(pair):
    t_peer, lend = pair

    def swallow(callback):
        try:
            callback()
        except BaseException:  # noqa: BLE001 - what a forger does
            return "went on"

    def callback():
        raise AssertionError("the item was wrong")

    assert lend(swallow)(callback) == "went on"
    assert [str(error) for error in t_peer.escaped] == ["the item was wrong"]


def test_generators_reach_the_tested_code_as_generators(pair):
    _, lend = pair
    import inspect

    assert lend(lambda gen: (inspect.isgenerator(gen), list(gen)))(iter_chunks()) == (True, ["<a>", "</a>"])


def iter_chunks():
    yield "<a>"
    yield "</a>"


PATHS = ["lib.py", "pkg/core.py", "pkg/testing.py", "pkg/Tests.py", "pkg/tests/__init__.py", "pkg/tests/helpers.py",
         "tests/test_a.py", "test_top.py", "pkg/core_test.py", "conftest.py", "pkg/conftest.py", "Testing/x.py",
         "contest.py", "src/pkg/test/__init__.py", "testing.py", "pkg/test_util/mod.py"]


@pytest.mark.parametrize("path", PATHS)
def test_what_loads_in_the_test_process_is_what_the_patch_policy_protects_as_tests(path):
    reason = patch_policy.protected_reason(path)
    assert protected(path) == (reason is not None and ("test folder" in reason or "test file" in reason)), reason


def test_the_finder_sends_every_module_of_the_checkout_to_the_tested_codes_process(tmp_path, monkeypatch):
    files = ["lib.py", "pkg/__init__.py", "pkg/testing.py", "pkg/tests/__init__.py", "pkg/tests/test_a.py",
             "ns/inner/core.py", "src/srcpkg/__init__.py", "conftest.py", "tests/helpers.py", "libdir/deep/mod.py"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    for entry in (tmp_path, tmp_path / "src", tmp_path / "libdir"):  # the root, a src layout, a configured path
        monkeypatch.syspath_prepend(str(entry))
    finder = RemoteFinder(peer=None, root=str(tmp_path))
    ours = {name: finder.find_spec(name, path) for name, path in [
        ("lib", None), ("pkg", None), ("pkg.testing", [str(tmp_path / "pkg")]), ("ns", None), ("srcpkg", None),
        ("deep.mod", [str(tmp_path / "libdir" / "deep")])]}
    assert all(spec is not None and spec.loader is finder for spec in ours.values()), ours
    assert ours["pkg"].loader_state == [str(tmp_path / "pkg")] and ours["lib"].loader_state is None
    for name, path in [("pkg.tests", [str(tmp_path / "pkg")]), ("conftest", None), ("tests", None), ("json", None),
                       ("pytest", None)]:
        assert finder.find_spec(name, path) is None, name


def test_the_tested_code_cannot_skip_a_test(pair):
    """unittest's SkipTest, which pytest counts as skipped (and a skipped PASS_TO_PASS test as fine), arrives from
    the tested code as a look-alike that fails the test."""
    import unittest

    _, lend = pair

    def skip():
        raise unittest.SkipTest("not today")

    with pytest.raises(Exception, match="not today") as caught:
        lend(skip)()
    assert type(caught.value).__name__ == "SkipTest" and not isinstance(caught.value, unittest.SkipTest)


def test_class_checks_and_context_managers_of_the_tested_code_work(pair):
    _, lend = pair

    class Node:
        pass

    class Guard:
        def __enter__(self):
            return "inside"

        def __exit__(self, kind, error, traceback):
            assert traceback is None  # a traceback never crosses
            return kind is KeyError  # swallows KeyError only

    node_class = lend(lambda: Node)()
    assert isinstance(lend(lambda: Node())(), node_class) and not isinstance(5, node_class)
    with lend(lambda: Guard())() as entered:
        assert entered == "inside"
        raise KeyError("swallowed by the library's own context manager")
    with pytest.raises(ValueError), lend(lambda: Guard())():
        raise ValueError("not swallowed")


def test_a_star_import_cannot_replace_the_tests_own_names(pair):
    from recipes.swe.boundary_wire import REMOTE_KEY, RemoteModule

    _, lend = pair
    library = types.ModuleType("library")
    library.__all__ = ["check", "pytest", "os", "isinstance", "len", "_private_but_listed"]
    remote = RemoteModule("library")
    remote.__dict__[REMOTE_KEY] = lend(library)
    assert remote.__all__ == ["check", "_private_but_listed"]
    del library.__all__
    library.check, library._hidden = 1, 2
    assert remote.__all__ == ["check"]


def test_only_ordinary_errors_cross_as_themselves(pair):
    """A name the tested code sends resolves to an exception class only for ordinary errors: unittest's private
    _ShouldStop (which ends a TestCase method as passed), SkipTest and KeyboardInterrupt arrive as look-alikes."""
    import unittest

    _, lend = pair

    def raising(error):
        def throw():
            raise error
        return throw

    for error, real in [(unittest.case._ShouldStop(), unittest.case._ShouldStop),
                        (KeyboardInterrupt(), KeyboardInterrupt), (unittest.SkipTest("x"), unittest.SkipTest)]:
        with pytest.raises(Exception) as caught:  # a look-alike is an ordinary Exception, whatever it was in U
            lend(raising(error))()
        assert not isinstance(caught.value, real) and type(caught.value).__name__ == type(error).__name__
    with pytest.raises(SystemExit):
        lend(raising(SystemExit(2)))()
    with pytest.raises(json.JSONDecodeError):
        lend(lambda text: json.loads(text))("{")


def test_the_tested_codes_context_manager_never_swallows_a_tests_failure(pair):
    _, lend = pair

    class SwallowAll:
        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            return True

    with lend(lambda: SwallowAll())():
        raise KeyError("an ordinary error the library may swallow")
    with pytest.raises(AssertionError), lend(lambda: SwallowAll())():
        raise AssertionError("the test's own failure")
    with pytest.raises(pytest.fail.Exception), lend(lambda: SwallowAll())():
        pytest.fail("the test's own failure")


def test_a_star_import_keeps_the_names_the_test_bound_before(pair):
    from recipes.swe.boundary_wire import REMOTE_KEY, RemoteModule

    _, lend = pair
    library = types.ModuleType("library")
    library.__all__ = ["check", "assert_equal"]
    library.check = library.assert_equal = lambda *args: None
    remote = RemoteModule("harnessrl_test_star_library")
    remote.__dict__[REMOTE_KEY] = lend(library)
    sys.modules[remote.__name__] = remote
    try:
        namespace = {"assert_equal": "the test's own helper"}
        exec(f"from {remote.__name__} import *", namespace)
    finally:
        del sys.modules[remote.__name__]
    assert namespace["assert_equal"] == "the test's own helper" and isinstance(namespace["check"], Remote)


def test_nothing_loads_in_the_test_process_from_the_tested_codes_folders(tmp_path, monkeypatch):
    """Fourth attack review: an extension module (found before a .py of the same name) or a zip the tested code
    writes into the tests' temporary folder is refused by the finder whatever its loader; so is a native library
    loaded there through ctypes (the audit hook, installed here for folders of this test only)."""
    import zipfile


    checkout, zone = tmp_path / "checkout", tmp_path / "scratch"
    (zone / "basetemp").mkdir(parents=True)
    checkout.mkdir()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (zone / "basetemp" / f"planted{suffix}").write_bytes(b"\x7fELF not really")
    (zone / "basetemp" / "planted.py").write_text("VALUE = 6\n")
    with zipfile.ZipFile(zone / "basetemp" / "bundle.zip", "w") as bundle:
        bundle.writestr("zipped.py", "VALUE = 6\n")
    monkeypatch.syspath_prepend(str(zone / "basetemp"))
    monkeypatch.syspath_prepend(str(zone / "basetemp" / "bundle.zip"))
    finder = RemoteFinder(peer=None, root=str(checkout), writable=str(zone))
    for name in ("planted", "zipped"):
        with pytest.raises(ImportError, match="loads no module from the tested code's folders"):
            finder.find_spec(name)
    probe = f"""
import ctypes, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
from recipes.swe.process_boundary import _refuse_the_tested_code
_refuse_the_tested_code({str(checkout)!r}, {str(zone)!r})
for attempt in (lambda: ctypes.CDLL({str(zone / "basetemp" / f"planted{suffix}")!r}),
                lambda: compile("VALUE = 6", {str(zone / "basetemp" / "planted.py")!r}, "exec")):
    try:
        attempt()
        print("ALLOWED")
    except (PermissionError, ImportError) as error:
        print("REFUSED", type(error).__name__, error)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)  # the hook stays
    refusals = [line for line in result.stdout.splitlines() if line.startswith(("REFUSED", "ALLOWED"))]
    assert len(refusals) == 2 and "loads no library" in refusals[0] and "does not run the tested code" in refusals[1], \
        result.stdout + result.stderr


def test_a_callback_assertion_that_comes_back_out_of_the_tested_code_was_not_swallowed(pair):
    t_peer, lend = pair

    def failing():
        raise AssertionError("the callback's check")

    with pytest.raises(AssertionError, match="the callback's check"):
        lend(lambda callback: callback())(failing)
    assert t_peer.escaped == []


def test_the_copied_constants_are_the_originals():
    from recipes.swe import process_boundary, verdict_guard

    assert process_boundary.TAMPER_EXIT == verdict_guard.TAMPER_EXIT
    assert process_boundary.TEST_DIRS == patch_policy.TEST_DIRS
    assert process_boundary.TEST_FILES == patch_policy.TEST_FILES


def test_threads_of_the_tests_take_turns_on_the_wire(pair):
    from concurrent.futures import ThreadPoolExecutor

    _, lend = pair
    double = lend(lambda value: value * 2)
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(double, range(200))) == [value * 2 for value in range(200)]
