"""The canary: a gate must be seen to fail before its PASS means anything.

Once per session for each (kind, gate) in use, :class:`Canary` takes the real artifact a
comparison was just made on, writes a copy with exactly one unit changed, and has the same
comparator, through the same registry, judge the copy. It must say FAIL and name that unit;
otherwise the gate cannot fail, which :class:`~..errors.CanaryError` reports. The copy is the
kind's own business: a built-in kind's :meth:`~.base.BuiltinKind.plan` (one byte of one decoded
video frame, one PCM sample by one LSB, the last bit of one tensor element; for a lossy gate a
change just beyond its bound), a plugin kind's ``pytest_lossless_perturb`` hook, or one flipped
bit of the file (:func:`flip_byte`, also the ``bytes`` gate's change for every kind).

:meth:`~.registry.KindRegistry.compare` runs it after each comparison (the golden and the
lossless flows both compare through it); its records wait in :attr:`Canary.fresh` until the
plugin puts them in the receipt of the test they ran in.
"""

from __future__ import annotations

import contextlib
import errno
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import faults
from ..core.artifact import Artifact
from ..core.records import JsonObject, Record, from_json
from ..errors import ArtifactError, CanaryError, LosslessError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..core.digests import Fingerprint
    from ..gates import Gate, GateResult
    from ..gates.gate import LocationValue
    from .registry import KindRegistry


class Unavailable(Exception):
    """No copy with one unit changed can be made of this artifact (``reason`` says why)."""


class Unfailable(Exception):
    """No change of one unit goes beyond the gate's bound: the gate cannot fail."""


@dataclass(frozen=True)
class Plan:
    """A perturbed copy: the file to judge, what to judge it against, and where it differs.

    ``expected`` is None when the copy is judged against the artifact itself; a video copy is
    judged against an unchanged copy of the same frames written the same way (``expected``).
    ``location`` (a subset of ``GateResult.location``) or ``prefix`` (how ``first_mismatch``
    starts) is where the comparator must say the difference is; neither: not checked.
    """

    obtained: Path
    kind: str
    unit: str
    expected: Path | None = None
    #: The fingerprint of ``expected``, when it was taken already (to check the copy).
    expected_fingerprint: Fingerprint | None = None
    #: The fingerprint of ``obtained``, when the kind took it already (with the expected one).
    obtained_fingerprint: Fingerprint | None = None
    #: The gate reads only digests: ``expected`` is judged as a digest-only golden is (no
    #: file, so no diagnostics decode of both copies after the FAIL: the record needs none).
    digests_suffice: bool = False
    location: dict[str, LocationValue] = field(default_factory=dict)
    prefix: str | None = None
    #: Further copies the same comparator must each FAIL too, at their own unit: the audio of
    #: a video container (its frames prove the frame side, these the audio side, which a
    #: comparator could ignore). The canary is proved only when every one FAILS.
    also: tuple[Plan, ...] = ()

    def located(
        self, result_location: Mapping[str, LocationValue], first_mismatch: str | None
    ) -> bool | None:
        """Whether a FAIL named the changed unit (None: nothing to check it against)."""
        if not self.location and self.prefix is None:
            return None
        if self.location and all(result_location.get(k) == v for k, v in self.location.items()):
            return True
        return self.prefix is not None and (first_mismatch or "").startswith(self.prefix)


def flip_byte(path: Path, out: Path, kind: str) -> Plan:
    """A copy of the file with the low bit of its middle byte flipped."""
    size = path.stat().st_size
    if size == 0:
        raise Unavailable("the file is empty: it has no byte to change")
    shutil.copyfile(path, out)
    offset = size // 2
    with open(out, "r+b") as fh:
        fh.seek(offset)
        old = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([old ^ 0x01]))
    return Plan(
        obtained=out,
        kind=kind,
        unit=f"byte {offset} of {size}, 0x{old:02x} -> 0x{old ^ 0x01:02x}",
        location={"offset": offset},
        prefix=f"offset {offset} ",
    )


# ------------------------------------------------------------------ one value beyond a bound


