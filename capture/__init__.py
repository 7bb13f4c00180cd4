"""Capture taps: write an operator's output stream into a log as Progress/Messages events."""

from .capture import Capture

__all__ = ["Capture"]
