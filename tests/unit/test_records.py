"""The generic record serialiser (core/records.py, #19): one to_json/from_json for every frozen
dataclass record, keys in field order, strict reading that names the field, lenient reading that
notes what it could not read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_lossless.core.records import Record, RecordError, from_json, spec, to_json


class Colour(str, Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, slots=True)
class Point(Record):
    x: int
    y: float = 0.0


@dataclass(frozen=True, slots=True)
class Shape(Record):
    name: str
    points: tuple[Point, ...]
    colour: Colour
    where: Path
    size: tuple[float, float]
    tags: dict[str, int] = field(default_factory=dict)
    label: str | None = spec(None, key="text", omit="none")
    notes: tuple[str, ...] = spec((), omit="empty")
    extra: dict[str, Any] | None = None
    timing: float | tuple[float, ...] | None = None
    scratch: int = spec(0, json=False)


@dataclass(frozen=True, slots=True)
class Counts(Record):
    requests: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class Totals(Record):
    all: Counts = spec(default_factory=Counts, flatten=True)
    limit: int = 0
    done: str | None = None
    #: Written only once done; read from ``old_name`` in files that predate it.
    result: int | None = spec(None, omit=lambda t: t.done is None, absent_from="old_name")
    version: str = spec("new", absent="legacy")


def _shape(**changes: Any) -> Shape:
    base: dict[str, Any] = {
        "name": "s",
        "points": (Point(1, 2.5), Point(3)),
        "colour": Colour.BLUE,
        "where": Path("/tmp/x"),
        "size": (1.0, 2.0),
    }
    return Shape(**{**base, **changes})


def test_keys_follow_the_fields_and_values_become_json() -> None:
    data = to_json(_shape(tags={"a": 1}, label="L", extra={"raw": [1, {"k": None}]}))
    assert list(data) == [
        "name",
        "points",
        "colour",
        "where",
        "size",
        "tags",
        "text",
        "extra",
        "timing",
    ]
    assert data["points"] == [{"x": 1, "y": 2.5}, {"x": 3, "y": 0.0}]
    assert data["colour"] == "blue"
    assert type(data["colour"]) is str
    assert data["where"] == "/tmp/x"
    assert data["size"] == [1.0, 2.0]
    assert "notes" not in data  # empty
    assert "scratch" not in data  # not part of the JSON
    assert to_json(_shape(notes=("n",)))["notes"] == ["n"]


def test_a_record_round_trips_through_json_text() -> None:
    shape = _shape(tags={"a": 1}, label="L", notes=("n",), extra={"raw": [1]}, timing=(0.5, 1))
    text = json.dumps(shape.to_json())
    again = Shape.from_json(json.loads(text))
    assert again == shape
    assert json.dumps(again.to_json()) == text
    assert Shape.from_json(json.loads(json.dumps(_shape(timing=2.0).to_json()))).timing == 2.0


def test_an_int_in_a_float_field_is_kept_as_written() -> None:
    point = Point.from_json({"x": 1, "y": 2})
    assert json.dumps(point.to_json()) == '{"x": 1, "y": 2}'


def test_flattened_records_rules_and_older_keys() -> None:
    totals = Totals(Counts(3, 1), limit=5)
    assert totals.to_json() == {
        "requests": 3,
        "failed": 1,
        "limit": 5,
        "done": None,
        "version": "new",
    }
    done = Totals(Counts(), limit=1, done="yes", result=7)
    assert list(done.to_json()) == ["requests", "failed", "limit", "done", "result", "version"]
    assert Totals.from_json(done.to_json()) == done
    old = Totals.from_json({"requests": 2, "limit": 1, "done": "yes", "old_name": 4})
    assert old == Totals(Counts(2, 0), limit=1, done="yes", result=4, version="legacy")


def test_a_missing_required_key_is_named() -> None:
    data = _shape().to_json()
    del data["colour"]
    with pytest.raises(RecordError, match=r"Shape\.colour: the key 'colour' is missing"):
        Shape.from_json(data)
    with pytest.raises(RecordError, match=r"Shape\.points\[1\]\.x: the key 'x' is missing"):
        Shape.from_json({**_shape().to_json(), "points": [{"x": 1}, {"y": 2.0}]})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("name", 5, r"Shape\.name: expected str, got int 5"),
        ("points", {"x": 1}, r"Shape\.points: expected a list, got dict"),
        ("colour", "green", r"Shape\.colour: expected one of 'red', 'blue', got str 'green'"),
        ("size", [1.0], r"Shape\.size: expected a list, got list \[1\.0\]"),
        ("tags", {"a": "1"}, r"Shape\.tags\.a: expected int, got str '1'"),
        ("text", 3, r"Shape\.text: expected str or null, got int 3"),
        ("timing", "fast", r"Shape\.timing: expected float or a list or null, got str"),
        ("where", None, r"Shape\.where: expected PurePath|Path"),
    ],
)
def test_a_value_of_the_wrong_type_is_named(key: str, value: object, message: str) -> None:
    data = {**_shape().to_json(), key: value}
    with pytest.raises(RecordError, match=message):
        Shape.from_json(data)


def test_a_bool_is_no_number_and_a_number_no_bool() -> None:
    with pytest.raises(RecordError, match=r"Point\.x: expected int, got bool True"):
        Point.from_json({"x": True})
    with pytest.raises(RecordError, match=r"Counts\.failed"):
        from_json(Counts, {"failed": 1.5})


def test_what_is_not_an_object_is_refused() -> None:
    with pytest.raises(RecordError, match=r"Point: expected an object \(Point\), got list"):
        Point.from_json([1, 2])
    with pytest.raises(RecordError, match=r"Shape\.points\[0\]: expected an object"):
        Shape.from_json({**_shape().to_json(), "points": [7]})


def test_lenient_reading_notes_each_problem_and_reads_it_as_absent() -> None:
    problems: list[str] = []
    data = {
        **_shape().to_json(),
        "name": 5,
        "points": [{"x": 1}, 7, {"x": "2"}],
        "tags": {"a": 1, "b": "2"},
        "text": 3,
    }
    del data["colour"]
    shape = from_json(Shape, data, problems=problems)
    assert (shape.name, shape.label, shape.colour) == ("", None, Colour.RED)
    assert shape.points == (Point(1), Point(0))  # the entry that is no object is skipped
    assert shape.tags == {"a": 1}
    assert problems == [
        "Shape.name: expected str, got int 5",
        "Shape.points[1]: expected an object (Point), got int 7",
        "Shape.points[2].x: expected int, got str '2'",
        "Shape.tags.b: expected int, got str '2'",
        "Shape.text: expected str or null, got int 3",
    ]  # a missing key is no problem when lenient: older files lack keys


def test_lenient_reading_of_no_object_at_all() -> None:
    problems: list[str] = []
    assert from_json(Totals, "x", problems=problems) == Totals(version="legacy")
    assert problems == ["Totals: expected an object (Totals), got str 'x'"]


def test_unknown_keys_are_ignored() -> None:
    assert Point.from_json({"x": 1, "lifecycle": {"clean": True}}) == Point(1)


@dataclass(frozen=True, slots=True)
class Circle(Record):
    kind: Literal["circle"] = field(default="circle", kw_only=True)
    radius: float


@dataclass(frozen=True, slots=True)
class Square(Record):
    kind: Literal["square"] = field(default="square", kw_only=True)
    side: float


@dataclass(frozen=True, slots=True)
class Drawing(Record):
    figures: tuple[Circle | Square, ...]


def test_a_union_of_records_is_told_apart_by_their_literal_fields() -> None:
    """A tag (a ``Literal`` field, written among the others) says which record an object is;
    one whose tag fits none is refused (lenient: skipped and noted)."""
    drawing = Drawing((Circle(radius=1.0), Square(side=2.0)))
    data = to_json(drawing)
    assert data == {"figures": [{"kind": "circle", "radius": 1.0}, {"kind": "square", "side": 2.0}]}
    assert from_json(Drawing, data) == drawing
    odd = {"figures": [{"kind": "square", "side": 3}, {"kind": "star", "points": 5}, {"side": 1}]}
    with pytest.raises(RecordError, match=r"Drawing\.figures\[1\]: expected Circle or Square"):
        from_json(Drawing, odd)
    problems: list[str] = []
    assert from_json(Drawing, odd, problems=problems) == Drawing((Square(side=3),))
    assert len(problems) == 2


def _double(d: Derived) -> int:
    return d.base * 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Derived(Record):
    base: int
    twice: int = spec(derive=_double)
    name: str = ""


@dataclass(frozen=True, slots=True)
class Own(Record):
    """A record whose JSON has logic of its own: a list written as one joined string."""

    parts: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"joined": "+".join(self.parts)}

    @classmethod
    def from_json(cls, data: object) -> Own:
        assert isinstance(data, dict)
        return cls(tuple(str(data["joined"]).split("+")))


@dataclass(frozen=True, slots=True)
class Holder(Record):
    own: Own
    many: tuple[Own, ...] = ()


def test_a_derived_key_is_written_in_its_place_and_never_read() -> None:
    record = Derived(base=3, name="n")
    assert record.twice == 6
    assert list(record.to_json().items()) == [("base", 3), ("twice", 6), ("name", "n")]
    assert Derived.from_json({"base": 4, "twice": 99}) == Derived(base=4)
    assert Derived.from_json({"base": 4, "twice": 99}).twice == 8


def test_a_nested_record_with_its_own_pair_is_written_and_read_by_it() -> None:
    holder = Holder(Own(("a", "b")), (Own(("c",)),))
    data = holder.to_json()
    assert data == {"own": {"joined": "a+b"}, "many": [{"joined": "c"}]}
    assert Holder.from_json(data) == holder
    with pytest.raises(RecordError, match=r"Holder\.own: .*joined"):
        Holder.from_json({"own": {}})
