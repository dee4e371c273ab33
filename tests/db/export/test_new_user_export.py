"""The default export a new user gets: people's pairs first, contradictions counted, a card true for each format."""

import json
from pathlib import Path

import pytest
from datasets import load_dataset
from datasets.utils.metadata import MetadataConfigs, known_task_ids
from huggingface_hub import DatasetCard

from preflab.db.export.dataset import load_export
from tests.db.helpers import ranking_line, write_lines

SIZE_CATEGORIES = {"n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M", "10M<n<100M", "100M<n<1B", "n>1B"}


@pytest.fixture
def people_and_judge(cli, tmp_path):
    """Two prompts people ranked and a judge ranked the other way; a third only the judge ranked."""
    responses = {p: [f"{p} answer {j}" for j in range(3)] for p in ("p0", "p1", "p2")}
    lines = [
        ranking_line("p0", responses["p0"], [[0], [1], [2]], "alice", id="h0"),
        ranking_line("p1", responses["p1"], [[0], [1], [2]], "alice", id="h1"),
        ranking_line("p0", responses["p0"], [[2], [1], [0]], "judge", kind="ai", id="a0"),
        ranking_line("p1", responses["p1"], [[1], [0], [2]], "judge", kind="ai", id="a1"),
        ranking_line("p2", responses["p2"], [[0], [1], [2]], "judge", kind="ai", id="a2"),
    ]
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    cli("pairs", "build")  # every ranking, people's and the judge's: 15 pairs
    return cli


def test_default_export_keeps_people_first_and_says_so(people_and_judge, tmp_path):
    cli = people_and_judge
    info = json.loads(cli("export", tmp_path / "out", "--test-size", "0", "--json").stdout)
    # People's 6 pairs; the judge's 3 on p2, which no person ranked; the judge's 6 on p0 and p1 left out.
    assert info["annotators"] == "human-first"
    assert info["pairs_by_kind"] == {"human": 6, "ai": 3}
    assert info["left_out_by_kind"] == {"ai": 6}
    assert info["contradicting_pairs"] == 0 and info["train"] == 9
    dd = load_export(tmp_path / "out")
    assert sorted(dd["train"]["annotator_kind"]) == ["ai"] * 3 + ["human"] * 6
    card = (tmp_path / "out" / "README.md").read_text()
    assert (
        "Annotators: `human-first`: people's pairs, and an AI judge's only on prompts no person gave a pair for."
        in card
    )
    assert "| people | 6 |" in card and "| AI judges | 3 |" in card
    assert "Left out: 6 pairs by AI judges." in card
    assert "No pair contradicts another" in card


def test_everyone_opt_in_counts_the_contradictions(people_and_judge, tmp_path):
    cli = people_and_judge
    info = json.loads(cli("export", tmp_path / "all", "--annotators", "any", "--test-size", "0", "--json").stdout)
    assert (info["pairs_by_kind"] == {"human": 6, "ai": 9} and "left_out_by_kind" not in info) or info[
        "left_out_by_kind"
    ] == {}
    # p0: the judge reversed all 3 of alice's pairs (6 rows); p1: one pair reversed (2 rows).
    assert info["contradicting_pairs"] == 8
    assert info["contradicting_by_split"] == {"train": 8, "test": 0}
    card = (tmp_path / "all" / "README.md").read_text()
    assert (
        "8 pairs contradict another pair of the same prompt (the same two responses in the opposite order): 8 in train."
    ) in card

    people = json.loads(cli("export", tmp_path / "people", "--annotators", "human", "--json").stdout)
    assert people["pairs_by_kind"] == {"human": 6} and people["left_out_by_kind"] == {"ai": 9}


def test_an_export_with_nothing_of_the_kind_says_what_there_is(cli, tmp_path):
    responses = ["a", "b"]
    cli(
        "import",
        "rankings",
        write_lines(tmp_path / "r.jsonl", [ranking_line("q", responses, [[0], [1]], "judge", kind="ai", id="a")]),
    )
    cli("pairs", "build")
    result = cli("export", tmp_path / "out", "--annotators", "human", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: no pairs to export with --annotators human: the comparisons hold "
        "1 ai pairs (choose them with --annotators any, human or ai)"
    )
    # The default takes a judge's pairs where no person ranked.
    assert json.loads(cli("export", tmp_path / "out", "--json").stdout)["pairs_by_kind"] == {"ai": 1}


