"""The content-addressed store: files kept by SHA-256, written atomically, hashed on read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pytest_lossless.goldens.store import ContentStore, StoreError, StoreIntegrityError


def _file(tmp_path: Path, data: bytes, name: str = "artifact.bin") -> tuple[Path, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def test_put_keeps_the_file_under_its_sha256(tmp_path):
    source, digest = _file(tmp_path, b"frames" * 1000)
    store = ContentStore(tmp_path / "store")
    kept = store.put(source, digest)
    assert kept == tmp_path / "store" / "sha256" / digest[:2] / digest[2:]
    assert kept.read_bytes() == source.read_bytes()
    assert store.get(digest) == kept
    # No temporary file is left beside it.
    assert sorted(p.name for p in (tmp_path / "store" / "sha256").iterdir()) == [digest[:2]]


def test_put_without_a_known_digest_hashes_the_file(tmp_path):
    source, digest = _file(tmp_path, b"pcm")
    assert ContentStore(tmp_path / "s").put(source) == ContentStore(tmp_path / "s").path_of(digest)


def test_a_stored_file_is_not_written_again(tmp_path):
    source, digest = _file(tmp_path, b"abc")
    store = ContentStore(tmp_path / "store")
    kept = store.put(source, digest)
    before = os.stat(kept).st_ino
    assert store.put(source, digest) == kept
    assert os.stat(kept).st_ino == before


def test_a_file_that_does_not_match_its_name_is_refused_and_named(tmp_path):
    source, digest = _file(tmp_path, b"golden bytes")
    store = ContentStore(tmp_path / "store")
    kept = store.put(source, digest)
    os.chmod(kept, 0o644)
    kept.write_bytes(b"edited bytes")
    with pytest.raises(StoreIntegrityError) as caught:
        store.get(digest)
    assert str(kept) in str(caught.value)
    assert "refused" in str(caught.value)
    # The next put replaces the damaged file with the right bytes.
    assert store.put(source, digest) == kept
    assert store.get(digest) == kept


def test_a_source_that_does_not_match_the_digest_given_is_not_stored(tmp_path):
    source, _ = _file(tmp_path, b"one")
    wrong = hashlib.sha256(b"two").hexdigest()
    store = ContentStore(tmp_path / "store")
    with pytest.raises(StoreError, match="nothing was stored"):
        store.put(source, wrong)
    assert store.get(wrong) is None
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]


def test_a_missing_file_is_none(tmp_path):
    assert ContentStore(tmp_path / "nowhere").get("0" * 64) is None


def test_a_link_in_the_store_is_refused(tmp_path):
    source, digest = _file(tmp_path, b"linked")
    store = ContentStore(tmp_path / "store")
    path = store.path_of(digest)
    path.parent.mkdir(parents=True)
    path.symlink_to(source)
    with pytest.raises(StoreError, match="symbolic link"):
        store.get(digest)


def test_a_name_that_is_not_a_sha256_is_an_error(tmp_path):
    with pytest.raises(StoreError, match="is not a SHA-256"):
        ContentStore(tmp_path).path_of("../../etc/passwd")


def test_a_store_that_cannot_be_written_is_an_error_naming_it(tmp_path):
    source, digest = _file(tmp_path, b"x")
    blocker = tmp_path / "store"
    blocker.write_text("a file, not a folder")
    with pytest.raises(StoreError) as caught:
        ContentStore(blocker).put(source, digest)
    assert str(blocker) in str(caught.value)
