"""Declared shapes of the JSON files kerncap reads, and one checker for all of them.

A reader states what it needs once (`Obj({...})`, `List(Int(min=0))`, …) and calls
`check(data, SCHEMA, path)` before touching the data: a missing or mistyped field is
one `CaptureFormatError` that names the file and the field (`regions[3].size`), never
a KeyError or TypeError somewhere later. Keys a schema does not list are allowed
(newer writers may add them); bounds keep absurd values (a 2^70-byte region, a
billion chunks) out before anything acts on them.

Each node has a fast `ok(value)` (a closure built once; a manifest of 200k regions is
checked in well under a second) and a slow `errors(value, path)` that is run only to
word the message once `ok` said no.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kerncap.errors import CaptureFormatError

U64 = (1 << 64) - 1
_MISSING = object()


def where_text(path: tuple) -> str:
    """('regions', 3, 'size') -> 'regions[3].size'."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "the file"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Type:
    """A schema node."""

    ok: Callable[[Any], bool]

    def errors(self, value: Any, path: tuple) -> str | None:
        """The first problem with `value` (a message starting with the field's name), or None."""
        raise NotImplementedError


class Int(Type):
    def __init__(self, min: int | None = None, max: int | None = None):
        self.min, self.max = min, max
        lo = -(1 << 200) if min is None else min
        hi = 1 << 200 if max is None else max
        self.ok = lambda v: type(v) is int and lo <= v <= hi

    def errors(self, value, path):
        if type(value) is not int:
            return f"{where_text(path)} must be an integer (got {_show(value)})"
        if self.min is not None and value < self.min:
            return f"{where_text(path)} must be >= {self.min} (got {value})"
        if self.max is not None and value > self.max:
            return f"{where_text(path)} must be <= {self.max} (got {value})"
        return None


class Num(Type):
    def __init__(self, min: float | None = None, max: float | None = None):
        self.min, self.max = min, max
        lo = float("-inf") if min is None else min
        hi = float("inf") if max is None else max
        self.ok = lambda v: type(v) in (int, float) and lo <= v <= hi  # NaN fails both comparisons

    def errors(self, value, path):
        if type(value) not in (int, float) or value != value:
            return f"{where_text(path)} must be a number (got {_show(value)})"
        if self.min is not None and value < self.min:
            return f"{where_text(path)} must be >= {self.min} (got {value})"
        if self.max is not None and value > self.max:
            return f"{where_text(path)} must be <= {self.max} (got {value})"
        return None


class Bool(Type):
    def __init__(self):
        self.ok = lambda v: type(v) is bool

    def errors(self, value, path):
        return None if type(value) is bool else f"{where_text(path)} must be true or false (got {_show(value)})"


class Str(Type):
    def __init__(self, pattern: str | None = None, choices: tuple[str, ...] = (), max_len: int = 1 << 20):
        """`pattern`: a regular expression the whole string must match; `choices`: the allowed values.
        No string may hold a NUL character: names and paths reach C strings and system calls."""
        self.pattern, self.choices, self.max_len = pattern, choices, max_len
        full = re.compile(pattern).fullmatch if pattern is not None else None
        allowed = frozenset(choices)
        if allowed:
            self.ok = lambda v: type(v) is str and v in allowed
        elif full is not None:
            self.ok = lambda v: type(v) is str and len(v) <= max_len and "\x00" not in v and full(v) is not None
        else:
            self.ok = lambda v: type(v) is str and len(v) <= max_len and "\x00" not in v

    def errors(self, value, path):
        if type(value) is not str:
            return f"{where_text(path)} must be a string (got {_show(value)})"
        if len(value) > self.max_len:
            return f"{where_text(path)} is {len(value)} characters long (at most {self.max_len})"
        if "\x00" in value and value not in self.choices:
            return f"{where_text(path)} holds a NUL character (got {_show(value)})"
        if self.choices and value not in self.choices:
            return f"{where_text(path)} must be one of {', '.join(self.choices)} (got {_show(value)})"
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            return f"{where_text(path)} is malformed (got {_show(value)})"
        return None


