"""The storage abstraction: a URI and FileIO properties give a pyarrow filesystem and a path;
a reader finds a catalog's store settings by its name, without its connection string."""

from __future__ import annotations

import os

import pyarrow.fs as pafs

from lakehouse.parquet import file_io_properties, split_uri


def test_local_paths_and_file_uris_reach_the_local_disk(tmp_path):
    for uri in (str(tmp_path / "a b.parquet"), (tmp_path / "a b.parquet").as_uri()):
        fs, path = split_uri(uri, {"s3.endpoint": "http://127.0.0.1:1"})
        assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "a b.parquet")


def test_an_s3_uri_gets_a_filesystem_configured_by_the_properties():
    properties = {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.region": "eu-west-3",
        "s3.access-key-id": "k",
        "s3.secret-access-key": "s",
    }
    fs, path = split_uri("s3://bucket/wh/raw/docs/data/f.parquet", properties)
    assert isinstance(fs, pafs.S3FileSystem) and path == "bucket/wh/raw/docs/data/f.parquet"
    settings = fs.__reduce__()[1][0]  # what pyarrow would rebuild it from
    assert (fs.region, settings["endpoint_override"], settings["access_key"]) == (
        "eu-west-3",
        "http://127.0.0.1:9",
        "k",
    )
    # One filesystem per bucket and configuration, made once.
    assert split_uri("s3://bucket/other", dict(properties))[0] is fs
    assert split_uri("s3://bucket/other", {**properties, "s3.region": "us-east-1"})[0] is not fs


def test_a_readers_store_settings_come_from_its_own_configuration_read_afresh(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pyiceberg.yaml
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.upper().startswith("PYICEBERG_")]:
        monkeypatch.delenv(name)
    assert file_io_properties("lake") == {} and file_io_properties(None) == {}

    # Set after pyiceberg was imported: still seen. The connection string, with its password, is not passed on.
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__URI", "postgresql://u:pw@db/x")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__S3__ENDPOINT", "http://minio:9000")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__S3__SECRET_ACCESS_KEY", "s3cr3t")
    assert file_io_properties("lake") == {"s3.endpoint": "http://minio:9000", "s3.secret-access-key": "s3cr3t"}
    assert file_io_properties("other") == {}


def test_a_lease_never_shows_the_stores_keys():
    from lakehouse.lease import _Lease

    lease = _Lease("s3://b/wh/t/data/runs/r/a", {"s3.secret-access-key": "s3cr3t"})
    assert "s3cr3t" not in repr(lease)
