"""The wire of the process boundary (`process_boundary`): one `Peer` at each end of a socket between the test process
(T) and the tested code's process (U), each serving the other's requests while it waits for its own answer.

What crosses, and how (the same rules both ways, decoded strictly; nothing is unpickled or imported on request in T):
- By value, rebuilt with exact built-in types: None, bool, int, float, complex, str, bytes, bytearray, and list,
  tuple, dict, set, frozenset and OrderedDict of those; and the standard library's value types (dates, times,
  durations, Decimal, Fraction, UUID, paths). A test's `==` on what the tested code returned is the test's own
  comparison, never the tested code's.
- Exception classes and instances: built-in and standard-library ones by name; others as classes made on the
  receiving side (look-alikes), so `pytest.raises(lib.Error)` works and an exception crossing back is the original;
  unittest's SkipTest from U arrives as a look-alike, so the tested code cannot have a test counted skipped.
- Everything else by reference (`Remote`): calls, attribute reads, iteration and the like go back to the owner.
  T lends the tests' objects under rules (`guarded`): U may call what it was given, read public attributes (never a
  test double's own API) and iterate, but gets no module, frame, code, traceback or test-runner object, changes none
  of them (no attribute or item writes), and no name U sends resolves to anything in T but a plain data type or an
  exception class. T compares U's objects with its own values on their plain value (`Remote._compare`).

Standard library only: copied into the grader's runner directory beside `process_boundary.py`, which loads it by path.
"""

from __future__ import annotations

import base64
import builtins
import collections
import datetime
import decimal
import fractions
import importlib
import json
import operator
import pathlib
import socket
import struct
import sys
import threading
import types
import uuid
import warnings

MAX_MESSAGE_BYTES = 64 << 20  # a larger message is a broken protocol
MAX_DEPTH = 200  # nesting of a value sent by value
HEADER = struct.Struct("!I")
SCALARS = (type(None), bool, int, float, str)
# The names T resolves for U: plain data types (any exception class is resolved by `_exception_class`).
DATA_TYPES = {t.__name__: t for t in (dict, list, tuple, str, int, float, bool, bytes, bytearray, set, frozenset,
                                       complex, object)}
# Operations either side may ask of the other's objects (by the built-in that performs them); in T, the writes
# (`MUTATING`) are refused.
SPECIALS = {"iter": iter, "next": next, "len": len, "bool": bool, "str": str, "repr": repr, "hash": hash,
            "contains": lambda obj, item: item in obj, "getitem": lambda obj, key: obj[key],
            "setitem": lambda obj, key, value: obj.__setitem__(key, value),
            "delitem": lambda obj, key: obj.__delitem__(key), "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
            "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
            "index": lambda obj: obj.__index__(), "int": int, "float": float,
            "enter": lambda obj: obj.__enter__(), "exit": lambda obj, *args: obj.__exit__(*args),
            "instancecheck": lambda cls, instance: isinstance(instance, cls), "plain": lambda obj: _plain(obj),
            "subclasscheck": lambda cls, subclass: issubclass(subclass, cls), "dir": dir}
PLAIN_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
                         frozenset, collections.OrderedDict})  # what crosses by value
# Standard-library value types that cross by value too (exact types; a datetime or time with a zone goes by reference):
# name -> (type, its constructor's arguments).
VALUE_TYPES = {
    "date": (datetime.date, lambda v: [v.year, v.month, v.day]),
    "datetime": (datetime.datetime, lambda v: [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond]),
    "time": (datetime.time, lambda v: [v.hour, v.minute, v.second, v.microsecond]),
    "timedelta": (datetime.timedelta, lambda v: [v.days, v.seconds, v.microseconds]),
    "decimal": (decimal.Decimal, lambda v: [str(v)]),
    "fraction": (fractions.Fraction, lambda v: [v.numerator, v.denominator]),
    "uuid": (uuid.UUID, lambda v: [v.hex]),
    "path": (pathlib.PosixPath, lambda v: [str(v)]),
    "purepath": (pathlib.PurePosixPath, lambda v: [str(v)]),
}
VALUE_NAMES = {kind: name for name, (kind, _) in VALUE_TYPES.items()}
MUTATING = frozenset({"setitem", "delitem"})
NEVER_LENT = (types.ModuleType, types.FrameType, types.CodeType, types.TracebackType, types.CellType)
RUNNER_MODULES = ("_pytest", "pytest", "pluggy", "harnessrl_")  # T's objects of these modules are never lent


