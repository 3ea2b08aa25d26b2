"""One resolver for every setting: marker > command line > environment > ini > default.

The plugin declares its options from :data:`OPTIONS`; :func:`resolve` turns the
raw values into a frozen :class:`Settings`. A bad value raises
:class:`~pytest_lossless.errors.ConfigError` naming where it came from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .core.redact import parse_patterns
from .core.sharding import Shard, parse_shard
from .errors import ConfigError

BACKENDS = ("auto", "npu", "cuda", "cpu")
#: No host has more devices than this; a larger range is a typo, not a pool.
MAX_DEVICES = 4096
BUSY_POLICIES = ("wait", "fail")
#: What a session does with a process an earlier allocation left running on a device it wants.
ORPHAN_POLICIES = ("wait", "kill")
#: Whether a progress line is shown during long model runs and server startups.
PROGRESS_MODES = ("auto", "off", "always")

#: Environment variables that change numerics; recorded in every receipt when present.
DETERMINISM_KNOBS = (
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    "HCCL_DETERMINISTIC",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "VLLM_BATCH_INVARIANT",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TORCH_DETERMINISTIC",
    "CUDA_LAUNCH_BLOCKING",
    "ASCEND_LAUNCH_BLOCKING",
)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected a boolean (true/false, 1/0, yes/no)")


def _parse_choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value

    return parse


def _parse_seconds(text: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min|h)?\s*", text)
    if not match:
        raise ValueError("expected a duration such as 30, 2.5s, 10m or 1h")
    number = float(match.group(1))
    scale = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}
    return number * scale[match.group(2)]


def _parse_positive_seconds(text: str) -> float:
    value = _parse_seconds(text)
    if value <= 0:
        raise ValueError("must be more than 0 seconds")
    return value


def _parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]i?[bB]?|[bB])?\s*", text)
    if not match:
        raise ValueError("expected a size such as 1048576, 512KiB or 1MiB")
    number = float(match.group(1))
    unit = (match.group(2) or "b").lower().rstrip("b").rstrip("i")
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]
    return int(number * scale)


def _parse_positive_size(text: str) -> int:
    value = _parse_size(text)
    if value < 1:
        raise ValueError("must be at least 1 byte")
    return value


def _parse_positive_int(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("expected a whole number") from None
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    return parse


def parse_device_list(text: str) -> tuple[str, ...]:
    """``"0,1,2"``, ``"0-3"`` or ``"GPU-ab12,GPU-cd34"`` into device ids, in the order given."""
    ids: list[str] = []
    for part in (p.strip() for p in text.replace(" ", ",").split(",")):
        if not part:
            continue
        span = re.fullmatch(r"(\d+)-(\d+)", part)
        if span:
            low, high = int(span.group(1)), int(span.group(2))
            if high < low:
                raise ValueError(f"range {part!r} runs backwards")
            if high - low >= MAX_DEVICES:
                raise ValueError(f"range {part!r} names more than {MAX_DEVICES} devices")
            ids.extend(str(i) for i in range(low, high + 1))
        elif re.fullmatch(r"\d+-[^-]*", part):
            raise ValueError(f"{part!r} looks like a range but is not one (write 0-3)")
        else:
            ids.append(part)
    if len(set(ids)) != len(ids):
        raise ValueError("a device id is listed twice")
    return tuple(ids)


def _parse_names(text: str) -> tuple[str, ...]:
    return tuple(n for n in re.split(r"[\s,]+", text.strip()) if n)


@dataclass(frozen=True)
class OptionSpec:
    """One setting: its command-line flag, ini key, environment variable and parser."""

    dest: str
    flag: str
    ini: str
    env: str | None
    default: str | None
    parse: Callable[[str], Any]
    help: str
    is_flag: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    #: A second flag of the same setting, kept only where no other plugin defines it
    #: (``--update-goldens``: pytest-golden has its own).
    alias: str | None = None


def ini_type(spec: OptionSpec) -> Literal["bool"] | None:
    """The type pytest is told of the ini key (``--help`` shows it): ``bool`` for a boolean
    setting, else pytest's default (a string); the resolver still parses every value."""
    return "bool" if spec.parse is _parse_bool else None


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "lossless",
        "--lossless",
        "lossless_enabled",
        "PYTEST_LOSSLESS",
        "false",
        _parse_bool,
        "run the lossless gates (tests marked lossless are skipped without it)",
        is_flag=True,
    ),
    OptionSpec(
        "update_goldens",
        "--lossless-update-goldens",
        "lossless_update_goldens",
        None,
        "false",
        _parse_bool,
        "write goldens instead of comparing; report what changed (also --update-goldens, "
        "where no other plugin defines it)",
        is_flag=True,
        alias="--update-goldens",
    ),
    OptionSpec(
        "receipts_keep",
        "--lossless-receipts-keep",
        "lossless_receipts_keep",
        None,
        "10",
        _parse_positive_int(0),
        "keep the last N session folders under the receipts folder (default 10; 0 keeps "
        "all): older finished sessions of this host are removed at the session's end, never "
        "a signed one, and never under --lossless-shard or a scheduler (SLURM_JOB_ID)",
        metavar="N",
    ),
    OptionSpec(
        "goldens",
        "--lossless-goldens",
        "lossless_goldens",
        None,
        "goldens",
        str,
        "goldens folder, relative to the rootdir (default: goldens)",
        metavar="DIR",
    ),
    OptionSpec(
        "backend",
        "--lossless-backend",
        "lossless_backend",
        "PYTEST_LOSSLESS_BACKEND",
        "auto",
        _parse_choice(BACKENDS),
        "where device tests run: auto finds NPUs, then CUDA GPUs; cpu emulates slots",
        choices=BACKENDS,
    ),
    OptionSpec(
        "devices",
        "--lossless-devices",
        "lossless_devices",
        "PYTEST_LOSSLESS_DEVICES",
        None,
        parse_device_list,
        "device ids tests may take, e.g. 0,1,2,3 or 0-3 (default: all discovered)",
        metavar="LIST",
    ),
    OptionSpec(
        "receipts",
        "--lossless-receipts",
        "lossless_receipts",
        "PYTEST_LOSSLESS_RECEIPTS",
        "lossless-receipts",
        str,
        "folder for receipts, relative to the rootdir",
        metavar="DIR",
    ),
    OptionSpec(
        "lock_dir",
        "--lossless-lock-dir",
        "lossless_lock_dir",
        "PYTEST_LOSSLESS_LOCK_DIR",
        None,
        str,
        "host-wide folder of device lock files (default: /var/tmp/pytest-lossless-locks, "
        "one per host whatever TMPDIR says)",
        metavar="DIR",
    ),
    OptionSpec(
        "lock_timeout",
        "--lossless-lock-timeout",
        "lossless_lock_timeout",
        "PYTEST_LOSSLESS_LOCK_TIMEOUT",
        "600",
        _parse_seconds,
        "seconds to wait for a device allocation (default: 600)",
        metavar="SECONDS",
    ),
    OptionSpec(
        "busy",
        "--lossless-busy",
        "lossless_busy",
        None,
        "wait",
        _parse_choice(BUSY_POLICIES),
        "a device used by a foreign process: wait for it, or fail at once",
        choices=BUSY_POLICIES,
    ),
    OptionSpec(
        "orphans",
        "--lossless-orphans",
        "lossless_orphans",
        "PYTEST_LOSSLESS_ORPHANS",
        "wait",
        _parse_choice(ORPHAN_POLICIES),
        "a process an earlier allocation left running on a wanted device (its pytest was "
        "killed, say): wait for it (within the lock timeout), or kill it (SIGTERM to its "
        "process group, then SIGKILL)",
        choices=ORPHAN_POLICIES,
    ),
    OptionSpec(
        "control_runs",
        "--lossless-control-runs",
        "lossless_control_runs",
        None,
        "2",
        _parse_positive_int(2),
        "control runs before a candidate is judged (default: 2)",
        metavar="N",
    ),
    OptionSpec(
        "repeat_producers",
        "--lossless-repeat-producers",
        "lossless_repeat_producers",
        None,
        "false",
        _parse_bool,
        "under --lossless, run each producer given to golden.check or golden.check_all as "
        "many times as --lossless-control-runs says (as --update-goldens does) before comparing "
        "its first run with the golden: runs that differ are INCONCLUSIVE, never a FAIL "
        "(what bisect relies on)",
        is_flag=True,
    ),
    OptionSpec(
        "digest_above",
        "--lossless-digest-above",
        "lossless_digest_above",
        None,
        "1MiB",
        _parse_size,
        "goldens larger than this are kept as digests only (default: 1MiB)",
        metavar="SIZE",
    ),
    OptionSpec(
        "speed_pairs",
        "--lossless-speed-pairs",
        "lossless_speed_pairs",
        None,
        "8",
        _parse_positive_int(2),
        "ABBA blocks a speed gate runs at most (default: 8)",
        metavar="N",
    ),
    OptionSpec(
        "speed_seed",
        "--lossless-speed-seed",
        "lossless_speed_seed",
        None,
        None,
        _parse_positive_int(0),
        "seed of the A/B order (default: random, recorded)",
        metavar="N",
    ),
    OptionSpec(
        "run_timeout",
        "--lossless-run-timeout",
        "lossless_run_timeout",
        None,
        "900",
        _parse_seconds,
        "default timeout of one model run (default: 900)",
        metavar="SECONDS",
    ),
    OptionSpec(
        "ffmpeg_timeout",
        "--lossless-ffmpeg-timeout",
        "lossless_ffmpeg_timeout",
        "PYTEST_LOSSLESS_FFMPEG_TIMEOUT",
        "600",
        _parse_positive_seconds,
        "seconds one ffmpeg call may run before it is killed (default: 600)",
        metavar="SECONDS",
    ),
    OptionSpec(
        "decode_limit",
        "--lossless-decode-limit",
        "lossless_decode_limit",
        "PYTEST_LOSSLESS_DECODE_LIMIT",
        "64GiB",
        _parse_positive_size,
        "decoded data one artifact may declare or produce (default: 64GiB)",
        metavar="SIZE",
    ),
    OptionSpec(
        "determinism_env",
        "--lossless-determinism-env",
        "lossless_determinism_env",
        None,
        "",
        _parse_names,
        "more environment variables to record as determinism knobs",
        metavar="NAMES",
    ),
    OptionSpec(
        "redact",
        "--lossless-redact",
        "lossless_redact",
        "PYTEST_LOSSLESS_REDACT",
        "",
        parse_patterns,
        "more names whose values are secret (globs such as *_DSN): their values in argv, "
        "environment overrides and the stored diff are replaced by a hash",
        metavar="PATTERNS",
    ),
    OptionSpec(
        "store",
        "--lossless-store",
        "lossless_store",
        "PYTEST_LOSSLESS_STORE",
        None,
        str,
        "content-addressed store (a folder, e.g. shared storage): --update-goldens also keeps "
        "every golden there whole by SHA-256, and the report draws digest-only goldens from it",
        metavar="DIR",
    ),
    OptionSpec(
        "export",
        "--lossless-export",
        "lossless_export",
        None,
        None,
        str,
        "copy the obtained artifacts of every failing or new check into DIR with export.json, "
        "for a CI upload; accept them with python -m pytest_lossless accept DIR",
        metavar="DIR",
    ),
    OptionSpec(
        "no_canary",
        "--lossless-no-canary",
        "lossless_no_canary",
        None,
        "false",
        _parse_bool,
        "skip the canary: by default, once per session for each kind and gate in use, one unit "
        "of a copy of a real artifact is changed and the gate must say FAIL (it is recorded "
        "as skipped)",
        is_flag=True,
    ),
    OptionSpec(
        "require_published",
        "--lossless-require-published",
        "lossless_require_published",
        None,
        "false",
        _parse_bool,
        "for CI: a dirty rootdir, or a revision in no remote-tracking branch of a non-local "
        "remote, is a usage error at session start; so is a dirty or unpublished tree named in "
        "model_run(sources=...) when its run starts (nothing is fetched)",
        is_flag=True,
    ),
    OptionSpec(
        "progress",
        "--lossless-progress",
        "lossless_progress",
        None,
        "auto",
        _parse_choice(PROGRESS_MODES),
        "a progress line during long model runs and server startups (stage, elapsed, "
        "requests): auto redraws it on a terminal and writes a line after 10 s, then every "
        "30 s, to a log; never under -qq or on xdist workers; always also under -qq; off",
        choices=PROGRESS_MODES,
    ),
    OptionSpec(
        "shard",
        "--lossless-shard",
        "lossless_shard",
        "PYTEST_LOSSLESS_SHARD",
        None,
        parse_shard,
        "run shard I of N (numbered from 0) of the selected tests, a stable split by test id; "
        "in a Slurm array task, by default, the task's position in the array of its count",
        metavar="I/N",
    ),
)