HEX = Str(pattern="(?:[0-9a-f]{2})*")
CHUNK_HASH = Str(pattern="[0-9a-f]{16}")


class Opt(Type):
    """`inner`, or null."""

    def __init__(self, inner: Type):
        self.inner = inner
        inner_ok = inner.ok
        self.ok = lambda v: v is None or inner_ok(v)

    def errors(self, value, path):
        return None if value is None else self.inner.errors(value, path)


class OneOf(Type):
    """Any of several types (e.g. a command as a list of words or as one string)."""

    def __init__(self, *options: Type):
        self.options = options
        checks = [o.ok for o in options]
        self.ok = lambda v: any(ok(v) for ok in checks)

    def errors(self, value, path):
        if self.ok(value):
            return None
        return self.options[0].errors(value, path)


class Any_(Type):
    def __init__(self):
        self.ok = lambda v: True

    def errors(self, value, path):
        return None


ANY = Any_()


class List(Type):
    def __init__(self, item: Type, min_len: int = 0, max_len: int = 1 << 24):
        self.item, self.min_len, self.max_len = item, min_len, max_len
        item_ok = item.ok
        self.ok = lambda v: type(v) is list and min_len <= len(v) <= max_len and all(map(item_ok, v))

    def errors(self, value, path):
        if type(value) is not list:
            return f"{where_text(path)} must be a list (got {_show(value)})"
        if not self.min_len <= len(value) <= self.max_len:
            return f"{where_text(path)} holds {len(value)} entries (expected {self.min_len} to {self.max_len})"
        for i, item in enumerate(value):
            if not self.item.ok(item):
                return self.item.errors(item, (*path, i))
        return None


class Map(Type):
    """An object with arbitrary string keys, every value of one type."""

    def __init__(self, value: Type, max_len: int = 1 << 20):
        self.value, self.max_len = value, max_len
        value_ok = value.ok
        self.ok = lambda v: type(v) is dict and len(v) <= max_len and all(map(value_ok, v.values()))

    def errors(self, value, path):
        if type(value) is not dict:
            return f"{where_text(path)} must be an object (got {_show(value)})"
        if len(value) > self.max_len:
            return f"{where_text(path)} holds {len(value)} entries (at most {self.max_len})"
        for k, v in value.items():
            if not self.value.ok(v):
                return self.value.errors(v, (*path, k))
        return None


class Obj(Type):
    """An object with the listed fields; a key ending in `?` is optional."""

    def __init__(self, fields: dict[str, Type]):
        self.fields = [(k.rstrip("?"), k.endswith("?"), t) for k, t in fields.items()]
        checks = [(name, optional, t.ok) for name, optional, t in self.fields]

        def ok(v) -> bool:
            if type(v) is not dict:
                return False
            for name, optional, field_ok in checks:
                x = v.get(name, _MISSING)
                if x is _MISSING:
                    if not optional:
                        return False
                elif not field_ok(x):
                    return False
            return True

        self.ok = ok

    def field(self, name: str) -> Type:
        return next(t for n, _, t in self.fields if n == name)

    def errors(self, value, path):
        if type(value) is not dict:
            return f"{where_text(path)} must be an object (got {_show(value)})"
        for name, optional, kind in self.fields:
            if name not in value:
                if not optional:
                    return f"{where_text((*path, name))} is missing"
            elif not kind.ok(value[name]):
                return kind.errors(value[name], (*path, name))
        return None


def problem(data: Any, schema: Type) -> str | None:
    """What is wrong with `data`, or None when it fits `schema`."""
    if schema.ok(data):
        return None
    return schema.errors(data, ()) or "does not fit its schema"


def check(data: Any, schema: Type, path: str | Path, hint: str | None = None) -> None:
    """Raise CaptureFormatError naming `path` and the first wrong field, if any."""
    found = problem(data, schema)
    if found:
        raise CaptureFormatError(f"{path}: {'' if found.startswith('the file') else 'field '}{found}", hint)
