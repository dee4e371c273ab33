"""`preflab stats --judges`: which judge to trust, as a table and as JSON."""

from __future__ import annotations

import json

import pytest

from tests.labelling.judges.test_trust import PROMPTS, judged_store

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def test_stats_judges_prints_the_judges_best_first(cli, sessions, tmp_path):
    ids = judged_store(cli, sessions, tmp_path)
    out = json.loads(cli("stats", "--judges", "--json").stdout)
    assert out["bootstrap"] == {"rounds": 1000, "seed": 0, "level": 0.95, "resampled": "prompts"}
    assert [r["annotator_id"] for r in out["judges"]] == [
        ids[name] for name in ("oracle", "noisy", "always-first", "always-second")
    ]
    oracle = out["judges"][0]
    assert (oracle["kind"], oracle["model"], oracle["shared_prompts"], oracle["shared_pairs"]) == (
        "likelihood",
        "test/oracle",
        PROMPTS,
        3 * PROMPTS,
    )
    assert [oracle["agreement_low"], oracle["agreement_high"]] == [1.0, 1.0]
    assert out == json.loads(cli("stats", "--judges", "--json").stdout)  # seeded: the same intervals every time

    lines = cli("stats", "--judges").stdout.splitlines()
    assert lines[0].startswith("which judge to trust") and "seed 0" in lines[0]
    assert lines[1].split()[:3] == ["kind", "prompts", "pairs"] and lines[1].split()[-1] == "judge"
    rows = lines[2:6]
    assert [row.split()[0] for row in rows] == ["likelihood", "score", "pairwise", "pairwise"]
    # Each judge by its whole name, last on its line: the name `ls predict --judge` takes, never a pseudonym.
    assert (
        [row.split()[-1] for row in rows] == [r["judge"] for r in out["judges"]] == [r["name"] for r in out["judges"]]
    )
    assert oracle["judge"].startswith("judge:likelihood:") and oracle["judge"].endswith(":test/oracle")
    assert "1.00 [1.00, 1.00]" in rows[0] and "n/a (scores each reply alone)" in rows[0]
    noisy = out["judges"][1]
    assert f"0.67 [{noisy['agreement_low']:.2f}, {noisy['agreement_high']:.2f}]" in rows[1]
    assert "n/a (no shared pair)" in rows[2] and "1.00 (first 1.00, second 0.00)" in rows[2]
    assert "1.00 (first 0.00, second 1.00)" in rows[3]
    assert lines[-2].startswith("position bias: ") and lines[-1].startswith("$/1k pairs: ")


def test_stats_judges_with_no_judge(cli, sessions):
    assert json.loads(cli("stats", "--judges", "--json").stdout)["judges"] == []
    assert "no judge has ranked anything yet" in cli("stats", "--judges").stdout
    assert "prompts 0" in cli("stats").stdout  # without --judges: the counts, as before


# --- imported AI annotators: GPT-4's UltraFeedback ratings beside the team's own people ----------------------------

TOPICS = [
    "photosynthesis",
    "a rainbow",
    "tides",
    "inflation",
    "vaccines",
    "a leap year",
    "compound interest",
    "the seasons",
]
MODELS = ("gpt-4", "llama-2-13b-chat", "falcon-40b-instruct")  # best, middle, worst by GPT-4's overall_score
REVERSED_BY_BOB = {0, 1}  # bob ranks these prompts' replies the other way round
EMAIL = "bob.annotator@example.com"


def _completion(model: str, response: str, overall: float) -> dict:
    """One completion as openbmb/UltraFeedback publishes it: the model, its response and GPT-4's ratings."""
    rating = str(max(1, round(overall / 2)))
    annotations = {
        aspect: {"Rating": rating, "Rationale": f"The {aspect} is rated {rating}."}
        for aspect in ("helpfulness", "honesty", "instruction_following", "truthfulness")
    }
    return {
        "annotations": annotations,
        "critique": "Clear and correct.",
        "custom_system_prompt": "",
        "fine-grained_score": overall / 2,
        "model": model,
        "overall_score": overall,
        "principle": "helpfulness",
        "response": response,
    }


def _question(k: int) -> str:
    return f"Explain {TOPICS[k]} to a ten-year-old."


def _replies(k: int) -> list[str]:
    return [
        f"{TOPICS[k].capitalize()}, told by {model}: "
        + ("a clear and correct answer." if i == 0 else "a fair answer." if i == 1 else "a confused answer.")
        for i, model in enumerate(MODELS)
    ]


