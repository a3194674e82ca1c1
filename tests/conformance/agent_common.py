"""What the two Python conformance agents (agent.py over the blocking
package, agent_aio.py over hilock.aio) share: the command line's client
options, the error kinds of an answer, and the object a scenario names.
Both clients have the same factory methods, so one function makes either's.
"""
import hilock

# The conformance error kinds; the first matching class wins (subclasses first).
ERR_KINDS = [
    (hilock.LockTimeout, "timeout"), (hilock.NotOwnerError, "notowner"),
    (hilock.LockLostError, "lost"), (hilock.AuthenticationError, "auth"),
    (hilock.NotAcknowledgedError, "unacked"),
    (hilock.ConnectionError, "connection"), (hilock.WrongTypeError, "wrongtype"),
    (hilock.ProtocolError, "protocol"), (hilock.ClosedError, "closed"),
    (hilock.InvalidArgument, "invalid"),
]

_SECONDS = ("watchdog_lease_ms", "command_timeout_ms", "connect_timeout_ms",
            "replica_ack_timeout_ms")


def client_kwargs(pairs):
    """key=value words (the same keys as agent.c, times in ms) -> keyword
    arguments of the client (times in seconds)."""
    kw = {}
    for p in pairs:
        k, v = p.split("=", 1)
        v = int(v)
        if k == "replica_ack":
            kw[k] = bool(v)
        elif k in _SECONDS:
            kw[k[:-3]] = v / 1000.0
        else:
            raise ValueError("unknown option " + k)
    return kw


def failure(e):
    """The answer line for an exception: err KIND CLASS: MESSAGE."""
    kind = next((k for cls, k in ERR_KINDS if isinstance(e, cls)), "other")
    return "err %s %s: %s" % (kind, type(e).__name__, str(e).replace("\n", " "))


def make_lock(c, kind, name):
    """r | f | fenced | read | write: the client's lock of that kind."""
    if kind == "f":
        return c.fair_lock(name)
    if kind == "fenced":
        return c.fenced_lock(name)
    if kind == "read":
        return c.read_write_lock(name).read_lock()
    if kind == "write":
        return c.read_write_lock(name).write_lock()
    return c.lock(name)


def make_sem(c, kind, name):
    """sem | pes | latch: the client's semaphore or count-down latch."""
    if kind == "sem":
        return c.semaphore(name)
    if kind == "pes":
        return c.permit_expirable_semaphore(name)
    return c.count_down_latch(name)
