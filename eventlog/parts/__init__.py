"""The rules of one part of a stream, written once: timely's progress rules (``rules``), committed reads over
writer epochs (``committed``), the checked part reader every consumer reads through (``reader.CheckedPart``)
and the checked part writer, ``Capture`` (``capture``; public as ``capture.Capture``).

Each name is imported from its module on first use (``eventlog._lazy``): a reader does not import the writer."""

from typing import TYPE_CHECKING

from .._lazy import lazy_package

if TYPE_CHECKING:
    from .capture import Capture
    from .committed import ISOLATIONS, CommittedPart, check_isolation
    from .reader import CheckedPart, part_frontier
    from .rules import PartProgress, frontier_text, time_text

lazy_package(__name__, {"Capture": ".capture", "ISOLATIONS": ".committed", "CommittedPart": ".committed",
                        "check_isolation": ".committed", "CheckedPart": ".reader", "part_frontier": ".reader",
                        "PartProgress": ".rules", "frontier_text": ".rules", "time_text": ".rules"})

__all__ = ["ISOLATIONS", "Capture", "CheckedPart", "CommittedPart", "PartProgress", "check_isolation", "frontier_text",
           "part_frontier", "time_text"]
