# hilock._engine (python/_engine.c): libcore's engine for Python drivers.
# Its objects are described in the C file's comments; to type checkers the
# module is opaque.
from typing import Any

def __getattr__(name: str) -> Any: ...