def _ultrafeedback_rows() -> list[dict]:
    return [
        {
            "source": "evol_instruct",
            "instruction": _question(k),
            "models": list(MODELS),
            "completions": [_completion(m, r, s) for m, r, s in zip(MODELS, _replies(k), (9.0, 6.5, 3.0))],
            "correct_answers": ["None"],
            "incorrect_answers": ["None"],
        }
        for k in range(len(TOPICS))
    ]


def _people_lines() -> list[str]:
    """alice agrees with GPT-4 everywhere; bob (named by his email) reverses two prompts, and lists replies shuffled."""
    from tests.db.helpers import ranking_line

    lines = []
    for k in range(len(TOPICS)):
        replies = _replies(k)
        lines.append(ranking_line(_question(k), replies, [[0], [1], [2]], "alice", id=f"alice-{k}"))
        shown = [replies[2], replies[0], replies[1]]  # worst, best, middle
        order = [[0], [2], [1]] if k in REVERSED_BY_BOB else [[1], [2], [0]]
        lines.append(ranking_line(_question(k), shown, order, EMAIL, id=f"bob-{k}"))
    return lines


def _nectar_row() -> dict:
    """One berkeley-nest/Nectar row on a prompt no person ranked: GPT-4 again, sharing nothing with people."""
    return {
        "prompt": "\n\nHuman: Name a word that rhymes with cat.\n\nAssistant: ",
        "answers": [
            {"answer": "Hat.", "model": "gpt-4", "rank": 1.0},
            {"answer": "Dog.", "model": "llama-2-7b-chat", "rank": 2.0},
        ],
        "turns": 1,
        "num_responses": 2,
        "source": ["sharegpt"],
        "good_natured": True,
    }


def _imported_store(cli, sessions, tmp_path) -> dict[str, tuple[int, str, str]]:
    """UltraFeedback rows, people's rankings of its prompts and a Nectar row; source -> (id, pseudonym, name)."""
    from sqlalchemy import select

    from preflab.db.models import Annotator, Ranking
    from tests.db.helpers import write_lines

    uf = write_lines(tmp_path / "ultrafeedback.jsonl", [json.dumps(row) for row in _ultrafeedback_rows()])
    nectar = write_lines(tmp_path / "nectar.jsonl", [json.dumps(_nectar_row())])
    cli("import", "dataset", "--format", "ultrafeedback", "--criterion", "overall", uf)
    cli("import", "dataset", "--format", "nectar", nectar)
    cli("import", "rankings", write_lines(tmp_path / "people.jsonl", _people_lines()))
    with sessions.begin() as session:
        return {
            source: (aid, pseudonym, name)
            for source, aid, pseudonym, name in session.execute(
                select(Ranking.source, Annotator.id, Annotator.pseudonym, Annotator.name)
                .distinct()
                .join(Annotator, Annotator.id == Ranking.annotator_id)
                .where(Annotator.kind == "ai")
            )
        }