def beyond(value: Any, dtype: np.dtype[Any], bound: float, step: int = 1) -> Any:
    """The value nearest ``value`` (in ``dtype``, a finite number) whose distance from it is
    more than ``bound``, as the tolerance gate measures it (``|a - b|`` in float64 or exact
    integers); integers move in multiples of ``step``. None when no such value exists."""
    import numpy as np

    if dtype.kind == "b":
        return (not bool(value)) if bound < 1 else None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        jump = (math.floor(bound / step) + 1) * step
        for y in (int(value) + jump, int(value) - jump):
            if info.min <= y <= info.max - (step - 1 if y > 0 else 0):
                return dtype.type(y)
        return None
    if dtype.kind not in "fc":
        return None
    wide = np.complex128 if dtype.kind == "c" else np.float64
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        x = wide(value)
        if not np.isfinite(x):
            return None
        if bound > 0:
            ladder = [bound * (1 + 2.0**-i) for i in range(60, -1, -1)]
            ladder += [bound * 2.0**j for j in range(1, 64)]
            # A bound far below the value's own step (atol=1e-36 at 1.0): the next float out.
            component = np.finfo(dtype)
            step = float(component.eps) * max(abs(x), float(component.tiny))
            ladder += [d for d in (step * 2.0**j for j in range(-2, 64)) if d > ladder[-1]]
        else:  # any change at all: from far below one step up to the value itself
            component = np.finfo(dtype)  # a complex dtype's: its parts' format
            base = max(abs(x), float(component.tiny))
            ladder = [base * 2.0**-i for i in range(80, -1, -1)]
        for sign in (1.0, -1.0):
            for d in ladder:
                y = dtype.type(x + sign * d)
                yw = wide(y)
                if np.isfinite(yw) and abs(yw - x) > bound:
                    return _nearest_past(y, x, bound) if dtype.kind == "f" else y
    return None


def _nearest_past(y: Any, x: Any, bound: float) -> Any:
    """The float nearest ``x`` that is more than ``bound`` from it, on ``y``'s side: ``y``
    passes, and the floats between are searched by bisection in their order (float64's
    rounding of a distance can leave the first value the ladder found many steps too far:
    past zero, the distances of all denormals round to the same number)."""
    import numpy as np

    dtype = y.dtype
    ints = np.dtype(f"i{dtype.itemsize}")
    low = np.iinfo(ints).min

    def order(v: Any) -> int:  # the floats' order as integers (negatives mirrored)
        bits = int(np.array(v, dtype=dtype).view(ints))
        return bits if bits >= 0 else low - bits

    def value(n: int) -> Any:
        bits = n if n >= 0 else low - n
        return np.array(bits, dtype=ints).view(dtype)[()]

    def passes(n: int) -> bool:
        return bool(abs(np.float64(value(n)) - x) > bound)

    near, far = order(dtype.type(x)), order(y)  # near fails (distance 0), far passes
    while abs(far - near) > 1:
        mid = (near + far) // 2
        if passes(mid):
            far = mid
        else:
            near = mid
    return value(far)


def middle_out(count: int, limit: int = 4096) -> Iterator[int]:
    """Positions from the middle outwards (at most ``limit``): a unit inside the data, not at
    an edge a comparator might special-case."""
    mid = count // 2
    for i in range(min(count, limit)):
        pos = mid + (i + 1) // 2 * (1 if i % 2 else -1)
        if 0 <= pos < count:
            yield pos


def _lsb_byte(dtype: np.dtype[Any]) -> int:
    """Which byte of an element holds its least significant bit."""
    return dtype.itemsize - 1 if dtype.byteorder == ">" else 0