class BoundaryError(Exception):
    """The other process broke the protocol, refused an operation, or went away."""


def _stdlib(module: str | None) -> bool:
    top = (module or "").partition(".")[0]
    return top == "builtins" or top in sys.stdlib_module_names


def _named(obj) -> str | None:
    """'module:qualname' when `obj` is a standard-library module, class or function that resolves back to itself."""
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
        return f"{name}:" if isinstance(name, str) and _stdlib(name) and sys.modules.get(name) is obj else None
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or not _stdlib(module) or "<" in qualname:
        return None
    try:
        return f"{module}:{qualname}" if _resolve(module, qualname, import_=False) is obj else None
    except (AttributeError, LookupError):
        return None


def _resolve(module: str, qualname: str, import_: bool):
    found = importlib.import_module(module) if import_ else sys.modules[module]
    for part in qualname.split(".") if qualname else ():
        found = getattr(found, part)
    return found


def _exception_class(module: str, qualname: str) -> type | None:
    """A built-in or standard-library exception class already loaded in this process (nothing is imported)."""
    if not _stdlib(module) or module not in sys.modules:
        return None
    try:
        found = _resolve(module, qualname, import_=False)
    except AttributeError:
        return None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


class Remote:
    """An object of the other process: every operation is a request to it."""

    __slots__ = ("_peer", "_rid", "__weakref__")

    def __init__(self, peer: Peer, rid: int) -> None:
        object.__setattr__(self, "_peer", peer)
        object.__setattr__(self, "_rid", rid)

    def _ask(self, op: str, *args, **fields):
        return self._peer.request(op, r=self._rid, args=list(args), **fields)

    def __getattr__(self, name: str):
        return self._ask("getattr", name=name)

    def __setattr__(self, name: str, value) -> None:
        self._ask("setattr", value, name=name)

    def __delattr__(self, name: str) -> None:
        self._ask("delattr", name=name)

    def __call__(self, *args, **kwargs):
        return self._ask("call", *args, kwargs=self._peer.encode(kwargs))

    def __iter__(self):
        return self._ask("special", name="iter")

    def __next__(self):
        return self._ask("special", name="next")

    def __len__(self):
        return self._ask("special", name="len")

    def __bool__(self):
        return self._ask("special", name="bool")

    def __str__(self):
        return self._ask("special", name="str")

    def __repr__(self):
        return self._ask("special", name="repr")

    def __hash__(self):
        return self._ask("special", name="hash")

    def __contains__(self, item):
        return self._ask("special", item, name="contains")

    def __getitem__(self, key):
        return self._ask("special", key, name="getitem")

    def __setitem__(self, key, value):
        self._ask("special", key, value, name="setitem")

    def __delitem__(self, key):
        self._ask("special", key, name="delitem")

    def _compare(self, other, name: str, compare):
        """In T, against anything of T's own: the comparison is T's, on U's object's plain value (NotImplemented when
        it has none), so no object of the tested code's own class satisfies a test's comparison with its values."""
        if self._peer.guarded and not (isinstance(other, Remote) and other._peer is self._peer):
            plain, value = self._ask("special", name="plain")
            if plain is not True or type(value) not in PLAIN_TYPES:
                return NotImplemented
            return compare(value, other)
        return self._ask("special", other, name=name)

    def __eq__(self, other):
        return self._compare(other, "eq", operator.eq)

    def __ne__(self, other):
        return self._compare(other, "ne", operator.ne)

    def __lt__(self, other):
        return self._compare(other, "lt", operator.lt)

    def __le__(self, other):
        return self._compare(other, "le", operator.le)

    def __gt__(self, other):
        return self._compare(other, "gt", operator.gt)

    def __ge__(self, other):
        return self._compare(other, "ge", operator.ge)

    def __index__(self):
        return self._ask("special", name="index")

    def __int__(self):
        return self._ask("special", name="int")

    def __float__(self):
        return self._ask("special", name="float")

    def __enter__(self):
        return self._ask("special", name="enter")

    def __exit__(self, kind, error, traceback):
        suppress = self._ask("special", kind, error, None, name="exit")  # a traceback never crosses
        if self._peer.guarded and error is not None and (_is_assertion(error) or not isinstance(error, Exception) or
                                                         type(error).__module__.startswith("_pytest")):
            return False  # the tested code's context manager never swallows a test's failure or outcome
        return suppress

    def __instancecheck__(self, instance) -> bool:
        return self._ask("special", instance, name="instancecheck")

    def __subclasscheck__(self, subclass) -> bool:
        return self._ask("special", subclass, name="subclasscheck")

    def __dir__(self):
        return self._ask("special", name="dir")


