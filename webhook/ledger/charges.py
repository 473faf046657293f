"""`ChargeCache`: one `Charge` object per distinct charge, shared by every holder of it.

Pods stamped from one template are charged alike, so a large cluster holds far fewer
distinct charges than pods and records; sharing one object per charge text keeps memory
in line with the distinct charges, and parses each record's annotation once. Entries are
weak: a charge no pod, record or reservation holds any more is forgotten by itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from quota.charge import Charge

__all__ = ["ChargeCache"]


class ChargeCache:
    """Charges by the annotation text they were parsed from or print as, while held."""

    def __init__(self) -> None:
        self._by_text: weakref.WeakValueDictionary[str, Charge] = weakref.WeakValueDictionary()

    def parsed(self, text: str, parse: Callable[[], Charge | None]) -> Charge | None:
        """The charge an annotation text records (`parse` runs only for a text not held)."""
        found = self._by_text.get(text)
        if found is None:
            found = parse()
            if found is not None:
                self._by_text[text] = found
        return found

    def shared(self, charge: Charge) -> Charge:
        """The object held for an equal charge, or this one from now on."""
        text = charge.to_annotation()
        found = self._by_text.get(text)
        if found is None:
            self._by_text[text] = charge
            return charge
        return found
