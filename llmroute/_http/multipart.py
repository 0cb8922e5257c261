"""`multipart/form-data` bodies (RFC 7578) for the batch APIs' file uploads. Sans-I/O: bytes in, bytes out.

Form fields first, then files, each part with its `Content-Disposition` (and a file's
`Content-Type`), as httpx encodes `data=` and `files=`. The boundary is passed in (the caller draws
it at random), so the output is reproducible in tests. Never reads a file or touches a socket.
"""

from __future__ import annotations

from typing import List, Mapping, Tuple

__all__ = ["encode_multipart"]


def _quoted(value: str) -> str:
    # RFC 7578 §4.2: names and filenames in quotes, with `"` and newlines percent-encoded (as browsers do).
    return value.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def encode_multipart(data: Mapping[str, str] | None, files: Mapping[str, Tuple[str, bytes, str]] | None,
                     boundary: str) -> Tuple[str, bytes]:
    """(the Content-Type header value, the body) for form fields `data` and `files` ({field: (filename,
    content, content type)}). Raises ValueError for a boundary found in a part (pick another)."""
    if not boundary or len(boundary) > 70:
        raise ValueError("a multipart boundary has 1 to 70 characters")
    marker = f"--{boundary}".encode("ascii")
    parts: List[bytes] = []
    for name, value in (data or {}).items():
        parts.append(b"%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n"
                     % (marker, _quoted(name).encode(), str(value).encode()))
    for name, (filename, content, ctype) in (files or {}).items():
        if marker in content:
            raise ValueError("the multipart boundary occurs in a file's content")
        head = (f'Content-Disposition: form-data; name="{_quoted(name)}"; filename="{_quoted(filename)}"\r\n'
                f"Content-Type: {ctype}\r\n\r\n").encode()
        parts.append(b"%s\r\n%s%s\r\n" % (marker, head, content))
    parts.append(marker + b"--\r\n")
    return f"multipart/form-data; boundary={boundary}", b"".join(parts)
