"""Build src/myao2/infrastructure/search/data/ja_words.npz from the word vectors of the ja-ginza wheel.

    pip download --no-deps -d /tmp/wheels ja-ginza==5.3.0
    .venv/bin/python tools/ja_word_vectors.py /tmp/wheels/ja_ginza-5.3.0-py3-none-any.whl

ja-ginza (MIT) ships 20,000 chiVe word vectors (Apache-2.0, Works Applications) of 300
dimensions, with 480,443 words each pointing at one of them, as spaCy stores them: the
vectors as a .npy, the words by their 64-bit MurmurHash (seed 1) in a msgpack map, their
strings in a JSON list. This reads them without spaCy and keeps the words written in
Japanese script alone (up to 8 characters, as NFKC leaves them), each vector rounded to
8 bits (a cosine moves by about 0.001).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import struct
import sys
import unicodedata
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "myao2" / "infrastructure" / "search" / "data" / "ja_words.npz"
VOCAB = "ja_ginza/ja_ginza-5.3.0/vocab/"
MAX_LENGTH = 8
_JAPANESE = re.compile(r"^[\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+$")
_CONTENT = re.compile(r"[\u3005\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_M, _R, _MASK = 0xC6A4A7935BD1E995, 47, (1 << 64) - 1


def murmurhash64a(data: bytes, seed: int = 1) -> int:
    """spaCy's hash of a string (MurmurHash64A of its UTF-8 bytes, seed 1)."""
    h = (seed ^ (len(data) * _M)) & _MASK
    whole = len(data) // 8
    for i in range(whole):
        k = (struct.unpack_from("<Q", data, i * 8)[0] * _M) & _MASK
        k = ((k ^ (k >> _R)) * _M) & _MASK
        h = ((h ^ k) * _M) & _MASK
    rest = data[whole * 8 :]
    if rest:
        for i in range(len(rest) - 1, -1, -1):
            h ^= rest[i] << (8 * i)
        h = (h * _M) & _MASK
    h ^= h >> _R
    h = (h * _M) & _MASK
    return h ^ (h >> _R)


def unpack_map(data: bytes) -> dict[int, int]:
    """A msgpack map of unsigned integers to unsigned integers (spaCy's key2row)."""
    position = 0

    def number() -> int:
        nonlocal position
        tag = data[position]
        position += 1
        if tag <= 0x7F:
            return tag
        size, fmt = {0xCC: (1, ">B"), 0xCD: (2, ">H"), 0xCE: (4, ">I"), 0xCF: (8, ">Q")}[tag]
        value = struct.unpack_from(fmt, data, position)[0]
        position += size
        return value

    tag = data[0]
    size, fmt = {0xDE: (2, ">H"), 0xDF: (4, ">I")}[tag]
    count = struct.unpack_from(fmt, data, 1)[0]
    position = 1 + size
    return {number(): number() for _ in range(count)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="ja_ginza-5.3.0-py3-none-any.whl")
    args = parser.parse_args()
    with zipfile.ZipFile(args.wheel) as wheel:
        vectors = np.load(io.BytesIO(wheel.read(VOCAB + "vectors")))
        key_rows = unpack_map(wheel.read(VOCAB + "key2row"))
        strings = json.loads(wheel.read(VOCAB + "strings.json"))
    word_rows = {}
    for word in strings:
        if len(word) <= MAX_LENGTH and _JAPANESE.match(word) and _CONTENT.search(word):
            if unicodedata.normalize("NFKC", word) == word:
                row = key_rows.get(murmurhash64a(word.encode("utf-8")))
                if row is not None:
                    word_rows[word] = row
    used = sorted(set(word_rows.values()))
    renumbered = {row: i for i, row in enumerate(used)}
    kept = vectors[used].astype(np.float64)
    kept /= np.maximum(np.linalg.norm(kept, axis=1, keepdims=True), 1e-12)
    quantized = np.round(kept * 127 / np.abs(kept).max(axis=1, keepdims=True)).astype(np.int8)
    words = sorted(word_rows)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT,
        words=np.array(words, dtype=f"U{MAX_LENGTH}"),
        rows=np.array([renumbered[word_rows[w]] for w in words], dtype=np.uint16),
        vectors=quantized,
    )
    print(f"{len(words)} words, {len(used)} vectors -> {OUT} ({OUT.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
