#!/usr/bin/env python3
"""Fuzz driver for the bundle decoder: mutated valid bundles and random bytes through decode,
iter_bundles and Bundle.payloads().  The only exception allowed is BundleError.

    python tools/fuzz_bundle.py --count 1000000 --seed 1                 # native decoder
    python tools/fuzz_bundle.py --count 20000 --seed 1 --impl both       # also differential vs reference
    python tools/fuzz_bundle.py --seed 1 --dump 12345                    # print input #12345 as hex

Inputs are generated from one seeded RNG, so (seed, index) reproduces an input.  Exits non-zero if any
input raised anything but BundleError (or, with --impl both, if the implementations disagree).  A hard
crash (segfault) is reported by faulthandler with the Python stack; rerun with --dump to get the bytes of
the last index printed by --progress.
"""

from __future__ import annotations

import argparse
import faulthandler
import random
import re
import struct
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eventlog import bundle as B  # noqa: E402

U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF
_INTERESTING = [0, 1, 2, 3, 4, 5, 12, 13, 15, 16, 17, 31, 32, 33, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF,
                0x80000000, 0xFFFFFFF0, 0xFFFFFFFF]
_HEADER_FIELDS = [(0, 4), (4, 8), (12, 8), (20, 4), (24, 4), (28, 4)]
_MAX_MESSAGES = [B.DEFAULT_MAX_MESSAGES] * 12 + [0, 1, 2, 7, 2**63 - 1]


def _random_bundle(rng: random.Random) -> bytes:
    """A valid bundle with random type, ids, types and payloads (encoded by the reference)."""
    kind = rng.random()
    ts = rng.choice([0, rng.getrandbits(41), U64])
    if kind < 0.1:
        return B.reference.encode([], bundle_type=B.EMPTY, last_id=rng.choice([0, rng.getrandbits(64)]), bundle_ts=ts)
    n = rng.choice([1, 1, 2, 3, 5, 8, rng.randint(1, 64)])
    sizes = [rng.choice([0, 1, 4, 12, 13, 16, rng.randint(0, 300)]) for _ in range(n)]
    payloads = [rng.randbytes(s) for s in sizes]
    if kind < 0.25:
        return B.reference.encode(payloads, bundle_type=B.BARRIER, last_id=rng.getrandbits(rng.choice([8, 64])),
                                  bundle_ts=ts)
    first = rng.choice([1, rng.randint(1, 1000), U64 - n + 1, rng.randint(1, U64 - n + 1)])
    types = rng.choice([None, [rng.choice([2, 3, 4, 5, rng.randint(2, U32)]) for _ in range(n)]])
    return B.reference.encode(payloads, first, types, bundle_ts=ts)


