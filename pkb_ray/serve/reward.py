"""From a verdict to a reward (``serve.reward``, docs/serve.md#reward).

Every kind is 0 (``failure``) unless the sample is correct, so a reward cannot be earned by being
fast and wrong. ``speedup`` (the default) then rises with the speedup on a log scale, from
``correct_reward`` for a correct sample whose speed is unknown or tiny to 1 at ``speedup_cap``:
bounded (a timing outlier cannot dominate a batch's advantage), increasing (faster is always
better below the cap), and as much reward for 1x -> 2x as for 2x -> 4x.
"""

from __future__ import annotations

import math

from pkb_ray.spec.config import RewardConfig


def reward(correct: bool, speedup: float | None, cfg: RewardConfig) -> float:
    """The reward of one verdict."""
    if not correct:
        return cfg.failure
    if cfg.kind == "binary":
        return 1.0
    fast = speedup is not None and math.isfinite(speedup) and speedup > 0
    if cfg.kind == "fast":
        return 1.0 if fast and speedup > cfg.fast_p else cfg.correct_reward
    if not fast:
        return cfg.correct_reward
    # log2(1 + s) / log2(1 + cap): 0 at s -> 0, 1 at the cap; strictly increasing below it
    rise = min(1.0, math.log2(1.0 + speedup) / math.log2(1.0 + cfg.speedup_cap))
    return cfg.correct_reward + (1.0 - cfg.correct_reward) * rise
