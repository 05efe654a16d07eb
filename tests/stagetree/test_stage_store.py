"""The stage store: checkpoints published by one study, listed by another (real files)."""

from __future__ import annotations

import json
from pathlib import Path

from hpctune.files import sha256_file
from hpctune.stagetree.store import StageStore, link_or_copy, point_key

PATH = [[0, [["lr", {"kind": "constant", "args": [0.1]}]]]]


def test_publish_then_list(tmp_path: Path) -> None:
    source = tmp_path / "ck.pt"
    source.write_bytes(b"weights" * 100)
    store = StageStore(tmp_path / "store", "abc123")
    key = store.publish(PATH, 4, source, study="a", trial=2, curve=[[1, 10.0, 0.5]])
    assert key == point_key(PATH, 4) != point_key(PATH, 5)
    (entry,) = store.entries()
    assert (entry.key, entry.step, entry.study, entry.trial) == (key, 4, "a", 2)
    assert entry.file.read_bytes() == source.read_bytes()
    assert entry.sha256 == sha256_file(source)
    assert entry.curve == [[1, 10.0, 0.5]]
    # publishing the same point again (another study) leaves the entry alone
    other = tmp_path / "other.pt"
    other.write_bytes(b"different")
    assert store.publish(PATH, 4, other, study="b", trial=0, curve=[]) == key
    assert store.entries()[0].study == "a"
    assert StageStore(tmp_path / "store", "other-digest").entries() == []


def test_unreadable_entries_are_skipped(tmp_path: Path) -> None:
    store = StageStore(tmp_path, "d")
    store.entries_dir.mkdir(parents=True)
    (store.entries_dir / "torn.json").write_text('{"version": 1, "key":')
    (store.entries_dir / "newer.json").write_text(json.dumps({"version": 99}))
    (store.entries_dir / "partial.json").write_text(json.dumps({"version": 1, "key": "k"}))
    assert store.entries() == []
    assert not list(store.folder.glob("**/*.tmp"))


def test_link_or_copy_puts_the_bytes_in_place(tmp_path: Path) -> None:
    source = tmp_path / "a.pt"
    source.write_bytes(b"x" * 10)
    target = tmp_path / "deep" / "b.pt"
    link_or_copy(source, target)
    link_or_copy(source, target)  # again: replaced, not an error
    assert target.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.pt"]
