"""hilock._engine from Python as a careless caller would use it: every type
it exports constructed with no, wrong and plausible arguments, every method
of every object (and every module function) called with junk arguments,
every attribute read and overwritten. Anything may raise; nothing may crash.

Each type runs in its own interpreter (a crash is a signal there, not the
end of pytest), which prints each step before taking it so that a failure
names the call that crashed.
"""

from __future__ import annotations

import subprocess
import sys
from typing import List

import pytest

import hilock._engine as E

_TYPES: List[str] = sorted(n for n in dir(E) if isinstance(getattr(E, n), type))

_CHILD = r'''
import asyncio, socket, sys
import hilock._engine as E

loop = asyncio.new_event_loop()
junk_vals = [None, 0, 1, -1, 2**31, 2**63, -2**63 - 1, 1.5, "", "x" * 300, b"", b"*1\r\n",
             bytearray(8), [], [None], (), {}, object(), E, loop, print]

def reply(data):
    r = E.Reader()
    r.feed(data)
    return r.get()

# real replies of each shape, and an object of each type made the documented way
for data in (b":1\r\n", b"-ERR x\r\n", b"$3\r\nabc\r\n", b"*2\r\n:1\r\n$-1\r\n", b"+OK\r\n",
             b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"):
    junk_vals.append(reply(data))
names = E.Names("n", E.KIND_REENTRANT)
junk_vals.append(names)
junk_vals.append(E.Router("single"))
junk_vals.append(E.Ack(1, 0, 100))

def arg_lists():
    yield ()
    for n in range(1, 11):
        for v in junk_vals:
            yield (v,) * n
        yield (1,) * (n - 1) + (None,)
        yield ("n",) + (1,) * (n - 1)
        yield ("n",) * n

def step(what):
    print(what, flush=True)

def poke(make, label):
    """Every method of a fresh object from make(), called with every junk
    argument list; every attribute of another overwritten with junk."""
    for m in sorted(dir(make())):
        if m.startswith("__") or m == "_asyncio_future_blocking":
            continue
        obj = make()
        try:
            attr = getattr(obj, m)
        except Exception:
            continue
        if callable(attr):
            for args in arg_lists():
                step(f"{label}.{m}{tuple(type(a).__name__ for a in args)}")
                try:
                    attr(*args)
                except BaseException:
                    pass
            step(f"{label}.{m}(junk=1)")
            try:
                attr(junk=1)
            except BaseException:
                pass
        else:
            for v in junk_vals[:12]:
                step(f"{label}.{m} = {type(v).__name__}")
                try:
                    setattr(obj, m, v)
                except BaseException:
                    pass
                poke_methods(obj, f"{label} with {m} = {type(v).__name__}")
        step(f"del {label}")
        del obj, attr


def poke_methods(obj, label):
    for m in sorted(dir(obj)):
        if m.startswith("__"):
            continue
        try:
            attr = getattr(obj, m)
        except Exception:
            continue
        if callable(attr):
            for args in ((), (1,), (None,)):
                step(f"{label}: {m}{args}")
                try:
                    attr(*args)
                except BaseException:
                    pass


name = sys.argv[1]
T = getattr(E, name)
made = []
for args in arg_lists():
    step(f"{name}{tuple(type(a).__name__ for a in args)}")
    try:
        T(*args)
    except BaseException:
        continue
    made.append(args)
    if len(made) > 3:
        break
# plausible arguments, for the types whose constructor wants them
plausible = {
    "Names": [("n", E.KIND_REENTRANT), ("n", E.KIND_FAIR, True)],
    "SemNames": [("s", E.SEM_SEMAPHORE), ("s", E.SEM_LATCH, True)],
    "Router": [("single",), ("cluster",), ("sentinel",)],
    "Ack": [(1, 0, 100), (0, -1, 1)],
    "ReplyFuture": [(loop,)],
}.get(name, [])
for i, args in enumerate(made + plausible):
    poke(lambda: T(*args), f"{name}#{i}")
if name == "Wire":
    def wire():
        a, b = socket.socketpair()
        keep.append(b)
        return T(a.detach(), loop, E.Reader(), [], print)
    keep = []
    poke(wire, "Wire")
if name == _FIRST:
    for f in sorted(n for n in dir(E) if not n.startswith("_")):
        fn = getattr(E, f)
        if callable(fn) and not isinstance(fn, type):
            for args in arg_lists():
                step(f"E.{f}{tuple(type(a).__name__ for a in args)}")
                try:
                    fn(*args)
                except BaseException:
                    pass
loop.close()
print("survived", flush=True)
'''


@pytest.mark.parametrize("name", _TYPES)
def test_engine_type_survives_junk(name: str) -> None:
    """No engine type can be made into an invalid object from Python, and
    none crashes on junk: each either refuses to be constructed (TypeError)
    or is valid when it is."""
    code = _CHILD.replace("_FIRST", repr(_TYPES[0]))
    p = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                       timeout=120)
    last = p.stdout.strip().splitlines()[-1:] or ["(nothing)"]
    assert p.returncode == 0 and last == ["survived"], (
        f"{name}: exit {p.returncode} after {last[0]!r}\n{p.stderr[-2000:]}")


def test_engine_types_without_constructor_refuse() -> None:
    """The types the engine makes itself (replies, machines) cannot be
    made from Python: a clear TypeError, not a zeroed object."""
    for name in ("Reply", "Acquire", "Release", "Settle", "Call", "SemWait"):
        with pytest.raises(TypeError, match="cannot create"):
            getattr(E, name)()
