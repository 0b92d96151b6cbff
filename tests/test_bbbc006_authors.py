"""The authors' BBBC006 archive: tar.gz download and unpack, pairing, plane check, split and Broad mapping.

Offline: a replica archive (tests/bbbc006_replica.py) is served over loopback by fixtures_http.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile

import numpy as np
import pytest
import tifffile
from bbbc006_replica import (
    CHANNELS,
    SITES,
    TEST_FIELDS,
    WELLS,
    archive_members,
    broad_name,
    fields,
    plane_image,
    scene,
    targz_bytes,
    unpack_replica,
    write_broad,
)
from fixtures_http import bbbc006_http_session, bbbc006_server  # noqa: F401

from dgno.cli import main
from dgno.data import bbbc006
from dgno.data import bbbc006_authors as authors
from dgno.data.bbbc006_pairing import ARCHIVE, authors_channel, index_archive, parse_field, plane_from_name
from dgno.data.check import check_prepared
from dgno.data.download import DownloadError, part_path
from dgno.data.paired import level_test_ids
from dgno.data.targz import TruncatedArchive, unpack_tar, verify_targz
from dgno.io import InputError

FAST = dict(backoff=0.0, timeout=10, progress=False)


@pytest.fixture(scope="module")
def replica() -> bytes:
    return targz_bytes(archive_members())


@pytest.fixture(scope="module")
def broad(tmp_path_factory):
    return write_broad(tmp_path_factory.mktemp("broad"))


def _split(out) -> list[tuple[str, str]]:
    return [tuple(line.split(",")) for line in (out / "split.csv").read_text().splitlines()[1:]]


def _read(path) -> np.ndarray:
    return tifffile.imread(path)


# ------------------------------------------------------------------------------------------ tar.gz


def test_verify_targz_reads_every_member_and_refuses_a_truncated_archive(tmp_path, replica):
    good = tmp_path / "good.tar.gz"
    good.write_bytes(replica)
    assert set(verify_targz(good)) == set(archive_members())
    for cut in (len(replica) - 4, len(replica) // 2, 50):  # gzip trailer only, mid-member, inside the first header
        bad = tmp_path / f"cut{cut}.tar.gz"
        bad.write_bytes(replica[:cut])
        with pytest.raises(TruncatedArchive, match=rf"{bad}: the archive is truncated.*Fix: re-run the download"):
            verify_targz(bad)


def _tar_with(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        ok = tarfile.TarInfo("BBBC006/ok.txt")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"ok"))
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.mark.parametrize(
    "member, problem",
    [
        (_member("/etc/evil"), "absolute path"),
        (_member("BBBC006/../../evil"), "climbs out"),
        (_member("BBBC006/link", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
        (_member("BBBC006/link", tarfile.SYMTYPE, "../../x.tif"), "symbolic link"),
        (_member("BBBC006/hard", tarfile.LNKTYPE, "../ok.txt"), "hard link"),
        (_member("BBBC006/fifo", tarfile.FIFOTYPE), "device or FIFO"),
    ],
)
def test_unpack_tar_refuses_unsafe_members_and_leaves_the_target_alone(tmp_path, member, problem):
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(_tar_with(member, b"x" if member.isfile() else b""))
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(InputError, match=rf"{archive}: member '{member.name}' .*{problem}.*refusing"):
        unpack_tar(archive, out, progress=False)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []  # no temporary folder left
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    with pytest.raises(InputError, match=problem):
        verify_targz(archive)  # refused before a download is accepted, too


def test_links_inside_the_archive_unpack_as_copies_of_their_targets(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_member("BBBC006/GT/late.tif", tarfile.SYMTYPE, "../blur/a.tif"))  # its target comes later
        data = tarfile.TarInfo("BBBC006/blur/a.tif")
        data.size = 4
        tar.addfile(data, io.BytesIO(b"tiff"))
        tar.addfile(_member("BBBC006/blur/b.tif", tarfile.LNKTYPE, "BBBC006/blur/a.tif"))
        tar.addfile(_member("BBBC006/test", tarfile.SYMTYPE, "blur"))  # a folder link
        tar.addfile(_member("BBBC006/dangling.tif", tarfile.SYMTYPE, "nowhere.tif"))
    archive = tmp_path / "links.tar.gz"
    archive.write_bytes(buf.getvalue())
    out = unpack_tar(archive, tmp_path / "out", progress=False)
    for name in ("GT/late.tif", "blur/b.tif", "test/a.tif"):
        path = out / "BBBC006" / name
        assert not path.is_symlink() and path.read_bytes() == b"tiff", name
    assert not (out / "BBBC006" / "dangling.tif").exists()


def test_a_file_url_is_copied_and_checked_like_a_download(tmp_path, replica):
    source = tmp_path / "mirror" / ARCHIVE
    source.parent.mkdir()
    source.write_bytes(replica)
    root = authors.fetch(tmp_path / "raw", url=source.as_uri(), **FAST)
    assert root == tmp_path / "raw" / "authors" / "BBBC006"
    with pytest.raises(DownloadError, match="no such file"):
        authors.fetch(tmp_path / "other", url=(tmp_path / "missing.tar.gz").as_uri(), **FAST)


@pytest.mark.parametrize("top", ["", "data/BBBC006/", "BBBC006/BBBC006/"], ids=["no-top-folder", "two-levels", "doubled"])
def test_the_unpacked_folder_is_found_under_any_top_folder(tmp_path, top):
    members = {top + name.removeprefix("BBBC006/"): data for name, data in archive_members(mac=True).items() if name.startswith("BBBC006/")}
    source = tmp_path / ARCHIVE
    source.write_bytes(targz_bytes(members, shuffle=3))
    root = authors.fetch(tmp_path / "raw", url=source.as_uri(), **FAST)
    assert root == tmp_path / "raw" / "authors" / top.rstrip("/") and (root / "train" / "GT").is_dir()


def test_an_archive_without_train_and_test_says_what_it_holds(tmp_path):
    members = {name.replace("/train/", "/").replace("/test/", "/"): data for name, data in archive_members().items()}
    source = tmp_path / ARCHIVE
    source.write_bytes(targz_bytes(members))
    with pytest.raises(InputError, match=r"holds .*BBBC006 with GT/ and blur/ but no train/ and test/ folders.*Fix: this is not the authors' archive"):
        authors.fetch(tmp_path / "raw", url=source.as_uri(), **FAST)


def test_a_deleted_unpacked_folder_is_unpacked_again_by_the_preparation(tmp_path, replica):
    source = tmp_path / ARCHIVE
    source.write_bytes(replica)
    raw = tmp_path / "raw"
    authors.fetch(raw, url=source.as_uri(), **FAST)
    shutil.rmtree(raw / "authors")  # what a pairing error's fix says to do for a bad unpack
    out = authors.prepare_dataset(raw, tmp_path / "ds", channel="w1", seed=0, labels=False, n_val_wells=1, progress=False)
    assert (out / "manifest.json").is_file() and (raw / "authors" / "BBBC006" / "train" / "GT").is_dir()


def test_fetch_downloads_verifies_and_unpacks_once(bbbc006_server, tmp_path, replica):
    srv = bbbc006_server
    srv.archives[ARCHIVE] = replica
    root = authors.fetch(tmp_path, url=srv.url(ARCHIVE), **FAST)
    assert root == tmp_path / "authors" / "BBBC006"
    assert (root / "train" / "GT" / broad_name("a01", 1, "w1", 16)).read_bytes() == archive_members()[f"BBBC006/train/GT/{broad_name('a01', 1, 'w1', 16)}"]
    record = json.loads((tmp_path / "archives" / (ARCHIVE + ".json")).read_text())
    assert record["size"] == len(replica) and record["url"] == srv.url(ARCHIVE)
    n_requests = len(srv.requests)
    assert authors.fetch(tmp_path, url=srv.url(ARCHIVE), **FAST) == root
    assert len(srv.requests) == n_requests  # extracted once: no second download, no second unpack


def test_an_interrupted_download_resumes(bbbc006_server, tmp_path, replica):
    srv = bbbc006_server
    srv.archives[ARCHIVE] = replica
    srv.faults.drop_first.add(ARCHIVE)
    authors.fetch(tmp_path, url=srv.url(ARCHIVE), **FAST)
    first, second = srv.served(ARCHIVE)
    assert first["sent"] == len(replica) // 2 and second == {"name": ARCHIVE, "range": f"bytes={first['sent']}-", "status": 206, "sent": len(replica) - first["sent"]}
    assert (tmp_path / "archives" / ARCHIVE).read_bytes() == replica


def test_a_truncated_archive_placed_by_hand_resumes_from_its_end(bbbc006_server, tmp_path, replica):
    srv = bbbc006_server
    srv.archives[ARCHIVE] = replica
    placed = tmp_path / "archives" / ARCHIVE
    placed.parent.mkdir()
    placed.write_bytes(replica[:1000])
    authors.fetch(tmp_path, url=srv.url(ARCHIVE), **FAST)
    assert [r["range"] for r in srv.served(ARCHIVE)] == ["bytes=1000-"]
    assert placed.read_bytes() == replica and not part_path(placed).exists()


def test_a_failed_download_says_how_to_place_the_archive_by_hand(bbbc006_server, tmp_path):
    url = bbbc006_server.url("no-such.tar.gz")
    with pytest.raises(DownloadError, match="HTTP 404") as err:
        authors.fetch(tmp_path, url=url, **FAST)
    assert f"huggingface-cli download Duane245/DGNO BBBC006.tar.gz --local-dir {tmp_path / 'archives'}" in str(err.value)
    assert not (tmp_path / "authors").exists()


def test_check_authors_describes_the_download_state(tmp_path, replica):
    part = part_path(tmp_path / "archives" / ARCHIVE)
    part.parent.mkdir()
    part.write_bytes(replica[:500])
    report = authors.check_authors(tmp_path)
    assert not report.ok and "interrupted download" in report.text() and "huggingface-cli download" in report.text()
    unpack_replica(tmp_path)
    report = authors.check_authors(tmp_path)
    assert report.ok, report.text()
    assert f"{tmp_path / 'BBBC006' / 'test'}: GT 4 w1 + 4 w2, blur 12 w1 + 12 w2" in report.text()
    assert main(["data", "check", "bbbc006-authors", "--root", str(tmp_path)]) == 0  # the command line's name for it


# ----------------------------------------------------------------------------------------- pairing


def test_names_of_the_archive():
    gt = broad_name("h03", 2, "w2", 16)
    assert authors_channel(gt) == "w2" and authors_channel("x_y_w1abc.tif") == "w1"
    assert parse_field(gt).id == "h03_s2" and parse_field("img001_w1a.tif") is None
    assert plane_from_name(gt) is None
    assert plane_from_name(gt[:-4] + "-z06.tif") == 6
    assert plane_from_name("z10_" + gt) == 10 and plane_from_name("02_" + gt) == 2


@pytest.mark.parametrize("channel", CHANNELS)
def test_pairs_are_the_authors_and_verified_by_field(tmp_path, channel):
    root = unpack_replica(tmp_path) / "BBBC006"
    index = index_archive(root, channel, progress=False)
    # The authors' rule, written out: channel by the name's last '_' part, sorted blur vs sorted GT x 3.
    for split in ("train", "test"):
        blur = sorted(p for p in (root / split / "blur").rglob("*.tif") if p.name.split("_")[-1][:2] == channel)
        gt = [p for p in sorted((root / split / "GT").rglob("*.tif")) if p.name.split("_")[-1][:2] == channel for _ in range(3)]
        ours = [(p.gt, b) for p in index.pairs if p.split == split for b in p.triple]
        assert ours == list(zip(gt, blur))
    assert {p.id for p in index.pairs if p.split == "test"} == {f"{w}_s{s}" for w, s in TEST_FIELDS}
    assert index.plane_rule == "name" and index.plane_check["passed"] and index.plane_check["out_of_order"] == []
    for pair in index.pairs:
        assert all(parse_field(b) == pair.field for b in pair.triple)
        for z, path in pair.blur.items():
            np.testing.assert_array_equal(_read(path), plane_image(pair.field.well, pair.field.site, channel, z))


def test_planes_from_the_sorted_position_when_asked(tmp_path):
    index = index_archive(unpack_replica(tmp_path, "sorted") / "BBBC006", "w1", plane_rule="position", progress=False)
    assert index.plane_rule == "position" and index.plane_check["in_order"] == 12 and index.plane_check["independent"]
    pair = index.pairs[0]
    np.testing.assert_array_equal(_read(pair.blur[2]), plane_image(pair.field.well, pair.field.site, "w1", 2))


def test_broad_names_do_not_sort_by_plane_the_check_says_so_and_sharpness_recovers(tmp_path):
    root = unpack_replica(tmp_path, "broad") / "BBBC006"
    with pytest.raises(InputError, match=r"of 12 fields .* out of blur order under plane rule 'position'.*plane_rule='sharpness'"):
        index_archive(root, "w1", plane_rule="position", plane_check="strict", progress=False)
    warned = index_archive(root, "w1", plane_rule="position", progress=False)  # the default: a warning, not a stop
    assert warned.plane_check["status"] == "failed" and "out of blur order" in warned.plane_check["warning"] and warned.warnings
    index = index_archive(root, "w1", progress=False)  # auto without the Broad listing: by sharpness, and it says so
    assert index.plane_rule == "sharpness" and index.plane_check["independent"] is False and index.plane_check["status"] == "not independent"
    for pair in index.pairs:
        for z, path in pair.blur.items():
            assert path.name == broad_name(pair.field.well, pair.field.site, "w1", z)


def test_a_missing_gt_is_refused_naming_the_field_and_how_to_tell_download_from_unpack(tmp_path):
    root = unpack_replica(tmp_path, drop_gt=("b07", 2, "w1")) / "BBBC006"
    orphan = broad_name("b07", 2, "w1", 16)[:-4] + "-z02.tif"
    with pytest.raises(InputError, match=rf"train/GT: no w1 GT file for field\(s\) b07_s2, whose 3 blur file\(s\) are there \({orphan}") as err:
        index_archive(root, "w1", progress=False)
    assert "gzip -t" in str(err.value) and f"delete the unpacked folder {root}/" in str(err.value)


def test_an_extra_blur_file_is_refused_naming_the_field(tmp_path):
    root = unpack_replica(tmp_path, extra_blur=("c12", 1, "w2")) / "BBBC006"
    gt = broad_name("c12", 1, "w2", 16)
    with pytest.raises(InputError, match=r"test/blur: 1 w2 field\(s\) without exactly 3 blur files: too many in c12_s1 \(4\); c12_s1 holds .*-z06b\.tif.*Fix: remove the extra"):
        index_archive(root, "w2", progress=False)
    assert gt.startswith("mcf-z-stacks-03212011_c12_s1_w2")


def test_a_missing_and_an_extra_blur_file_are_both_named(tmp_path):
    root = unpack_replica(tmp_path, extra_blur=("c12", 1, "w2")) / "BBBC006"
    next((root / "test" / "blur").glob("*_p24_s1_w2*-z10.tif")).unlink()  # the counts balance: only the pairing sees it
    with pytest.raises(InputError, match=r"2 w2 field\(s\) .*too few in p24_s1 \(2 of 3\); too many in c12_s1 \(4\).*Fix: remove the extra .*; a blur file is missing: check the archive"):
        index_archive(root, "w2", progress=False)


def test_blur_files_in_the_wrong_split_are_named_as_such(tmp_path):
    root = unpack_replica(tmp_path) / "BBBC006"
    for path in (root / "test" / "blur").glob("*_c12_s1_w1*"):
        path.rename(root / "train" / "blur" / path.name)
    with pytest.raises(InputError, match=r"train/GT: no w1 GT file for field\(s\) c12_s1.*The GT of c12_s1 is in .*test/GT: those blur files are in the wrong split"):
        index_archive(root, "w1", progress=False)


@pytest.mark.parametrize("form", ["after-channel", "before-well"])
def test_plane_tokens_anywhere_in_a_broad_name_pair_and_decide_the_plane(tmp_path, form):
    root = unpack_replica(tmp_path, "broad") / "BBBC006"
    for path in sorted((root).glob("*/blur/*.tif")):
        z = next(z for z in (2, 6, 10) for w, st in fields() for ch in CHANNELS if path.name == broad_name(w, st, ch, z))
        plate, rest = path.name.split("_", 1)
        path.rename(path.with_name(f"{path.stem}_z{z:02d}.tif" if form == "after-channel" else f"{plate}_z{z:02d}_{rest}"))
    index = index_archive(root, "w1", progress=False)
    assert index.plane_rule == "name" and len(index.pairs) == 12 and index.plane_check["status"] == "passed"
    assert all(f"_z{z:02d}" in pair.blur[z].name and parse_field(pair.blur[z]) == pair.field for pair in index.pairs for z in (2, 6, 10))
    drops = [w for w in index.warnings if "authors' channel rule" in w]
    assert bool(drops) == (form == "after-channel")  # "z0" is what the authors' rule reads there


def test_a_field_out_of_blur_order_is_refused_by_name(tmp_path):
    root = unpack_replica(tmp_path, swap=("h03", 1, "w1")) / "BBBC006"
    with pytest.raises(InputError, match=r"1 of 12 fields \(8%, more than the 5% allowed\) are out of blur order .*train/h03_s1: z02="):
        index_archive(root, "w1", plane_check="strict", progress=False)
    index = index_archive(root, "w1", max_out_of_order=0.1, plane_check="strict", progress=False)
    assert index.plane_check["out_of_order"] == ["train/h03_s1"] and index.plane_check["passed"]


# ----------------------------------------------------------------------------------------- prepare


def test_prepare_writes_the_authors_split_with_the_broad_levels(tmp_path, broad):
    out = authors.prepare_dataset(unpack_replica(tmp_path / "raw"), tmp_path / "ds", channel="w2", seed=3, broad_root=broad, n_val_wells=1, progress=False)
    rows = dict(line.split(",") for line in (out / "split.csv").read_text().split()[1:])
    assert {i for i, s in rows.items() if s == "test"} == {f"{w}_s{s}" for w, s in TEST_FIELDS}
    val = {i for i, s in rows.items() if s == "val"}
    assert len({i.split("_")[0] for i in val}) == 1 and val == {f"{w}_s{s}" for w, s in fields("train") if w == next(iter(val))[:3]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["planes"]["rule"] == "name" and manifest["planes"]["check"]["passed"]
    assert manifest["broad"]["status"] == "mapped" and manifest["broad"]["gt_identical_to_broad_z16"] == [12, 12]
    assert sorted(manifest["levels"]) == ["z01", "z02", "z05", "z06", "z10", "z13"] and manifest["levels"]["z05"]["source"] == "BBBC006_v1_images_z_05.zip"
    assert manifest["split"]["wells_in_train_and_test"] == ["h03", "p24"]
    assert (manifest["n_train"], manifest["n_val"], manifest["n_test"]) == (8 - len(val), len(val), 4)
    assert check_prepared(out).ok
    np.testing.assert_array_equal(_read(out / "blur" / "z05" / "p24_s1.tif"), plane_image("p24", 1, "w2", 5))
    np.testing.assert_array_equal(_read(out / "blur" / "z10" / "p24_s1.tif"), plane_image("p24", 1, "w2", 10))
    np.testing.assert_array_equal(_read(out / "labels" / "a01_s2.tif"), scene("a01", 2, "w1")[1])
    again = authors.prepare_dataset(tmp_path / "raw", tmp_path / "ds2", channel="w2", seed=3, broad_root=broad, n_val_wells=1, progress=False)
    assert (again / "split.csv").read_text() == (out / "split.csv").read_text()  # the seed alone fixes validation


def test_a_field_the_broad_folders_lack_is_refused_by_name(tmp_path):
    broad = write_broad(tmp_path / "broad", planes=(1, 5, 13), skip={("d05", 2)})
    with pytest.raises(InputError, match=r"Broad plane z01 has no w1 image for 1 field\(s\) of the authors' archive \(d05_s2\)"):
        authors.prepare_dataset(unpack_replica(tmp_path / "raw"), tmp_path / "ds", channel="w1", seed=0, broad_root=broad, n_val_wells=1, progress=False)
    assert not (tmp_path / "ds").exists()


def test_names_without_fields_pair_unverified_and_report_no_mapping(tmp_path, broad):
    out = authors.prepare_dataset(unpack_replica(tmp_path / "raw", "opaque"), tmp_path / "ds", channel="w1", seed=0, broad_root=broad, n_val_wells=2, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["broad"]["status"] == "no_names" and "by-well split" in manifest["broad"]["description"]
    assert manifest["pairing"]["verified"].startswith("not verifiable") and manifest["labels"] is None
    assert sorted(manifest["levels"]) == ["z02", "z06", "z10"]
    assert check_prepared(out).ok and manifest["planes"]["rule"] == "sharpness" and manifest["planes"]["check"]["status"] == "not independent"
    # the unseen levels fall back to the by-well split of the Broad planes; the evaluation follows the manifest
    assert set(manifest["test_sets"]) == {"z01", "z05", "z13"} and manifest["test_sets"]["z01"]["split"] == "by_well"
    wells = bbbc006.split_by_well(WELLS, seed=0, n_val=2)
    expected = sorted(f"by_well-{w}_s{s}" for w in WELLS for s in SITES if wells[w] == "test")
    assert sorted(level_test_ids(out, "z01")) == expected and manifest["test_sets"]["z01"]["test_wells"] == sorted(w for w in WELLS if wells[w] == "test")
    assert level_test_ids(out, "z02") == [i for i, sp in _split(out) if sp == "test"] and all(not i.startswith("by_well-") for i in level_test_ids(out, "z02"))
    w, s = expected[0].removeprefix("by_well-").split("_s")
    assert np.array_equal(_read(out / "blur" / "z01" / f"{expected[0]}.tif"), _read(broad / "z01" / broad_name(w, int(s), "w1", 1)))
    assert np.array_equal(_read(out / "gt" / f"{expected[0]}.tif"), _read(broad / "z16" / broad_name(w, int(s), "w1", 16)))
    assert (out / "labels" / f"{expected[0]}.tif").exists()
    # without the fallback, the unseen levels are left out
    bare = authors.prepare_dataset(tmp_path / "raw", tmp_path / "bare", channel="w1", seed=0, broad_root=broad, labels=False, n_val_wells=2, fallback=False, progress=False)
    assert "test_sets" not in json.loads((bare / "manifest.json").read_text()) and not (bare / "blur" / "z01").exists()


def test_a_zip_where_the_tar_gz_should_be_is_named_as_a_zip(tmp_path):
    import zipfile

    source = tmp_path / ARCHIVE
    with zipfile.ZipFile(source, "w") as zf:
        zf.writestr("BBBC006/train/GT/a.tif", b"x")
    with pytest.raises(DownloadError, match=r"a zip archive, not a gzipped tar .*Fix: this is not the expected \.tar\.gz") as err:
        authors.fetch(tmp_path / "raw", url=source.as_uri(), **FAST)
    assert "corrupt" not in str(err.value) and str(err.value).count("Fix:") == 1
