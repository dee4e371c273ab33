"""`preflab bon …` and `preflab demo bon`: JSON keys, numbers, files written, bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from preflab.cli import cli as root
from preflab.training.bestofn.estimator import estimate
from preflab.training.bestofn.kl import theory
from tests.training.pictures import assert_picture

ESTIMATE_KEYS = ["n", "true", "proxy", "true_stderr", "groups", "kl_bound"]
KL_KEYS = ["n", "kl_exact", "kl_bound", "kl_beirami", "win_rate", "win_rate_bound"]


def run(*args, ok=True):
    result = CliRunner().invoke(root, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def assert_one_line_error(result, *fragments):
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.output


@pytest.fixture
def samples_file(tmp_path):
    rng = np.random.default_rng(0)
    rows, groups = [], []
    for g in range(6):
        size = 5 + g
        true = rng.normal(size=size)
        proxy = np.round(true + rng.normal(0, 0.5, size), 1)  # rounding makes ties
        groups.append((proxy, true))
        rows += [{"group": f"prompt-{g}", "proxy": float(p), "true": float(t)} for p, t in zip(proxy, true)]
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path, groups


def test_estimate_json_has_the_issue_keys_and_the_library_numbers(samples_file):
    path, groups = samples_file
    out = json.loads(run("bon", "estimate", path, "--n", "1,2,4,8", "--json").stdout)
    assert list(out) == ESTIMATE_KEYS
    want = estimate(groups, [1, 2, 4, 8])
    assert out["n"] == [1, 2, 4, 8]
    assert out["true"] == pytest.approx(want.true)
    assert out["proxy"] == pytest.approx(want.proxy)
    assert out["true_stderr"] == pytest.approx(want.true_stderr)
    assert out["groups"] == [6, 6, 6, 3]  # groups of 5 … 10 samples
    assert out["kl_bound"] == pytest.approx([0.0, math.log(2) - 0.5, math.log(4) - 0.75, math.log(8) - 7 / 8])
    assert out["true"][0] == pytest.approx(np.mean([t.mean() for _, t in groups]))


def test_estimate_text_and_proxy_only(tmp_path, samples_file):
    path, _ = samples_file
    text = run("bon", "estimate", path, "--n", "1,2").stdout
    assert "KL bound" in text and "best-of-n over 6 groups (45 samples" in text
    proxy_only = tmp_path / "proxy.jsonl"
    proxy_only.write_text('{"proxy": 1}\n{"proxy": 3}\n{"proxy": 2}\n')
    out = json.loads(run("bon", "estimate", proxy_only, "--n", "all", "--json").stdout)
    assert out["n"] == [1, 2, 3] and out["true"] == [None, None, None]
    assert out["proxy"] == pytest.approx([2.0, 8 / 3, 3.0])


def test_kl_json_has_the_issue_keys():
    out = json.loads(run("bon", "kl", "--probs", "0.5,0.3,0.2", "--rewards", "3,2,1", "--n", "1,2,4", "--json").stdout)
    assert list(out) == KL_KEYS
    want = theory([0.5, 0.3, 0.2], [3, 2, 1], [1, 2, 4]).as_json()
    for key in KL_KEYS:
        assert out[key] == pytest.approx(want[key])
    assert out["kl_exact"][2] < out["kl_bound"][2] and out["win_rate"][2] < out["win_rate_bound"][2]
    assert "KL exact" in run("bon", "kl", "--probs", "1", "--rewards", "0").stdout


def test_plot_writes_the_picture(tmp_path, samples_file):
    path, _ = samples_file
    out = tmp_path / "plots" / "goodhart.png"
    result = json.loads(run("bon", "plot", path, "--out", out, "--json").stdout)
    assert result["out"] == str(out)
    assert assert_picture(out) == (1210, 495)  # two panels, 11 × 4.5 inches at 110 dpi
    assert result["n_max"] == 10 and set(result["fit"]) >= {"alpha", "beta", "kl_peak"}
    toy = tmp_path / "toy.png"
    assert "notebook toy" in run("bon", "plot", "--out", toy).stdout
    assert_picture(toy)


def test_demo_reproduces_the_notebook(tmp_path):
    plot = tmp_path / "demo.png"
    out = json.loads(run("demo", "bon", "--seed", "3", "--out", plot, "--json").stdout)
    assert out["n"] == [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    true, proxy = np.array(out["true"]), np.array(out["proxy"])
    # Known answers: without noise 3 + 2n/(n+1); the notebook's 4.30 → 5.00 and 4.28 → 5.08.
    assert true[0] == pytest.approx(4.333, abs=0.03) and true[-1] == pytest.approx(5.0, abs=0.02)
    assert proxy[0] == pytest.approx(4.33, abs=0.03) and proxy[-1] == pytest.approx(5.08, abs=0.01)
    assert np.all(np.diff(true) > 0) and proxy[-1] - true[-1] > 0.06  # the proxy overshoots
    assert np.abs(np.array(out["true_mc"]) - true).max() < 0.1
    assert out["kl"] == pytest.approx([math.log(n) - (n - 1) / n for n in out["n"]])
    assert_picture(plot)
    assert out["plot"] == str(plot) and set(out["fit"]) >= {"alpha", "beta", "kl_peak"}
    again = json.loads(run("demo", "bon", "--seed", "3", "--out", plot, "--json").stdout)
    assert again == out
    text = run("demo", "bon", "--samples", "500", "--trials", "10", "--out", plot).stdout
    assert "notebook: true 4.30" in text and "  256  " in text and "  512  " not in text


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["bon", "estimate", "BAD", "--n", "1"], ["line 2 is not valid JSON"]),
        (["bon", "estimate", "GOOD", "--n", "1,4"], ["n = 4 is more than the largest group's 3 samples"]),
        (["bon", "estimate", "GOOD", "--n", "two"], ["--n must be comma-separated"]),
        (["bon", "estimate", "GOOD", "--proxy", "rm"], ["add --from-db"]),
        (["bon", "estimate"], ["give a JSON Lines FILE or --from-db"]),
        (["bon", "estimate", "MISSING"], ["is not a file"]),
        (["bon", "kl", "--probs", "0.5,0.3", "--rewards", "1,2"], ["probabilities sum to 0.8, not 1"]),
        (["bon", "kl", "--probs", "0.5,0.5", "--rewards", "1"], ["2 probabilities but 1 rewards"]),
        (["bon", "kl", "--probs", "a,b", "--rewards", "1,2"], ["--probs must be comma-separated numbers"]),
        (["demo", "bon", "--samples", "1"], ["--samples must be between 2 and 1,000,000"]),
        (["bon", "sample", "--reward-model", "rm", "--top-p", "1.5"], ["--top-p must be in (0, 1]"]),
    ],
)
def test_bad_input_is_one_line_and_non_zero(tmp_path, args, fragments):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"group": "a", "proxy": 1, "true": 0}\n{"group": "a", "proxy": 2, "true":\n')
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"group": "a", "proxy": p, "true": p}) + "\n" for p in (1, 2, 3)))
    names = {"BAD": bad, "GOOD": good, "MISSING": tmp_path / "missing.jsonl"}
    assert_one_line_error(run(*[names.get(a, a) for a in args], ok=False), *fragments)


def test_mixed_true_is_refused(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"proxy": 1, "true": 1}\n{"proxy": 2}\n')
    assert_one_line_error(run("bon", "estimate", path, ok=False), "line 2 lacks 'true'")


def test_bon_help_imports_no_heavy_libraries():
    code = (
        "import sys; from click.testing import CliRunner; from preflab.cli import cli\n"
        "for args in (['--help'], ['bon', '--help'], ['bon', 'estimate', '--help'], ['bon', 'sample', '--help'],"
        " ['demo', 'bon', '--help']):\n"
        "    r = CliRunner().invoke(cli, args); assert r.exit_code == 0 and 'Usage:' in r.output, (args, r.output)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_bon_command_has_help_with_an_example():
    for command in ("estimate", "kl", "plot", "sample"):
        assert "Example:" in run("bon", command, "--help").stdout
    assert "Example:" in run("demo", "bon", "--help").stdout


def test_sample_options_are_the_sampling_config_with_best_of_n_defaults():
    """`bon sample` takes n, temperature, top-p, max-new-tokens and seed from the one sampling config,
    starting from the policy's own distribution (temperature 1, no truncation) and N = 8."""
    import dataclasses

    from preflab.commands.bon import sample_command
    from preflab.lm.sampling import SamplingConfig

    defaults = {p.name: p.default for p in sample_command.params}
    assert {f.name for f in dataclasses.fields(SamplingConfig)} <= set(defaults)
    assert {
        k: defaults[k]
        for k in ("n", "temperature", "top_p", "max_new_tokens", "seed", "top_k", "batch_size", "conversational")
    } == {
        "n": 8,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 128,
        "seed": 0,
        "top_k": 0,
        "batch_size": 8,
        "conversational": False,
    }
    assert "[default: 8]" in " ".join(run("bon", "sample", "--help").stdout.split())
