"""Force unlock while `hilock run` holds the lock: the holder listens on its
own lock's channel, so the force unlock's message makes it check its hold at
once (instead of at the next renewal, lease/3 = 10 s later with the default
30 s lease): the command is stopped (exit 75) right away and before the
next `hilock run` on the name starts its command.

Every kind `hilock run` takes: plain, --fair, -s, -x, --fenced. A semaphore
permit has no force unlock, but any client that knows its id may give it
back: the last test. The bound asserted (5 s) is generous;
the times are printed. Uses test_silence.py's command and helpers.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import numsub, report, stop_all, wait_for
from test_silence import RUN_CMD, hilock_cli, started, times


MODES = {"plain": [], "fair": ["--fair"], "shared": ["-s"], "exclusive": ["-x"],
         "fenced": ["--fenced"]}


def holder_channel(mode: str, name: str) -> str:
    if mode in ("shared", "exclusive"):
        return "redisson_rwlock:{%s}" % name
    return "redisson_lock__channel:{%s}" % name


def listening(server, mode: str, name: str) -> bool:
    """Give the holder up to 3 s to subscribe to its lock's channel (made
    without waiting, right after the grant); a holder that does not listen
    (before this fix) is then tested as it is."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if numsub(server, holder_channel(mode, name)) >= 1:
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("mode", list(MODES))
def test_cli_run_force_unlock_stops_command_at_once(server, name, tmp_path, mode):
    hl = hilock_cli()
    py = os.environ.get("HILOCK_PYTHON", "python3")
    a_out, b_out = str(tmp_path / "a"), str(tmp_path / "b")
    a = subprocess.Popen([hl, "run", "--url", server.url, *MODES[mode], name, "--",
                          py, "-c", RUN_CMD, a_out])
    b = None
    try:
        wait_for(lambda: started(a_out), 10, "the first command")
        listening(server, mode, name)
        t_force = time.monotonic()
        subprocess.run([hl, "unlock", "--url", server.url, "--force", "--yes", name],
                       check=True, stdout=subprocess.DEVNULL)
        # the next run: exclusive, so that it must not overlap
        b_mode = ["-x"] if mode == "shared" else MODES[mode]
        b = subprocess.Popen([hl, "run", "--url", server.url, *b_mode, "-w", "20", name, "--",
                              py, "-c", RUN_CMD, b_out, "0.2"])
        try:
            rc = a.wait(5)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 75, "the force-unlocked hilock run did not stop its command (exit %r)" % rc
        a_last = max(t for _, t in times(a_out))
        report(f"force unlock ({mode}): hilock run stopped its command after", a_last - t_force)
        assert b.wait(20) == 0
        b_start = min(t for w, t in times(b_out) if w == "start")
        report(f"force unlock ({mode}): the next command started after", b_start - t_force)
        assert a_last < b_start, "two hilock run commands ran at the same time"
    finally:
        stop_all(a, b)


def test_cli_run_fair_short_command_force_unlocked_exits_75(server, name, tmp_path):
    """The fair case of the issue: the command ends before any renewal (the
    default 30 s lease), and a second `hilock run --fair` got the lock in
    between. The fair unlock script answers "released" on the missing key;
    the run must still say the lock was lost."""
    hl = hilock_cli()
    py = os.environ.get("HILOCK_PYTHON", "python3")
    a_out, b_out = str(tmp_path / "a"), str(tmp_path / "b")
    a = subprocess.Popen([hl, "run", "--url", server.url, "--fair", name, "--",
                          py, "-c", RUN_CMD, a_out, "1.5"])
    b = None
    try:
        wait_for(lambda: started(a_out), 10, "the first command")
        listening(server, "fair", name)
        subprocess.run([hl, "unlock", "--url", server.url, "--force", "--yes", name],
                       check=True, stdout=subprocess.DEVNULL)
        b = subprocess.Popen([hl, "run", "--url", server.url, "--fair", "-w", "20", name, "--",
                              py, "-c", RUN_CMD, b_out, "0.2"])
        assert a.wait(10) == 75, "hilock run --fair did not report the loss"
        assert b.wait(20) == 0
        a_last = max(t for _, t in times(a_out))
        b_start = min(t for w, t in times(b_out) if w == "start")
        assert a_last < b_start, "two hilock run --fair commands ran at the same time"
    finally:
        stop_all(a, b)



def test_cli_run_semaphore_permit_released_by_another_stops_command(server, name, tmp_path):
    """`hilock run --semaphore NAME:1`: another client gives the running
    command's permit back (permits belong to nobody: any client that knows
    the id may release it), then a second `hilock run --semaphore NAME:1`
    takes the freed permit. The first must stop its command (exit 75) before
    the second starts its own: the client keeps the permit
    (hilock_permit_semaphore_keep) and listens on redisson_sc:{NAME}, where
    the release publishes the new count; the message has it look for its id
    in the leases ZSET. Before: the first ran on until its next renewal
    (9.9 s later) while the second ran its command 0.18 s after the release."""
    import hilock
    hl = hilock_cli()
    py = os.environ.get("HILOCK_PYTHON", "python3")
    a_out, b_out, id_file = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "id")
    a = subprocess.Popen([hl, "run", "--url", server.url, "--semaphore", name + ":1", "--",
                          "sh", "-c", 'printf %s "$HILOCK_PERMIT_ID" > "$0"; exec "$1" -c "$2" "$3"',
                          id_file, py, RUN_CMD, a_out])
    b = None
    c = hilock.Client(server.url)
    try:
        wait_for(lambda: started(a_out), 10, "the first command")
        with open(id_file) as f:
            permit = f.read().strip()
        assert len(permit) == 32
        t_force = time.monotonic()
        c.permit_expirable_semaphore(name).release(permit)
        b = subprocess.Popen([hl, "run", "--url", server.url, "--semaphore", name + ":1", "-w",
                              "20", "--", py, "-c", RUN_CMD, b_out, "0.2"])
        try:
            rc = a.wait(5)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 75, "hilock run did not stop its command (exit %r)" % rc
        a_last = max(t for _, t in times(a_out))
        report("permit released by another: hilock run stopped its command after",
               a_last - t_force)
        assert b.wait(20) == 0
        b_start = min(t for w, t in times(b_out) if w == "start")
        report("permit released by another: the next command started after", b_start - t_force)
        assert a_last < b_start, "two hilock run --semaphore NAME:1 commands ran at the same time"
    finally:
        c.close()
        stop_all(a, b)
