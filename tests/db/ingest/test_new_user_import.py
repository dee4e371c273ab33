"""Re-importing a prompts file counts its lines as duplicates, however they are spelled."""

import json


def test_reimporting_prompts_counts_duplicates(cli, tmp_path):
    first = tmp_path / "prompts.jsonl"
    first.write_text('{"prompt": "Name a prime.", "responses": ["2", "3"]}\n{"prompt": "Name a colour."}\n')
    assert cli("import", "prompts", first).stdout.strip() == (
        "read 2 lines: imported 2 prompts, 0 quarantined, 0 duplicates, 0 blank (2 new prompts, 2 new candidates)"
    )
    # The same file again, and the same prompts written another way (spacing, key order, a repeated line).
    assert cli("import", "prompts", first).stdout.strip() == (
        "read 2 lines: imported 0 prompts, 0 quarantined, 2 duplicates, 0 blank (0 new prompts, 0 new candidates)"
    )
    respelled = tmp_path / "respelled.jsonl"
    respelled.write_text(
        '{"responses":["3","2"],"prompt":"Name a prime."}\n{"prompt":"Name a colour."}\n{"prompt":  "Name a colour."}\n'
    )
    report = json.loads(cli("import", "prompts", respelled, "--json").stdout)
    assert (report["read"], report["imported"], report["duplicates"], report["new_prompts"]) == (3, 0, 3, 0)

    # A line that adds a response is imported; one in the same file holding only what it added is not.
    more = tmp_path / "more.jsonl"
    more.write_text(
        '{"prompt": "Name a prime.", "responses": ["5"]}\n{"prompt": "Name a prime.", "responses": ["5"]} \n'
    )
    report = json.loads(cli("import", "prompts", more, "--json").stdout)
    assert (report["imported"], report["duplicates"], report["new_candidates"]) == (1, 1, 1)
