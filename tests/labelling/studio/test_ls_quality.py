"""Gold tasks and annotator flags through a real Label Studio: push with gold, annotate, sync, `annotators`."""

import json

from sqlalchemy import select

from preflab.db.models import Comparison, GoldAnswer
from tests.labelling.ls_helpers import item, ranker_result, session, tasks, unique, write_prompts


def quality(text: str) -> int:
    """The true rank a response was written with (0 is best)."""
    return int(text.split("rank ")[1].split(")")[0])


def test_gold_tasks_hide_among_the_others_and_flag_a_careless_annotator(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    tag = unique("q")

    def responses(p: int) -> list[str]:
        return [f"reply {i} to {p} (rank {i}) {tag}" for i in range(4)]

    prompts = {f"Question {p}, asked plainly {tag}": responses(p) for p in range(12)}
    lcli("import", "prompts", write_prompts(tmp_path / "prompts.jsonl", prompts))
    gold = tmp_path / "gold.jsonl"
    gold.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": f"Question {p}, asked plainly {tag}",
                    "responses": responses(p),
                    "ranking": [[0], [1], [2], [3]],
                }
            )
            + "\n"
            for p in range(100, 104)
        ),
        encoding="utf-8",
    )
    pid = json.loads(lcli("ls", "init", "--title", unique("gold"), "--json").stdout)["project_id"]

    # A bad gold file, or a rate that is no share, stops the push with one sentence, before anything is written.
    bad = tmp_path / "bad-gold.jsonl"
    tied = json.dumps({"prompt": "Tied?", "responses": ["a", "b"], "ranking": [[0, 1]]})
    bad.write_text(gold.read_text(encoding="utf-8") + tied + "\n", encoding="utf-8")
    for args, said in [
        (("--gold", bad), "bad-gold.jsonl line 5: the ranking has a single tier"),
        (("--gold", gold, "--gold-rate", "1.5"), "--gold-rate must be at least 0 and below 1"),
        (("--gold-rate", "0.1"), "no gold answers are stored: give them with --gold FILE"),
    ]:
        refused = lcli("ls", "push", "--project", pid, *args, expect_ok=False)
        assert refused.exit_code != 0 and said in refused.output and "Traceback" not in refused.output
    with session(sqlite_url) as s:
        assert s.scalar(select(GoldAnswer.id)) is None
    assert tasks(sqlite_url) == []

    pushed = json.loads(lcli("ls", "push", "--project", pid, "--gold", gold, "--gold-rate", "0.25", "--json").stdout)
    assert (pushed["created"], pushed["gold"], pushed["gold_answers"]) == (16, 4, {"new": 4, "unchanged": 0})
    again = lcli("ls", "push", "--project", pid, "--gold", gold, "--gold-rate", "0.25")
    assert "created 0 tasks, 0 of them gold" in again.stdout  # the project holds its share of gold already

    with session(sqlite_url) as s:
        gold_prompts = set(s.scalars(select(GoldAnswer.prompt_id)))
    assert len(gold_prompts) == 4
    pushed_tasks = tasks(sqlite_url)
    remote = {t.id: t.data for t in server.sdk().tasks.list(project=pid)}
    assert len(remote) == 16
    # Nothing in a task tells a gold task from another: the same fields, the same kind of values.
    assert {frozenset(data) for data in remote.values()} == {
        frozenset({"prompt", "system", "dialogue", "items", "preflab_task"})
    }
    assert not any("gold" in json.dumps(data).lower() for data in remote.values())

    careful = [server.signup(f"careful{n}-{pid}@preflab.test") for n in range(3)]
    careless = server.signup(f"careless-{pid}@preflab.test")
    sdk = server.sdk()
    for task in pushed_tasks:
        best_first = sorted(task["shown"], key=lambda c: quality(task["texts"][task["shown"].index(c)]))
        for user in careful:
            sdk.annotations.create(
                task["id"],
                completed_by=user,
                lead_time=25.0,
                result=ranker_result({"rank": [item(c) for c in best_first]}),
            )
        sdk.annotations.create(
            task["id"],
            completed_by=careless,
            lead_time=1.5,
            result=ranker_result({"rank": [item(c) for c in task["shown"]]}),
        )
    assert json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)["new"] == 64

    report = json.loads(lcli("annotators", "--json").stdout)["annotators"]
    assert len(report) == 4
    flagged = [r for r in report if r["flags"]]
    assert len(flagged) == 1
    (bad,) = flagged
    assert {"mostly-unchanged", "too-fast"} <= set(bad["flags"])
    assert bad["same_as_shown"] == 1.0 and bad["median_seconds"] == 1.5 and bad["gold_rankings"] == 4
    for good in (r for r in report if not r["flags"]):
        assert (good["gold_tau"], good["gold_pairwise"], good["gold_rankings"]) == (1.0, 1.0, 4)
        assert good["rankings"] == 16 and good["median_seconds"] == 25.0
    text = lcli("annotators").stdout
    assert bad["annotator"] in text and "@preflab.test" not in text

    built = json.loads(lcli("pairs", "build", "--exclude-flagged", "--json").stdout)
    assert list(built["excluded"]) == [bad["annotator"]]
    assert built["pairs"] == 3 * 12 * 6  # three careful people on the 12 prompts; gold prompts give none
    with session(sqlite_url) as s:
        assert not set(s.scalars(select(Comparison.prompt_id).distinct())) & gold_prompts
