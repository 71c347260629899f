"""How a request body is framed on the wire: by Content-Length or in chunks, and how big
the fake LLM lets it grow. Both HTTP front ends read bodies by these rules."""

from __future__ import annotations

from collections.abc import Mapping

from swarmdeck.testing.answer import HttpError, bad_request

MAX_BODY_BYTES = 32 * 1024 * 1024


def body_length(headers: Mapping[str, str]) -> int:
    """The Content-Length a request announces (0 if none); 400 or 413 if it is unusable."""
    try:
        length = int(headers.get("content-length") or 0)
    except ValueError:
        raise bad_request("invalid Content-Length header") from None
    if length < 0 or length > MAX_BODY_BYTES:
        raise HttpError(413, "request body too large")
    return length


def is_chunked(headers: Mapping[str, str]) -> bool:
    """Whether the request body comes in chunked encoding."""
    return "chunked" in headers.get("transfer-encoding", "").lower()


def chunk_size(line: bytes, read_so_far: int) -> int:
    """The size on a chunk's header line; 400 if malformed, 413 if the body grows too big."""
    try:
        size = int(line.split(b";")[0].strip(), 16)
    except ValueError:
        raise bad_request("malformed chunked request body") from None
    if size < 0 or read_so_far + size > MAX_BODY_BYTES:
        raise HttpError(413, "request body too large")
    return size
