"""The authors' archive as it really is: macOS leftovers, Broad names, any member order; each blur file's plane known exactly.

The replica (tests/bbbc006_replica.py) is varied here beyond the project's own layout: AppleDouble
``._*`` files and ``.DS_Store`` beside the images, a shuffled pax tar, ``.tiff`` / upper-case suffixes,
nested folders. The Broad z02/z06/z10 archives are served on loopback by a server that honours Range
and by one that ignores it; their central directories name every blur file's plane.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import tifffile
from bbbc006_replica import (
    APPLEDOUBLE,
    CHANNELS,
    broad_name,
    broad_zips,
    fields,
    plane_image,
    unpack_replica,
    write_archive,
    write_broad,
)
from fixtures_http import serve, zip_bytes

from dgno.data import bbbc006
from dgno.data import bbbc006_authors as authors
from dgno.data.bbbc006_listing import HttpRangeFile, _images, broad_listing, plane_lookup, remote_zip_names
from dgno.data.bbbc006_pairing import decide_planes, index_archive
from dgno.io import InputError

LISTED = (2, 6, 10)
FAST = dict(retries=0, backoff=0.0, timeout=10)


@pytest.fixture(scope="module")
def broad_server():
    """The Broad archives of the replica's fields: z02/z06/z10 (to be listed) beside z01/z05/z13/z16 and the labels."""
    with serve(broad_zips(listed=LISTED)) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(broad_server):
    broad_server.reset()


@pytest.fixture(scope="module")
def broad(tmp_path_factory):
    return write_broad(tmp_path_factory.mktemp("broad"))


def _listing(srv, tmp_path) -> dict:
    return broad_listing(tmp_path / "listing", base_url=srv.base_url, **FAST)


def _assert_exact(pairs, channel: str) -> None:
    """Every blur file sits at the plane whose image it holds, and carries that plane's Broad name."""
    for pair in pairs:
        w, s = pair.field.well, pair.field.site
        for z, path in pair.blur.items():
            assert path.stem.lower() == broad_name(w, s, channel, z)[:-4].lower()
            np.testing.assert_array_equal(tifffile.imread(path), plane_image(w, s, channel, z))


# ------------------------------------------------------------------------------------ the listing


def test_the_listing_reads_only_the_central_directories(broad_server, tmp_path):
    listing = _listing(broad_server, tmp_path)
    assert listing["status"] == "listed"
    for z in LISTED:
        plane = listing["planes"][f"z{z:02d}"]
        assert sorted(plane["names"]) == sorted(broad_name(w, s, ch, z) for w, s in fields() for ch in CHANNELS)
        assert "central directory" in plane["source"] and plane["requests"] == 1
        size = len(broad_server.archives[plane["archive"]])
        assert plane["archive_bytes"] == size and plane["bytes_read"] < size / 5  # the tail, not the archive
        (req,) = broad_server.served(plane["archive"])
        assert req["status"] == 206 and req["range"].startswith("bytes=-")
    assert not (tmp_path / "listing" / "archives").exists()


def test_a_central_directory_beyond_the_tail_costs_one_more_range_request(tmp_path):
    names = [f"BBBC006_v1_images_z_02/{broad_name(f'a{i % 24 + 1:02d}', i, 'w1', 2)}" for i in range(1, 1800)]
    data = zip_bytes(dict.fromkeys(names, b""))
    with serve({"big.zip": data}) as srv:
        got, cost = remote_zip_names(srv.url("big.zip"), retries=0)
        assert got == names and cost["requests"] == 2 and cost["bytes_read"] < len(data)
        ranges = [r["range"] for r in srv.served("big.zip")]
        assert ranges[0].startswith("bytes=-") and ranges[1].startswith("bytes=") and not ranges[1].startswith("bytes=-")


def test_a_server_that_ignores_range_gets_the_whole_download(broad_server, tmp_path):
    broad_server.faults.ignore_range.update(f"BBBC006_v1_images_z_{z:02d}.zip" for z in LISTED)
    listing = _listing(broad_server, tmp_path)
    assert listing["status"] == "listed" and "ignores Range" in listing["planes"]["z06"]["source"]
    kept = tmp_path / "listing" / "archives" / "BBBC006_v1_images_z_06.zip"
    assert kept.read_bytes() == broad_server.archives[kept.name]  # kept: a second listing reads it locally
    n = len(broad_server.requests)
    again = broad_listing(tmp_path / "listing", base_url="http://127.0.0.1:9/nowhere/", **FAST)
    assert again["status"] == "listed" and len(broad_server.requests) == n and "local archive" in again["planes"]["z02"]["source"]


