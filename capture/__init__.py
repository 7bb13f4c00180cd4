"""Capture taps: write an operator's output stream into a log as Progress/Messages events.

``Capture`` writes one worker's part from Python (it lives with the rules of a part, in ``eventlog.parts``, so
that the layers below the taps may write parts too); ``tap`` and ``tap_batches`` capture Spark DataFrames (the
Spark integration: this package sits above ``connectors.spark``)."""

from eventlog.parts.capture import Capture

from .tap import tap, tap_batches

__all__ = ["Capture", "tap", "tap_batches"]
