"""Hidden files (OS and archiver leftovers) are never taken for images."""

from __future__ import annotations

import pytest

from dgno.io import is_hidden, visible_files


@pytest.mark.parametrize("name", ["._a.tif", ".DS_Store", "Thumbs.db", "__MACOSX/blur/a.tif", "GT/._x.tif", ".cache/a.tif", "desktop.ini"])
def test_leftovers_are_hidden(name):
    assert is_hidden(name)


@pytest.mark.parametrize("name", ["a.tif", "GT/a_b.tif", "blur/x._y.tif", "./a.tif"])
def test_data_files_are_not_hidden(name):
    assert not is_hidden(name)


def test_visible_files_lists_data_and_counts_what_it_skipped(tmp_path):
    for rel in ["a.tif", "._a.tif", "b.png", "notes.txt", "sub/c.TIFF", "sub/._c.TIFF", "__MACOSX/sub/c.TIFF"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    keep, skipped = visible_files(tmp_path)
    assert [p.name for p in keep] == ["a.tif", "b.png"] and [p.name for p in skipped] == ["._a.tif"]
    keep, skipped = visible_files(tmp_path, recursive=True)
    assert [p.relative_to(tmp_path).as_posix() for p in keep] == ["a.tif", "b.png", "sub/c.TIFF"]
    assert len(skipped) == 3
