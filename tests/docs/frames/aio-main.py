# Frame "aio-main" (tests/docs): an asyncio fragment of the docs (one that
# says "inside a coroutine") runs as the body of a coroutine, on asyncio.run.
import asyncio


async def main() -> None:
    @BLOCK@


asyncio.run(main())
