"""Artifact kinds: the interface a kind implements (:class:`Kind`), the registry, the canary,
and one module per built-in kind (video, audio, tensor, image, bytes)."""

from __future__ import annotations

from .interface import Kind as Kind
from .registry import (
    BUILTIN_KIND_NAMES as BUILTIN_KIND_NAMES,
)
from .registry import (
    Artifact as Artifact,
)
from .registry import (
    KindRegistry as KindRegistry,
)
from .registry import (
    fingerprint as fingerprint,
)
from .registry import (
    media_limits as media_limits,
)
from .registry import (
    plugin_manager as plugin_manager,
)
