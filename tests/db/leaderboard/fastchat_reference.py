"""FastChat's published Bradley–Terry and style-control formulas, written out as the reference.

The `fschat` wheel on PyPI (0.2.36) predates these: its `elo_analysis` imports plotly,
pytz and scikit-learn, none of which preflab installs, and fits ties with scikit-learn's
default L2 (C = 1). Chatbot Arena's current code is lm-sys/FastChat's
`fastchat/serve/monitor/rating_systems.py` (the style features: `add_markdown_info.py`);
these functions follow it line by line: `preprocess_for_bt`, `bt_loss_and_grad`,
`fit_bt`, `scale_and_offset`, `compute_bt`, `compute_bootstrap_bt` (with the
process pool replaced by a plain loop: the fits are independent), `preprocess_for_style`
(fed the counts directly instead of a `conv_metadata` column), `contextual_bt_loss_and_grad`,
`fit_contextual_bt` and `compute_style_control`. Only numpy, scipy and pandas, as there; the
L-BFGS-B option `disp: False` is left out (SciPy 1.17 deprecates it; it only silenced output).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit

# The Bradley-Terry half is the benches' baseline too: one copy, in bench/ (benches never import tests/).
from bench.fastchat_bt import (  # the reference's Bradley-Terry names, read by the tests from here
    bt_loss_and_grad,  # noqa: F401
    compute_bootstrap_bt,  # noqa: F401
    compute_bt,  # noqa: F401
    fit_bt,  # noqa: F401
    get_matchups_models,
    preprocess_for_bt,  # noqa: F401
    scale_and_offset,
)

DIFF_MASK = np.array([1.0, -1.0], dtype=np.float64)


def preprocess_for_style(df, style_a, style_b, apply_ratio=(1, 1, 1, 1), add_one=True):
    """`style_a`/`style_b`: (N, 4) tokens, headers, lists, bold per side (FastChat reads them from conv_metadata)."""
    matchups, models = get_matchups_models(df)
    outcomes = np.full(len(df), 0.5)
    outcomes[df["winner"] == "model_a"] = 1.0
    outcomes[df["winner"] == "model_b"] = 0.0
    k = style_a.shape[1]
    style_vector = np.ascontiguousarray(np.concatenate([style_a.T, style_b.T]).astype(np.int32))
    style_diff = (style_vector[:k] - style_vector[k:]).astype(float)
    style_sum = (style_vector[:k] + style_vector[k:]).astype(float)
    if add_one:
        style_sum = style_sum + np.ones(style_diff.shape)
    apply_ratio = np.flatnonzero(apply_ratio)
    style_diff[apply_ratio] /= style_sum[apply_ratio]
    style_mean = np.mean(style_diff, axis=1)
    style_std = np.std(style_diff, axis=1)
    features = ((style_diff - style_mean[:, np.newaxis]) / style_std[:, np.newaxis]).T
    return matchups, features, outcomes, models


def contextual_bt_loss_and_grad(params, n_competitors, matchups, features, outcomes, alpha=1.0, reg=1.0, half_reg=0.5):
    reg_loss = half_reg * np.inner(params, params)
    ratings = params[:n_competitors]
    feature_params = params[n_competitors:]
    matchup_ratings = ratings[matchups]
    bt_logits = alpha * (matchup_ratings[:, 0] - matchup_ratings[:, 1])
    context_logits = np.dot(features, feature_params)
    probs = expit(bt_logits + context_logits)
    loss = -(np.log(probs) * outcomes + np.log(1.0 - probs) * (1.0 - outcomes)).sum() + reg_loss
    error = outcomes - probs
    grad = reg * params
    matchups_grads = -alpha * error
    np.add.at(grad[:n_competitors], matchups[:, [0, 1]], matchups_grads[:, None] * DIFF_MASK)
    grad[n_competitors:] -= np.dot(features.T, error)
    return loss, grad


def fit_contextual_bt(matchups, features, outcomes, models, idxs=None, alpha=math.log(10.0), reg=0.5, tol=1e-6):
    n_features = features.shape[1]
    n_models = len(models)
    initial_params = np.zeros(n_models + n_features, dtype=np.float64)
    half_reg = reg / 2.0
    if idxs is not None:
        matchups, features, outcomes = matchups[idxs], features[idxs], outcomes[idxs]
    result = minimize(
        fun=contextual_bt_loss_and_grad,
        x0=initial_params,
        args=(n_models, matchups, features, outcomes, alpha, reg, half_reg),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 100, "gtol": tol},
    )
    return result["x"]


def compute_style_control(
    df, style_a, style_b, alpha=math.log(10.0), reg=0.5, init_rating=1000.0, scale=400.0, tol=1e-6
):
    matchups, features, outcomes, models = preprocess_for_style(df, style_a, style_b)
    ratings_params = fit_contextual_bt(matchups, features, outcomes, models=models, alpha=alpha, reg=reg, tol=tol)
    ratings = ratings_params[: len(models)]
    params = ratings_params[len(models) :]
    scaled_ratings = scale_and_offset(ratings, models, scale, init_rating)
    scaled_ratings = pd.Series(scaled_ratings, index=models).sort_values(ascending=False)
    return scaled_ratings, params
