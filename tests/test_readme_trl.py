"""The README's `trl dpo` on an export, run exactly as shown, on this CPU machine.

TRL's DPO defaults to bf16 and stopped on a CPU ("Your setup doesn't support
bf16/gpu") when the README showed `trl dpo --dataset_name <export>` alone. The test
reads the fenced block that holds `trl dpo` from README.md, runs its lines from a fresh
folder (the `preflab export` line through the CLI, the `trl dpo` line with the venv's
`trl` entry point), and changes only the model (a tiny one saved here, for the hub id)
and the length of the run (`--max_steps 1`).
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.db.helpers import ranking_line, write_lines
from tests.labelling.ls_fixtures import make_cli
from tests.tiny_models import tiny_causal_lm

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)


def readme_commands() -> list[list[str]]:
    """The commands of the README's one fenced block that runs `trl dpo`, each split as the shell would."""
    blocks = [b for b in BLOCK.findall(README.read_text(encoding="utf-8")) if re.search(r"^trl dpo ", b, re.M)]
    assert len(blocks) == 1, "the README shows `trl dpo` in one fenced block"
    text = blocks[0].replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


def test_the_readme_block_shows_the_cpu_flags():
    export, trl = readme_commands()
    assert export[:2] == ["preflab", "export"] and trl[:2] == ["trl", "dpo"]
    flags = dict(zip(trl[2::2], trl[3::2]))
    assert flags["--use_cpu"] == "true" and flags["--bf16"] == "false"
    assert flags["--dataset_name"] == export[2]  # the export the first line writes


@pytest.mark.slow
def test_the_readme_trl_dpo_command_trains_on_a_cpu(sqlite_url, tmp_path, monkeypatch):
    # SQLite only: what is tested is TRL reading the export (the export itself runs on both databases elsewhere),
    # and one run takes about 40 s.
    cli = make_cli(sqlite_url)
    lines = [
        ranking_line(
            f"What is {i} plus {i}?", [f"It is {2 * i}.", f"Maybe {i + 1}.", "No idea."], [[0], [1], [2]], id=f"r{i}"
        )
        for i in range(6)
    ]
    cli("import", "rankings", write_lines(tmp_path / "rankings.jsonl", lines))
    cli("pairs", "build")
    export, trl = readme_commands()
    monkeypatch.chdir(tmp_path)  # the block's relative paths land here
    cli(*export[1:])
    model = trl[trl.index("--model_name_or_path") + 1]
    trl[trl.index(model)] = str(tiny_causal_lm(tmp_path / "tiny-lm"))
    entry_point = Path(sys.executable).with_name("trl")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(
        [str(entry_point), *trl[1:], "--max_steps", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / trl[trl.index("--output_dir") + 1] / "model.safetensors").is_file()
