"""A reader compiled once per schema: Python source generated for one record layout, run on the bytes.

Why: fastavro's generic reader walks the schema for every record and calls through a file object
for every field; for our small, fixed records that walk costs more than the reading. The function
generated here reads the layout straight from the bytes (zig-zag varints, strings, maps, unions,
arrays) with the common one-byte lengths inlined, and returns the same dict fastavro returns.

It is deliberately stricter than fastavro, never looser: anything it does not expect (a bad
boolean byte, an enum or union index out of range, a negative length, bytes left over or missing)
raises ``Unreadable``, and the caller hands the record to fastavro, which either reads it or names
what is wrong. Schemas it does not know how to compile (other logical types, recursive types) raise
``NotCompiled`` and stay with fastavro. It reads a record only as its own writer schema: resolving
an older writer to a newer reader stays with fastavro too.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["NotCompiled", "Unreadable", "compile_reader"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # what fastavro adds timestamp-micros to


class NotCompiled(ValueError):
    """A schema this compiler leaves to fastavro."""


class Unreadable(ValueError):
    """Bytes the compiled reader does not accept; fastavro decides what they are."""


def _long(data: bytes, pos: int) -> tuple[int, int]:
    """A varint the inlined code does not finish (three bytes or more: every event's two timestamps
    take eight), unrolled: a loop's counter and test cost as much as the bits."""
    b = data[pos]
    n = b & 0x7F
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 1
    b = data[pos + 1]
    n |= (b & 0x7F) << 7
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 2
    b = data[pos + 2]
    n |= (b & 0x7F) << 14
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 3
    b = data[pos + 3]
    n |= (b & 0x7F) << 21
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 4
    b = data[pos + 4]
    n |= (b & 0x7F) << 28
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 5
    b = data[pos + 5]
    n |= (b & 0x7F) << 35
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 6
    b = data[pos + 6]
    n |= (b & 0x7F) << 42
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 7
    b = data[pos + 7]
    n |= (b & 0x7F) << 49
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 8
    b = data[pos + 8]
    n |= (b & 0x7F) << 56
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 9
    b = data[pos + 9]
    n |= (b & 0x7F) << 63
    if b < 0x80:
        return (n >> 1) ^ -(n & 1), pos + 10
    raise Unreadable("varint longer than ten bytes")


def _length(data: bytes, pos: int) -> tuple[int, int]:
    """A string's or bytes' length that is not one byte, or is negative (refused)."""
    n, pos = _long(data, pos)
    if n < 0:
        raise Unreadable("negative length")
    return n, pos


