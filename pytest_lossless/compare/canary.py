"""The built-in canary: a gate must be seen to fail before its PASS means anything.

Once per session for each (kind, gate) in use, :class:`Canary` takes the real artifact a
comparison was just made on, writes a copy with exactly one unit changed
(:mod:`.perturb`: one byte of one decoded video frame, one PCM sample by one LSB, the last bit
of one tensor element, one byte of any other file; for a lossy gate a change just beyond its
bound), and has the same comparator, through the same registry, judge the copy. It must say
FAIL and name that unit; otherwise the gate cannot fail, which :class:`~..errors.CanaryError`
reports. A kind a plugin adds is perturbed by its ``pytest_lossless_perturb`` hook, or by one
flipped byte of the file; its compare must then say FAIL.

Every attempt is a :class:`CanaryRecord` for the receipt of the test it ran in.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.artifact import Artifact
from ..errors import ArtifactError, CanaryError, LosslessError
from ..kinds.registry import BUILTIN_KIND_NAMES, KindRegistry, media_limits
from . import perturb
from .perturb import Plan, Unavailable, Unfailable

if TYPE_CHECKING:
    from ..gates import Gate, GateResult

#: What became of a canary: the gate failed at the changed unit (``proved``); it said PASS,
#: or did not name the unit, or no change can go beyond it (``cannot-fail``: an error); no
#: copy could be made (``unavailable``, with the reason); ``--lossless-no-canary`` (``skipped``).
STATUSES = ("proved", "cannot-fail", "unavailable", "skipped")
#: The option that skips the canary, named in messages and records.
SKIP_FLAG = "--lossless-no-canary"


@dataclass
class CanaryRecord:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

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
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="lossless-canary-", dir=self.workdir) as tmp:
            try:
                self._judge(record, gate, artifact, Path(tmp))
            except Unfailable as exc:
                record.status, record.reason = "cannot-fail", str(exc)
            except Unavailable as exc:
                record.reason = str(exc)
            except (LosslessError, OSError, ValueError) as exc:
                record.reason = f"the copy could not be made or judged: {exc}"
        record.seconds = round(time.perf_counter() - started, 4)
        return record

    def _judge(self, record: CanaryRecord, gate: Gate, artifact: Artifact, folder: Path) -> None:
        assert artifact.path is not None
        plan = self._plan(record.kind, gate, artifact, folder)
        record.unit = plan.unit
        builtin = record.kind in BUILTIN_KIND_NAMES
        expected = artifact
        if plan.expected is not None:
            fingerprint = plan.expected_fingerprint
            if fingerprint is None:
                fingerprint = self.registry.fingerprint(record.kind, plan.expected)
            expected = Artifact(artifact.name, record.kind, fingerprint, plan.expected)
        try:
            obtained = self.registry.artifact(artifact.name, plan.obtained, plan.kind)
        except ArtifactError as exc:
            if builtin:  # our own copies are sound: a refusal is the canary's problem
                raise Unavailable(f"the changed copy cannot be fingerprinted: {exc}") from None
            record.status, record.verdict = "proved", "FAIL"
            record.first_mismatch = f"its fingerprint refused the changed copy: {exc}"
            return
        result: GateResult = self.registry.compare_only(gate, expected, obtained)
        record.verdict = str(result.verdict)
        record.first_mismatch = result.first_mismatch or (
            "; ".join(result.metadata_diffs) if result.metadata_diffs else None
        )
        record.located = plan.located(result.location, result.first_mismatch)
        proved = not result.passed and record.located is not False
        record.status = "proved" if proved else "cannot-fail"

    def _plan(self, kind: str, gate: Gate, artifact: Artifact, folder: Path) -> Plan:
        """A perturbed copy: a plugin kind's own hook first, then the built-in perturbation.
        A built-in kind is always perturbed by the built-in code: a hook (a conftest's too)
        never replaces it, or it could make every canary "prove" with a copy of its choice."""
        assert artifact.path is not None
        path = artifact.path
        out = folder / f"changed{path.suffix}"
        hook = getattr(self.registry.hook, "pytest_lossless_perturb", None)  # a foreign relay
        if kind in BUILTIN_KIND_NAMES:
            hook = None
        described = None if hook is None else hook(kind=kind, gate=gate, path=path, out=out)
        if described is not None:
            if not out.is_file():
                raise Unavailable(f"pytest_lossless_perturb for kind {kind!r} wrote no {out.name}")
            return Plan(obtained=out, kind=kind, unit=str(described))
        limits = media_limits(self.registry.settings)
        builtin = kind in BUILTIN_KIND_NAMES
        if gate.name == "bytes" or not builtin or kind == "bytes":
            # Built-in kinds' bytes gate reads only the file's digests and bytes: the copy is
            # fingerprinted as bytes (a flipped byte may leave a container undecodable).
            plan = perturb.flip_byte(path, out, "bytes" if builtin else kind)
            if not builtin:  # a plugin's comparer says FAIL in its own words: not checked
                plan.location, plan.prefix = {}, None
            return plan
        if kind == "tensor":
            return perturb.perturb_tensor(path, out, gate, limits)
        if kind == "audio":
            return perturb.perturb_audio(path, out, gate, limits)
        return self._plan_video(gate, artifact, folder, limits)

    def _plan_video(self, gate: Gate, artifact: Artifact, folder: Path, limits: Any) -> Plan:
        """Three decoded frames from mid-clip, written losslessly twice: as decoded, and with one
        byte (one sample, for a tolerance) of the middle one changed. The copy must decode to
        the original's frame digests, or the next codec is tried."""
        from .. import media

        assert artifact.path is not None
        stream = perturb.video_stream(artifact.fingerprint)
        frames = stream["frames"]
        start, stop, changed = perturb.video_window(len(frames))
        decoded = media.load_video_frames(
            artifact.path,
            stream_index=stream.get("index"),
            indices=range(start, stop),
            frame_bytes=stream.get("frame_bytes"),
            limits=limits,
        )
        window = [decoded[n].tobytes() for n in range(start, stop) if n in decoded]
        if len(window) != stop - start:
            raise Unavailable(f"frames {start} to {stop - 1} could not be decoded again")
        at = changed - start
        new_frame, what = perturb.change_frame(window[at], stream, gate)
        wanted = [f["sha256"] for f in frames[start:stop]]
        problems = []
        for codec in perturb.VIDEO_COPY_CODECS:
            same, other = folder / f"same.{codec[0]}.{codec[1]}", folder / f"changed.{codec[1]}"
            try:
                perturb.write_frames(window, stream, same, codec, limits)
                copy = self.registry.fingerprint("video", same)
            except LosslessError as exc:
                problems.append(f"{codec[0]}: {exc}")
                continue
            got = [f["sha256"] for f in perturb.video_stream(copy)["frames"]]
            if got != wanted:
                problems.append(f"{codec[0]} does not decode to the same frames")
                continue
            perturb.write_frames(
                [*window[:at], new_frame, *window[at + 1 :]], stream, other, codec, limits
            )
            return Plan(
                obtained=other,
                expected=same,
                expected_fingerprint=copy,
                kind="video",
                unit=f"frame {changed}: {what} (a {codec[0]} copy of frames {start}-{stop - 1})",
                location={"frame": at},
            )
        raise Unavailable(
            f"no lossless copy of {stream.get('pix_fmt')} frames: " + "; ".join(problems)
        )


def _source(expected: Artifact, obtained: Artifact) -> Artifact | None:
    """The real artifact to copy: the obtained one, else the expected one, as a file."""
    for artifact in (obtained, expected):
        if artifact.kind == expected.kind and artifact.path is not None and artifact.path.is_file():
            return artifact
    return None


def summary_lines(records: list[dict[str, Any]]) -> list[str]:
    """The session summary's canary lines: one per (kind, gate), however many workers ran it."""
    seen: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        seen.setdefault((str(record.get("kind")), str(record.get("gate"))), []).append(record)
    if not seen:
        return []
    if all(r.get("status") == "skipped" for rs in seen.values() for r in rs):
        gates = ", ".join(f"{k}/{g}" for k, g in sorted(seen))
        return [f"canary skipped ({SKIP_FLAG}): {gates} not proven able to fail"]
    lines = []
    for _key, found in sorted(seen.items()):
        worst = next((r for r in found if r.get("status") == "cannot-fail"), found[0])
        known = {f: worst.get(f) for f in CanaryRecord.__dataclass_fields__}
        text = CanaryRecord(**known).line()  # type: ignore[arg-type]
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
