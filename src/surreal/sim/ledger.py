"""What the simulator checks: every honest chunk's fate, every counter, every rule of flow control.

The honest actors tag each chunk (the first cell of its tagged field holds the actor's index, the next its serial
number: `tag`), so the ledger follows each one from the actor that sent it to the update that learned from it. At the
end of a run every honest chunk sent must be in exactly one place: learned once, still held (a shard, the learner's
feed or port, a pipe), or inside a process the scenario killed (counted when it died); a chunk dropped as stale or
evicted from a full FIFO is a loss, allowed only where the scenario says its faults make some unavoidable.

The invariants (`Ledger.check` reports each broken one with what broke it):

- **chunks**: no honest chunk lost or duplicated (as above; off-policy, the env steps each shard reported are
  counted by the learner exactly once, whatever restarts);
- **counters**: no counter goes backwards: within a learner incarnation versions only grow, and env steps and
  updates never fall, across incarnations too; a ps never goes back to an older blob;
- **staleness**: no update learns from a chunk more than `max_staleness` versions old (lockstep: any older);
- **replay ratio**: no update goes past `(env_steps - learning_starts) * replay_ratio`, and the honest fleet's env
  steps stay within the budget the learner published plus one chunk per actor;
- **live actors**: in the scenario's steady windows every blob counts exactly the honest actors alive;
- **fan-out**: a version goes to the held actors it frees: a blob below a held request's wake version (of the same
  learner) answers it only once the ps has heard nothing newer for `QUIET_MIN_S` (the quiet-learner rule), never as
  a blob arrives;
- **completes**: the learner reaches `total_env_steps` and announces `done`, and every honest actor still alive
  has finished by the scenario's deadline;
- **group**: in a learner group, every rank made each update rank 0 ordered since the group last formed (each
  restart of the group starts from rank 0's checkpoint; a learner resumed after a kill forgets what it learned
  since, and the chunks made with the versions it published since are the kill's, not a loss);
- **parking**: no shard refuses the learner a parking place (`too_many_pending`), whatever other peers park: it
  holds at most `learner.prefetch` requests a shard, fewer than any peer may (roles/parking.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from surreal.proto.codec import Message
from surreal.proto.frame_fields import OBS_INDEX
from surreal.proto.wire import (
    EXPERIENCE,
    FIFO_REPLY,
    BlobMeta,
    Chunk,
    FifoReply,
    ParamsRequest,
    decode_chunk,
    decode_sample_reply,
)
from surreal.roles.ps import QUIET_MIN_S

ChunkId = tuple[int, int]  # (actor, serial)
HOSTILE = -1.0  # what a hostile peer's chunks hold where an honest chunk holds its actor's index
MAX_REPORTED = 5  # violations kept per invariant


TAGGED = ("obs", "returns")  # the field a chunk's tag is written in: the first of these it has (ES: its returns)


def tagged_field(arrays: Mapping[str, Any]) -> str:
    """Where a chunk's tag is. An image chunk's observations are uint8 frames and indices into them (it has
    `obs_index`), neither of which can hold an actor's index and a serial, so its tag goes in its rewards (float32:
    exact for integers below 2**24), which the simulated learner never learns from. The wire format is the real one
    either way: the tag changes values, never a field."""
    if OBS_INDEX in arrays:
        return "rewards"
    return next((name for name in TAGGED if name in arrays), "")


def tag(arrays: dict[str, Any], actor: int, serial: int) -> None:
    """Mark a chunk's arrays (its tagged field, copied by the caller) as honest chunk (`actor`, `serial`)."""
    cells = arrays[tagged_field(arrays)].reshape(-1)  # a view: the first two cells, whatever the field's shape
    cells[0], cells[1] = actor, serial


def chunk_id(arrays: Mapping[str, Any]) -> ChunkId | None:
    """The honest chunk these arrays are, or None (a hostile peer's)."""
    if not tagged_field(arrays):
        return None
    cells = np.asarray(arrays[tagged_field(arrays)]).reshape(-1)
    return None if cells[0] < 0 else (int(cells[0]), int(cells[1]))


def chunks_in(message: Message) -> Iterator[ChunkId]:
    """The honest chunks an experience message or a FIFO reply carries."""
    try:
        if message.kind == EXPERIENCE:
            chunks = [decode_chunk(message)]
        elif message.kind == FIFO_REPLY:
            reply = decode_sample_reply(message, 0)
            chunks = reply.chunks if isinstance(reply, FifoReply) else []
        else:
            return
    except ValueError:
        return  # what no honest role sent
    for chunk in chunks:
        found = chunk_id(chunk.arrays)
        if found is not None:
            yield found


