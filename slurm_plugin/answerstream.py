"""A list answer of Slurm (``squeue --json``, ``scontrol show node --json``, slurmrestd's
``GET jobs`` and ``GET nodes``) read as it arrives: each record becomes a ``SlurmJob`` or a
``SlurmNode`` as soon as it has come, and the text read so far is dropped. A 100k-job
answer (near a GB of JSON on 24.11) or a 10k-node one (about 17 MB) is then never in memory
whole, neither as bytes nor as text nor as a tree (``cosched bench squeue`` measures it
beside the whole-text read).

It reads what ``parse._RecordsReader`` reads, the same way (Slurm's ``errors`` before a bad
record, a later list field winning), with the same bounds: nesting is checked on the
bytes before they are parsed (``boundedjson.DepthStream``), bytes that are not UTF-8 are
shown, not fatal, and CR LF is a line end, as ``commands._text`` does for a whole answer.
Anything else (not an object, not JSON, too deep, trailing data) is ``Surprise``: the caller
reads the answer again whole, so its error is the whole-text reader's, word for word.
"""

from __future__ import annotations

import codecs
import json
from typing import Any, Generator

from coscheduler import boundedjson

from .parse import (JOBS, JSON_SPACE, MAX_JSON_DEPTH, NODES, ParseError, RecordList,
                    SlurmJob, SlurmNode, records_of_answer)

# Text already parsed is dropped once it is at least this much and at least half of what is
# held: what is kept stays about a record and a piece, and each character is copied O(1) times.
_DROP_AT = 1 << 16


class Surprise(ValueError):
    """The answer is not the shape read here (the whole-text reader says why)."""


# Each step of the reader waits (yields) until more text has come or the answer has ended.
_Steps = Generator[None, None, Any]


