"""The semantic index's records: a question and its unit-length embedding, packed as bytes. Sans-I/O.

A record is `<u32 length><question utf-8><float32 * dims>`. Vectors are normalized when packed, so a
lookup's cosine similarity is a plain dot product, and comparing a query with a thousand records
reads no JSON.
"""

from __future__ import annotations

import math
import operator
import struct
from array import array
from typing import List, Sequence, Tuple

__all__ = ["pack", "unpack", "normalize", "dot"]


def normalize(vector: Sequence[float]) -> List[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else [0.0 for _ in vector]


def pack(question: str, vector: Sequence[float]) -> bytes:
    text = question.encode()
    return struct.pack("<I", len(text)) + text + array("f", normalize(vector)).tobytes()


def unpack(record: bytes) -> Tuple[str, array[float]]:
    (n,) = struct.unpack_from("<I", record)
    question = record[4:4 + n].decode()
    vector = array("f")
    vector.frombytes(record[4 + n:])
    return question, vector


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product (cosine similarity of unit vectors); 0 for vectors of different lengths."""
    if len(a) != len(b):
        return 0.0
    total: float = sum(map(operator.mul, a, b))
    return total