@dataclass(frozen=True)
class Settings:
    """Every resolved setting of a session; ``sources`` says where each value came from."""

    lossless: bool
    update_goldens: bool
    goldens: Path
    backend: str
    devices: tuple[str, ...] | None
    receipts: Path
    #: --lossless-receipts-keep: how many session folders to keep (0: all).
    receipts_keep: int
    lock_dir: Path
    lock_timeout: float
    busy: str
    orphans: str
    control_runs: int
    #: --lossless-repeat-producers: compare mode runs a golden's producer control_runs times.
    repeat_producers: bool
    digest_above: int
    speed_pairs: int
    speed_seed: int | None
    run_timeout: float
    ffmpeg_timeout: float
    decode_limit: int
    determinism_env: tuple[str, ...]
    redact: tuple[str, ...]
    store: Path | None
    export: Path | None
    #: --lossless-no-canary: the canary (:mod:`.kinds.canary`) is skipped, and says so.
    no_canary: bool
    #: --lossless-require-published: a dirty or unpublished source tree is an error.
    require_published: bool
    #: --lossless-progress: auto, off or always (:mod:`.plugin.progress`).
    progress: str
    #: --lossless-shard: the part of the selection this session runs (:mod:`.plugin.shard`).
    shard: Shard | None
    rootdir: Path
    sources: Mapping[str, str]

    @property
    def written_folders(self) -> tuple[Path, ...]:
        """What a session writes into (receipts, export, store): never part of the source tree's
        state, or a session inside a clean checkout would call it dirty by its own output."""
        return tuple(p for p in (self.receipts, self.export, self.store) if p is not None)

    @property
    def determinism_knobs(self) -> tuple[str, ...]:
        return DETERMINISM_KNOBS + tuple(
            n for n in self.determinism_env if n not in DETERMINISM_KNOBS
        )


