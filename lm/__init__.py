"""The model leaf: load a model, sample from it, score with it, resolve its name.

It sits just above `preflab.db` and below `preflab.labelling`: generation and the
judges load and run models through it, and the trainers build on it.

- `loading`: causal LMs and one-label scorers by hub id, local path or embedded name.
- `sampling`: the one sampling config, and batched generation.
- `scoring`: rewards and log-probabilities of responses, batched.
- `names`: what `--model NAME` means, and the model version it is recorded as.
"""
