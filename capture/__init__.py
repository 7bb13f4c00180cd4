"""Capture taps: write an operator's output stream into a log as Progress/Messages events."""

from .capture import Capture
from .tap import tap, tap_batches

__all__ = ["Capture", "tap", "tap_batches"]
