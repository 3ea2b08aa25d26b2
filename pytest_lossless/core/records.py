"""Records: frozen dataclasses written to JSON and read back by one generic pair of functions.

A record is a frozen dataclass that derives from :class:`Record`; its fields' type hints are
its schema. :func:`to_json` writes the fields in their declared order (so the order of the
keys on disk is the order of the fields), nested records as objects, tuples as lists, enums by
value and paths as strings; a field typed ``Any`` (or a mapping of str to ``Any``) is raw JSON
that another layer owns, copied as it is. :func:`from_json` reads that back, checking every value
against its field's hint, and names the record, the field (``RunRecord.processes[1].pid``) and
the problem in a :class:`RecordError`. Given a ``problems`` list it is lenient instead, the
way a receipt's hand-edited block is read: what does not fit is noted there and read as
absent, and an entry of a list that does not fit is skipped.

A missing key reads as the field's ``absent=`` value (:func:`spec`), else its default, else
None where None is allowed; any other missing key is an error (lenient: the type's empty
value). A union of records is told apart by their tags, ``Literal`` fields written among the
others (``type: Literal["video"] = field(default="video", kw_only=True)``). What the JSON does
differently from the fields is said per field with :func:`spec`:
another key, a value left out (when None, empty, or by a rule of the record), a nested record
whose keys sit beside the others (``flatten``), a key an older writer used, a field that is
not part of the JSON at all, a key derived from the other fields (``derive``: written, never
read). A JSON document the plugin reads is parsed by :func:`loads_bounded`, which bounds how
deep it nests (a hostile one is a ValueError, never a RecursionError). Standard library only,
no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Callable, Hashable, Mapping
from fractions import Fraction
from pathlib import PurePath
from typing import Any, TypeAlias, TypeVar

if typing.TYPE_CHECKING:
    #: A JSON value as :func:`json.loads` returns it, to the type checker: where JSON of a shape
    #: another party owns is handed on (a user kind's fingerprint, a receipt read raw so that
    #: ``verify`` can re-derive it), a reader must narrow each value before using it.
    JsonValue: TypeAlias = (
        "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
    )
else:  # at run time a record field so typed is raw JSON, copied as it is
    JsonValue = Any
#: A JSON object (see :data:`JsonValue`): the type of JSON whose keys this code does not own.
JsonObject: TypeAlias = dict[str, JsonValue]


def json_object(value: object) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one (a block missing or of another
    shape reads as holding nothing)."""
    return value if isinstance(value, dict) else {}


