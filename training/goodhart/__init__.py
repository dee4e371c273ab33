"""The Goodhart frontier: every way of optimising a learned preference, against a truth that is known.

- `world`: the counting world (the digit world of `preflab demo toy`, its true
  reward graded), its simulated annotator, and the exact output distribution of
  any policy in it.
- `frontier`: one point per optimised policy (KL, proxy reward, true reward, win
  rate over the base), best-of-n points in closed form, Gao et al.'s fit per
  method, and what the chart shows.
- `chart`: all methods on one reward-against-√KL chart, with a win-rate panel.
- `job`: `run_goodhart`, the whole experiment through preflab's own jobs.
- `lineage`: the same chart for real data, from stored samples and judgements.
"""