def test_imported_ai_judges_show_their_names_and_people_keep_pseudonyms(cli, sessions, tmp_path):
    """GPT-4's UltraFeedback ratings beside the team's people: the judges by name (the four score fields could
    not be told apart by pseudonym), the people by pseudonym everywhere."""
    import re

    annotators = _imported_store(cli, sessions, tmp_path)
    (uf_id, uf_pseudonym, uf_name), (nectar_id, nectar_pseudonym, nectar_name) = (
        annotators["import:ultrafeedback"],
        annotators["import:nectar"],
    )
    assert (uf_name, nectar_name) == ("openbmb/UltraFeedback", "nectar-gpt-4")
    shared = len(TOPICS)

    out = json.loads(cli("stats", "--judges", "--json").stdout)["judges"]
    assert [r["annotator_id"] for r in out] == [uf_id, nectar_id]  # the one with an interval first
    gpt4, nectar = out
    assert (gpt4["judge"], gpt4["pseudonym"], gpt4["kind"], gpt4["imported"]) == (uf_name, uf_pseudonym, "import", True)
    assert (gpt4["shared_prompts"], gpt4["shared_pairs"]) == (shared, 2 * 3 * shared)  # two people, three pairs each
    assert gpt4["agreement"] == (2 * 3 * shared - 3 * len(REVERSED_BY_BOB)) / (2 * 3 * shared)  # 42 of 48 pairs
    assert gpt4["agreement_low"] < gpt4["agreement"] <= gpt4["agreement_high"]
    assert gpt4["kendall_tau"] == (2 * shared - 2 * len(REVERSED_BY_BOB)) / (2 * shared)  # 14 of +1, 2 of -1
    assert gpt4["position_bias"] is None and gpt4["run_id"] is None and gpt4["name"] == uf_name
    assert (gpt4["model"], gpt4["source"], nectar["source"]) == (None, "import:ultrafeedback", "import:nectar")
    # A judge that shares no prompt with people is listed, with that said: no agreement, no interval.
    assert (nectar["judge"], nectar["shared_prompts"], nectar["agreement"], nectar["agreement_low"]) == (
        nectar_name,
        0,
        None,
        None,
    )

    lines = cli("stats", "--judges").stdout.splitlines()
    rows = {line.split("  ")[-1]: line for line in lines[2:4]}
    assert set(rows) == {f"{uf_name} (import:ultrafeedback)", f"{nectar_name} (import:nectar)"}
    uf_row = rows[f"{uf_name} (import:ultrafeedback)"]
    assert uf_row.split()[0] == "import"
    assert f"0.88 [{gpt4['agreement_low']:.2f}, {gpt4['agreement_high']:.2f}]" in uf_row
    assert "n/a (imported: not recorded)" in uf_row
    assert "n/a (no prompt shared)" in rows[f"{nectar_name} (import:nectar)"]
    assert uf_pseudonym not in cli("stats", "--judges").stdout

    page = tmp_path / "report.html"
    report = json.loads(cli("report", page, "--json").stdout)
    assert "judges" in report["sections"]
    assert [j["judge"] for j in report["judges"]] == [uf_name, nectar_name]
    judge = report["judges"][0]
    assert (judge["kind"], judge["model"], judge["imported"]) == ("import", "import:ultrafeedback", True)
    assert (judge["human_agreement"], judge["human_agreement_low"], judge["human_agreement_high"]) == (
        gpt4["agreement"],
        gpt4["agreement_low"],
        gpt4["agreement_high"],
    )
    html = page.read_text(encoding="utf-8")
    table = html.split('<table class="trust">')[1].split("</table>")[0]
    cells = dict(re.findall(r"<tr><td class=\"id\">([^<]+)</td>(.*?)</tr>", table, flags=re.S))
    assert list(cells) == [uf_name, nectar_name]
    assert f"0.88 <small>[{gpt4['agreement_low']:.2f}, {gpt4['agreement_high']:.2f}]</small>" in cells[uf_name]
    assert "n/a <small>(imported)</small>" in cells[uf_name]
    assert "(no prompt shared with people)" in cells[nectar_name]
    # People appear by pseudonym only: no person's name, no email; the judges' pseudonyms are not needed.
    for private in (EMAIL, "alice", uf_pseudonym, nectar_pseudonym):
        assert not re.search(rf"(?<![\w-]){re.escape(private)}(?![\w-])", html), private
    with sessions.begin() as session:
        from sqlalchemy import select

        from preflab.db.models import Annotator

        people = list(session.scalars(select(Annotator.pseudonym).where(Annotator.kind == "human")))
    assert len(people) == 2 and all(p in html for p in people)  # the agreement section names them so


def test_a_panel_is_named_whole_and_cut_from_the_right_where_it_must_be_cut():
    """The panel's members are all named: a judge's name is never cut from the left (`…enai:judge-b+…`)."""
    from preflab.commands.text import judges_text
    from preflab.report.privacy import ai_label

    name = "judge:pairwise:0123456789abcdef:panel:openai:judge-a+openai:judge-b+/home/alice/models/judge-c"
    row = {
        "judge": name,
        "kind": "pairwise",
        "method": None,
        "imported": False,
        "shared_prompts": 0,
        "shared_pairs": 0,
        "agreement": None,
        "agreement_low": None,
        "agreement_high": None,
        "kendall_tau": None,
        "position_bias": 0.25,
        "position_first": 0.25,
        "position_second": 0.0,
    }
    text = judges_text({"judges": [row], "bootstrap": {"level": 0.95, "rounds": 1000, "seed": 0}})
    assert text.splitlines()[2].endswith("  " + name)
    # On the page, a member's local folders are dropped, as any model's are; the rest is whole.
    assert ai_label(name) == "judge:pairwise:0123456789abcdef:panel:openai:judge-a+openai:judge-b+judge-c"