@pytest.mark.parametrize("fmt", ["disk", "parquet", "jsonl"])
def test_the_card_is_true_for_each_format(people_and_judge, tmp_path, fmt):
    cli = people_and_judge
    out = tmp_path / fmt
    info = json.loads(
        cli("export", out, "--format", fmt, "--test-size", "0.34", "--license", "cc-by-4.0", "--json").stdout
    )
    card = DatasetCard.load(out / "README.md")
    data = card.data.to_dict()
    assert data["license"] == "cc-by-4.0"
    assert data["task_categories"] and all(t in known_task_ids for t in data["task_categories"])
    assert data["size_categories"] == ["n<1K"] and set(data["size_categories"]) <= SIZE_CATEGORIES
    assert "pypi.org" not in card.text
    # Every path the card's configs name holds files of this export.
    configs = MetadataConfigs.from_dataset_card_data(card.data)
    files = configs["default"]["data_files"]
    assert {f["split"] for f in files} == {"train", "test"}
    for f in files:
        assert list(Path(out).glob(f["path"])), f"{f['path']} matches no file of a {fmt} export"
    # What the Hub's loader reads from the card is the export itself.
    from_card = load_dataset(str(out))
    assert {s: len(from_card[s]) for s in from_card} == {"train": info["train"], "test": info["test"]}
    rows = [json.dumps(row, sort_keys=True) for row in load_export(out)["train"].to_list()]
    assert sorted(json.dumps(row, sort_keys=True) for row in from_card["train"].to_list()) == sorted(rows)
    # The card says which form the texts take (conversational, the default) and which loader reads the format.
    assert (
        "Form: **conversational, explicit prompt**" in card.text
        and "- form: conversational, explicit prompt" in card.text
    )
    assert ("load_from_disk" if fmt == "disk" else "trl dpo --dataset_name path/to/this/folder") in card.text


def test_the_export_summary_line(people_and_judge, tmp_path):
    from preflab.commands.text import export_summary

    info = json.loads(people_and_judge("export", tmp_path / "out", "--test-size", "0", "--json").stdout)
    assert export_summary(info, tmp_path / "out") == (
        f"exported 9 train and 0 test pairs from 3 prompts to {tmp_path / 'out'} as dataset version {info['name']}, "
        f"from the last pairs build (#{info['pairs_build']['id']}: strategy all, aggregate none, annotators any) "
        "(3 ai, 6 human; annotators human-first; left out 6 ai); 0 pairs contradict another pair of the same prompt"
    )


def test_export_says_which_pairs_build_it_exports(people_and_judge, tmp_path):
    """The README's walk: a Borda build of people's rankings, then `export`, which takes that last build."""
    cli = people_and_judge
    cli("pairs", "build", "--aggregate", "borda", "--annotator-kind", "human")
    info = json.loads(cli("export", tmp_path / "json", "--test-size", "0", "--json").stdout)
    assert info["pairs_build"] == {
        "id": info["pairs_build"]["id"],
        "strategy": "all",
        "aggregate": "borda",
        "annotator_kind": "human",
    }
    line = cli("export", tmp_path / "text", "--test-size", "0").stdout
    assert "from the last pairs build (#" in line and "strategy all, aggregate borda, annotators human)" in line


def test_score_margins_carry_no_floating_point_noise(cli, tmp_path):
    scores = [0.7, 0.3, 0.1]
    cli(
        "import",
        "rankings",
        write_lines(
            tmp_path / "r.jsonl",
            [ranking_line("q", ["a", "b", "c"], [[0], [1], [2]], "judge", kind="ai", id="s", scores=scores)],
        ),
    )
    cli("pairs", "build")
    cli("export", tmp_path / "out", "--test-size", "0", "--format", "parquet")
    margins = sorted(load_export(tmp_path / "out")["train"]["margin"])
    assert margins == [0.2, 0.4, 0.6]
    assert (0.3 - 0.1, 0.7 - 0.3) != (0.2, 0.4)  # what the noise would have been
