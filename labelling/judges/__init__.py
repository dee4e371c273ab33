"""AI judges: rank a prompt's candidates and store the ranking as an AI annotator's.

`pairwise` (LLM-as-a-judge over both orders of every pair), `score` (additive
5-point grading), `reference` (grading against the prompt's reference answer),
`reward-model` (a one-label sequence classifier) and `likelihood` (the model's
own average token log-likelihood of the response). A judge that reads a causal LM
runs through its engine (`preflab.lm.engines`), in process as on a server: one path.
Run one with `preflab.labelling.judges.run.run_judge` (open the model by name, judge,
report), `judge_on` on an engine already open, or `judge_candidates` on a model already
loaded. Every kind, and what differs between kinds, is one entry of
`preflab.labelling.judges.table.JUDGES`.
"""
