"""A Bradley–Terry leaderboard of the models whose candidates were ranked (`preflab leaderboard`).

Read in the order the data flows: `battles` (rankings → battles between models),
`fit` (the ratings), `bootstrap` (their intervals), `board` (the job and its result).
"""