class RecordStream:
    """Feed the answer's bytes as they come (``feed``), then ``finish()``: the records of
    ``kind``, a ``ParseError`` as the whole-text reader raises it (Slurm's errors, a bad
    record, no list), or ``Surprise``."""

    kind: RecordList

    def __init__(self, what: str, max_depth: int = MAX_JSON_DEPTH):
        self.what = what
        self._depth = boundedjson.DepthStream(max_depth, what)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._cr = False             # a CR at the end of the last piece: CR LF may be cut
        self._buf = ""               # text not yet parsed, and some parsed before it
        self._new: list[str] = []    # text come since the reader last looked
        self._new_len = 0
        self._wanted = 0             # the reader waits until _buf and _new hold this much
        self._eof = False
        self._failed: str | None = None
        self._result: tuple[dict, list | None, ParseError | None] | None = None
        self._decode = json.JSONDecoder().raw_decode
        self._steps = self._read()
        self._resume()

    # -- input ---------------------------------------------------------------------------------
    def feed(self, raw: bytes) -> None:
        if self._failed is not None or self._result is not None:
            return            # (the rest is drained by the caller, never kept)
        try:
            self._depth.feed(raw)
        except boundedjson.JSONUnusable as exc:
            self._failed = str(exc)
            return
        self._add(self._utf8.decode(raw))

    def finish(self) -> list:
        if self._failed is None and self._result is None:
            self._add(self._utf8.decode(b"", final=True), final=True)
            self._eof = True
            self._resume()
        if self._failed is not None:
            raise Surprise(self._failed)
        if self._result is None:       # (the reader always ends at the end of the text)
            raise Surprise("the answer ended early")
        top, records, bad = self._result
        return records_of_answer(self.kind, top, records, bad, self.what)

    def _add(self, text: str, final: bool = False) -> None:
        if self._cr:
            text, self._cr = "\r" + text, False
        if text.endswith("\r") and not final:
            text, self._cr = text[:-1], True
        if "\r\n" in text:
            text = text.replace("\r\n", "\n")
        if text:
            self._new.append(text)
            self._new_len += len(text)
        if len(self._buf) + self._new_len >= self._wanted:
            self._resume()

    def _resume(self) -> None:
        """Run the reader until it needs more text than has come, or ends."""
        if self._new:
            self._buf += "".join(self._new)
            self._new, self._new_len = [], 0
        try:
            next(self._steps)
        except StopIteration as stop:
            self._result = stop.value
        except (ValueError, RecursionError) as exc:
            self._failed = f"{self.what}: {exc}"

    # -- the reader ------------------------------------------------------------------------------
    def _more(self, n: int) -> _Steps:
        """Wait until ``n`` more characters than the reader holds have come."""
        if self._eof:
            raise Surprise("the answer ended early")
        self._wanted = len(self._buf) + n
        yield

    def _space(self, i: int) -> _Steps:
        """The position of the next character that is not white space (more text waited for)."""
        while True:
            j = JSON_SPACE.match(self._buf, i).end()
            if j < len(self._buf) or self._eof:
                return j
            i = j
            yield from self._more(1)

    def _expect(self, i: int, ch: str) -> _Steps:
        i = yield from self._space(i)
        if not self._buf.startswith(ch, i):
            raise Surprise(f"{ch!r} expected")
        return i + 1

    def _value(self, i: int) -> _Steps:
        """One JSON value at ``i``. A value that ends where the text come so far ends may go
        on (a number cut in two): it is read once more text (or the end) has come."""
        while True:
            try:
                value, j = self._decode(self._buf, i)
            except json.JSONDecodeError:
                if self._eof:
                    raise
                j = None
            if j is not None and (j < len(self._buf) or self._eof):
                return value, j
            # wait for as much text again as this value has so far: a long value is tried
            # a few times, not once a piece
            yield from self._more(max(1, len(self._buf) - i))

    def _drop_read(self, i: int) -> int:
        """Forget the text before ``i`` once there is enough of it; ``i``'s new position."""
        if i >= _DROP_AT and 2 * i >= len(self._buf):
            self._buf = self._buf[i:]
            return 0
        return i

    def _read(self) -> _Steps:
        top: dict = {}
        field = self.kind.field
        records: list | None = None
        bad: ParseError | None = None
        i = yield from self._space(0)
        i = yield from self._expect(i, "{")
        i = yield from self._space(i)
        if self._buf.startswith("}", i):
            i += 1
        else:
            while True:
                key, i = yield from self._value(i)
                if not isinstance(key, str):
                    raise Surprise("an object key that is not a string")
                i = yield from self._expect(i, ":")
                i = yield from self._space(i)
                if key == field and self._buf.startswith("[", i):
                    records, bad, i = yield from self._records(i + 1)
                    top.pop(key, None)
                else:
                    top[key], i = yield from self._value(i)
                    if key == field:
                        records = None       # (a later one wins, as in json.loads)
                i = yield from self._space(i)
                if self._buf.startswith(",", i):
                    i = yield from self._space(i + 1)
                    continue
                i = yield from self._expect(i, "}")
                break
        i = yield from self._space(i)
        if i != len(self._buf):
            raise Surprise("extra data after the answer")
        return top, records, bad

    def _records(self, i: int) -> _Steps:
        records: list = []
        bad: ParseError | None = None
        record_of = self.kind.record_of
        i = yield from self._space(i)
        if self._buf.startswith("]", i):
            return records, bad, i + 1
        while True:
            record, i = yield from self._value(i)
            if bad is None:
                try:
                    records.append(record_of(record, self.what))
                except ParseError as exc:
                    bad = exc   # read on: Slurm's own errors, later in the text, come first
            del record
            i = self._drop_read(i)
            i = yield from self._space(i)
            if self._buf.startswith(",", i):
                i = yield from self._space(i + 1)
                continue
            i = yield from self._expect(i, "]")
            return records, bad, i


class JobsStream(RecordStream):
    """``squeue --json``, ``scontrol show job --json``, slurmrestd's ``GET jobs``."""

    kind = JOBS

    def __init__(self, what: str = "squeue --json", max_depth: int = MAX_JSON_DEPTH):
        super().__init__(what, max_depth)

    def finish(self) -> list[SlurmJob]:
        return super().finish()


class NodesStream(RecordStream):
    """``scontrol show node --json`` (23.02+), ``sinfo --json`` (22.05), slurmrestd's
    ``GET nodes``."""

    kind = NODES

    def __init__(self, what: str = "scontrol show node --json", max_depth: int = MAX_JSON_DEPTH):
        super().__init__(what, max_depth)

    def finish(self) -> list[SlurmNode]:
        return super().finish()


__all__ = ["JobsStream", "NodesStream", "RecordStream", "Surprise"]