def test_an_unreachable_server_is_recorded_not_raised(tmp_path):
    listing = broad_listing(tmp_path, base_url="http://127.0.0.1:9/bbbc/", **FAST)
    assert listing["status"] == "unavailable" and all(p["status"] == "unavailable" and p["reason"] for p in listing["planes"].values())
    assert plane_lookup(listing) == {}


def test_hidden_members_and_names_in_two_planes_decide_nothing():
    listing = {"planes": {
        "z02": {"status": "listed", "plane": 2, "names": ["a.tif", "same.tif"]},
        "z06": {"status": "listed", "plane": 6, "names": ["B.TIF", "same.tif"]},
        "z10": {"status": "unavailable", "plane": 10},
    }}  # fmt: skip
    assert plane_lookup(listing) == {"a": 2, "b": 6}
    with serve({"m.zip": zip_bytes({"z/a.tif": b"x", "z/._a.tif": APPLEDOUBLE, "__MACOSX/z/._a.tif": APPLEDOUBLE, "z/r.txt": b""})}) as srv:
        with HttpRangeFile(srv.url("m.zip"), retries=0) as remote:
            assert zipfile.ZipFile(remote).namelist()[0] == "z/a.tif"
        assert _images(remote_zip_names(srv.url("m.zip"), retries=0)[0]) == (["a.tif"], 2)


# ------------------------------------------------------------------------------ planes, exactly


def test_broad_names_with_mac_leftovers_get_every_plane_from_the_listing(broad_server, tmp_path):
    root = unpack_replica(tmp_path / "raw", "broad", mac=True) / "BBBC006"
    listing = _listing(broad_server, tmp_path)
    for channel in CHANNELS:
        index = index_archive(root, channel, broad_listing=listing, progress=False)
        assert index.plane_rule == "broad" and set(index.decided.values()) == {"broad"} and len(index.decided) == 36
        assert index.plane_check["independent"] and index.plane_check["status"] == "passed" and index.plane_check["in_order"] == 12
        assert index.hidden == {"train/GT": 17, "train/blur": 49, "test/GT": 9, "test/blur": 25}  # the ._* forks of both channels and a .DS_Store
        assert not any(p.name.startswith("._") for pair in index.pairs for p in (pair.gt, *pair.triple))
        _assert_exact(index.pairs, channel)


@pytest.mark.parametrize(
    "options",
    [dict(suffix=".tiff"), dict(suffix=".TIF", mac=True), dict(nest="well"), dict(nest="plane")],
    ids=["tiff", "upper-case+mac", "nested-by-well", "nested-by-plane"],
)
def test_other_layouts_of_the_archive_are_read_exactly(broad_server, tmp_path, options):
    root = unpack_replica(tmp_path / "raw", "broad", **options) / "BBBC006"
    index = index_archive(root, "w1", broad_listing=_listing(broad_server, tmp_path), progress=False)
    assert index.plane_rule == ("name" if options.get("nest") == "plane" else "broad")  # a z02/ folder names the plane first
    assert index.plane_check["status"] == "passed" and len(index.pairs) == 12
    assert index.authors_order_agrees == (options.get("nest") != "plane")  # sorted by folder first: the authors' pairing breaks
    _assert_exact(index.pairs, "w1")


def test_a_partial_listing_decides_what_it_can_then_by_elimination_then_by_sharpness(broad_server, tmp_path):
    root = unpack_replica(tmp_path / "raw", "broad") / "BBBC006"
    listing = _listing(broad_server, tmp_path)
    listing["planes"]["z06"] = {"status": "unavailable", "plane": 6, "reason": "test"}
    index = index_archive(root, "w2", broad_listing=listing, progress=False)
    assert index.plane_rule == "mixed" and sorted(set(index.decided.values())) == ["broad", "elimination"]
    assert sum(r == "elimination" for r in index.decided.values()) == 12  # one z06 file per field: the plane left
    assert index.plane_check["independent"] and index.plane_check["status"] == "passed" and not index.warnings
    _assert_exact(index.pairs, "w2")
    listing["planes"]["z10"] = {"status": "unavailable", "plane": 10, "reason": "test"}  # one plane known: the images decide
    index = index_archive(root, "w2", broad_listing=listing, progress=False)
    assert sorted(set(index.decided.values())) == ["broad", "sharpness"] and sum(r == "sharpness" for r in index.decided.values()) == 24
    assert index.plane_check["independent_fields"] == 0 and index.plane_check["status"] == "not independent"
    assert any("24 of 36 w2 blur files were assigned their plane by sharpness" in w and "delete the cached listing" in w for w in index.warnings)
    _assert_exact(index.pairs, "w2")


