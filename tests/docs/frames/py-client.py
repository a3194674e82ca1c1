# Frame "py-client" (tests/docs): a Python fragment of the docs runs with
# `client` open; run_job(), storage and data stand for the reader's own code.
import hilock

client = hilock.Client("redis://127.0.0.1:6379/0")


def run_job() -> None:
    print("job")


class _Storage:
    def write(self, key: str, value: bytes, fencing_token: int) -> None:
        print("write", key, fencing_token)


storage, data = _Storage(), b"report"
@BLOCK@
client.close()
