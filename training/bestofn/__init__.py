"""Best-of-n analysis: how much optimisation a proxy reward applies, and how much of it is real.

- `estimator`: the unbiased best-of-n estimator (every n-subset of N samples at once).
- `kl`: exact KL and win rate of best-of-n for a discrete reference, the
  log n − (n−1)/n bound, Beirami et al.'s estimator.
- `fit`: Gao et al.'s R(d) = d(α − βd) fit against d = √KL.
- `sources`: samples from JSON Lines or from the database's scores and rankings.
- `plot`: the Goodhart picture.
- `config`, `sample`: best-of-n sampling with a trained reward model, stored for estimation.
- `jobs`: what the `preflab bon …` commands (`cli`) call.
"""
