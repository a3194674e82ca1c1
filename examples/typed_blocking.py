"""Every object of the blocking package, as a type checker sees it
(tests/python/test_types.py runs mypy --strict on it, and on a copy with a
typo per object, which mypy must catch). Run: python examples/typed_blocking.py
with HILOCK_URL set (default redis://127.0.0.1:6379/0)."""
import os

import hilock


def main() -> None:
    url = os.environ.get("HILOCK_URL", "redis://127.0.0.1:6379/0")
    with hilock.Client(url) as client:
        lock = client.lock("typed:lock")
        with lock:
            count: int = lock.hold_count
        fair = client.fair_lock("typed:fair")
        if fair.acquire(wait=1.0):
            fair.release()
        fenced = client.fenced_lock("typed:fenced")
        token = fenced.acquire_token(wait=1.0)
        if token is not None:
            fenced.release()
        rw = client.read_write_lock("typed:rw")
        with rw.read_lock():
            pass
        with rw.write_lock():
            pass
        multi = hilock.MultiLock([client.lock("typed:m1"), client.lock("typed:m2")])
        with multi:
            pass
        red = hilock.RedLock([client.lock(f"typed:r{i}") for i in range(3)])
        if red.acquire(wait=1.0):
            red.release()
        sem = client.semaphore("typed:sem")
        sem.try_set_permits(2)
        sem.acquire()
        sem.release()
        pes = client.permit_expirable_semaphore("typed:pes")
        pes.try_set_permits(1)
        permit = pes.acquire(wait=1.0)
        if permit is not None:
            pes.release(permit)
        latch = client.count_down_latch("typed:latch")
        latch.try_set_count(1)
        latch.count_down()
        print(f"{client.url} {count} {token} {latch.count}")


if __name__ == "__main__":
    main()
