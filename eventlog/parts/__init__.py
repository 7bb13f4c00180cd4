"""The rules of one part of a stream, written once: timely's progress rules (``rules``), committed reads over
writer epochs (``committed``), the checked part reader every consumer reads through (``reader.CheckedPart``)
and the checked part writer, ``Capture`` (``capture``; public as ``capture.Capture``)."""

from .capture import Capture
from .committed import ISOLATIONS, CommittedPart, check_isolation
from .reader import CheckedPart, part_frontier
from .rules import PartProgress, frontier_text, time_text

__all__ = ["ISOLATIONS", "Capture", "CheckedPart", "CommittedPart", "PartProgress", "check_isolation", "frontier_text",
           "part_frontier", "time_text"]
