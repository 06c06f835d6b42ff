"""Mesos RecordIO: the framing of the SUBSCRIBE event stream (docs/recordio.md).

    records     = *record
    record      = record-size LF record-data
    record-size = 1*DIGIT            (an unsigned 64-bit integer, never 0 for events)
    record-data = record-size(OCTET)

Chunk boundaries of the HTTP response mean nothing: a record may arrive split over many
chunks or many records in one. ``decode`` is the pure core (bytes in, complete records and
the unread rest out) so that it can be fuzzed; ``RecordIODecoder`` keeps a partial record between
network reads. Hand-written because it is twenty lines and no maintained Python package
implements Mesos's variant (the doc itself warns that RecordIO dialects differ).

Reading of the doc: its pseudo-code skips empty lines before a record-size (``while
(lengthBytes.length < 1)``) although the grammar has none; we accept them, as the
pseudo-code does. A size of 0, a size with anything but ASCII digits, or a size line
longer than a uint64 can be is malformed: the stream cannot be resynchronised after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A uint64 has at most 20 decimal digits; a longer size line is garbage, not a size.
_MAX_SIZE_DIGITS = 20
DEFAULT_MAX_RECORD = 64 * 1024 * 1024


class RecordIOError(ValueError):
    """The stream is not valid RecordIO; the message says where and what was read.
    ``records`` holds the complete records that came before the fault (to be used)."""

    def __init__(self, message: str, records: list[bytes] | None = None):
        super().__init__(message)
        self.records: list[bytes] = list(records or [])


def decode(buf: bytes, max_record: int = DEFAULT_MAX_RECORD) -> tuple[list[bytes], bytes]:
    """Split ``buf`` into complete records and the rest (a partial record, or b"").

    Raises RecordIOError for a malformed size line or a record larger than
    ``max_record``; the error names the offending bytes and their offset in ``buf``.
    """
    records: list[bytes] = []
    try:
        pos, _ = _split(buf, max_record, records)
    except RecordIOError as exc:
        raise RecordIOError(str(exc), records) from None
    return records, bytes(buf[pos:])


def _split(buf: bytes, max_record: int, records: list[bytes]) -> tuple[int, int]:
    """Append ``buf``'s complete records to ``records``; return where the rest starts and,
    when the rest is a complete size line followed by part of its data, that size (else 0)."""
    pos, n = 0, len(buf)
    while pos < n:
        if buf[pos] == 0x0A:   # an empty line before a size: skipped (doc pseudo-code)
            pos += 1
            continue
        lf = buf.find(b"\n", pos, pos + _MAX_SIZE_DIGITS + 1)
        if lf < 0:
            head = buf[pos:pos + _MAX_SIZE_DIGITS + 1]
            if len(head) > _MAX_SIZE_DIGITS or not head.isdigit():
                raise RecordIOError(
                    f"malformed RecordIO size at byte {pos}: {bytes(head[:32])!r} is not a "
                    f"record size (1 to {_MAX_SIZE_DIGITS} ASCII digits and a newline)")
            break   # a size still arriving
        size_text = buf[pos:lf]
        if not size_text.isdigit() or not size_text.isascii():
            raise RecordIOError(f"malformed RecordIO size at byte {pos}: {bytes(size_text[:32])!r} "
                                "is not a decimal number")
        size = int(size_text)
        if size == 0:
            raise RecordIOError(f"RecordIO record at byte {pos} has size 0 (Mesos never sends one)")
        if size > max_record:
            raise RecordIOError(f"RecordIO record at byte {pos} claims {size} bytes, more than the "
                                f"limit of {max_record}")
        end = lf + 1 + size
        if end > n:
            return pos, size   # the record's data is still arriving
        records.append(bytes(buf[lf + 1:end]))
        pos = end
    return pos, 0


def encode(record: bytes) -> bytes:
    """One record, framed: its size in decimal, a newline, the data."""
    return str(len(record)).encode() + b"\n" + record


@dataclass
class RecordIODecoder:
    """Incremental decoder: ``feed`` network reads, get whole records back.

    Once a record's size line is read, its data is kept as the list of pieces received and
    joined once, when the last byte arrives: re-joining the held bytes with every read (as
    ``decode`` on the whole rest would) makes a large record sent in small chunks cost time
    quadratic in its size (a 32 MB event in 8 KB reads took 47 s)."""

    max_record: int = DEFAULT_MAX_RECORD
    consumed: int = 0   # bytes fed so far (for error messages)
    # A partial size line (at most _MAX_SIZE_DIGITS digits) carried to the next read.
    _head: bytes = field(default=b"", repr=False)
    # The record whose data is arriving: its size (0: none), size-line length, data so far.
    _size: int = field(default=0, repr=False)
    _size_line: int = field(default=0, repr=False)
    _pieces: list[memoryview] = field(default_factory=list, repr=False)
    _got: int = field(default=0, repr=False)

    def feed(self, data: bytes) -> list[bytes]:
        data = bytes(data)   # no copy for bytes; a bytearray could change under us
        records: list[bytes] = []
        pos = 0
        if self._size:
            pos = min(self._size - self._got, len(data))
            self._pieces.append(memoryview(data)[:pos])
            self._got += pos
            if self._got < self._size:
                self.consumed += len(data)
                return records
            records.append(b"".join(self._pieces))
            self._size, self._size_line, self._pieces, self._got = 0, 0, [], 0
        # What is left is headed by a size line: the small held-back part of one, if any,
        # is prepended (a copy of this read's rest, once).
        buf = self._head + data[pos:] if self._head else data[pos:]
        base = self.consumed + pos - len(self._head)   # stream offset of buf[0]
        try:
            rest, size = _split(buf, self.max_record, records)
        except RecordIOError as exc:
            raise RecordIOError(f"{exc} (after {base} bytes of the stream)", records) from None
        if size:
            lf = buf.index(b"\n", rest)
            self._head, self._size, self._size_line = b"", size, lf + 1 - rest
            self._pieces = [memoryview(buf)[lf + 1:]]
            self._got = len(buf) - lf - 1
        else:
            self._head = buf[rest:]
        self.consumed += len(data)
        return records

    @property
    def pending(self) -> int:
        """Bytes of an incomplete record held back (its size line included)."""
        return len(self._head) + (self._size_line + self._got if self._size else 0)

    def finish(self) -> None:
        """The stream ended: raise RecordIOError if it ended inside a record."""
        if self._size:
            raise RecordIOError(f"the stream ended inside a record: {self._got} of "
                                f"{self._size} bytes received")
        rest = self._head.lstrip(b"\n")
        if rest:
            raise RecordIOError(f"the stream ended inside a record size: {rest[:32]!r}")


__all__ = ["DEFAULT_MAX_RECORD", "RecordIODecoder", "RecordIOError", "decode", "encode"]
