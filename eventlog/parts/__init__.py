"""The rules of reading one part of a stream, written once: timely's progress rules (``rules``), committed
reads over writer epochs (``committed``) and the checked part reader every consumer reads through
(``reader.CheckedPart``)."""

from .committed import ISOLATIONS, CommittedPart, check_isolation
from .reader import CheckedPart, part_frontier
from .rules import PartProgress, frontier_text, time_text

__all__ = ["ISOLATIONS", "CheckedPart", "CommittedPart", "PartProgress", "check_isolation", "frontier_text",
           "part_frontier", "time_text"]