def _plain(obj) -> tuple[bool, object]:
    """U's object as the plain value of the built-in type it derives from ((False, None) when none): what T compares
    with plain data, so that an object of the tested code's own class is never equal to a test's expected value."""
    for base in (bool, int, float, complex, str, bytes, bytearray, dict, list, tuple, set, frozenset):
        if isinstance(obj, base):
            return True, base(obj)
    return False, None


def _pull(remote: Remote):
    """A real generator over the other process's iterator (so `inspect.isgenerator` holds on both sides)."""
    while True:
        try:
            item = next(remote)
        except StopIteration:
            return
        yield item


class Peer:
    """One end of the boundary: requests to the other process, and the service of its requests while waiting."""

    def __init__(self, sock: socket.socket, guarded: bool) -> None:
        self.sock = sock
        self.guarded = guarded  # True in T: what the other side may do with this side's objects is limited
        self.lent: dict[int, object] = {}  # id on the wire -> this side's object the other side holds
        self._lent_ids: dict[int, int] = {}  # id(object) -> id on the wire (lent objects stay alive)
        self._proxies: dict[tuple[str, int], object] = {}  # the other side's objects, one proxy each
        self._counter = 0
        self.escaped: list[BaseException] = []  # assertion failures raised in this side's code served to the other
        self.lock = threading.RLock()  # one request on the wire at a time, whichever thread makes it
        self.busy = False  # inside a read or write of the wire (a warning then must not start a request)

    # -- the wire
    def _send(self, message: dict) -> None:
        data = json.dumps(message, separators=(",", ":")).encode("ascii")
        if len(data) > MAX_MESSAGE_BYTES:
            raise BoundaryError(f"a message of {len(data)} bytes is over the boundary's {MAX_MESSAGE_BYTES}")
        self.busy = True
        try:
            self.sock.sendall(HEADER.pack(len(data)) + data)
        finally:
            self.busy = False

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise BoundaryError("the other process closed the boundary (it ended or was killed)")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _receive(self) -> dict:
        self.busy = True
        try:
            (size,) = HEADER.unpack(self._read(HEADER.size))
            if size > MAX_MESSAGE_BYTES:
                raise BoundaryError(f"a message of {size} bytes is over the boundary's {MAX_MESSAGE_BYTES}")
            data = self._read(size)
        finally:
            self.busy = False
        try:
            message = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise BoundaryError(f"a message that is not the boundary's JSON: {error}") from None
        if not isinstance(message, dict):
            raise BoundaryError("a message that is not an object")
        return message

    # -- requests
    def request(self, op: str, r: int | None = None, args: list | tuple = (), **fields):
        """Ask the other side to perform `op`, serving its own requests until the answer comes (one thread at a time:
        a request holds the wire until its answer, the other side's nested requests served meanwhile)."""
        with self.lock:
            self._counter += 1
            number = self._counter
            self._send({"op": op, "id": number, "r": r, "args": [self.encode(arg) for arg in args], **fields})
            while True:
                message = self._receive()
                if "op" in message:
                    self._serve(message)
                    continue
                if message.get("re") != number:
                    raise BoundaryError(f"an answer to request {message.get('re')!r} while waiting for {number}")
                if "err" in message:
                    error = self._decode_exception(message["err"])
                    # an assertion of a test's callback that came back out of the tested code was not swallowed
                    self.escaped = [escaped for escaped in self.escaped if escaped is not error]
                    raise error
                return self.decode(message.get("ok"))

    def serve_forever(self) -> None:
        """U's loop: serve requests until T closes the boundary."""
        while True:
            try:
                with self.lock:
                    message = self._receive()
            except BoundaryError:
                return
            if "op" not in message:
                raise BoundaryError("an answer with no request waiting")
            self._serve(message)

    def _serve(self, message: dict) -> None:
        with self.lock:
            self._serve_locked(message)

    def _serve_locked(self, message: dict) -> None:
        number = message.get("id")
        try:
            reply = {"re": number, "ok": self.encode(self._perform(message))}
        except BaseException as error:  # noqa: BLE001 - every failure goes back as the other side's exception
            if self.guarded and _is_assertion(error):
                self.escaped.append(error)
            try:
                reply = {"re": number, "err": self._encode_exception(error)}
            except BoundaryError as refused:
                reply = {"re": number, "err": self._encode_exception(refused)}
        self._send(reply)

    def _perform(self, message: dict):
        op, name = message.get("op"), message.get("name")
        if op == "import" and not self.guarded:
            for entry in reversed([p for p in message.get("path", []) if isinstance(p, str)]):
                if entry not in sys.path:
                    sys.path.insert(0, entry)
            return importlib.import_module(str(name))
        if op == "warn" and self.guarded:
            return _reissue_warning(*self._arguments(message)[:4])
        target = self._target(message)
        args = self._arguments(message)
        if op == "call":
            kwargs = self.decode(message.get("kwargs", {"d": []}))
            if type(kwargs) is not dict or not all(type(key) is str for key in kwargs):
                raise BoundaryError("call keywords that are not a dict of names")
            return target(*args, **kwargs)
        if not isinstance(name, str):
            raise BoundaryError(f"request {op!r} without a name")
        if op == "getattr":
            self._check_read(target, name)
            return getattr(target, name)
        if op in ("setattr", "delattr") or (op == "special" and name in MUTATING):
            self._check_write(target, name)
            if op == "special":
                return SPECIALS[name](target, *args)
            return setattr(target, name, *args[:1]) if op == "setattr" else delattr(target, name)
        if op == "special" and name in SPECIALS:
            return SPECIALS[name](target, *args)
        raise BoundaryError(f"an unknown request {op!r} {name!r}")

    def _target(self, message: dict):
        rid = message.get("r")
        if type(rid) is not int or rid not in self.lent:
            raise BoundaryError(f"a request on {rid!r}, which this process never lent")
        return self.lent[rid]

    def _arguments(self, message: dict) -> list:
        args = message.get("args", [])
        if type(args) is not list:
            raise BoundaryError("request arguments that are not a list")
        return [self.decode(arg) for arg in args]

    def _check_read(self, target, name: str) -> None:
        """In T: the tested code reads only public attributes of the tests' objects, and never a test double's own
        API (`unittest.mock`: its assertions, counters and reset; the attributes it stands in for are fine)."""
        if not self.guarded:
            return
        if name.startswith("_"):
            raise AttributeError(f"the tested code may not reach the tests' private attribute {name!r}")
        if any(cls.__module__ == "unittest.mock" for cls in type(target).__mro__) and hasattr(type(target), name):
            raise AttributeError(f"the tested code may not use the test double's own {name!r}")

    def _check_write(self, target, what: str) -> None:
        """In T: the tested code changes none of the tests' objects (their attributes and items are the tests')."""
        if self.guarded:
            raise TypeError(f"the tested code may not change the tests' {type(target).__name__} ({what}): objects "
                            "lent to it are read, called and iterated only")

    # -- values
    def encode(self, value, depth: int = 0):
        """`value` as the boundary's JSON: by value, by name, or lent by reference."""
        kind = type(value)
        if kind in SCALARS:
            return value
        if depth > MAX_DEPTH:
            raise BoundaryError(f"a value nested more than {MAX_DEPTH} deep (or cyclic) cannot cross by value")
        nested = depth + 1
        if kind is list:
            return [self.encode(item, nested) for item in value]
        if kind in (tuple, set, frozenset):
            return {CONTAINER_TAGS[kind]: [self.encode(item, nested) for item in value]}
        if kind in (dict, collections.OrderedDict):
            return {CONTAINER_TAGS[kind]: [[self.encode(k, nested), self.encode(v, nested)] for k, v in value.items()]}
        if kind in (bytes, bytearray):
            return {CONTAINER_TAGS[kind]: base64.b64encode(value).decode("ascii")}
        if kind is complex:
            return {"c": [value.real, value.imag]}
        if kind in VALUE_NAMES and getattr(value, "tzinfo", None) is None:
            return {"v": [VALUE_NAMES[kind], *VALUE_TYPES[VALUE_NAMES[kind]][1](value)]}
        if isinstance(value, Remote) and value._peer is self:
            return {"y": value._rid}
        if isinstance(value, RemoteModule) and isinstance(value.__dict__.get(REMOTE_KEY), Remote):
            return {"y": value.__dict__[REMOTE_KEY]._rid}
        if isinstance(value, type) and issubclass(value, BaseException):
            return {"x": self._encode_class(value)}
        if isinstance(value, BaseException):
            return {"e": self._encode_exception(value)}
        return self._encode_other(value)

    def _encode_other(self, value):
        if isinstance(value, type) and value.__name__ in DATA_TYPES and DATA_TYPES[value.__name__] is value:
            return {"n": f"builtins:{value.__name__}"}
        named = _named(value) if self.guarded else None
        if named is not None:  # T's standard-library classes and functions: U resolves its own
            return {"n": named}
        if self.guarded:
            self._check_lendable(value)
        if type(value) is types.GeneratorType:
            return {"g": self._lend(value)}
        return {"r": self._lend(value)}

    def _check_lendable(self, value) -> None:
        owner = getattr(value, "__self__", None) if isinstance(value, types.MethodType | types.BuiltinMethodType) \
            else None
        modules = {getattr(value, "__module__", None) if isinstance(value, type | types.FunctionType) else
                   type(value).__module__, type(owner).__module__ if owner is not None else None}
        if isinstance(value, NEVER_LENT) or isinstance(owner, NEVER_LENT) or \
                any(str(module or "").startswith(RUNNER_MODULES) for module in modules):
            raise BoundaryError(f"the tests' {type(value).__name__} {_short(value)} cannot be lent to the tested "
                                "code (modules, frames, code, tracebacks and the test runner's objects never cross)")

    def _lend(self, value) -> int:
        rid = self._lent_ids.get(id(value))
        if rid is None:
            rid = len(self.lent) + 1
            self.lent[rid], self._lent_ids[id(value)] = value, rid
        return rid

    def decode(self, data, depth: int = 0):
        """The value that `data` (the other side's `encode`) stands for, rebuilt here; BoundaryError if malformed."""
        if type(data) in SCALARS:
            return data
        if depth > MAX_DEPTH + 2:
            raise BoundaryError("a value nested too deep")
        nested = depth + 1
        if type(data) is list:
            return [self.decode(item, nested) for item in data]
        if type(data) is not dict or len(data) != 1:
            raise BoundaryError(f"not a value of the boundary: {_short(data)}")
        ((tag, body),) = data.items()
        try:
            return DECODERS[tag](self, body, nested)
        except KeyError:
            raise BoundaryError(f"an unknown tag {tag!r}") from None
        except (TypeError, ValueError, ArithmeticError) as error:  # Fraction(1, 0) included
            raise BoundaryError(f"a malformed {tag!r} value: {error}") from None

    def _proxy(self, kind: str, rid, make):
        if type(rid) is not int:
            raise BoundaryError(f"a reference that is not a number: {_short(rid)}")
        key = (kind, rid)
        if key not in self._proxies:
            self._proxies[key] = make(Remote(self, rid))
        return self._proxies[key]

    def _own(self, rid):
        if type(rid) is not int or rid not in self.lent:
            raise BoundaryError(f"a reference to {rid!r}, which this process never lent")
        return self.lent[rid]

    def _resolve_name(self, body: str):
        module, _, qualname = str(body).partition(":")
        if self.guarded:
            if module == "builtins" and qualname in DATA_TYPES:
                return DATA_TYPES[qualname]
            found = _exception_class(module, qualname)
            if found is None or self._outcome_like(found):
                raise BoundaryError(f"the tested code named {body!r}, which is not a plain data type here")
            return found
        return _resolve(module, qualname, import_=True)

    # -- exceptions
    def _encode_class(self, cls: type, depth: int = 0) -> dict:
        origin = cls.__dict__.get("__boundary__")
        if origin is not None and origin[0] is self:
            return {"y": origin[1]}
        named = f"{cls.__module__}:{cls.__qualname__}"
        record = {"name": cls.__name__, "module": cls.__module__, "qualname": cls.__qualname__,
                  "n": named if _named(cls) == named or _exception_class(cls.__module__, cls.__qualname__) is cls
                  else None}
        if depth < MAX_DEPTH:  # bases always: a name the other side refuses still keeps its hierarchy
            record["bases"] = [self._encode_class(base, depth + 1) for base in cls.__bases__
                               if issubclass(base, BaseException)]
        if record["n"] is None and depth < MAX_DEPTH:
            try:
                if self.guarded:
                    self._check_lendable(cls)
                record["r"] = self._lend(cls)
            except BoundaryError:
                pass  # the test runner's own exception classes cross as look-alikes, never lent
        return record

    def _encode_exception(self, error: BaseException) -> dict:
        origin = error.__dict__.get("__boundary_rid__") if hasattr(error, "__dict__") else None
        if origin is not None and origin[0] is self:
            return {"y": origin[1]}
        try:
            args = self.encode(error.args)
        except BoundaryError:
            args = self.encode(tuple(_short(arg) for arg in error.args))
        try:
            text = str(error)
        except Exception:  # noqa: BLE001 - a broken __str__ is the thrower's problem
            text = type(error).__name__
        record = {"c": self._encode_class(type(error)), "a": args, "s": text}
        try:
            if self.guarded:
                self._check_lendable(error)
            record["r"] = self._lend(error)
        except BoundaryError:
            pass
        return record

    def _decode_class(self, record, depth: int = 0) -> type:
        if type(record) is not dict:
            raise BoundaryError("an exception class that is not a record")
        if "y" in record:
            own = self._own(record["y"])
            if not (isinstance(own, type) and issubclass(own, BaseException)):
                raise BoundaryError("an exception class that is not one")
            return own
        if isinstance(record.get("n"), str):
            try:
                found = self._resolve_name(record["n"])
                if isinstance(found, type) and issubclass(found, BaseException) and not self._outcome_like(found):
                    return found
            except (BoundaryError, ImportError, AttributeError, ValueError):
                pass
        name, module, qualname = (str(record.get(key, "")) for key in ("name", "module", "qualname"))
        key = ("x", record["r"]) if type(record.get("r")) is int else ("x?", f"{module}:{qualname}")
        if key not in self._proxies:
            bases = tuple(self._decode_class(base, depth + 1) for base in record.get("bases", [])
                          if depth < MAX_DEPTH) or (Exception,)
            body = {"__module__": module, "__qualname__": qualname, "__str__": _shadow_str,
                    "__boundary__": (self, record["r"]) if key[0] == "x" else None}
            try:
                self._proxies[key] = type(name or "RemoteError", bases, body)
            except TypeError:  # bases that cannot be combined here
                self._proxies[key] = type(name or "RemoteError", (Exception,), body)
        return self._proxies[key]

    def _outcome_like(self, cls: type) -> bool:
        """In T, an exception class U may not raise as itself: only ordinary errors are resolved by name (`Exception`
        subclasses and SystemExit, none private, none that a test runner reads as an outcome rather than a failure,
        like unittest's SkipTest or its private _ShouldStop); U's others arrive as look-alikes, which fail the test."""
        if not self.guarded:
            return False
        skip = getattr(sys.modules.get("unittest"), "SkipTest", None)
        private = any(part.startswith("_") for part in cls.__qualname__.split("."))  # csv.Error lives in _csv
        return private or not (issubclass(cls, Exception) or cls is SystemExit) or \
            (isinstance(skip, type) and issubclass(cls, skip))

    def _decode_exception(self, record) -> BaseException:
        if type(record) is not dict:
            return BoundaryError("an exception that is not a record")
        try:
            if "y" in record:
                own = self._own(record["y"])
                return own if isinstance(own, BaseException) else BoundaryError("an exception that is not one")
            cls = self._decode_class(record.get("c"))
            args = self.decode(record.get("a"))
            args = args if type(args) is tuple else (args,)
        except BoundaryError as error:
            return error
        try:
            error = cls(*args)
        except Exception:  # noqa: BLE001 - a class whose constructor wants other arguments
            error = cls.__new__(cls)
            error.args = args
        if "__boundary__" in cls.__dict__ and isinstance(record.get("s"), str):
            error.__boundary_str__ = record["s"]
        if type(record.get("r")) is int:
            error.__boundary_rid__ = (self, record["r"])
        return error


