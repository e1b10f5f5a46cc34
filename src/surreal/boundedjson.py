"""JSON from outside the process, parsed only once a linear scan has bounded it.

`json.loads` trusts its input's shape: it recurses once per nesting level (a header nested 200,000 deep is a
`RecursionError` traceback, not a refusal), builds every value whatever their number, and reads `NaN`, `Infinity`
and `1e999` as floats. Whatever a file, a bucket or a peer hands us (a policy artifact's header, a checkpoint's run
folder, a bucket's manifests, `sweep.json`, `reproduce.json`, a replay snapshot's header, metrics rows) goes through
`loads` instead: its length, nesting depth, number of values and longest string are checked by one pass over the
text before the parser sees it, and a refusal is one `JsonBoundsError` line naming what was over which limit.

The scan looks only at structure (brackets, commas, quotes and escapes), so it cannot itself recurse or backtrack:
it costs one regular-expression search per structural character, and a text whose bracket and comma counts are
already under the limits skips it altogether. Torch-free and NumPy-free: every role may use it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Outside a string: what changes the depth or the count of values, and where a string starts.
_STRUCTURE = re.compile(r'["\[\]{},]')
# Inside a string: where it ends, or an escape (whose next character is never its end).
_STRING_END = re.compile(r'["\\]')


class JsonBoundsError(ValueError):
    """Outside JSON that is over a limit or not JSON at all; the message is one line naming it."""


@dataclass(frozen=True)
class JsonBounds:
    """What a JSON text may hold. `max_items` counts values in containers (array items, object members) and
    containers themselves; `max_string` counts the characters of any one string, a key or a value; `allow_nan`
    admits `NaN`, `Infinity` and numbers too large for a float (Python's `json.dumps` writes the first two by
    default; a format written with `allow_nan=False` refuses them on the way in too)."""

    max_bytes: int
    max_depth: int = 32
    max_items: int = 1 << 20
    max_string: int = 1 << 20
    allow_nan: bool = False


def check(text: str, bounds: JsonBounds, what: str) -> None:
    """Raise JsonBoundsError unless `text` is within `bounds` (depth, values, strings); its length is the caller's
    (`loads` checks the bytes). One pass, no recursion; most texts are cleared by counting alone."""
    brackets = text.count("[") + text.count("{")
    if (
        brackets <= bounds.max_depth
        and brackets + text.count(",") <= bounds.max_items
        and len(text) <= bounds.max_string
    ):
        return  # no nesting, count or string could be over: nothing to scan
    depth = items = 0
    position, end = 0, len(text)
    while position < end:
        found = _STRUCTURE.search(text, position)
        if found is None:
            return
        char, position = found.group(), found.end()
        if char == '"':
            position = _skip_string(text, position, bounds, what)
        elif char in "[{":
            depth += 1
            items += 1
            if depth > bounds.max_depth:
                raise JsonBoundsError(f"{what}: JSON nested deeper than {bounds.max_depth} levels")
        elif char in "]}":
            depth -= 1
        else:  # a comma: one more value
            items += 1
        if items > bounds.max_items:
            raise JsonBoundsError(f"{what}: JSON of more than {bounds.max_items:,} values")


def _skip_string(text: str, start: int, bounds: JsonBounds, what: str) -> int:
    """The position after the string that starts at `start` (just after its opening quote); its length checked."""
    position = start
    while True:
        found = _STRING_END.search(text, position)
        if found is None:  # unterminated: json.loads says so
            return len(text)
        if found.group() == "\\":
            position = found.end() + 1
            continue
        if found.start() - start > bounds.max_string:
            raise JsonBoundsError(f"{what}: a JSON string of more than {bounds.max_string:,} characters")
        return found.end()


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:32]!r} is out of a float's range")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")


def loads(data: str | bytes | bytearray | memoryview, bounds: JsonBounds, what: str) -> Any:
    """The value `data` (UTF-8 bytes or text) holds, once it is within `bounds`; JsonBoundsError (one line) for
    anything over a limit, not UTF-8, or not JSON."""
    size = len(data) if isinstance(data, str) else memoryview(data).nbytes
    if size > bounds.max_bytes:
        raise JsonBoundsError(f"{what}: {size:,} bytes of JSON, over the {bounds.max_bytes:,}-byte limit")
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonBoundsError(f"{what}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    check(text, bounds, what)
    hooks: dict[str, Any] = (
        {} if bounds.allow_nan else {"parse_constant": _refuse_constant, "parse_float": _finite_float}
    )
    try:
        return json.loads(text, **hooks)
    except RecursionError:  # the scan bounds the depth far below the interpreter's limit; kept as a last guard
        raise JsonBoundsError(f"{what}: JSON nested too deep") from None
    except ValueError as exc:  # JSONDecodeError, a hook's refusal, an integer of more digits than Python reads
        raise JsonBoundsError(f"{what}: not JSON ({' '.join(str(exc).split())[:200]})") from None


def read(path: str | os.PathLike[str], bounds: JsonBounds, what: str | None = None) -> Any:
    """The JSON file at `path`, read no further than its limit allows (a file over it is refused after reading
    `max_bytes + 1` bytes); OSError as `open` raises it, JsonBoundsError for the rest."""
    with open(path, "rb") as f:
        data = f.read(bounds.max_bytes + 1)
    return loads(data, bounds, what or str(Path(path)))
