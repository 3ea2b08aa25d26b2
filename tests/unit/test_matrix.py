"""The determinism matrix (#24): cells, per-cell verdicts, and the explanation line."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_lossless.compare.matrix import (
    Cell,
    cell_verdict,
    cells,
    explain,
    explanation_line,
    find_cell,
    rederive,
    run_matrix,
    value_text,
)
from pytest_lossless.core.verdict import Verdict
from pytest_lossless.errors import ConfigError
from pytest_lossless.gates import parse_gate

# ------------------------------------------------------------------ cells


def test_cells_are_the_product_in_axis_order():
    found = cells({"threads": [1, 2, 4], "batch": [1, 4]})
    assert [c.name for c in found] == [
        "threads=1, batch=1",
        "threads=1, batch=4",
        "threads=2, batch=1",
        "threads=2, batch=4",
        "threads=4, batch=1",
        "threads=4, batch=4",
    ]
    assert found[3].kwargs == {"threads": 2, "batch": 4}
    assert found[3]["batch"] == 4


@pytest.mark.parametrize(
    "axes",
    [
        {},
        {"threads": []},
        {"threads": "124"},
        {"not a name": [1]},
        {"class": [1]},
        {"threads": [1, 1]},
        {"threads": [object()]},
        {"threads": [float("nan")]},
        {"x": [1, "1"]},
    ],
)
def test_bad_axes_are_named(axes):
    with pytest.raises(ConfigError, match=r"lossless\.matrix\(axes\)"):
        cells(axes)


def test_a_float_never_shares_a_name_with_an_int():
    assert value_text(2.0) == "2.0"
    assert value_text(2) == "2"
    assert len(cells({"x": [2, 2.0]})) == 2


def test_find_cell_by_name_tuple_or_mapping():
    found = cells({"threads": [1, 4], "batch": [1, 2]})
    assert find_cell(found, "threads=4,batch=2", "where") == found[3]
    assert find_cell(found, (4, 2), "where") == found[3]
    assert find_cell(found, {"batch": 2, "threads": 4}, "where") == found[3]
    with pytest.raises(ConfigError, match=r"names no cell.*threads=1, batch=1"):
        find_cell(found, (3, 2), "where")


# ------------------------------------------------------------------ verdicts


def test_cell_verdict_is_the_contract_table():
    assert cell_verdict(True, True, True, lossy=False) == Verdict.PASS
    assert cell_verdict(True, True, True, lossy=True) == Verdict.LOSSY_PASS
    assert cell_verdict(True, True, False, lossy=False) == Verdict.FAIL
    assert cell_verdict(True, False, True, lossy=False) == Verdict.INCONCLUSIVE
    # Nothing is judged against a reference that is not repeatable.
    assert cell_verdict(False, True, True, lossy=False) == Verdict.INCONCLUSIVE
    assert cell_verdict(False, True, False, lossy=True) == Verdict.INCONCLUSIVE


class _Model:
    """A toy model whose output depends on its knobs as a real one's might: ``threads > 1``
    reduces in another order; ``racy`` cells differ from run to run."""

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []
        self.counter = itertools.count()

    def make_run(self, threads, batch, racy=False):
        self.calls.append({"threads": threads, "batch": batch})

        def produce():
            values = np.arange(8, dtype=np.float32) * (1.0 if threads == 1 else 1.0001)
            if racy and threads > 1:
                values[0] += next(self.counter)
            return {"out.npy": values}

        return produce


def test_run_matrix_gives_a_verdict_per_cell(tmp_path, kinds):
    model = _Model()
    grid = run_matrix(
        model.make_run,
        {"threads": [1, 2], "batch": [1, 4]},
        runs=2,
        kinds=kinds,
        workdir=tmp_path,
        label="knobs",
    )
    assert grid.verdicts == {
        "threads=1, batch=1": Verdict.PASS,
        "threads=1, batch=4": Verdict.PASS,
        "threads=2, batch=1": Verdict.FAIL,
        "threads=2, batch=4": Verdict.FAIL,
    }
    assert grid.verdict == Verdict.FAIL
    assert grid.explanation == "differs whenever threads = 2, whatever the batch"
    assert len(model.calls) == 4  # make_run once per cell; each producer ran twice
    assert all(len(c.runs) == 2 for c in grid)
    assert grid[(2, 4)].summary().startswith("differs from the reference: out.npy (")
    assert "threads=2, batch=4: FAIL" in grid.message()
    # The record is JSON, and re-derives to what was decided.
    block = json.loads(json.dumps(grid.to_json(), default=str))
    assert rederive(block) == grid.verdicts


def test_racy_cells_are_inconclusive(tmp_path, kinds):
    model = _Model()
    grid = run_matrix(
        lambda threads, batch: model.make_run(threads, batch, racy=True),
        {"threads": [1, 4], "batch": [1, 2]},
        runs=2,
        kinds=kinds,
        workdir=tmp_path,
    )
    assert grid[(4, 1)].verdict == Verdict.INCONCLUSIVE
    assert grid[(4, 2)].verdict == Verdict.INCONCLUSIVE
    assert grid[(1, 2)].verdict == Verdict.PASS
    assert grid.verdict == Verdict.INCONCLUSIVE
    assert "not repeatable" in grid[(4, 2)].summary()
    assert grid.explanation.startswith("differs whenever threads = 4, whatever the batch")


def test_a_named_reference_and_a_gate(tmp_path, kinds):
    model = _Model()
    grid = run_matrix(
        model.make_run,
        {"threads": [1, 2], "batch": [1]},
        runs=2,
        kinds=kinds,
        workdir=tmp_path,
        reference="threads=2, batch=1",
        gate=parse_gate("tolerance(atol=0.01)"),
    )
    assert grid.reference.name == "threads=2, batch=1"
    assert model.calls[0] == {"threads": 2, "batch": 1}  # the reference runs first
    assert set(grid.verdicts.values()) == {Verdict.LOSSY_PASS}
    assert rederive(json.loads(json.dumps(grid.to_json(), default=str))) == grid.verdicts


def test_an_unrepeatable_reference_judges_nothing(tmp_path, kinds):
    model = _Model()
    grid = run_matrix(
        lambda threads: model.make_run(threads, 1, racy=True),
        {"threads": [4, 1]},
        runs=2,
        kinds=kinds,
        workdir=tmp_path,
    )
    assert set(grid.verdicts.values()) == {Verdict.INCONCLUSIVE}
    assert "reference cell threads=4 is not repeatable" in grid.explanation


def test_rederive_catches_an_edited_verdict_record(tmp_path, kinds):
    model = _Model()
    grid = run_matrix(
        model.make_run, {"threads": [1, 2], "batch": [1]}, runs=2, kinds=kinds, workdir=tmp_path
    )
    block = json.loads(json.dumps(grid.to_json(), default=str))
    block["cells"][1]["reference_comparison"]["results"][0]["passed"] = True
    assert rederive(block)["threads=2, batch=1"] == Verdict.PASS  # what the edit now claims
    block["cells"][1]["reference_comparison"] = None
    assert rederive(block)["threads=2, batch=1"] == Verdict.FAIL


@pytest.mark.parametrize("runs", [1, 0, True, "2"])
def test_runs_below_two_are_refused(tmp_path, kinds, runs):
    with pytest.raises(ConfigError, match="at least twice"):
        run_matrix(_Model().make_run, {"threads": [1]}, runs=runs, kinds=kinds, workdir=tmp_path)


def test_make_run_must_return_a_producer(tmp_path, kinds):
    with pytest.raises(ConfigError, match="must return a producer"):
        run_matrix(lambda threads: None, {"threads": [1]}, runs=2, kinds=kinds, workdir=tmp_path)


def test_the_cell_context_wraps_each_cell(tmp_path, kinds):
    import contextlib

    seen = []

    @contextlib.contextmanager
    def around(cell: Cell):
        seen.append(("enter", cell.name))
        yield {"devices": ["0"] * int(cell["devices"])}
        seen.append(("exit", cell.name))

    grid = run_matrix(
        lambda devices: lambda: {"out.npy": np.zeros(2, dtype=np.float32)},
        {"devices": [1, 2]},
        runs=2,
        kinds=kinds,
        workdir=tmp_path,
        cell_context=around,
    )
    assert seen == [
        ("enter", "devices=1"),
        ("exit", "devices=1"),
        ("enter", "devices=2"),
        ("exit", "devices=2"),
    ]
    assert grid[(2,)].context == {"devices": ["0", "0"]}


# ------------------------------------------------------------------ the explanation


def _axes3():
    return {"threads": [1, 2, 4], "batch": [1, 4], "tf32": [False, True]}


def _bad(axes, predicate):
    return {
        tuple(value_text(v) for v in combo)
        for combo in itertools.product(*axes.values())
        if predicate(dict(zip(axes, combo, strict=True)))
    }


@pytest.mark.parametrize(
    ("predicate", "text"),
    [
        (lambda c: False, "no cell differs"),
        (lambda c: True, "every cell differs"),
        (lambda c: c["threads"] > 1, "differs whenever threads > 1, whatever the batch and tf32"),
        (lambda c: c["threads"] < 4, "differs whenever threads < 4, whatever the batch and tf32"),
        (lambda c: c["tf32"], "differs whenever tf32 = True, whatever the threads and batch"),
        (
            lambda c: c["threads"] > 1 and c["batch"] > 1,
            "differs only when threads > 1 and batch = 4, whatever the tf32 "
            "(threads and batch interact)",
        ),
        (
            lambda c: c["threads"] == 4 or c["tf32"],
            "differs whenever threads = 4 or tf32 = True, whatever the batch "
            "(threads and tf32 interact)",
        ),
        (
            lambda c: (c["threads"], c["batch"]) in ((2, 4), (4, 1)),
            "differs at (threads=2, batch=4), (threads=4, batch=1), whatever the tf32 "
            "(threads and batch interact)",
        ),
    ],
)
def test_explanations(predicate, text):
    axes = _axes3()
    assert explain(axes, _bad(axes, predicate)).text() == text


def test_the_line_of_a_grid():
    axes = {"threads": [1, 2, 4], "chunk": [1, 4]}
    found = cells(axes)

    def verdict(c):
        return {1: Verdict.PASS, 2: Verdict.FAIL, 4: Verdict.INCONCLUSIVE}[c["threads"]]

    line = explanation_line(axes, {c.name: verdict(c) for c in found}, found[0].name)
    assert line == (
        "differs whenever threads > 1, whatever the chunk; not repeatable whenever "
        "threads = 4, whatever the chunk"
    )
    lossy = {c.name: Verdict.LOSSY_PASS for c in found}
    assert explanation_line(axes, lossy, found[0].name).endswith("within tolerance")


_values = st.lists(st.integers(-3, 9), min_size=1, max_size=4, unique=True)


@st.composite
def _grids(draw):
    count = draw(st.integers(1, 3))
    axes = {f"a{i}": draw(_values) for i in range(count)}
    every = list(itertools.product(*([value_text(v) for v in vs] for vs in axes.values())))
    bad = set(draw(st.lists(st.sampled_from(every), max_size=len(every))))
    return axes, every, bad


@settings(max_examples=300, deadline=None)
@given(_grids())
def test_an_explanation_covers_exactly_the_cells_that_differ(grid):
    axes, every, bad = grid
    explanation = explain(axes, bad)
    for cell in every:
        assert explanation.covers(dict(zip(axes, cell, strict=True))) == (cell in bad)
    assert explanation.text()  # always a line


@settings(max_examples=200, deadline=None)
@given(_grids(), st.data())
def test_an_axis_alone_is_named_alone(grid, data):
    axes, every, _ = grid
    axis = data.draw(st.sampled_from(sorted(axes)))
    texts = [value_text(v) for v in axes[axis]]
    chosen = set(data.draw(st.lists(st.sampled_from(texts), unique=True)))
    index = list(axes).index(axis)
    bad = {cell for cell in every if cell[index] in chosen}
    explanation = explain(axes, bad)
    if 0 < len(chosen) < len(texts):
        assert explanation.form == "axis"
        assert explanation.relevant == (axis,)
        others = {a for a in axes if a != axis and len(axes[a]) > 1}
        assert set(explanation.ignored) == others
        assert not explanation.interacting
    else:
        assert explanation.form == ("all" if chosen else "none")


@settings(max_examples=200, deadline=None)
@given(_grids())
def test_an_ignored_axis_never_matters(grid):
    axes, every, bad = grid
    explanation = explain(axes, bad)
    names = list(axes)
    for axis in explanation.ignored:
        i = names.index(axis)
        for cell in every:
            for value in axes[axis]:
                other = (*cell[:i], value_text(value), *cell[i + 1 :])
                assert (cell in bad) == (other in bad)


def test_the_grid_as_a_table_for_the_report(tmp_path, kinds):
    from pytest_lossless.report.grid import grid_table, read_grid

    grid = run_matrix(
        _Model().make_run,
        {"threads": [1, 2], "batch": [1, 4]},
        runs=2,
        kinds=kinds,
        workdir=tmp_path,
    )
    problems: list[str] = []
    read = read_grid(json.loads(json.dumps(grid.to_json(), default=str)), problems)
    assert read is not None
    assert problems == []
    table = grid_table(read)
    assert table is not None
    assert table.head == ("threads \\ batch", "1", "4")
    assert list(table.rows) == [
        ("threads=1", "PASS (reference)", "PASS"),
        ("threads=2", "FAIL", "FAIL"),
    ]
    # A receipt is read, not trusted: what does not fit is noted, never raised.
    assert read_grid({"axes": {"x": "not a list"}}, problems) is None
    assert problems
