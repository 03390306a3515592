"""From a verdict to a reward (``serve.reward``, docs/serve.md#reward).

Every kind is 0 (``failure``) unless the sample is correct, so a reward cannot be earned by being
fast and wrong; and a correct sample that is the problem's reference itself (``reference_copy``:
the same code up to names, comments and formatting) earns ``copy_reward`` (0) whatever its kind.

``speedup`` (the default) pays only for beating the reference::

    reward = correct_reward + (1 - correct_reward) * clip(log(s) / log(speedup_cap), 0, 1)

for the measured speedup ``s``: with the default ``correct_reward = 0``, 0 at or below 1x, 0.5 at
2x, 1 from ``speedup_cap`` (4x) up. Why:

- The reference is in the prompt. A reward for merely being correct pays the model for handing
  it back (or a trivially edited copy, which times at ~1x). Group-normalised advantages (GRPO and
  kin: reward minus the group's mean, over its spread) turn any such constant into a full-sized
  push wherever the rest of the group fails, so the policy would learn to copy. At 0 up to 1x, a
  copy is worth what a failure is.
- Log scale: each doubling is worth the same (1x -> 2x as much as 2x -> 4x), as speedups compound.
- Bounded at the cap: one timing outlier cannot dominate a batch's advantages.

``correct_reward`` > 0 brings back a floor for correctness (0.2: 0.2 at 1x, 0.6 at 2x).
"""

from __future__ import annotations

import math

from pkb_ray.spec.config import RewardConfig


def reward(correct: bool, speedup: float | None, cfg: RewardConfig, copy: bool = False) -> float:
    """The reward of one verdict (``copy``: the source is the problem's reference, answers.is_reference_copy)."""
    if not correct:
        return cfg.failure
    if copy:
        return cfg.copy_reward
    if cfg.kind == "binary":
        return 1.0
    known = speedup is not None and math.isfinite(speedup) and speedup > 0
    if cfg.kind == "fast":
        return 1.0 if known and speedup > cfg.fast_p else cfg.correct_reward
    if not known:
        return cfg.correct_reward
    rise = min(1.0, max(0.0, math.log(speedup) / math.log(cfg.speedup_cap)))
    return cfg.correct_reward + (1.0 - cfg.correct_reward) * rise