def test_a_failed_check_under_the_listing_warns_or_stops_naming_the_config_key(broad_server, tmp_path):
    root = unpack_replica(tmp_path / "raw", "broad", swap=("h03", 1, "w1"), mac=True) / "BBBC006"
    listing = _listing(broad_server, tmp_path)
    index = index_archive(root, "w1", broad_listing=listing, max_out_of_order=0.0, progress=False)
    assert index.plane_check["status"] == "failed" and index.plane_check["out_of_order"] == ["train/h03_s1"]
    assert "the pooled z02+z06+z10 numbers are not affected" in index.plane_check["warning"]
    with pytest.raises(InputError, match=r"under plane rule 'broad'.*Fix: .*datasets\.bbbc006_w1\.plane_rule: sharpness.*datasets\.bbbc006_w1\.plane_check: warn"):
        index_archive(root, "w1", broad_listing=listing, max_out_of_order=0.0, plane_check="strict", config_key="datasets.bbbc006_w1", progress=False)


def test_rule_broad_without_a_listing_stops_and_two_files_of_one_plane_are_refused(tmp_path):
    root = unpack_replica(tmp_path / "raw", "broad") / "BBBC006"
    with pytest.raises(InputError, match=r"plane_rule 'broad' but 36 blur file\(s\) are not named in the Broad listing .*listing: unavailable"):
        index_archive(root, "w1", plane_rule="broad", broad_listing={"status": "unavailable", "planes": {}}, progress=False)
    index = index_archive(root, "w1", plane_rule="sharpness", progress=False)
    pair = index.pairs[0]
    twice = {p.stem.lower(): 2 for p in pair.triple[:2]}
    with pytest.raises(InputError, match=rf"field {pair.id} are given planes \[2, 2\].*plane_rule='sharpness'"):
        decide_planes([pair], "auto", index.sharp, root=root, lookup=twice)


# ------------------------------------------------------------------------------ end to end, offline


