"""Stacked pixel observations carried and stored as each frame once, and the stacks rebuilt from indices.

An Atari env's observation is its last S frames (S=4, `envs_atari.py`): consecutive observations share S-1 of
them, and a chunk's `obs` and `next_obs` share all but one more, so a chunk of T steps x K envs laid out naively holds
every frame 2S = 8 times. Here a chunk is its distinct frames, each once, and per step the indices of the S frames of
its observation and of its next observation (Dopamine's replay rebuilds stacks from indices the same way):

    chunk = split(obs, next_obs)           # actor: [T, K, S, H, W] stacks -> frames [N, H, W] + indices [T, K, S]
    obs = chunk.obs(); next_obs = chunk.next_obs()       # learner: the stacks again, bit for bit

`split` decides what to store by comparing frames, not by trusting done flags: an observation that continues the
previous step's next observation reuses its indices, a next observation whose first S-1 frames are its observation's
last S-1 adds one frame, and anything else (a reset's stack, which FrameStackObservation pads with its first frame; an
n-step transition's bootstrap stack, n steps ahead) is looked up frame by frame: a frame the chunk already holds,
byte for byte, is stored once. So `split` then `obs()`/`next_obs()` gives back exactly what went
in, for any input (tests/test_frames.py checks arbitrary arrays as well as real episodes), and is compact for what
an env actually produces: N = K x (S + T) frames plus about two per episode end, i.e. 1 + S/T frames per env step
(1.016 at T=256), against 2S for the naive layout.

A chunk carries its first step's whole stack, the S-1 frames from before the chunk included: every chunk rebuilds on
its own, whichever shard or learner gets it and whatever chunk was lost before it (S-1 frames per env per chunk).

For off-policy replay, `FrameRing` keeps the frames of many chunks in a ring and hands out absolute frame numbers, so a
transition is its two index stacks (2S integers) and a sampled batch's (obs, next_obs) are two gathers. NumPy only:
the replay image has neither torch nor gymnasium.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INDEX_DTYPE = np.dtype(np.int32)
UINT8 = np.dtype(np.uint8)


@dataclass(frozen=True)
class FrameChunk:
    """A chunk of T steps x K envs of S-frame stacks as its distinct frames and per-step indices into them."""

    frames: np.ndarray  # [N, *frame]: each distinct frame of the chunk once, env by env, in time order
    obs_index: np.ndarray  # [T, K, S] int32: obs[t, k] is frames[obs_index[t, k]]
    next_index: np.ndarray  # [T, K, S] int32: next_obs[t, k] is frames[next_index[t, k]]

    def obs(self) -> np.ndarray:
        """The chunk's observations, [T, K, S, *frame]."""
        return self.frames[self.obs_index]

    def next_obs(self) -> np.ndarray:
        """The chunk's next observations (final observations at episode ends), [T, K, S, *frame]."""
        return self.frames[self.next_index]

    @property
    def nbytes(self) -> int:
        """What the layout carries: the frames and both index arrays."""
        return int(self.frames.nbytes + self.obs_index.nbytes + self.next_index.nbytes)

    def check(self, frame_shape: tuple[int, ...], stack: int, dtype: np.dtype = UINT8) -> None:
        """ValueError unless this is a well-formed chunk of `stack`-frame stacks of `frame_shape` `dtype` frames:
        what a receiver checks before it gathers (an index out of range would read past the frames)."""
        if self.frames.dtype != dtype or self.frames.shape[1:] != tuple(frame_shape):
            raise ValueError(
                f"frames are {self.frames.dtype} {self.frames.shape[1:]}, not {dtype} {tuple(frame_shape)}"
            )
        for name, index in (("obs_index", self.obs_index), ("next_index", self.next_index)):
            if index.dtype != INDEX_DTYPE or index.ndim != 3 or index.shape[2] != stack:
                raise ValueError(f"{name} is {index.dtype} {index.shape}, not int32 [T, K, {stack}]")
            if index.size and (int(index.min()) < 0 or int(index.max()) >= len(self.frames)):
                raise ValueError(f"{name} points outside the chunk's {len(self.frames)} frames")
        if self.obs_index.shape != self.next_index.shape:
            raise ValueError(f"obs_index {self.obs_index.shape} and next_index {self.next_index.shape} differ")


