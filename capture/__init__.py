"""Capture taps: write an operator's output stream into a log as Progress/Messages events.

``Capture`` writes one worker's part from Python (it lives with the rules of a part, in ``eventlog.parts``, so
that the layers below the taps may write parts too); ``tap`` and ``tap_batches`` capture Spark DataFrames (the
Spark integration: this package sits above ``connectors.spark``). Each name is imported on first use
(``eventlog._lazy``): ``from capture import Capture`` does not import the Spark taps."""

from typing import TYPE_CHECKING

from eventlog._lazy import lazy_package

if TYPE_CHECKING:
    from eventlog.parts.capture import Capture

    from .tap import tap, tap_batches

lazy_package(__name__, {"Capture": "eventlog.parts.capture", "tap": ".tap", "tap_batches": ".tap"})

__all__ = ["Capture", "tap", "tap_batches"]
