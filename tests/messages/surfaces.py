"""Every string hilock's Python package shows about a client, for
tests/messages/run.sh to search for passwords: for each URL given, the
blocking and asyncio clients' repr, str and url (opened) or the exception
(str, repr and traceback), lock reprs, and every log record (DEBUG and up).
Usage: python surfaces.py URL..."""
import asyncio
import logging
import sys
import traceback

import hilock
import hilock.aio

logging.basicConfig(level=logging.DEBUG, stream=sys.stdout,
                    format="py log %(name)s %(levelname)s %(message)s")
asyncio_debug = True


def show_exc(label, e):
    print(f"{label} raised {type(e).__name__}: {e}")
    print(f"{label} repr: {e!r}")
    print("".join(traceback.format_exception(type(e), e, e.__traceback__)))


def blocking(url):
    try:
        c = hilock.Client(url, connect_timeout=0.5, command_timeout=0.5)
    except Exception as e:  # noqa: BLE001 - every kind is shown
        show_exc("py Client", e)
        return
    with c:
        print(f"py Client repr: {c!r}")
        print(f"py Client str: {c}")
        print(f"py Client url: {c.url}")
        print(f"py Client errmsg: {c.errmsg}")
        lk = c.lock("secrets:x")
        print(f"py lock repr: {lk!r}")
        for name in ("", "n" * 5000):
            try:
                c.lock(name).acquire(blocking=False)
            except Exception as e:  # noqa: BLE001
                show_exc(f"py lock({len(name)} bytes)", e)
        try:
            lk.release()
        except Exception as e:  # noqa: BLE001
            show_exc("py release unheld", e)
    print(f"py Client repr closed: {c!r}")


async def aio(url):
    try:
        c = await hilock.aio.connect(url, connect_timeout=0.5, command_timeout=0.5)
    except Exception as e:  # noqa: BLE001
        show_exc("aio connect", e)
        return
    async with c:
        print(f"aio Client repr: {c!r}")
        print(f"aio Client str: {c}")
        print(f"aio Client url: {c.url}")
        lk = c.lock("secrets:x")
        print(f"aio lock repr: {lk!r}")
        for name in ("", "n" * 5000):
            try:
                c.lock(name)
            except Exception as e:  # noqa: BLE001
                show_exc(f"aio lock({len(name)} bytes)", e)
        try:
            await lk.release()
        except Exception as e:  # noqa: BLE001
            show_exc("aio release unheld", e)
    print(f"aio Client repr closed: {c!r}")


for u in sys.argv[1:]:
    print(f"py url {hilock._core._redact_url(u)}")
    blocking(u)
    asyncio.run(aio(u), debug=asyncio_debug)
print("py done")
