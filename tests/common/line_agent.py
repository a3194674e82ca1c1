"""The skeleton shared by the Python test agents that speak a line protocol
on stdin/stdout (tests/interop/driver.py, tests/conformance/agent.py); the
same shape as line_agent.c.

    request  ACTOR WORDS...        answer  ACTOR ...

Every actor is a thread, created the first time its name is seen, which runs
that actor's requests in order: with hilock's calling-thread locks each actor
is a distinct owner "<client-id>:<os-thread-id>".
"""
import os
import queue
import sys
import threading

_out = threading.Lock()


def say(who, text):
    """One answer line, whole (thread-safe)."""
    with _out:
        sys.stdout.write("%s %s\n" % (who, text))
        sys.stdout.flush()


def serve(run, on_error, min_words=2, usage="err missing command"):
    """Read requests until EOF or "quit"; answer each with run(words, state)
    (state: a dict of the actor's own), or on_error(exception) if it raised.
    Requests shorter than min_words are answered with `usage`. Ends the
    process without joining actors still blocked in a call."""
    def actor_loop(name, q):
        state = {}
        while True:
            w = q.get()
            try:
                reply = run(w, state)
            except Exception as e:  # noqa: BLE001 - reported to the harness
                reply = on_error(e)
            say(name, reply)

    actors = {}
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] == "quit":
            break
        if len(w) < min_words:
            say(w[0], usage)
            continue
        q = actors.get(w[0])
        if q is None:
            q = actors[w[0]] = queue.Queue()
            threading.Thread(target=actor_loop, args=(w[0], q), daemon=True).start()
        q.put(w)
    sys.stdout.flush()
    os._exit(0)
