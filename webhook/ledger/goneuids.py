"""`GoneUids`: the UIDs of pods and Jobs that left the view, remembered for a while.

An admission retried after its pod is gone must not be counted again (`PodUsage.reserve`
skips a UID remembered here), and a pod created and deleted before a replica saw it is
known by its UID (`PodUsage.knows`). A UID is remembered `GONE_MEMORY_SECONDS` after it
left, then forgotten; the map stays in the order UIDs left, so forgetting is O(forgotten).
"""

from __future__ import annotations

__all__ = ["GONE_MEMORY_SECONDS", "GoneUids"]

# how long the UID of a pod or Job that stopped holding quota is remembered
GONE_MEMORY_SECONDS = 600.0


class GoneUids:
    """UIDs by when they left the view, oldest first."""

    def __init__(self) -> None:
        self._left_at: dict[str, float] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._left_at

    def left(self, uid: str, now: float) -> None:
        """The object with this UID left the view (or left again) at `now`."""
        self._left_at.pop(uid, None)  # re-inserted at the end: the dict stays oldest first
        self._left_at[uid] = now

    def back(self, uid: str) -> None:
        """An object with this UID is in the view again."""
        self._left_at.pop(uid, None)

    def forget_before(self, now: float) -> None:
        """Forget the UIDs that left more than `GONE_MEMORY_SECONDS` before `now`."""
        horizon = now - GONE_MEMORY_SECONDS
        while self._left_at:
            uid, at = next(iter(self._left_at.items()))
            if at >= horizon:
                return
            del self._left_at[uid]
