"""The redaction filter: configured keys, credential shapes, and what must survive."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from swarmdeck.secrets.redact import (
    REDACTED,
    Redactor,
    default_redactor,
    load_redactor,
    set_default_redactor,
)
from swarmdeck.secrets.store import CredentialStore

SHAPES = {
    "OpenAI key": "sk-abcdefghijklmnopqrstuvwxyz012345",
    "OpenAI project key": "sk-proj-AbC_dEf-1234567890abcdefghij",
    "Anthropic key": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123",
    "AWS": "AKIAIOSFODNN7EXAMPLE",
    "GitHub classic": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "GitHub oauth": "gho_abcdefghijklmnopqrstuvwxyz0123456789",
    "GitHub server": "ghs_abcdefghijklmnopqrstuvwxyz0123456789",
    "GitHub fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "Slack": "xoxb-123456789012-abcdefghijkl",
    "Google": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
}


@pytest.mark.parametrize("secret", SHAPES.values(), ids=SHAPES.keys())
def test_credential_shapes_are_redacted(secret: str) -> None:
    out = Redactor().redact(f"before {secret} after")
    assert out == f"before {REDACTED} after"


def test_kind_names_the_shape() -> None:
    r = Redactor()
    assert r.contains_secret(f"x {SHAPES['Anthropic key']}") == "Anthropic key"
    assert r.contains_secret(f"x {SHAPES['OpenAI key']}") == "OpenAI key"
    assert r.contains_secret(f"x {SHAPES['AWS']}") == "AWS access key id"
    assert r.contains_secret("nothing to see here") is None


def test_labelled_values_keep_their_label() -> None:
    r = Redactor()
    assert r.redact("Authorization: Bearer eyJhbGciOi.J9abc.def123") == (
        f"Authorization: Bearer {REDACTED}"
    )
    assert r.redact("OPENAI_API_KEY=abc123def456ghi") == f"OPENAI_API_KEY={REDACTED}"
    assert r.redact('{"api_key": "zz9zz9zz9zz9"}') == f'{{"api_key": "{REDACTED}"}}'
    assert r.redact("password=hunter22 next") == f"password={REDACTED} next"
    assert r.redact("postgresql://bob:s3cret@db:5432/x") == f"postgresql://bob:{REDACTED}@db:5432/x"


def test_pem_private_key_block_is_redacted_whole() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----"
    assert Redactor().redact(f"key:\n{pem}\ndone") == f"key:\n{REDACTED}\ndone"
    # A block cut off by an output cap still goes.
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    assert Redactor().redact(cut) == REDACTED


@pytest.mark.parametrize(
    "text",
    [
        "the bearer of this letter is authorized",
        "password: make it strong",
        'api_key = os.environ["OPENAI_API_KEY"]',
        "api_key: str | None = None",
        "password=self.password",
        "task-abcdefghijklmnopqrstuvwxyz0123",
        "http://localhost:8080/path",
        "def test_sk(): pass",
    ],
)
def test_prose_and_code_survive(text: str) -> None:
    r = Redactor()
    assert r.redact(text) == text
    assert r.contains_secret(text) is None


def test_known_secrets_are_replaced_and_short_ones_ignored() -> None:
    r = Redactor(["my-own-provider-key-9"])
    r.add("short")  # under 8 characters: would redact trivia everywhere
    assert r.redact("use my-own-provider-key-9 now") == f"use {REDACTED} now"
    assert r.redact("short stays") == "short stays"
    assert r.contains_secret("x my-own-provider-key-9") == "configured key"


def test_a_longer_secret_containing_a_shorter_one_is_replaced_whole() -> None:
    r = Redactor(["abcdefgh", "abcdefgh-and-more"])
    assert r.redact("abcdefgh-and-more") == REDACTED


def test_redact_obj_recurses_and_keeps_other_types() -> None:
    r = Redactor(["configured-key-1234"])
    obj = {"a": ["x configured-key-1234", 3, None], "b": ("AKIAIOSFODNN7EXAMPLE",), "n": 1.5}
    assert r.redact_obj(obj) == {"a": [f"x {REDACTED}", 3, None], "b": (REDACTED,), "n": 1.5}


def test_default_redactor_is_one_instance_and_replaceable() -> None:
    before = default_redactor()
    assert default_redactor() is before
    mine = Redactor(["process-wide-secret"])
    set_default_redactor(mine)
    try:
        assert default_redactor() is mine
    finally:
        set_default_redactor(before)


def test_load_redactor_knows_every_stored_key(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.set("glm", "glm-key-0123456789")
    store.set("kimi", "kimi-key-abcdefghij")
    r = load_redactor(store)
    assert r.redact("glm-key-0123456789 kimi-key-abcdefghij") == f"{REDACTED} {REDACTED}"


def test_redact_is_fast_on_large_text() -> None:
    source = Path(os.__file__).read_text()  # a large real file with no secrets
    r = Redactor(["a-configured-key-123"])
    start = time.perf_counter()
    for _ in range(10):
        assert r.redact(source) == source
    per_mb = (time.perf_counter() - start) / 10 / (len(source) / 1e6)
    # Measured near 0.04 s/MB; the bound only catches a regression to a per-position scan.
    assert per_mb < 0.5