def json_objects(value: object) -> list[JsonObject]:
    """The JSON objects of a list (entries of another shape left out); empty for a non-list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


_T = TypeVar("_T")
_R = TypeVar("_R", bound="Record")


class RecordError(ValueError):
    """JSON that does not fit a record: the message names the record, the field and why."""


class _Mismatch(Exception):
    """One value that does not fit its hint (the caller knows where it was)."""


@dataclasses.dataclass(frozen=True)
class _Spec:
    key: str | None = None
    omit: str | Callable[[Any], bool] | None = None
    absent: tuple[object, ...] = ()  # (its value when the key is missing,) or ()
    absent_from: str | None = None
    flatten: bool = False
    read_when: tuple[str, object] | None = None
    json: bool = True
    derive: Callable[[Any], Any] | None = None


_PLAIN = _Spec()


def spec(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    **how: Any,
) -> Any:
    """A dataclass field with a default, and how it is written and read (:func:`meta`).
    A derived field (``derive=``) takes no argument: the record computes it when made."""
    if how.get("derive") is not None:
        return dataclasses.field(init=False, compare=False, metadata=meta(**how))
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta(**how))
    return dataclasses.field(default=default, metadata=meta(**how))


def meta(
    *,
    key: str | None = None,
    omit: str | Callable[[Any], bool] | None = None,
    absent: object = dataclasses.MISSING,
    absent_from: str | None = None,
    flatten: bool = False,
    read_when: tuple[str, object] | None = None,
    json: bool = True,
    derive: Callable[[Any], Any] | None = None,
) -> Mapping[str, _Spec]:
    """How a field is written and read: ``field(metadata=meta(...))`` (:func:`spec` for short).

    ``key``: its JSON key (default: the field's name). ``omit``: ``"none"`` leaves it out when
    None, ``"empty"`` when None or empty, a callable when it says so of the record
    (``lambda run: run.ended_at is None``). ``absent``: its value when the key is missing (an
    older file). ``absent_from``: the key to read when its own is missing (one an older writer
    used). ``flatten``: a nested record whose keys are written beside the others; an optional
    one is read when ``read_when=(key, value)`` is in the data (default: when one of its keys is).
    ``json=False``: neither written nor read. ``derive``: its value is ``derive(record)``, set
    when the record is made (from the fields before it) and written, never read back.
    """
    old = () if absent is dataclasses.MISSING else (absent,)
    return {"record": _Spec(key, omit, old, absent_from, flatten, read_when, json, derive)}


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    hint: Any
    spec: _Spec
    field: dataclasses.Field[Any]

    @property
    def optional(self) -> bool:
        return _allows_none(self.hint)


def _fields(cls: Any) -> tuple[_Field, ...]:
    return _fields_of(cls)


@functools.cache  # derived from a class definition, never changed: its hints are read once
def _fields_of(cls: Hashable) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(
        _Field(f.name, s.key or f.name, hints[f.name], s, f)
        for f in dataclasses.fields(typing.cast(Any, cls))
        for s in [f.metadata.get("record", _PLAIN)]
    )


@functools.cache
def _derived(cls: Any) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    return tuple((f.name, f.spec.derive) for f in _fields_of(cls) if f.spec.derive is not None)


def _allows_none(hint: Any) -> bool:
    return hint is Any or (_is_union(hint) and type(None) in typing.get_args(hint))


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


# ------------------------------------------------------------------ writing


def to_json(record: object) -> dict[str, Any]:
    """The record as a JSON object: its fields in order, as :mod:`json` writes them."""
    data: dict[str, Any] = {}
    for f in _fields(type(record)):
        value = getattr(record, f.name)
        if not f.spec.json or _omitted(f.spec.omit, record, value):
            continue
        if f.spec.flatten:
            if value is not None:
                data.update(to_json(value))
            continue
        data[f.key] = _plain(value)
    return data


def _omitted(omit: str | Callable[[Any], bool] | None, record: object, value: object) -> bool:
    if omit is None:
        return False
    if omit == "none":
        return value is None
    if omit == "empty":
        return value is None or (isinstance(value, (str, list, tuple, Mapping)) and not value)
    if callable(omit):
        return bool(omit(record))
    raise ValueError(f"records: unknown omit rule {omit!r} (use 'none', 'empty' or a callable)")


def _plain(value: object) -> Any:
    if isinstance(value, Record):
        return value.to_json()  # its own, where it overrides the generic one
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {(k.value if isinstance(k, enum.Enum) else k): _plain(v) for k, v in value.items()}
    if isinstance(value, (PurePath, Fraction)):  # a fraction exactly, as "1/40"
        return str(value)
    return value


# ------------------------------------------------------------------ reading


def from_json(cls: type[_T], data: object, *, problems: list[str] | None = None) -> _T:
    """The record ``cls`` read from ``data`` (a JSON object; unknown keys are ignored).

    Strict without ``problems``: a missing required key or a value of the wrong type raises
    :class:`RecordError` naming the field. With a ``problems`` list: lenient, each such value
    is noted there (``Record.field: ...``) and read as absent, a list entry that does not fit
    is skipped, and a missing key reads as the type's empty value (0, "", (), ...).
    """
    reader = _Reader(problems)
    try:
        return reader.record(cls, data, cls.__name__)
    except _Mismatch as exc:
        reader.fault(cls.__name__, str(exc))
        return reader.record(cls, {}, cls.__name__)


class _Reader:
    """One reading: strict (``problems`` None) or lenient, noting what it could not read."""

    def __init__(self, problems: list[str] | None) -> None:
        self.problems = problems

    def fault(self, where: str, message: str) -> None:
        if self.problems is None:
            raise RecordError(f"{where}: {message}")
        self.problems.append(f"{where}: {message}")

    def record(self, cls: type[_T], data: object, path: str) -> _T:
        if not isinstance(data, Mapping):
            raise _Mismatch(f"expected an object ({cls.__name__}), got {_show(data)}")
        values: dict[str, Any] = {}
        for f in _fields(cls):
            if not f.spec.json or not f.field.init:
                continue
            where = f"{path}.{f.key}"
            if f.spec.flatten:
                inner, when = _inner(f.hint), f.spec.read_when
                if not f.optional or (
                    any(g.key in data for g in _fields(inner))
                    if when is None
                    else data.get(when[0]) == when[1]
                ):
                    values[f.name] = self.record(inner, data, path)
                continue
            key = f.key
            if key not in data and f.spec.absent_from is not None:
                key = f.spec.absent_from
            if key not in data:
                fallback = self.absent(f, where)
            else:
                try:
                    values[f.name] = self.value(f.hint, data[key], where)
                    continue
                except _Mismatch as exc:
                    self.fault(where, str(exc))
                    fallback = self.absent(f, where, missing=False)
            if fallback is not dataclasses.MISSING:
                values[f.name] = fallback
        return cls(**values)

    def absent(self, f: _Field, where: str, *, missing: bool = True) -> Any:
        """What a field reads as when its key is missing (or, lenient, its value unreadable);
        MISSING: the dataclass default applies."""
        if f.spec.absent:
            return f.spec.absent[0]
        if f.field.default is not dataclasses.MISSING:
            return dataclasses.MISSING
        if f.field.default_factory is not dataclasses.MISSING:
            return dataclasses.MISSING
        if f.optional:
            return None
        if self.problems is None and missing:
            raise RecordError(f"{where}: the key {f.key!r} is missing (required)")
        return self.empty(f.hint, where)

    def empty(self, hint: Any, path: str) -> Any:
        """The type's empty value (lenient reading of a missing or unreadable field)."""
        origin = typing.get_origin(hint)
        if _is_union(hint):
            return self.empty(typing.get_args(hint)[0], path)
        if origin is tuple:
            args = typing.get_args(hint)
            if len(args) == 2 and args[1] is Ellipsis:
                return ()
            return tuple(self.empty(a, path) for a in args)
        if dataclasses.is_dataclass(hint):
            return self.record(typing.cast(type, hint), {}, path)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return next(iter(hint))
        if origin in (dict, Mapping):
            return {}
        return (origin or hint)()

    def value(self, hint: Any, value: object, path: str) -> Any:
        """``value`` read as ``hint``; :class:`_Mismatch` when it does not fit."""
        if hint is Any:
            return value
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if _is_union(hint):
            for alt in args:
                if _fits(alt, value):
                    return None if value is None else self.value(alt, value, path)
            raise _Mismatch(f"expected {_name(hint)}, got {_show(value)}")
        if _reads_itself(hint):
            try:
                return hint.from_json(value)
            except (RecordError, LookupError, TypeError, ValueError) as exc:
                raise _Mismatch(str(exc)) from None
        if dataclasses.is_dataclass(hint):
            return self.record(typing.cast(type, hint), value, path)
        if not _fits(hint, value):
            raise _Mismatch(f"expected {_name(hint)}, got {_show(value)}")
        if origin is tuple:
            assert isinstance(value, (list, tuple))
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(self.items(args[0], value, path))
            return tuple(
                self.value(a, v, f"{path}[{i}]")
                for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        if origin is list:
            assert isinstance(value, (list, tuple))
            return list(self.items(args[0], value, path))
        if origin in (dict, Mapping):
            assert isinstance(value, Mapping)
            found = {}
            for k, v in value.items():
                try:
                    found[k] = self.value(args[1], v, f"{path}.{k}")
                except _Mismatch as exc:
                    self.fault(f"{path}.{k}", str(exc))
            return found
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return hint(value)
        if isinstance(hint, type) and issubclass(hint, PurePath):
            return hint(str(value))
        return value

    def items(self, hint: Any, values: list[Any] | tuple[Any, ...], path: str) -> list[Any]:
        found = []
        for index, item in enumerate(values):
            try:
                found.append(self.value(hint, item, f"{path}[{index}]"))
            except _Mismatch as exc:
                self.fault(f"{path}[{index}]", str(exc))
        return found


def _reads_itself(hint: Any) -> bool:
    """Whether ``hint`` is a record with its own ``from_json`` (JSON with logic of its own)."""
    return (
        isinstance(hint, type)
        and issubclass(hint, Record)
        and hint.from_json.__func__ is not Record.from_json.__func__  # type: ignore[attr-defined]
    )


def _inner(hint: Any) -> type:
    """The record type of a flattened field (``X`` or ``X | None``)."""
    if _is_union(hint):
        return next(a for a in typing.get_args(hint) if a is not type(None))  # type: ignore[no-any-return]
    return typing.cast(type, hint)


def _fits(hint: Any, value: object) -> bool:
    """Whether ``value`` has the JSON shape of ``hint`` (its entries are checked after)."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # an int is a float written without its point; kept as written
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(hint):
        return any(_fits(a, value) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin is tuple:
        fixed = not (len(args) == 2 and args[1] is Ellipsis)
        return isinstance(value, (list, tuple)) and (not fixed or len(value) == len(args))
    if origin is list:
        return isinstance(value, (list, tuple))
    if dataclasses.is_dataclass(hint):  # in a union: told apart by its tags (Literal fields)
        return isinstance(value, Mapping) and all(
            value.get(f.key) in typing.get_args(f.hint)
            for f in _fields(hint)
            if typing.get_origin(f.hint) is typing.Literal
        )
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return value in {m.value for m in hint}
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return isinstance(value, str)
    raise TypeError(f"records: no JSON reading for the type {hint!r}")


def _name(hint: Any) -> str:
    if _is_union(hint):
        return " or ".join(_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    origin = typing.get_origin(hint)
    if origin in (tuple, list):
        return "a list"
    if origin in (dict, Mapping):
        return "an object"
    return getattr(hint, "__name__", str(hint))


def _show(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


# ------------------------------------------------------------------ the base class


class Record:
    """A frozen dataclass's base: ``to_json()`` and ``from_json()`` by the functions above.

    Override either only where the JSON has logic the field specs cannot say (and say why);
    a record nested in another is written and read by its own pair.
    """

    __slots__ = ()

    def __post_init__(self) -> None:
        for name, derive in _derived(typing.cast(Any, type(self))):
            object.__setattr__(self, name, derive(self))

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls: type[_R], data: object) -> _R:
        """The record read strictly (:class:`RecordError` naming the field)."""
        return from_json(cls, data)


#: How deep a JSON document the plugin reads (a manifest, a receipt) may nest. Ours nest about
#: a dozen levels; a hostile one of 100,000 would otherwise end in a RecursionError.
MAX_JSON_DEPTH = 64


def loads_bounded(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` of UTF-8 ``data`` that nests at most ``max_depth`` levels.

    ``ValueError`` (a ``JSONDecodeError``, a ``UnicodeDecodeError``, or one naming the depth
    limit) for anything else: never a ``RecursionError``, whatever the document holds.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than the limit of {max_depth} levels") from None
    if json_depth(value, stop_above=max_depth) > max_depth:
        raise ValueError(f"nested deeper than the limit of {max_depth} levels")
    return value


def json_depth(value: Any, *, stop_above: int | None = None) -> int:
    """How many levels of lists and objects ``value`` nests (a scalar is 0), without recursion;
    counting stops once it passes ``stop_above``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if stop_above is not None and deepest > stop_above:
            break
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
