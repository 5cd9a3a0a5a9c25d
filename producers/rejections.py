"""What a refusal records, so that every refusal can be recorded: the input exactly as it was sent,
and the problems, bounded and encodable.

Why this needs care: an Avro string holds UTF-8 text only, a Kafka record must stay under the broker's
1 MB limit, and the problems quote what the sender sent. So input that is UTF-8 text is kept verbatim
in ``raw_input``; input that is not (a stray byte, a lone surrogate from a command line) keeps its exact
bytes in ``raw_bytes`` beside a readable rendering; beyond ``MAX_RAW_INPUT`` bytes the start is kept
with the size and SHA-256 of the whole. Problems are capped at ``MAX_PROBLEMS``, their fields and
messages cut short and escaped (``producers.strict_json.escaped``).
"""

from __future__ import annotations

import hashlib

from ledger.events import Problem
from producers.strict_json import MAX_PROBLEMS, escaped

__all__ = ["MAX_RAW_INPUT", "MAX_ANONYMOUS_INPUT", "raw_record", "recordable"]

MAX_RAW_INPUT = 256 * 1024
"""Raw input kept verbatim in a SubmissionRejected, in bytes; beyond it the start is kept with the
size and SHA-256 of the whole (a Kafka record must stay under the broker's 1 MB limit)."""

MAX_ANONYMOUS_INPUT = 4096
"""... and of a submission that came with no valid credential: anyone can send those, so each keeps
only its start (with the size and SHA-256 of the whole), or a stream of them would fill the log's disk."""

_PREVIEW = 4096
"""Characters of readable rendering kept in ``raw_input`` beside the exact bytes of non-UTF-8 input."""


def _input_bytes(body: str | bytes) -> bytes:
    """The bytes a body stands for. A str body holding surrogates came from bytes decoded with
    ``surrogateescape`` (a command line argument), or names them explicitly; both encode back exactly."""
    if isinstance(body, bytes):
        return body
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return body.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return body.encode("utf-8", "surrogatepass")


def raw_record(body: str | bytes, *, most: int = MAX_RAW_INPUT, whole: tuple[int, str] | None = None) -> tuple[str, bytes]:
    """(raw_input, raw_bytes) of a SubmissionRejected: the input verbatim as text when it is UTF-8,
    else its exact bytes and a readable rendering. Beyond ``most`` bytes the start is kept, with the
    size and SHA-256 of the whole (``whole``, when ``body`` is itself only the start of the input)."""
    data = _input_bytes(body)
    kept = data[:most]
    note = ""
    if whole is not None or len(data) > most:
        size, digest = whole if whole is not None else (len(data), hashlib.sha256(data).hexdigest())
        note = f"\n[truncated: {size} bytes in all, sha256 {digest}]"
    try:
        return kept.decode("utf-8") + note, b""
    except UnicodeDecodeError as exc:
        if note and exc.reason == "unexpected end of data":  # the cut fell inside a character
            try:
                return kept[: exc.start].decode("utf-8") + note, b""
            except UnicodeDecodeError:
                pass
    preview = kept[:_PREVIEW].decode("utf-8", "backslashreplace")
    more = "…" if len(kept) > _PREVIEW else ""
    return f"{preview}{more}\n[not UTF-8 text: the exact {len(kept)} bytes are in raw_bytes]{note}", kept


def recordable(errors: tuple[Problem, ...]) -> tuple[Problem, ...]:
    """Problems as a refusal records and answers them: at most MAX_PROBLEMS, each field and message
    short and UTF-8-encodable, whatever the input did to them."""
    kept = [Problem(escaped(e.field, 200), escaped(e.code, 60), escaped(e.message, 1000)) for e in errors[:MAX_PROBLEMS]]
    if len(errors) > MAX_PROBLEMS:
        kept.append(Problem("body", "TOO_MANY_ERRORS", f"{len(errors)} problems; the first {MAX_PROBLEMS} are shown"))
    return tuple(kept)