def flip_lsb(element: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A one-element array with the last bit of its element flipped (a float's last mantissa
    bit, an integer's 1, a void word's first byte's low bit)."""
    import numpy as np

    changed = np.array(element, copy=True).reshape(1)
    raw = changed.view(np.uint8)
    raw[_lsb_byte(changed.dtype)] ^= 1
    return changed


def show(value: Any) -> str:
    """A number as a reader writes it (``0.001``, not ``np.float32(0.001)``)."""
    return str(value)  # numpy's str of a scalar is its shortest exact text


# ------------------------------------------------------------------ the canary

#: What became of a canary: the gate failed at the changed unit (``proved``); it said PASS,
#: or did not name the unit, or no change can go beyond it (``cannot-fail``: an error); no
#: copy could be made (``unavailable``, with the reason); ``--lossless-no-canary`` (``skipped``).
STATUSES = ("proved", "cannot-fail", "unavailable", "skipped")
#: The option that skips the canary, named in messages and records.
SKIP_FLAG = "--lossless-no-canary"


@dataclass(frozen=True)
class CanaryRecord(Record):
    """One canary: the comparator (kind, gate), the artifact copied, what was changed, what the
    comparator said of the copy, whether it named the changed unit, and how long it took."""

    kind: str
    gate: str
    artifact: str
    status: str
    unit: str | None = None
    verdict: str | None = None
    located: bool | None = None
    first_mismatch: str | None = None
    seconds: float | None = None
    reason: str | None = None
    test_id: str | None = None

    @classmethod
    def from_json(cls, data: object) -> CanaryRecord:
        """A record from a receipt (a worker's, an earlier session's), read leniently: what
        does not fit reads as absent (``verify`` checks the block: :func:`check_records`)."""
        return from_json(cls, data, problems=[])

    @property
    def failed(self) -> bool:
        return self.status == "cannot-fail"

    def error(self) -> CanaryError:
        """The error of a gate that cannot fail, for every test that uses it."""
        if self.unit is None:
            what = self.reason or "no change of one unit can fail it"
        else:
            what = (
                f"in a copy of {self.artifact!r} with one unit changed ({self.unit}), the "
                f"comparator said {self.verdict}"
            )
            if self.verdict == "FAIL" and self.located is False:
                named = self.first_mismatch or "no position"
                what += f", but the comparator did not name that unit (it named: {named})"
        return CanaryError(
            f"canary: the {self.kind} gate {self.gate} cannot fail: {what}; this gate cannot "
            f"fail, so its PASS proves nothing. Fix the comparator of kind {self.kind!r} "
            f"(pytest_lossless_compare) or the gate, or run with {SKIP_FLAG} to skip this check "
            "(recorded as skipped)",
            kind=self.kind,
            gate=self.gate,
            artifact=self.artifact,
            unit=self.unit or "",
            verdict=self.verdict or "",
        )

    def line(self) -> str:
        """The record in a few words, for the session summary."""
        took = f"; {self.seconds:.2f} s" if self.seconds is not None else ""
        name = f"{self.kind}/{self.gate}"
        if self.status == "proved":
            return f"{name}: FAIL as required ({self.artifact!r}: {self.unit}{took})"
        if self.status == "cannot-fail":
            said = f"{self.unit}: said {self.verdict}" if self.verdict else (self.reason or "")
            return f"{name}: CANNOT FAIL, an ERROR ({self.artifact!r}: {said}{took})"
        if self.status == "skipped":
            return f"{name}: skipped ({self.reason})"
        return f"{name}: not run ({self.artifact!r}: {self.reason}{took})"


class Canary:
    """The session's canaries: at most one per (kind, gate), each judged by ``registry``.

    ``workdir`` holds the copies while a canary runs (a temporary folder of its own, removed
    after); ``skip`` (``--lossless-no-canary``) records each (kind, gate) as skipped instead.
    """

    def __init__(
        self, registry: KindRegistry, *, workdir: Path | None = None, skip: bool = False
    ) -> None:
        self.registry = registry
        self.workdir = workdir
        self.skip = skip
        self.records: dict[tuple[str, str], CanaryRecord] = {}
        #: Records made since the plugin last took them (:meth:`take`) for a test's receipt.
        self.fresh: list[CanaryRecord] = []
        #: Copies being made in the background (:meth:`rehearse`), by (kind, gate).
        self._rehearsals: dict[tuple[str, str], _Rehearsal] = {}

    def rehearse(self, gate: Gate, artifact: Artifact) -> None:
        """Start the canary that the comparison of ``artifact`` (a file about to be
        fingerprinted; the fingerprint given is its golden's) will run, in a background thread:
        its copies are made and judged, by the same comparator, while the file is decoded.
        Only for a built-in kind's own copy, and only when that (kind, gate) has no record yet.
        Its verdict is used only if the file's own fingerprint turns out to equal the one given
        (else the canary runs again after the comparison, as without a rehearsal)."""
        key = (artifact.kind, gate.spec)
        if self.skip or key in self.records or key in self._rehearsals or artifact.path is None:
            return
        own = self.registry.builtin(artifact.kind)
        if own is None or gate.name == "bytes" or artifact.kind == "bytes":
            return
        folder = Path(tempfile.mkdtemp(prefix="lossless-canary-", dir=self._workdir()))
        future: Future[CanaryRecord] = Future()

        def make() -> None:
            judged = CanaryRecord(artifact.kind, gate.spec, artifact.name, "unavailable")
            try:
                plan = self._plan(judged.kind, gate, artifact, folder)
                future.set_result(
                    self._judge(replace(judged, unit=plan.unit), plan, gate, artifact)
                )
            except BaseException as exc:  # handed to the canary that uses it
                future.set_exception(exc)

        threading.Thread(target=make, name="lossless-canary-rehearsal", daemon=True).start()
        self._rehearsals[key] = _Rehearsal(artifact, folder, future)

    def _workdir(self) -> Path | None:
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        return self.workdir

    def _rehearsed(self, key: tuple[str, str], artifact: Artifact) -> _Rehearsal | None:
        """The rehearsal of ``key`` made from this very artifact, if any; others are dropped."""
        found = self._rehearsals.pop(key, None)
        if found is None:
            return None
        if found.artifact.path == artifact.path and found.artifact.fingerprint == (
            artifact.fingerprint
        ):
            return found
        found.discard()
        return None

    def _drop_rehearsals(self) -> None:
        """Rehearsals no comparison used (another gate was asked for): their copies go."""
        for rehearsal in self._rehearsals.values():
            rehearsal.discard()
        self._rehearsals.clear()

    def check(self, gate: Gate, expected: Artifact, obtained: Artifact) -> None:
        """After a comparison: its (kind, gate)'s canary, run once per session; raises the
        :class:`~..errors.CanaryError` of a gate that cannot fail, here and at every later use."""
        try:
            record = self.observe(gate, expected, obtained)
        finally:
            self._drop_rehearsals()
        if record is not None:
            self.fresh.append(record)
        error = self.error_for(gate, expected)
        if error is not None:
            raise error

    def take(self, test_id: str | None = None) -> list[CanaryRecord]:
        """The records made since the last call (for the receipt of the test that made them,
        ``test_id``, which each record then names)."""
        self._drop_rehearsals()  # one that no comparison used, in the test that started it
        taken, self.fresh = self.fresh, []
        return taken if test_id is None else [replace(r, test_id=test_id) for r in taken]

    def observe(self, gate: Gate, expected: Artifact, obtained: Artifact) -> CanaryRecord | None:
        """After a comparison: the canary of its (kind, gate) if none ran yet (None when one
        did, or when neither side is a file to copy). Raises nothing: see :meth:`error_for`."""
        kind = expected.kind
        if obtained.kind != kind and gate.name != "bytes":
            return None  # the registry judged the kinds, not the comparator
        key = (kind, gate.spec)
        if key in self.records:
            return None
        source = _source(expected, obtained)
        if self.skip:
            record = CanaryRecord(kind, gate.spec, expected.name, "skipped", reason=SKIP_FLAG)
        elif source is None:
            return None
        else:
            record = self.run(kind, gate, source)
            golden = _source(expected, expected)
            if record.status == "unavailable" and golden is not None and golden is not source:
                # The output has nothing to change (it lost every frame): the golden's copy.
                record = self.run(kind, gate, golden)
        self.records[key] = record
        return record

    def error_for(self, gate: Gate, expected: Artifact) -> CanaryError | None:
        """The error of this comparison's (kind, gate), when its canary showed it cannot fail."""
        record = self.records.get((expected.kind, gate.spec))
        return record.error() if record is not None and record.failed else None

    def run(self, kind: str, gate: Gate, artifact: Artifact) -> CanaryRecord:
        """Perturb a copy of ``artifact`` (a file) and judge it under ``gate``, now."""
        started = time.perf_counter()
        record = CanaryRecord(kind, gate.spec, artifact.name, "unavailable")
        rehearsal = self._rehearsed((kind, gate.spec), artifact)
        with contextlib.ExitStack() as stack:
            if rehearsal is not None:
                stack.callback(shutil.rmtree, rehearsal.folder, ignore_errors=True)
                tmp = str(rehearsal.folder)
            else:
                tmp = stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="lossless-canary-", dir=self._workdir())
                )
            try:
                if rehearsal is not None:
                    judged = rehearsal.future.result()  # or its exception, as if judged now
                    record = replace(
                        record,
                        unit=judged.unit,
                        verdict=judged.verdict,
                        first_mismatch=judged.first_mismatch,
                        located=judged.located,
                        status=judged.status,
                    )
                else:
                    plan = self._plan(kind, gate, artifact, Path(tmp))
                    record = replace(record, unit=plan.unit)  # kept if judging fails
                    record = self._judge(record, plan, gate, artifact)
            except Unfailable as exc:
                record = replace(record, status="cannot-fail", reason=str(exc))
            except Unavailable as exc:
                record = replace(record, reason=str(exc))
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the host's problem, named
                    suffix = artifact.path.suffix if artifact.path else ""
                    where = exc.filename2 or exc.filename or Path(tmp) / f"changed{suffix}"
                    raise LosslessError(f"canary: {faults.write_failed(exc, where)}") from None
                record = replace(record, reason=f"the copy could not be made or judged: {exc}")
            except (LosslessError, ValueError) as exc:
                record = replace(record, reason=f"the copy could not be made or judged: {exc}")
        return replace(record, seconds=round(time.perf_counter() - started, 4))

    def _judge(
        self, record: CanaryRecord, plan: Plan, gate: Gate, artifact: Artifact
    ) -> CanaryRecord:
        """What the comparator said of the copy ``plan`` made, and of each of its further
        copies (``plan.also``), in ``record``: proved only when every one FAILED at its unit;
        else the record of the first that did not, naming its unit."""
        judged = self._judge_one(record, plan, gate, artifact)
        units = [judged.unit or plan.unit]
        for more in plan.also:
            if judged.status != "proved":
                return judged
            other = self._judge_one(replace(record, unit=more.unit), more, gate, artifact)
            if other.status != "proved":
                return other
            units.append(more.unit)
        return replace(judged, unit="; and ".join(units))

    def _judge_one(
        self, record: CanaryRecord, plan: Plan, gate: Gate, artifact: Artifact
    ) -> CanaryRecord:
        """What the comparator said of the copy ``plan`` made, in ``record``."""
        builtin = self.registry.builtin(record.kind) is not None
        expected = artifact
        if plan.expected is not None:
            made = plan.expected_fingerprint
            fingerprint = (
                made.to_json()
                if made is not None
                else self.registry.fingerprint(record.kind, plan.expected)
            )
            kept = None if plan.digests_suffice else plan.expected
            expected = Artifact(artifact.name, record.kind, fingerprint, kept)
        try:
            if plan.obtained_fingerprint is not None:
                obtained = Artifact(
                    artifact.name, plan.kind, plan.obtained_fingerprint.to_json(), plan.obtained
                )
            else:
                obtained = self.registry.artifact(artifact.name, plan.obtained, plan.kind)
        except ArtifactError as exc:
            if builtin:  # our own copies are sound: a refusal is the canary's problem
                raise Unavailable(f"the changed copy cannot be fingerprinted: {exc}") from None
            return replace(
                record,
                status="proved",
                verdict="FAIL",
                first_mismatch=f"its fingerprint refused the changed copy: {exc}",
            )
        result: GateResult = self.registry.compare_only(gate, expected, obtained)
        located = plan.located(result.location, result.first_mismatch)
        return replace(
            record,
            verdict=result.verdict.value,
            first_mismatch=result.first_mismatch
            or ("; ".join(result.metadata_diffs) if result.metadata_diffs else None),
            located=located,
            status="proved" if not result.passed and located is not False else "cannot-fail",
        )

    def _plan(self, kind: str, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        """A perturbed copy, made by the kind: a built-in kind's own :meth:`plan`, a plugin
        kind's ``pytest_lossless_perturb`` hook, else one flipped byte. A built-in kind is
        always perturbed by its own code: a hook (a conftest's too) never replaces it, or it
        could make every canary "prove" with a copy of its choice."""
        assert artifact.path is not None
        path = artifact.path
        out = folder / f"changed{path.suffix}"
        faults.write("write-canary-temp", out)
        own = self.registry.builtin(kind)
        if own is None:
            hook = getattr(self.registry.hook, "pytest_lossless_perturb", None)  # a foreign relay
            described = None if hook is None else hook(kind=kind, gate=gate, path=path, out=out)
            if described is not None:
                if not out.is_file():
                    raise Unavailable(
                        f"pytest_lossless_perturb for kind {kind!r} wrote no {out.name}"
                    )
                return Plan(obtained=out, kind=kind, unit=str(described))
            # A plugin's comparer says FAIL in its own words: where is not checked.
            return replace(flip_byte(path, out, kind), location={}, prefix=None)
        if gate.name == "bytes" or kind == "bytes":
            # Built-in kinds' bytes gate reads only the file's digests and bytes: the copy is
            # fingerprinted as bytes (a flipped byte may leave a container undecodable).
            return flip_byte(path, out, "bytes")
        made: Plan = own.plan(gate, artifact, folder)
        return made


@dataclass
class _Rehearsal:
    """A canary judged in the background on copies of ``artifact``, made in ``folder``."""

    artifact: Artifact
    folder: Path
    future: Future[CanaryRecord]

    def discard(self) -> None:
        """Wait for the copies (a thread writing into a removed folder would fail noisily) and
        remove them."""
        with contextlib.suppress(BaseException):
            self.future.exception()
        shutil.rmtree(self.folder, ignore_errors=True)


def _source(expected: Artifact, obtained: Artifact) -> Artifact | None:
    """The real artifact to copy: the obtained one, else the expected one, as a file."""
    for artifact in (obtained, expected):
        if artifact.kind == expected.kind and artifact.path is not None and artifact.path.is_file():
            return artifact
    return None


def summary_lines(records: list[JsonObject]) -> list[str]:
    """The session summary's canary lines: one per (kind, gate), however many workers ran it
    (``records``: as the receipts hold them)."""
    seen: dict[tuple[str, str], list[CanaryRecord]] = {}
    for record in map(CanaryRecord.from_json, records):
        seen.setdefault((record.kind, record.gate), []).append(record)
    if not seen:
        return []
    if all(r.status == "skipped" for rs in seen.values() for r in rs):
        gates = ", ".join(f"{k}/{g}" for k, g in sorted(seen))
        return [f"canary skipped ({SKIP_FLAG}): {gates} not proven able to fail"]
    lines = []
    for _key, found in sorted(seen.items()):
        worst = next((r for r in found if r.status == "cannot-fail"), found[0])
        text = worst.line()
        lines.append(text + (f" [once on each of {len(found)} workers]" if len(found) > 1 else ""))
    return ["canary: " + lines[0], *("        " + line for line in lines[1:])]


def check_records(block: Any, receipt: Any) -> list[str]:
    """``verify``'s check of a receipt's ``canary`` block: its shape, each status against the
    comparator's recorded verdict, and a gate that cannot fail against the test's outcome."""
    covers = (receipt.get("integrity") or {}).get("covers") or []
    if block is None:
        return (
            ["canary: integrity covers a canary block that is missing"]
            if "canary" in covers
            else []
        )
    if not isinstance(block, list):
        return ["canary is not a list"]
    found = []
    for i, entry in enumerate(block):
        where = f"canary[{i}]"
        if not isinstance(entry, dict):
            found.append(f"{where} is not a mapping")
            continue
        missing = [
            k for k in ("kind", "gate", "artifact", "status") if not isinstance(entry.get(k), str)
        ]
        if missing:
            found.append(f"{where} lacks {', '.join(missing)}")
            continue
        status, verdict, located = entry["status"], entry.get("verdict"), entry.get("located")
        where += f" {entry['kind']}/{entry['gate']}"
        if status not in STATUSES:
            found.append(f"{where}: unknown status {status!r} (one of {', '.join(STATUSES)})")
        elif status == "proved" and (verdict != "FAIL" or located is False):
            found.append(
                f"{where}: recorded proved, but the comparator said {verdict} "
                f"(named the changed unit: {located})"
            )
        elif status == "cannot-fail":
            if verdict == "FAIL" and located is not False:
                found.append(f"{where}: recorded cannot-fail, but the comparator said FAIL there")
            if (receipt.get("outcome") or {}).get("call") == "passed":
                found.append(f"{where}: a gate that cannot fail, yet the test passed")
        elif status == "skipped" and entry.get("reason") != SKIP_FLAG:
            found.append(f"{where}: skipped without {SKIP_FLAG}")
        seconds = entry.get("seconds")
        if seconds is not None and (not isinstance(seconds, (int, float)) or seconds < 0):
            found.append(f"{where}: seconds={seconds!r} is not a duration")
    return found
