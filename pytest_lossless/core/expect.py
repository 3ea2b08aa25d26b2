"""What a run was asked for: the media a request should produce (``Media``).

An output truncated in every run is identical to itself, so equality alone cannot see it; the
request can. ``Media(seconds=5, fps=24, sample_rate=48000)`` states the rule: frames =
round(seconds x fps); audio samples = seconds x sample_rate, or, with ``audio_quantum``, the
duration rounded up to a whole number of quanta first (a model that renders audio at a 40 Hz
latent rate gives ``audio_quantum=1/40``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..errors import ConfigError
from .records import Record


def _fraction(value: float | Fraction | str | None, what: str) -> Fraction | None:
    if value is None:
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"Media({what})", value, "expected a finite number above 0")
    try:
        number = Fraction(value).limit_denominator(1_000_000)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        raise ConfigError(f"Media({what})", value, "expected a number") from None
    if number <= 0:
        raise ConfigError(f"Media({what})", value, "expected a number above 0")
    return number


@dataclass(frozen=True)
class Media(Record):
    """The media a run was asked for; ``None`` fields are not checked (``fps=None``: the
    stream's own frame rate is taken). :meth:`to_dict` is its JSON (in ``plan.json``), an
    ``audio_quantum`` given as a fraction written exactly (``"1/40"``)."""

    seconds: float
    fps: float | None = None
    sample_rate: int | None = None
    channels: int | None = None
    audio_quantum: float | Fraction | None = None

    def __post_init__(self) -> None:
        for name in ("seconds", "fps"):  # a number, not its text ("5" is a mistake here)
            if isinstance(getattr(self, name), str):
                raise ConfigError(f"Media({name})", getattr(self, name), "expected a number")
        if self.seconds is None:  # the one value every request states (not an assert: -O)
            raise ConfigError("Media(seconds)", None, "expected a number above 0")
        _fraction(self.seconds, "seconds")
        _fraction(self.fps, "fps")
        _fraction(self.audio_quantum, "audio_quantum")
        for name in ("sample_rate", "channels"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):  # fmt: skip
                raise ConfigError(f"Media({name})", value, "expected a whole number above 0")

    def frames(self, fps: float | Fraction | str | None = None) -> int | None:
        """round(seconds x fps): the frame count the request asks for (None without a rate)."""
        rate = _fraction(self.fps if self.fps is not None else fps, "fps")
        if rate is None:
            return None
        seconds = _fraction(self.seconds, "seconds")
        assert seconds is not None
        return round(seconds * rate)

    def audio_seconds(self) -> Fraction:
        """The audio duration asked for: ``seconds``, rounded up to whole ``audio_quantum``s."""
        seconds = _fraction(self.seconds, "seconds")
        assert seconds is not None
        quantum = _fraction(self.audio_quantum, "audio_quantum")
        if quantum is None:
            return seconds
        return math.ceil(seconds / quantum) * quantum

    def samples(self, rate: int | None = None) -> int | None:
        """Audio samples per channel the request asks for (None without a rate)."""
        chosen = self.sample_rate if self.sample_rate is not None else rate
        if chosen is None:
            return None
        return math.ceil(self.audio_seconds() * chosen)

    to_dict = Record.to_json