class _Writer:
    """Emits the source of one reader function; every value lands in a fresh local name."""

    def __init__(self, named: Mapping[str, Any], build: Mapping[str, Callable[..., Any]]) -> None:
        self.named = named
        self.build = build
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.count = 0
        self.expanding: set[str] = set()
        self.skipping = False  # past the head of a head-only reader: check, build nothing
        self.last_time: tuple[str, str, int] | None = None  # (raw local, datetime local, indent) of the last time read

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def constant(self, value: Any) -> str:
        key = self.name("K")
        self.constants[key] = value
        return key

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def varint(self, indent: int, target: str) -> None:
        """One- and two-byte varints inline (counts up to 8191), longer ones through ``_long``."""
        b, c = self.name("b"), self.name("c")
        self.emit(indent, f"{b} = data[pos]")
        self.emit(indent, f"if {b} < 128: {target} = ({b} >> 1) ^ -({b} & 1); pos += 1")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{c} = data[pos + 1]")
        self.emit(indent + 1, f"if {c} < 128: {b} = ({b} & 127) | ({c} << 7); {target} = ({b} >> 1) ^ -({b} & 1); pos += 2")
        self.emit(indent + 1, f"else: {target}, pos = _long(data, pos)")

    def sized(self, indent: int, target: str, decode: bool) -> None:
        n, b = self.name("n"), self.name("b")
        self.emit(indent, f"{b} = data[pos]")
        self.emit(indent, f"if {b} < 128 and not {b} & 1: {n} = {b} >> 1; pos += 1")
        self.emit(indent, f"else: {n}, pos = _length(data, pos)")
        if self.skipping:  # a skipped string is still checked to be UTF-8, as reading it would
            self.emit(indent, f"{'data[pos:pos + ' + n + '].decode(); ' if decode else ''}pos += {n}")
            return
        self.emit(indent, f"{target} = data[pos:pos + {n}]{'.decode()' if decode else ''}; pos += {n}")

    def value(self, schema: Any, indent: int) -> str:
        """Emit code reading ``schema``; return the local name that holds the value."""
        if isinstance(schema, str) and schema in self.named:
            return self.named_type(self.named[schema], indent)
        if isinstance(schema, list):
            return self.union(schema, indent)
        if isinstance(schema, dict):
            if "logicalType" in schema:
                return self.logical(schema, indent)
            kind = schema["type"]
            if kind in ("record", "enum", "fixed"):
                return self.named_type(schema, indent)
            if kind == "map":
                return self.blocks(schema["values"], indent, is_map=True)
            if kind == "array":
                return self.blocks(schema["items"], indent, is_map=False)
            return self.value(kind, indent)
        return self.primitive(schema, indent)

    def skip_varint(self, indent: int) -> None:
        """A varint a head-only reader walks past: any of up to ten bytes is accepted, as ``varint``
        accepts it, but its value is never needed."""
        self.emit(indent, "if data[pos] < 128: pos += 1")
        self.emit(indent, "elif data[pos + 1] < 128: pos += 2")
        self.emit(indent, "else: pos = _long(data, pos)[1]")

    def primitive(self, kind: Any, indent: int) -> str:
        out = self.name("v")
        if kind in ("int", "long") and self.skipping:
            self.skip_varint(indent)
            out = "None"
        elif kind in ("int", "long"):
            self.varint(indent, out)
        elif kind == "string":
            self.sized(indent, out, decode=True)
        elif kind == "bytes":
            self.sized(indent, out, decode=False)
        elif kind == "null":
            self.emit(indent, f"{out} = None")
        elif kind == "boolean":
            self.emit(indent, f"{out} = data[pos]; pos += 1")
            self.emit(indent, f"if {out} > 1: raise Unreadable('boolean')")
            self.emit(indent, f"{out} = {out} == 1")
        elif kind in ("float", "double"):
            size, fmt = (4, "<f") if kind == "float" else (8, "<d")
            self.emit(indent, f"{out} = {self.constant(struct.Struct(fmt).unpack_from)}(data, pos)[0]; pos += {size}")
        else:
            raise NotCompiled(f"type {kind!r}")
        return out

    def logical(self, schema: Mapping[str, Any], indent: int) -> str:
        if schema["logicalType"] != "timestamp-micros" or schema["type"] != "long":
            raise NotCompiled(f"logical type {schema['logicalType']!r}")
        raw = self.primitive("long", indent)
        if self.skipping:
            return "None"
        out = self.name("t")
        # Seconds and microseconds apart: the same instant as ``timedelta(microseconds=raw)`` (and the
        # same overflow), at less than half the cost. A second time equal to the one just read (an
        # envelope's ``occurred_at`` and ``recorded_at`` often are) is the same immutable object.
        convert = f"_EPOCH + _timedelta(0, {raw} // 1000000, {raw} % 1000000)"
        if self.last_time is not None and self.last_time[2] == indent:
            self.emit(indent, f"{out} = {self.last_time[1]} if {raw} == {self.last_time[0]} else {convert}")
        else:
            self.emit(indent, f"{out} = {convert}")
        self.last_time = (raw, out, indent) if indent == 1 else None
        return out

    def named_type(self, schema: Mapping[str, Any], indent: int) -> str:
        full = schema["name"]
        if full in self.expanding:
            raise NotCompiled(f"recursive type {full}")
        self.expanding.add(full)
        try:
            if schema["type"] == "record":
                fields = [(f["name"], self.value(f["type"], indent)) for f in schema["fields"]]
                if self.skipping:
                    return "None"
                out = self.name("r")
                if full in self.build:
                    self.emit(indent, f"{out} = {self.constant(self.build[full])}({', '.join(v for _, v in fields)})")
                else:
                    self.emit(indent, f"{out} = {{{', '.join(f'{k!r}: {v}' for k, v in fields)}}}")
                return out
            if schema["type"] == "enum":
                out = self.name("e")
                self.varint(indent, out)
                symbols = tuple(schema["symbols"])
                if full in self.build:
                    try:
                        symbols = tuple(self.build[full](symbol) for symbol in symbols)
                    except ValueError as exc:
                        raise NotCompiled(f"enum {full}: {exc}") from exc
                self.emit(indent, f"if not 0 <= {out} < {len(symbols)}: raise Unreadable('enum')")
                if self.skipping:
                    return "None"
                self.emit(indent, f"{out} = {self.constant(symbols)}[{out}]")
                return out
            if schema["type"] == "fixed":
                out = self.name("x")
                size = int(schema["size"])
                self.emit(indent, f"pos += {size}" if self.skipping else f"{out} = data[pos:pos + {size}]; pos += {size}")
                return out
            raise NotCompiled(f"named type {schema['type']!r}")
        finally:
            self.expanding.discard(full)

    def union(self, branches: list[Any], indent: int) -> str:
        index, out = self.name("u"), self.name("w")
        self.varint(indent, index)
        for i, branch in enumerate(branches):
            self.emit(indent, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
            before = len(self.lines)
            value = self.value(branch, indent + 1)
            if not self.skipping:
                self.emit(indent + 1, f"{out} = {value}")
            elif len(self.lines) == before:  # a null walked past: nothing to read
                self.emit(indent + 1, "pass")
        self.emit(indent, "else: raise Unreadable('union')")
        return "None" if self.skipping else out

    def blocks(self, items: Any, indent: int, *, is_map: bool) -> str:
        out, count, skip = self.name("m" if is_map else "a"), self.name("c"), self.name("s")
        if not self.skipping:
            self.emit(indent, f"{out} = {{}}" if is_map else f"{out} = []")
        self.varint(indent, count)
        self.emit(indent, f"while {count}:")
        self.emit(indent + 1, f"if {count} < 0:")
        self.emit(indent + 2, f"{count} = -{count}")
        self.varint(indent + 2, skip)
        self.emit(indent + 1, f"for _ in range({count}):")
        if self.skipping:
            before = len(self.lines)
            if is_map:
                self.primitive("string", indent + 2)
            self.value(items, indent + 2)
            if len(self.lines) == before:  # an array of nulls: nothing to read per item
                self.emit(indent + 2, "pass")
            out = "None"
        elif is_map:
            key = self.primitive("string", indent + 2)
            self.emit(indent + 2, f"{out}[{key}] = {self.value(items, indent + 2)}")
        else:
            self.emit(indent + 2, f"{out}.append({self.value(items, indent + 2)})")
        self.varint(indent + 1, count)
        return out


def compile_reader(
    parsed: Mapping[str, Any], *, start: int = 0, build: Mapping[str, Callable[..., Any]] | None = None,
    head_only: bool = False, finish: Callable[[Any, bytes], Any] | None = None,
) -> Callable[[bytes], Any]:
    """A function reading one record of ``parsed`` (a fastavro-parsed record schema) from ``start`` to
    the end of the bytes; raises ``Unreadable`` (or IndexError, UnicodeDecodeError...) on what it
    does not accept, ``NotCompiled`` here for schemas it leaves to fastavro.

    ``build`` names the types made by a function instead of a dict: a record's builder is called
    with its field values in schema order, an enum's once per symbol when the reader is compiled.

    ``head_only``: return only the record's first field (an event's envelope); the other fields are
    walked and checked as a full read checks them (lengths, UTF-8, enum and union indexes, the end
    of the record), so the reader refuses exactly what the full reader refuses, but nothing is built.

    ``finish``: the reader returns ``finish(value, data)`` instead of the value, called from the
    generated code (a deferred event made in the same call as its envelope is read)."""
    if not isinstance(parsed, Mapping) or parsed.get("type") != "record":
        raise NotCompiled("only record schemas are compiled")
    writer = _Writer(parsed.get("__named_schemas", {}), build or {})
    if head_only:
        first, *rest = parsed["fields"]
        body = writer.value(first["type"], 1)
        writer.skipping = True
        for field in rest:
            writer.value(field["type"], 1)
    else:
        body = writer.value(dict(parsed), 1)
    if finish is not None:
        body = f"{writer.constant(finish)}({body}, data)"
    source = "\n".join(
        [f"def read(data):", f"    pos = {start}", *writer.lines,
         "    if pos != len(data): raise Unreadable('length')", f"    return {body}"]
    )
    scope: dict[str, Any] = {"_long": _long, "_length": _length, "Unreadable": Unreadable, "_EPOCH": _EPOCH, "_timedelta": timedelta,
                             **writer.constants}
    exec(compile(source, f"<avro reader {parsed.get('name')}>", "exec"), scope)  # noqa: S102 - our own source
    reader: Callable[[bytes], Any] = scope["read"]
    return reader