def _star_names(remote: Remote, importer: dict, own: str = "") -> list[str]:
    """What `from module import *` binds in a test module: the module's `__all__` (or its public names), less any name
    the importer has bound already (`importer`, its globals: a helper it imported, `pytest`), of a built-in or of a
    module loaded here, which the tested code would otherwise replace in the test's namespace with objects of its
    choosing."""
    try:
        names = remote.__all__
    except AttributeError:
        names = [name for name in dir(remote) if isinstance(name, str) and not name.startswith("_")]
    loaded = {module.partition(".")[0] for module in sys.modules} - {own}  # the star-imported package's own name
    return [name for name in names if isinstance(name, str) and name.isidentifier() and name not in loaded and
            name not in vars(builtins) and name not in importer]


def _shadow_str(error: BaseException) -> str:
    return error.__dict__.get("__boundary_str__") or BaseException.__str__(error)


def _pairs(peer: Peer, body, depth: int, into: dict) -> dict:
    for key, value in body:  # no intermediate pairs: a decoded message allocates only what it stands for
        into[peer.decode(key, depth)] = peer.decode(value, depth)
    return into


def _b64(body) -> bytes:
    return base64.b64decode(str(body).encode("ascii"), validate=True)


def _number(value):
    if type(value) not in (int, float):
        raise TypeError(f"{_short(value)} is not a number")
    return value


