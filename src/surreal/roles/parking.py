"""Who gets a parking place: the rule the replay's and the ps's cores share for requests they hold.

A role parks requests it cannot answer yet (a replay shard's sample requests waiting for data, a ps's held parameter
requests waiting for a newer blob) in a bounded number of places, and no peer may hold more than its share. Caps
alone are not fair: a few peers each at their cap can fill every place, and then every other peer, an honest
learner among them, is refused for as long as they keep it full. So when the places are full, a peer holding fewer
requests than the peer holding the most still gets one: the newest request of the peer holding the most is evicted
(and answered, as the role answers a request it cannot hold) to make room. Peers end up holding places in turns of
equal shares, and a peer that parks a request or two at a time (a learner's prefetch, an actor's held fetch) always
gets its place, whatever the others park.

`FairParking` only counts and decides; the role keeps the requests and answers the evicted one. Ties among the peers
holding the most go to the one that reached that count first, so a driver's order of events decides everything
(the simulator replays a seed exactly). Torch-free.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)


class FairParking(Generic[P]):
    """Parked requests counted by peer, within `capacity` places and `per_peer` places a peer."""

    def __init__(self, capacity: int, per_peer: int) -> None:
        if capacity < 1 or per_peer < 1:
            raise ValueError(f"capacity and per_peer must be >= 1 (got {capacity}, {per_peer})")
        self.capacity, self.per_peer = capacity, per_peer
        self.counts: dict[P, int] = {}
        self.total = 0
        # _holding[c]: the peers holding exactly c requests, in the order they came to hold c (dicts keep order).
        self._holding: list[dict[P, None]] = [{} for _ in range(per_peer + 1)]

    def admit(self, peer: P) -> tuple[bool, P | None]:
        """Whether `peer` may park one more request, and whose newest parked request must be evicted first to make
        room (None: a place is free). A peer at its cap is refused; with every place taken, so is a peer holding
        as many as any other."""
        held = self.counts.get(peer, 0)
        if held >= self.per_peer:
            return False, None
        if self.total < self.capacity:
            return True, None
        most = self.most()
        if most is not None and self.counts[most] > held:
            return True, most
        return False, None

    def most(self) -> P | None:
        """The peer holding the most parked requests (of those holding equally many, the first to get there)."""
        for held in range(self.per_peer, 0, -1):
            if self._holding[held]:
                return next(iter(self._holding[held]))
        return None

    def add(self, peer: P) -> None:
        """`peer` parked one more request (`admit` said it may)."""
        held = self.counts.get(peer, 0)
        self._move(peer, held, held + 1)
        self.total += 1

    def remove(self, peer: P) -> None:
        """One of `peer`'s parked requests left its place (answered, expired or evicted)."""
        held = self.counts[peer]
        self._move(peer, held, held - 1)
        self.total -= 1

    def _move(self, peer: P, before: int, after: int) -> None:
        if before:
            del self._holding[before][peer]
        if after:
            self._holding[after][peer] = None
            self.counts[peer] = after
        else:
            del self.counts[peer]