@dataclass
class Ledger:
    """The books a run keeps, and the invariants read from them at the end (module docstring)."""

    max_staleness: int | None  # None: lockstep (only the current version); off-policy runs pass their own rules
    chunk_env_steps: int
    replay_ratio: tuple[int, float] | None = None  # (learning_starts, replay_ratio) off-policy
    tolerated_losses: int = 0  # stale or evicted honest chunks the scenario's faults make unavoidable
    sent: dict[ChunkId, int] = field(default_factory=dict)  # -> the version it was made with
    learned: Counter[ChunkId] = field(default_factory=Counter)
    lost_with_kill: dict[ChunkId, str] = field(default_factory=dict)
    lost_on_stop: int = 0
    env_steps_sent: int = 0
    budget: int | None = None  # the largest env-step budget a blob carried
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    blobs: list[tuple[float, BlobMeta]] = field(default_factory=list)
    ps_held: dict[str, tuple[int, str]] = field(default_factory=dict)
    shard_reports: dict[tuple[int, int], int] = field(default_factory=dict)  # (shard, its incarnation) -> env steps
    reports_sent: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # id(reply message) -> its report
    learner_counted: int = 0  # env steps the learner's replies added (ShardEnvSteps)
    done_at: float | None = None
    transitions_learned: int = 0
    learner_refused: Counter[str] = field(default_factory=Counter)  # the shards' error replies to it, by reason
    learner_data_replies: int = 0  # replies holding data the learner took in, every incarnation
    made_by: dict[ChunkId, str] = field(default_factory=dict)  # -> the learner incarnation whose parameters made it
    learned_order: list[ChunkId] = field(default_factory=list)  # each learning, in order
    checkpoint: tuple[int, int, int, int] = (0, 0, 0, 0)  # the learner's last: (len(learned_order), its counters)
    forgotten: dict[str, int] = field(default_factory=dict)  # killed learner incarnation -> its checkpoint's version
    floor: int | None = None  # the env steps a learner resumed after a kill went back to (its next blobs' floor)

    def violate(self, rule: str, detail: str) -> None:
        if len(self.violations[rule]) < MAX_REPORTED:
            self.violations[rule].append(detail)
        elif len(self.violations[rule]) == MAX_REPORTED:
            self.violations[rule].append("...")

    # -- what the nodes report --------------------------------------------------------------------------

    def chunk_sent(self, chunk: Chunk, incarnation: str, alive: int, now: float) -> None:
        """`incarnation`: the learner incarnation whose parameters (of `chunk.version`) made it."""
        found = chunk_id(chunk.arrays)
        assert found is not None
        if found in self.sent:
            self.violate("chunks", f"chunk {found} sent twice")
        self.sent[found] = chunk.version
        self.made_by[found] = incarnation
        self.env_steps_sent += chunk.env_steps
        if self.budget is not None and self.env_steps_sent > self.budget + alive * self.chunk_env_steps:
            self.violate(
                "replay_ratio",
                f"t={now:.1f}: the fleet sent {self.env_steps_sent} env steps, past the budget {self.budget} "
                f"plus a chunk for each of {alive} actors",
            )

    def chunks_learned(self, chunks: Iterable[Chunk], version: int, now: float) -> None:
        bound = 0 if self.max_staleness is None else self.max_staleness  # lockstep: only the current version
        for chunk in chunks:
            if version - chunk.version > bound:
                self.violate("staleness", f"t={now:.1f}: learned a chunk of version {chunk.version} at {version}")
            found = chunk_id(chunk.arrays)
            if found is None:
                self.violate("chunks", f"t={now:.1f}: learned a hostile peer's chunk")
                continue
            self.learned[found] += 1
            self.learned_order.append(found)
            if self.learned[found] == 2:
                self.violate("chunks", f"t={now:.1f}: chunk {found} learned twice")

    def updates_learned(self, updates: int, env_steps: int, now: float) -> None:
        """Off-policy: `updates` gradient steps done at `env_steps` counted."""
        assert self.replay_ratio is not None
        starts, ratio = self.replay_ratio
        allowed = int((env_steps - starts) * ratio) if env_steps >= starts else 0
        if updates > allowed:
            self.violate("replay_ratio", f"t={now:.1f}: {updates} updates at {env_steps} env steps ({allowed} allowed)")

    def blob(self, meta: BlobMeta, now: float) -> None:
        if self.blobs:
            last = self.blobs[-1][1]
            same = meta.incarnation == last.incarnation
            floor = last.env_steps if same or self.floor is None else self.floor
            if not same:
                self.floor = None
            if (same and meta.version <= last.version and not meta.done) or meta.env_steps < floor:
                self.violate(
                    "counters",
                    f"t={now:.1f}: blob ({meta.version}, {meta.env_steps} steps) after "
                    f"({last.version}, {last.env_steps} steps) of {last.incarnation}",
                )
        self.blobs.append((now, meta))
        if meta.env_step_budget is not None:
            self.budget = max(self.budget or 0, meta.env_step_budget)
        if meta.done and self.done_at is None:
            self.done_at = now

    def ps_accepted(self, ps: str, version: int, incarnation: str, restarted: bool, now: float) -> None:
        held = self.ps_held.get(ps)
        if held is not None and not restarted and held[1] == incarnation and version <= held[0]:
            self.violate("counters", f"t={now:.1f}: {ps} went from version {held[0]} back to {version}")
        self.ps_held[ps] = (version, incarnation)

    def woke(self, actor: str, asked: list[Any], version: int, incarnation: str, quiet_s: float) -> Any:
        """A ps answered one of `actor`'s requests `asked` ((hold's end, request), oldest first) with its blob
        (`version`, `incarnation`), held for `quiet_s`: the one it may answer so, or a fan-out violation."""
        for entry in asked:
            request: ParamsRequest = entry[1]
            if not request.hold_ms or request.wakes(version, incarnation) or quiet_s >= QUIET_MIN_S:
                return entry
        self.violate("fan_out", f"{actor} held for version {asked[0][1].wake_version} got {version} as it came")
        return asked[0]

    def checkpointed(self, updates: int, env_steps: int, version: int) -> None:
        self.checkpoint = (len(self.learned_order), updates, env_steps, version)

    def rolled_back(self, killed: str, updates: int, env_steps: int, now: float) -> int:
        """The learner resumed at (`updates`, `env_steps`) after its incarnation `killed` ended without a checkpoint
        (killed, or a learner group's collective failed): its counters must be its last checkpoint's. What it
        learned since is forgotten: those chunks went with it, but for those its checkpoint's feed held, which it
        learns again; and the chunks made with the versions it published after that checkpoint can never be learned
        (their versions are issued again, to other parameters). Returns the updates it went back to."""
        mark, saved_updates, saved_env_steps, saved_version = self.checkpoint
        self.forgotten[killed] = saved_version
        if (updates, env_steps) != (saved_updates, saved_env_steps):
            self.violate(
                "counters",
                f"t={now:.1f}: resumed at {updates} updates, {env_steps} env steps; its last checkpoint held "
                f"{saved_updates}, {saved_env_steps}",
            )
        for found in self.learned_order[mark:]:
            self.learned[found] -= 1
            if not self.learned[found]:
                del self.learned[found]
            self.lost_with_kill.setdefault(found, "learned after the learner's last checkpoint")
        del self.learned_order[mark:]
        self.floor = env_steps
        return updates

    def updates_written(self, before: int, after: int, now: float) -> None:
        if after < before:
            self.violate("counters", f"t={now:.1f}: updates went from {before} back to {after}")

    def shard_reported(self, shard: int, incarnation: int, env_steps: int) -> None:
        self.shard_reports[(shard, incarnation)] = max(env_steps, self.shard_reports.get((shard, incarnation), 0))

    def lost(self, chunks: Iterable[ChunkId], why: str) -> None:
        for found in chunks:
            self.lost_with_kill.setdefault(found, why)

    # -- the end --------------------------------------------------------------------------------------

    def check_data(self, held: Counter[ChunkId]) -> None:
        """Every honest chunk sent is learned once, held once, or went with a killed process; under a replay ratio,
        where a chunk is sampled again and again, the env steps are counted once instead."""
        if self.replay_ratio is not None:
            self.check_env_steps()
            return
        unknown = [c for c in [*self.learned, *held] if c not in self.sent]
        if unknown:
            self.violate("chunks", f"{len(unknown)} chunks learned or held that no honest actor sent: {unknown[:3]}")
        for found, count in held.items():
            if count > 1 or (found in self.learned and count):
                self.violate("chunks", f"chunk {found} held {count} times, learned {self.learned[found]} times")
        missing = [
            c
            for c in self.sent
            if c not in self.learned and c not in held and c not in self.lost_with_kill and not self._forgotten(c)
        ]
        if len(missing) > self.tolerated_losses:
            self.violate(
                "chunks",
                f"{len(missing)} honest chunks neither learned, held nor lost with a killed process "
                f"(stale, evicted or silently lost; {self.tolerated_losses} tolerated): {missing[:5]}",
            )

    def _forgotten(self, found: ChunkId) -> bool:
        """Made with the parameters of a version a killed learner published after its last checkpoint."""
        saved = self.forgotten.get(self.made_by[found])
        return saved is not None and self.sent[found] > saved

    def check_env_steps(self) -> None:
        """Off-policy: the learner counted exactly what every shard incarnation last reported."""
        reported = sum(self.shard_reports.values())
        if self.learner_counted != reported:
            self.violate(
                "chunks", f"the learner counted {self.learner_counted} env steps, its shards reported {reported}"
            )

    def check_live(self, windows: Iterable[tuple[float, float]], alive_at: Iterable[tuple[float, int]]) -> None:
        """In each window (start, end: virtual seconds, the fleet steady) every blob counts the honest actors alive."""
        alive_steps = sorted(alive_at)
        for start, end in windows:
            for at, meta in self.blobs:
                if not start <= at <= end or meta.done:
                    continue
                alive = next((n for t, n in reversed(alive_steps) if t <= at), 0)
                if meta.actors != alive:
                    self.violate("live_actors", f"t={at:.1f}: a blob counts {meta.actors} actors, {alive} are alive")

    def digest(self) -> tuple[Any, ...]:
        """The books themselves, for a run's fingerprint: each honest chunk's version and how often it was learned,
        what was lost with which kill, every blob and when it came."""
        books = self.sent, self.learned, self.lost_with_kill
        return (*(sorted(book.items()) for book in books), self.blobs)

    def report(self) -> dict[str, list[str]]:
        return {rule: list(found) for rule, found in self.violations.items() if found}