def test_the_archive_as_packed_on_a_mac_prepares_with_every_plane_exact(broad_server, tmp_path, broad):
    """Done-when of the data side: a shuffled pax tar with macOS leftovers and Broad names, fetched, unpacked, prepared."""
    archive = write_archive(tmp_path / "served" / "BBBC006.tar.gz", "broad", mac=True, shuffle=7)
    broad_server.archives["BBBC006.tar.gz"] = archive.read_bytes()
    raw = tmp_path / "raw"
    authors.fetch(raw, url=broad_server.url("BBBC006.tar.gz"), backoff=0.0, timeout=10, progress=False)
    listing = broad_listing(raw, base_url=broad_server.base_url, **FAST)
    out = authors.prepare_dataset(raw, tmp_path / "ds", channel="w1", seed=0, broad_root=broad, n_val_wells=1, broad_listing=listing, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    planes = manifest["planes"]
    assert planes["requested"] == "auto" and planes["rule"] == "broad" and planes["decided_by"] == {"broad": 36}
    assert planes["check"]["independent"] and planes["check"]["passed"] and manifest["warnings"] == []
    assert planes["broad_listing"]["status"] == "listed" and planes["broad_listing"]["planes"]["z10"]["names"] == 24
    assert planes["files"]["test/c12_s1"]["z06"] == {"file": broad_name("c12", 1, "w1", 6), "rule": "broad", "sharpness": pytest.approx(planes["files"]["test/c12_s1"]["z06"]["sharpness"])}
    assert manifest["pairing"]["hidden_files_skipped"] == {"train/GT": 17, "train/blur": 49, "test/GT": 9, "test/blur": 25}
    assert manifest["pairing"]["fields"] == 12 and manifest["pairing"]["files"] == {"GT": 12, "blur": 36}
    for w, s in fields():
        for z in LISTED:
            np.testing.assert_array_equal(tifffile.imread(out / "blur" / f"z{z:02d}" / f"{w}_s{s}.tif"), plane_image(w, s, "w1", z))


def test_an_archive_with_another_top_folder_and_tiff_suffixes_is_found(broad_server, tmp_path):
    from bbbc006_replica import archive_members, targz_bytes

    members = {name.replace("BBBC006/", "BBBC006_DGNO_release/", 1): data for name, data in archive_members("broad", suffix=".TIFF", mac=True).items()}
    broad_server.archives["BBBC006.tar.gz"] = targz_bytes(members, shuffle=2)
    root = authors.fetch(tmp_path, url=broad_server.url("BBBC006.tar.gz"), backoff=0.0, timeout=10, progress=False)
    assert root == tmp_path / "authors" / "BBBC006_DGNO_release" and authors.find_root(tmp_path) == root
    record = authors.fetch_record(tmp_path, tmp_path / "authors.json", url=broad_server.url("BBBC006.tar.gz"), progress=False)
    assert record["counts"]["train"]["blur"] == {"w1": 24, "w2": 24, "other": 0, "hidden": 49}
    index = index_archive(root, "w2", broad_listing=_listing(broad_server, tmp_path), progress=False)
    assert index.plane_rule == "broad" and index.plane_check["status"] == "passed"
    _assert_exact(index.pairs, "w2")


def test_without_the_listing_the_planes_come_from_sharpness_and_the_manifest_says_so(tmp_path, broad):
    raw = unpack_replica(tmp_path / "raw", "broad", mac=True)
    listing = broad_listing(raw, base_url="http://127.0.0.1:9/bbbc/", **FAST)
    out = authors.prepare_dataset(raw, tmp_path / "ds", channel="w2", seed=0, broad_root=broad, n_val_wells=1, broad_listing=listing, progress=False)
    planes = json.loads((out / "manifest.json").read_text())["planes"]
    assert planes["rule"] == "sharpness" and planes["decided_by"] == {"sharpness": 36} and planes["broad_listing"]["status"] == "unavailable"
    assert planes["check"]["status"] == "not independent" and "not independent" in planes["check"]["note"]
    np.testing.assert_array_equal(tifffile.imread(out / "blur" / "z02" / "a01_s1.tif"), plane_image("a01", 1, "w2", 2))  # right, but unverified


# ----------------------------------------------------------------------------------- other readers


def test_the_broad_reader_skips_and_counts_hidden_files(tmp_path):
    root = write_broad(tmp_path, planes=(2, 16), labels=False)
    for z in (2, 16):
        (root / f"z{z:02d}" / f"._{broad_name('a01', 1, 'w1', z)}").write_bytes(APPLEDOUBLE)
    found = bbbc006.index_plane(root, 2, "w1")
    assert len(found) == 12 and not any(p.name.startswith("._") for p in found.values())
    assert bbbc006.hidden_files(root, (2, 16, 5)) == {"z02": 1, "z16": 1}
    out = bbbc006.prepare_dataset(root, tmp_path / "ds", channel="w1", seed=0, train_planes=(2,), extra_planes=(), n_val_wells=1, labels=False, progress=False)
    assert json.loads((out / "manifest.json").read_text())["hidden_files_skipped"] == {"z02": 1, "z16": 1}



# ----------------------------------------------------------------------------------- the config keys


def test_the_config_keys_reach_the_preparation():
    import yaml
    from conftest import ROOT

    from dgno.workflow import plan, settings
    from dgno.workflow.config import ConfigError, validate_config

    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    paper = validate_config(dict(cfg))
    ds = settings.bbbc006_settings(paper, "bbbc006_w1")
    assert (ds["plane_rule"], ds["plane_check"], ds["max_out_of_order"]) == ("auto", "warn", 0.05)
    assert plan.bbbc006_planes(paper, "bbbc006_w1")["broad_names"] == "resources/bbbc006/broad_names.json"
    cfg["datasets"]["bbbc006_w1"]["plane_rule"] = "sharpness"
    assert "broad_names" not in plan.bbbc006_planes(validate_config(yaml.safe_load(yaml.safe_dump(cfg, sort_keys=False))), "bbbc006_w1")
    cfg["datasets"]["dpdd"]["plane_check"] = "strict"
    with pytest.raises(ConfigError, match=r"datasets\.dpdd\.plane_check: only for source 'bbbc006'"):
        validate_config(cfg)
    cfg["datasets"]["dpdd"].pop("plane_check")
    cfg["datasets"]["bbbc006_w1"]["plane_check"] = "stop"
    with pytest.raises(ConfigError, match=r"plane_check: 'stop' is not allowed; allowed values: warn, strict"):
        validate_config(cfg)