#: Where the default lock folder may live, first existing one wins: host-wide folders that no
#: environment variable moves (``TMPDIR`` is per job under many CI systems and schedulers).
LOCK_DIR_PARENTS = ("/var/tmp", "/dev/shm", "/tmp")
LOCK_DIR_NAME = "pytest-lossless-locks"


def default_lock_dir(parents: Sequence[str] = LOCK_DIR_PARENTS) -> Path:
    """Host-wide (not per run, not per ``TMPDIR``): every pytest process on this machine must
    see the same locks, whatever its environment says. ``/var/tmp`` first (sticky and
    root-owned on every Linux, and not a per-job mount), else ``/dev/shm``, else ``/tmp``;
    the folder itself is checked like any lock folder (:class:`~.devices.locks.LockDir`)."""
    for parent in parents:
        if os.path.isdir(parent) and not os.path.islink(parent):
            return Path(parent) / LOCK_DIR_NAME
    return Path(parents[-1]) / LOCK_DIR_NAME


def resolve(
    cli: Mapping[str, Any],
    ini: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    rootdir: Path,
) -> Settings:
    """Resolve each option: command line, then environment, then ini, then default.

    ``cli`` maps ``dest`` to the parsed flag value (``None`` or ``False`` when absent);
    ``ini`` maps ``dest`` to the raw ini string (``None`` or empty when unset).
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in OPTIONS:
        raw: Any = None
        source = "default"
        cli_value = cli.get(spec.dest)
        if cli_value not in (None, False, ""):
            raw, source = cli_value, spec.flag
        elif spec.env and env.get(spec.env, "") != "":
            raw, source = env[spec.env], f"environment {spec.env}"
        elif ini.get(spec.dest) not in (None, "", []):
            raw, source = ini[spec.dest], f"ini {spec.ini}"
        else:
            raw = spec.default
        if raw is None:
            values[spec.dest] = None
        elif isinstance(raw, bool):
            values[spec.dest] = raw
        else:
            text = " ".join(raw) if isinstance(raw, list) else str(raw)
            try:
                values[spec.dest] = spec.parse(text)
            except ValueError as exc:
                raise ConfigError(source, text, str(exc)) from None
        sources[spec.dest] = source
    root = Path(rootdir)
    values["goldens"] = root / values["goldens"]
    values["receipts"] = root / values["receipts"]
    values["lock_dir"] = Path(values["lock_dir"]) if values["lock_dir"] else default_lock_dir()
    for dest in ("store", "export"):
        values[dest] = root / values[dest] if values[dest] else None
    return Settings(**values, rootdir=root, sources=sources)


def marker_device_count(args: tuple[Any, ...], kwargs: Mapping[str, Any], marker: str) -> int:
    """The N of ``@pytest.mark.npu(devices=N)``; marker values override every other source."""
    unknown = set(kwargs) - {"devices"}
    if unknown:
        raise ConfigError(f"marker {marker}", sorted(unknown), "unknown argument; use devices=N")
    if args and "devices" in kwargs:
        raise ConfigError(f"marker {marker}", args, "give devices once")
    value = kwargs.get("devices", args[0] if args else 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"marker {marker}(devices=...)", value, "must be a whole number >= 1")
    return value