CONTAINER_TAGS = {tuple: "t", set: "s", frozenset: "f", dict: "d", collections.OrderedDict: "o", bytes: "b",
                  bytearray: "a"}
DECODERS = {
    "t": lambda peer, body, depth: tuple(peer.decode(item, depth) for item in body),
    "s": lambda peer, body, depth: {peer.decode(item, depth) for item in body},
    "f": lambda peer, body, depth: frozenset(peer.decode(item, depth) for item in body),
    "d": lambda peer, body, depth: _pairs(peer, body, depth, {}),
    "o": lambda peer, body, depth: _pairs(peer, body, depth, collections.OrderedDict()),
    "b": lambda peer, body, depth: _b64(body),
    "a": lambda peer, body, depth: bytearray(_b64(body)),
    "c": lambda peer, body, depth: complex(*(_number(part) for part in body[:2])),
    "n": lambda peer, body, depth: peer._resolve_name(body),
    "v": lambda peer, body, depth: _value(body),
    "y": lambda peer, body, depth: peer._own(body),
    "r": lambda peer, body, depth: peer._proxy("r", body, lambda remote: remote),
    "g": lambda peer, body, depth: peer._proxy("g", body, _pull),
    "x": lambda peer, body, depth: peer._decode_class(body, depth),
    "e": lambda peer, body, depth: peer._decode_exception(body),
}


