"""An export's content hash: of the pairs it holds, whatever order they come in.

A pair is ten 64-bit words (`pair_words`): 128 bits of its prompt's and of each reply's content hash, its
margin's and weight's bits, and 64 bits of the SHA-256 of its annotator kind and of its public name
(a pseudonym, never a database id). `SplitDigest` hashes each pair in two lanes (every word mixed with a
key of its own by splitmix64's finaliser, the mixed words added up and mixed again) and adds the pairs'
hashes up, modulo 2**64 a lane. A sum does not depend on the order the rankings were stored in (two
imports at once, a shuffled file) nor on how the batches cut the pairs, and a pair met twice counts
twice. numpy does the arithmetic without Python's lock, so the writer's thread hashes one batch while
the next is read. The split's hash is SHA-256 of its count and its two sums.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

WORDS = 10
LANES = 2
# splitmix64's finaliser (Steele, Lea and Flood's constants)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
_MULTIPLIERS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _keys() -> np.ndarray:
    """A fixed key per lane and word (and one per lane for the pair's mix), from SHA-256: never to change."""
    words = [
        hashlib.sha256(f"preflab export digest {lane}:{k}".encode()).digest()[:8]
        for lane in range(LANES)
        for k in range(WORDS + 1)
    ]
    return np.frombuffer(b"".join(words), dtype="<u8").reshape(LANES, WORDS + 1).astype(np.uint64)


KEYS = _keys()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on an array of uint64 (multiplication wraps modulo 2**64)."""
    x ^= x >> _SHIFTS[0]
    x *= _MULTIPLIERS[0]
    x ^= x >> _SHIFTS[1]
    x *= _MULTIPLIERS[1]
    x ^= x >> _SHIFTS[2]
    return x


def hash_words(hashes: Sequence[str]) -> np.ndarray:
    """(k, 2) words of k content hashes (SHA-256 in hex): their first 128 bits."""
    return np.array([(int(h[:16], 16), int(h[16:32], 16)) for h in hashes], dtype=np.uint64).reshape(-1, 2)


def text_words(values) -> np.ndarray:
    """(n, 1) words of an Arrow array of short texts (kinds, pseudonyms): 64 bits of each distinct one's SHA-256."""
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(values)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    table = np.array(
        [
            int.from_bytes(hashlib.sha256(str(v).encode()).digest()[:8], "little")
            for v in encoded.dictionary.to_pylist()
        ],
        dtype=np.uint64,
    )
    return table[encoded.indices.to_numpy(zero_copy_only=False)].reshape(-1, 1)


def float_words(values) -> np.ndarray:
    """(n, 1) words of an Arrow float64 array: each value's bits (-0.0 as 0.0)."""
    array = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64) + 0.0
    return array.view("<u8").astype(np.uint64).reshape(-1, 1)


def pair_words(prompt, chosen, rejected, margin, weight, kind, annotator) -> np.ndarray:
    """(n, WORDS) words of n pairs: three (n, 2) content-hash words, then Arrow arrays of the rest."""
    return np.concatenate(
        [prompt, chosen, rejected, float_words(margin), float_words(weight), text_words(kind), text_words(annotator)],
        axis=1,
    )


class SplitDigest:
    """A split's pairs, added up: how many, and the sum of their hashes in each lane."""

    def __init__(self) -> None:
        self.count = 0
        self.lanes = np.zeros(LANES, dtype=np.uint64)

    def add(self, words: np.ndarray) -> None:
        """Add the pairs of a batch (`pair_words`)."""
        self.count += len(words)
        sums = np.empty(LANES, dtype=np.uint64)
        for lane in range(LANES):
            mixed = _mix(words ^ KEYS[lane, :WORDS]).sum(axis=1, dtype=np.uint64)
            sums[lane] = _mix(mixed ^ KEYS[lane, WORDS]).sum(dtype=np.uint64)
        self.lanes += sums  # modulo 2**64: numpy's unsigned arrays wrap

    def hexdigest(self) -> str:
        return hashlib.sha256(b"pairs:%d:" % self.count + self.lanes.astype("<u8").tobytes()).hexdigest()
