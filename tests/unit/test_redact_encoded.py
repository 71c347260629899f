"""Issue 10, hole 1's encoded keys: the redactor also masks a configured key reversed, in
hex and in base64 (at any byte alignment, inside a longer encoded text)."""

from __future__ import annotations

import base64

import pytest

from swarmdeck.secrets.redact import REDACTED, Redactor

KEY = "sk-proj-" + "Ab3dEf9hIj" * 4


@pytest.mark.parametrize("prefix", [b"", b"x", b"xy", b"line one\n"])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_base64_at_every_alignment(prefix: bytes, encode) -> None:
    text = encode(prefix + KEY.encode() + b"\n").decode()
    out = Redactor([KEY]).redact(f"output: {text} end")
    assert REDACTED in out
    # What is left of the encoding cannot give the key back: at most a quartet each side.
    left = out.split(REDACTED)
    assert all(len(part.replace("output: ", "").replace(" end", "")) <= 16 for part in left)


@pytest.mark.parametrize("form", [KEY[::-1], KEY.encode().hex(), KEY.encode().hex().upper()])
def test_reversed_and_hex(form: str) -> None:
    redactor = Redactor([KEY])
    assert form not in redactor.redact(f"a {form} b")
    assert redactor.contains_secret(form) == "configured key"


def test_plain_text_is_left_alone() -> None:
    text = "no key here, just base64 of hello: aGVsbG8="
    assert Redactor([KEY]).redact(text) == text
