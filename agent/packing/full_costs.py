"""What each file costs shown whole: exact where the tokenizer counted it, else estimated from this commit's sample.

Counting every file with the server's /tokenize costs seconds per million tokens, although a selection that fits
a window needs exact counts only for what it shows. So the packer counts a sample exactly (files taken in blob-id
order, a pseudo-random choice fixed by the content), estimates the rest with the sample's tokens per byte (per file
suffix where the sample holds enough of it), ranks and selects on those, and then counts exactly the files the
selection shows whole, selecting again while the exact counts say it does not fit. Every number the selection sees
is a function of the commit: which files are counted is decided by the same steps cold or warm, and the disk
cache only makes the counting faster. So cold and warm runs give the same pack.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from agent.packing.classify import TextFile
from agent.packing.tokens import CountRequest, TokenCounter

# The sample: this share of the repository's bytes, at least SAMPLE_MIN_BYTES (all of a small repository).
SAMPLE_SHARE = 1 / 50
SAMPLE_MIN_BYTES = 256 * 1024
# A suffix gets a ratio of its own once the sample holds this much of it; below, the sample's overall ratio.
SUFFIX_MIN_BYTES = 32 * 1024


class FullCosts:
    """Per file: tokens shown whole, and whether that number is exact."""

    def __init__(self, counter: TokenCounter, files: list[TextFile], requests: list[CountRequest]) -> None:
        self._counter = counter
        self._requests = requests
        self.values = [0] * len(files)
        self.exact = [False] * len(files)
        if not counter.exact:  # offline every count is an estimate: nothing to refine later
            self.values = counter.count(requests)
            self.exact = [True] * len(files)
            return
        order = sorted(range(len(files)), key=lambda index: files[index].blob_id)
        total = sum(request.size_hint for request in requests)
        wanted = max(SAMPLE_MIN_BYTES, total * SAMPLE_SHARE)
        sample, taken = [], 0
        for index in order:
            if taken >= wanted:
                break
            sample.append(index)
            taken += requests[index].size_hint
        self.count_exactly(sample)
        ratios = _suffix_ratios(
            (_suffix(files[index]), requests[index].size_hint, self.values[index]) for index in sample
        )
        overall = ratios.get("", counter.tokens_per_byte)
        for index, request in enumerate(requests):
            if not self.exact[index]:
                self.values[index] = math.ceil(request.size_hint * ratios.get(_suffix(files[index]), overall))

    def count_exactly(self, indices: Iterable[int]) -> bool:
        """Replace estimates by exact counts; True when any was replaced."""
        missing = sorted({index for index in indices if not self.exact[index]})
        if not missing:
            return False
        for index, count in zip(missing, self._counter.count([self._requests[i] for i in missing]), strict=True):
            self.values[index] = count
            self.exact[index] = True
        return True

    def total(self) -> int:
        return sum(self.values)


def _suffix(text_file: TextFile) -> str:
    """`.py`, or the whole name when it has no suffix (`Makefile`)."""
    name = text_file.path.rpartition("/")[2]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else name


def _suffix_ratios(measured: Iterable[tuple[str, int, int]]) -> dict[str, float]:
    """Tokens per byte per suffix with enough sample bytes, and overall under the key ''."""
    sizes: dict[str, int] = defaultdict(int)
    tokens: dict[str, int] = defaultdict(int)
    for suffix, size, count in measured:
        for key in (suffix, ""):
            sizes[key] += size
            tokens[key] += count
    return {
        key: tokens[key] / sizes[key] for key in sizes if sizes[key] and (key == "" or sizes[key] >= SUFFIX_MIN_BYTES)
    }
