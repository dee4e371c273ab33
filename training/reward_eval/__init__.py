"""The reward-model bench (`preflab train eval` on a reward model or pair ranker), in RewardBench's style.

- `score`: every held-out pair scored by the saved model, as it read its training data.
- `pairs`: each pair's prompt, category, annotator kind and margin, from the store.
- `bench`: the report: accuracy, its breakdowns, length bias, position, and `compare`, with
  intervals from `preflab.db.quality.intervals` (a bootstrap that resamples prompts).
- `job`: `plan_reward_eval` reads the store; `evaluate_reward` scores and returns the reports.
"""