def split(obs: np.ndarray, next_obs: np.ndarray) -> FrameChunk:
    """`obs` and `next_obs` of a chunk, [T, K, S, *frame] each, as a `FrameChunk` (module docstring)."""
    if obs.shape != next_obs.shape or obs.dtype != next_obs.dtype or obs.ndim < 3:
        raise ValueError(
            f"obs {obs.dtype} {obs.shape} and next_obs {next_obs.dtype} {next_obs.shape}: not [T, K, S, ...]"
        )
    T, K, S = obs.shape[:3]
    frames: list[np.ndarray] = []
    seen: dict[bytes, int] = {}  # each stored frame's bytes -> its index: a frame seen before is not stored again
    obs_index = np.empty((T, K, S), INDEX_DTYPE)
    next_index = np.empty((T, K, S), INDEX_DTYPE)

    def intern(frame: np.ndarray) -> int:
        key = frame.tobytes()
        index = seen.get(key)
        if index is None:
            frames.append(frame)
            index = seen[key] = len(frames) - 1
        return index

    def store(stack: np.ndarray, out: np.ndarray) -> None:
        """A stack that continues nothing: each of its frames, stored unless the chunk holds it already."""
        for s in range(S):
            out[s] = intern(stack[s])

    for k in range(K):
        for t in range(T):
            o, n = obs[t, k], next_obs[t, k]
            if t > 0 and np.array_equal(o, next_obs[t - 1, k]):
                obs_index[t, k] = next_index[t - 1, k]
            else:
                store(o, obs_index[t, k])
            if S > 1 and np.array_equal(n[:-1], o[1:]):
                next_index[t, k, :-1] = obs_index[t, k, 1:]
                next_index[t, k, -1] = intern(n[-1])  # the frame before it again where no new one came (a game
                # that ended within a frame skip)
            else:
                store(n, next_index[t, k])
    stacked = np.stack(frames) if frames else np.empty((0, *obs.shape[3:]), obs.dtype)
    return FrameChunk(stacked, obs_index, next_index)


class FrameRing:
    """A transition replay's frames, each once, in a ring of `capacity` frames. `add` stores a chunk's frames and
    returns its stacks' indices as absolute frame numbers (counted from the ring's first frame, never reused), which
    the replay keeps per transition; `gather` rebuilds stacks from them. A stack is valid while its oldest frame is
    still in the ring (`oldest`): the replay evicts the transitions that name older frames."""

    def __init__(self, capacity: int, frame_shape: tuple[int, ...], dtype: np.dtype = UINT8) -> None:
        if capacity < 1:
            raise ValueError(f"a ring of {capacity} frames")
        self.capacity = capacity
        self.frames = np.zeros((capacity, *frame_shape), dtype)
        self.end = 0  # absolute number of the next frame to be stored

    @property
    def oldest(self) -> int:
        """The absolute number of the oldest frame still stored."""
        return max(0, self.end - self.capacity)

    def add(self, chunk: FrameChunk) -> tuple[np.ndarray, np.ndarray]:
        """Store the chunk's frames (overwriting the oldest); its obs and next_obs indices as absolute frame numbers,
        int64 [T, K, S] each."""
        n = len(chunk.frames)
        if n > self.capacity:
            raise ValueError(f"a chunk of {n} frames does not fit a ring of {self.capacity}")
        start = self.end
        first = start % self.capacity
        head = min(n, self.capacity - first)
        self.frames[first : first + head] = chunk.frames[:head]
        self.frames[: n - head] = chunk.frames[head:]
        self.end += n
        return chunk.obs_index.astype(np.int64) + start, chunk.next_index.astype(np.int64) + start

    def valid(self, index: np.ndarray) -> np.ndarray:
        """Per stack ([..., S] -> [...]): whether all its frames are still stored."""
        return (index.min(axis=-1) >= self.oldest) & (index.max(axis=-1) < self.end)

    def gather(self, index: np.ndarray) -> np.ndarray:
        """The stacks `index` names ([..., S] absolute frame numbers -> [..., S, *frame]); ValueError if any frame
        has been overwritten (or was never stored)."""
        if not self.valid(index).all():
            raise ValueError(f"a stack names frames outside [{self.oldest}, {self.end}): overwritten or never stored")
        return self.frames[index % self.capacity]


def as_planes(stacks: np.ndarray, frame_ndim: int) -> np.ndarray:
    """Stacks of frames of `frame_ndim` dimensions as the env's planes: [..., S, planes, H, W] -> [..., S x planes, H,
    W]; stacks of one-plane frames ([..., S, H, W]) as they are."""
    return stacks.reshape(*stacks.shape[:-4], -1, *stacks.shape[-2:]) if frame_ndim == 3 else stacks
