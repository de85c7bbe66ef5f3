"""Redacting credentials from a catalog's configuration, in every form they are written."""

from __future__ import annotations

import time

import pytest

from lakehouse.redact import redact

SECRET = "Pw-7Hq2xZ"


@pytest.mark.parametrize(
    "text",
    [
        f"postgresql+psycopg2://factory:{SECRET}@db:5432/lake",
        f"postgresql://:{SECRET}@db/lake",
        f"postgresql://factory:{SECRET}/with/slash@db/lake",
        f"postgresql://factory@db/lake?password={SECRET}",
        f"postgresql://factory@db/lake?sslmode=require&PASSWORD={SECRET}&connect_timeout=5",
        f"mssql+pyodbc://db/lake?passwd={SECRET}",
        f"mssql+pyodbc://db/lake?pwd={SECRET}#frag",
        f"https://rest.example/v1?api_key={SECRET}",
        f"https://rest.example/v1?access_key={SECRET}&secret_key={SECRET}",
        f"https://account.blob.core.windows.net/c?sas_token={SECRET}&sig={SECRET}",
        f"https://rest.example/v1?token={SECRET}&credential={SECRET}",
        f"mssql+pyodbc:///?odbc_connect=DRIVER%3D%7BODBC%7D%3BSERVER%3Ddb%3BPWD%3D{SECRET}%3BUID%3Du",
        f"Could not infer the catalog type from the uri: postgres://u:{SECRET}@db/x",
        f"{{'uri': 'http://rest', 'credential': '{SECRET}', 's3.secret-access-key': '{SECRET}'}}",
        f'{{"token": "{SECRET}", "warehouse": "s3://wh"}}',
        f"PYICEBERG_CATALOG__LAKE__PASSWORD={SECRET}",
        f"mssql+pyodbc:///?odbc_connect=PWD%3D{SECRET}",
        f"options=a=b=password={SECRET}&sslmode=require",
        # An object store's keys, as pyiceberg FileIO properties, variables and URLs carry them.
        f"PYICEBERG_CATALOG__LAKE__S3__ACCESS_KEY_ID={SECRET}",
        f"PYICEBERG_CATALOG__LAKE__S3__SECRET_ACCESS_KEY={SECRET} PYICEBERG_CATALOG__LAKE__S3__SESSION_TOKEN={SECRET}",
        f"{{'s3.endpoint': 'http://127.0.0.1:9000', 's3.access-key-id': '{SECRET}', 's3.session-token': '{SECRET}'}}",
        f'{{"client.access-key-id": "{SECRET}", "client.secret-access-key": "{SECRET}", "gcs.oauth2.token": "{SECRET}"}}',
        f"s3.access-key-id={SECRET}&s3.secret-access-key={SECRET}&s3.region=us-east-1",
        f"https://b.s3.amazonaws.com/k?X-Amz-Credential={SECRET}&X-Amz-Security-Token={SECRET}&X-Amz-Signature={SECRET}",
        f"s3://{SECRET}:{SECRET}@bucket/warehouse",
    ],
)
def test_every_credential_form_is_redacted(text):
    redacted = redact(text)
    assert SECRET not in redacted
    assert "***" in redacted


def test_what_is_not_a_credential_is_kept():
    assert redact("postgresql+psycopg2://factory@db:5432/lake?sslmode=require") == (
        "postgresql+psycopg2://factory@db:5432/lake?sslmode=require"
    )
    assert redact("sqlite:////home/me/.factory/catalog.db") == "sqlite:////home/me/.factory/catalog.db"
    assert redact(f"postgresql://factory:{SECRET}@db/lake?password={SECRET}&sslmode=require") == (
        "postgresql://factory:***@db/lake?password=***&sslmode=require"
    )
    assert redact("") == ""
    assert redact("s3.endpoint=http://127.0.0.1:9000&s3.region=us-east-1&s3.path-style-access=true") == (
        "s3.endpoint=http://127.0.0.1:9000&s3.region=us-east-1&s3.path-style-access=true"
    )


def test_a_long_message_costs_linear_time():
    # An error message can be long; a pattern that backtracks over it would hang the error path.
    texts = ["a" * 100_000, "key" * 30_000, "a=b" * 30_000, "'" + "key" * 30_000 + "': '", "http://" + "a:" * 50_000]
    began = time.perf_counter()
    for text in texts:
        redact(text)
    assert time.perf_counter() - began < 5