def corpus(rng: random.Random, size: int = 256) -> list[bytes]:
    """Valid inputs to mutate: single bundles and concatenations of two or three."""
    singles = [_random_bundle(rng) for _ in range(size)]
    multi = [b"".join(rng.sample(singles, rng.randint(2, 3))) for _ in range(size // 4)]
    return singles + multi


def _message_headers(data: bytes) -> list[int]:
    """Offsets of the message headers of the valid bundles in ``data``."""
    out = []
    for b in B.reference.iter_bundles(data):
        out += [int(o) - 16 for o in b.offsets]
    return out


def _mutate(rng: random.Random, seed: bytes, headers: list[int], pool: list[bytes]) -> bytes:
    data = bytearray(seed)
    if headers and rng.random() < 0.3:  # a message header field: PayloadSize, MessageId or MessageType
        h = rng.choice(headers)
        off, width = rng.choice([(0, 4), (4, 8), (12, 4)])
        (v,) = struct.unpack_from("<I" if width == 4 else "<Q", data, h + off)
        v = rng.choice([v + 1, v - 1, v + 16, v - 16, 0, rng.choice(_INTERESTING), rng.getrandbits(8 * width)])
        data[h + off : h + off + width] = (v & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        if rng.random() < 0.5:
            return bytes(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 6])):
        op = rng.randrange(10)
        n = len(data)
        if op == 0 and n:  # flip bits
            i = rng.randrange(n)
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # random byte
            data[rng.randrange(n)] = rng.randrange(256)
        elif op == 2 and n >= 4:  # interesting u32 anywhere
            i = rng.randrange(n - 3)
            data[i : i + 4] = struct.pack("<I", rng.choice(_INTERESTING))
        elif op == 3:  # interesting value in a bundle header field
            off, width = rng.choice(_HEADER_FIELDS)
            if off + width <= n:
                v = rng.choice(_INTERESTING + [U64, 2**63, rng.getrandbits(64)])
                data[off : off + width] = (v & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        elif op == 4:  # truncate
            del data[rng.randint(0, n) :]
        elif op == 5:  # insert random bytes
            i = rng.randint(0, n)
            data[i:i] = rng.randbytes(rng.randint(1, 24))
        elif op == 6 and n:  # delete a range
            i = rng.randrange(n)
            del data[i : i + rng.randint(1, 24)]
        elif op == 7 and n:  # duplicate a range
            i = rng.randrange(n)
            data[i:i] = data[i : i + rng.randint(1, 48)]
        elif op == 8:  # splice with another corpus entry
            other = rng.choice(pool)
            cut = rng.randint(0, n)
            data = data[:cut] + other[rng.randint(0, len(other)) :]
        elif op == 9 and n >= 16:  # off-by-small on a u32 (sizes and counts)
            i = rng.randrange(n - 3)
            (v,) = struct.unpack_from("<I", data, i)
            struct.pack_into("<I", data, i, (v + rng.choice([-17, -16, -1, 1, 15, 16, 17])) & U32)
    if len(data) >= 32 and rng.random() < 0.3:  # make RawBundleSize agree with the length again
        struct.pack_into("<I", data, 28, min(len(data) - 32, U32))
    return bytes(data)


def inputs(seed: int, count: int) -> Iterator[tuple[bytes, int]]:
    """(input bytes, max_messages) for indexes 0..count-1 of a seed."""
    rng = random.Random(seed)
    pool = corpus(rng)
    headers = [_message_headers(d) for d in pool]
    magic = struct.pack("<I", B.MAGIC)
    for _ in range(count):
        r = rng.random()
        if r < 0.80:
            k = rng.randrange(len(pool))
            data = _mutate(rng, pool[k], headers[k], pool)
        elif r < 0.90:
            data = rng.randbytes(rng.randint(0, 96))
        elif r < 0.97:  # a plausible header over random bytes
            body = rng.randbytes(rng.randint(0, 200))
            data = magic + struct.pack("<QQIII", rng.getrandbits(64), rng.choice([0, 1, rng.getrandbits(64)]),
                                       rng.choice([0, 1, 2, 3, rng.getrandbits(32)]), rng.randint(0, 4),
                                       rng.choice([len(body), rng.randint(0, 256), rng.getrandbits(32)])) + body
        else:
            data = rng.choice(pool)
        yield data, rng.choice(_MAX_MESSAGES)


@dataclass
class FuzzResult:
    """Counts of a fuzz run; ``failures`` lists (index, description, input hex) of every bad input."""

    inputs: int = 0
    decoded: int = 0  # decode() accepted the input
    bundles: int = 0  # bundles yielded by iter_bundles over all inputs
    rejected: Counter[str] = field(default_factory=Counter)  # BundleError reasons, by their first words
    failures: list[tuple[int, str, str]] = field(default_factory=list)
    seconds: float = 0.0


def _reason_kind(reason: str) -> str:
    """The reason with its numbers replaced by N: one line per kind of rejection."""
    return re.sub(r"0x[0-9A-F]+|\d+", "N", reason)


def _run_one(impl: Any, data: bytes, max_messages: int, res: FuzzResult | None) -> tuple[Any, ...]:
    """Outcome of decode + iter_bundles + payloads() on one input; non-BundleError exceptions propagate."""
    out: list[Any] = []
    try:
        b = impl.decode(data, max_messages=max_messages)
        arr = b.payloads()
        out.append(("ok", b.count, b.last_id, b.ids.tolist(), b.types.tolist(), arr.to_pylist()))
        if res is not None:
            res.decoded += 1
    except B.BundleError as exc:
        out.append(("err", exc.offset, exc.reason))
        if res is not None:
            res.rejected[_reason_kind(exc.reason)] += 1
    try:
        for b in impl.iter_bundles(data, max_messages=max_messages):
            out.append(("bundle", b.offset, b.count, b.lengths.tolist()))
            if res is not None:
                res.bundles += 1
    except B.BundleError as exc:
        out.append(("iter-err", exc.offset, exc.reason))
    return tuple(out)


def fuzz(count: int, seed: int, *, impl: str = "native", progress: int = 0) -> FuzzResult:
    """Runs ``count`` inputs of ``seed`` through the chosen implementation ("native", "reference", or
    "both": native, and the reference compared with it)."""
    if impl in ("native", "both") and B.native is None:
        raise SystemExit("the native codec eventlog._bundle_native is not built: pip install -e .")
    main = B.reference if impl == "reference" else B.native
    res = FuzzResult()
    t0 = time.perf_counter()
    for i, (data, max_messages) in enumerate(inputs(seed, count)):
        if progress and i % progress == 0:
            print(f"  ... input {i} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
        res.inputs += 1
        try:
            got = _run_one(main, data, max_messages, res)
            if impl == "both":
                want = _run_one(B.reference, data, max_messages, None)
                if got != want:
                    res.failures.append((i, f"native {got!r} != reference {want!r}", data.hex()))
        except Exception as exc:  # anything but BundleError is a bug
            res.failures.append((i, f"{type(exc).__name__}: {exc}", data.hex()))
    res.seconds = time.perf_counter() - t0
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000, help="number of inputs (default 100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--impl", choices=["native", "reference", "both"], default="native")
    ap.add_argument("--progress", type=int, default=0, help="print a line every N inputs")
    ap.add_argument("--dump", type=int, metavar="INDEX", help="print input INDEX of the seed as hex and exit")
    args = ap.parse_args(argv)
    if args.dump is not None:
        for i, (data, max_messages) in enumerate(inputs(args.seed, args.dump + 1)):
            if i == args.dump:
                print(f"# seed {args.seed} index {i} max_messages {max_messages}\n{data.hex()}")
        return 0
    res = fuzz(args.count, args.seed, impl=args.impl, progress=args.progress)
    print(f"fuzz_bundle: impl={args.impl} seed={args.seed} inputs={res.inputs} decoded={res.decoded} "
          f"bundles={res.bundles} rejected={sum(res.rejected.values())} failures={len(res.failures)} "
          f"time={res.seconds:.1f}s ({res.inputs / max(res.seconds, 1e-9):,.0f} inputs/s)")
    for reason, n in res.rejected.most_common():
        print(f"  {n:9d}  {reason}")
    for i, what, hexdata in res.failures[:20]:
        print(f"FAILURE at index {i}: {what}\n  input: {hexdata[:400]}", file=sys.stderr)
    return 1 if res.failures else 0


if __name__ == "__main__":
    faulthandler.enable()  # a hard crash prints the Python stack (index and seed are in --progress lines)
    sys.exit(main())