def _value(body):
    """A standard-library value rebuilt from its name and constructor arguments (numbers and strings only)."""
    name, *args = body
    if name not in VALUE_TYPES or not all(type(arg) in (int, str) for arg in args):
        raise ValueError(f"no value type {_short(name)} with those arguments")
    return VALUE_TYPES[name][0](*args)


def _short(value, limit: int = 80) -> str:
    try:
        text = repr(value) if type(value) in SCALARS else f"<{type(value).__name__}>"
    except Exception:  # noqa: BLE001
        text = "<unprintable>"
    return text if len(text) <= limit else text[:limit] + "..."


def _is_assertion(error: BaseException) -> bool:
    """An assertion failure or pytest's own failure (pytest.fail), raised by the tests' code, alone or in a group."""
    if isinstance(error, BaseExceptionGroup):
        return any(_is_assertion(inner) for inner in error.exceptions)
    return isinstance(error, AssertionError) or (type(error).__name__ == "Failed" and
                                                 type(error).__module__.startswith("_pytest"))


def _reissue_warning(message, category, filename, lineno=0):
    """U's warning, issued in T under T's filters (pytest.warns, -W error), attributed to U's line."""
    if not (isinstance(category, type) and issubclass(category, Warning)):
        category = UserWarning
    warnings.warn_explicit(str(message), category, str(filename), lineno if type(lineno) is int else 0)


REMOTE_KEY = "__boundary_remote__"


class RemoteModule(types.ModuleType):
    """A module of the repository, as T sees it: attribute reads and writes go to U's module."""

    def __getattr__(self, name: str):
        remote = self.__dict__.get(REMOTE_KEY)
        if remote is None:
            raise AttributeError(name)
        if name == "__all__":
            return _star_names(remote, sys._getframe(1).f_globals, self.__name__.partition(".")[0])
        return getattr(remote, name)

    def __setattr__(self, name: str, value) -> None:
        # The import system's own attributes and submodules stay here (a test-like submodule is T's own module).
        if (name.startswith("__") and name.endswith("__")) or isinstance(value, types.ModuleType):
            super().__setattr__(name, value)
        else:
            setattr(self.__dict__[REMOTE_KEY], name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.__dict__[REMOTE_KEY], name)
