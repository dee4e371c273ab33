"""The report's charts say what their captions promise: a colour per source, a ★ on each current model.

Text in the charts is drawn as paths (the page needs no font), and matplotlib writes
each string as a comment before its glyphs: the tests read the legend and the boxes
from those comments, and the colours and glyphs from the SVG itself.
"""

from __future__ import annotations

import json
import re

from sqlalchemy import update

from preflab.db.models import ModelVersion

# Twelve sources, as a store that has taken every public format and the judges holds them.
SOURCES = [
    "bon",
    "import",
    "import:arena",
    "import:hh",
    "import:helpsteer3",
    "import:nectar",
    "import:oasst2",
    "import:pku",
    "import:rankings",
    "import:shp",
    "import:trl",
    "judge",
]
WEEKS = ["2025-03-03", "2025-03-10", "2025-03-17"]


def _weekly(sources: list[str]) -> dict:
    """The Data section's `weekly` data: a few rankings per source and week."""
    return {
        "weeks": WEEKS,
        "prompts": [40, 25, 10],
        "candidates": [120, 75, 30],
        "rankings": {source: [i + 1, 2 * i + 2, 3] for i, source in enumerate(sources)},
    }


def _legend(svg: str, labels: list[str]) -> list[tuple[str, str]]:
    """(label, fill colour) of each legend entry: the fill of the patch drawn just before its label."""
    entries = []
    for label in labels:
        at = svg.index(f"<!-- {label} -->")
        entries.append((label, re.findall(r'style="fill: (#[0-9a-f]{6})', svg[:at])[-1]))
    return entries


def test_twelve_sources_get_twelve_colours_in_the_legend():
    from preflab.report.charts import weekly_chart

    legend = _legend(weekly_chart(_weekly(SOURCES)), SOURCES)
    colours = [colour for _, colour in legend]
    assert len(set(colours)) == len(SOURCES), legend  # import and import:trl no longer share one


def test_past_the_palette_the_smallest_sources_are_one_other():
    from preflab.report.charts import SOURCE_COLOURS, source_colours, weekly_chart

    many = [f"import:set-{i:02d}" for i in range(len(SOURCE_COLOURS) + 4)]  # 20 sources, the first the smallest
    weekly = _weekly(many)
    svg = weekly_chart(weekly)
    kept = many[5:]  # the 15 largest, in their own order, then the rest summed
    legend = _legend(svg, [*kept, "other (5 sources)"])
    assert len({colour for _, colour in legend}) == len(legend) == len(SOURCE_COLOURS)
    assert not [source for source in many[:5] if f"<!-- {source} -->" in svg]
    *_, (label, other, _) = source_colours(weekly["rankings"])
    assert label == "other (5 sources)" and other == [
        sum(week) for week in zip(*(weekly["rankings"][s] for s in many[:5]))
    ]


def _star_glyph_drawn(svg: str, label: str) -> bool:
    """Whether the box labelled `label  ★` is in the chart and its last glyph is drawn (not the missing-glyph box)."""
    marker = f"<!-- {label}  ★ -->"
    if marker not in svg:
        return False
    start = svg.index(marker)
    text = svg[start : svg.index("<!--", start + len(marker))]
    glyph = re.findall(r'<use xlink:href="#([^"]+)"', text)[-1]
    drawn = re.search(rf'<path id="{re.escape(glyph)}" d="M [^"]+"', svg)
    return drawn is not None and not glyph.endswith("-0")


def _lineage(cli, tmp_path, name: str) -> tuple[dict, str, str]:
    """The report's lineage data, its chart's SVG and the page's caption."""
    out = tmp_path / f"{name}.html"
    report = json.loads(cli("report", out, "--json").stdout)
    html = out.read_text(encoding="utf-8")
    section = html.split('<section id="models">')[1].split("</section>")[0]
    figure = section[section.index('<figure class="chart"><svg') :]
    svg, caption = figure[: figure.index("</svg>")], figure.split("<figcaption>")[1].split("</figcaption>")[0]
    return report["models"]["lineage"], svg, caption


def test_the_lineage_draws_a_star_on_each_current_model(cli, sessions, tmp_path):
    with sessions.begin() as session:
        base = ModelVersion(name="smollm2-base", kind="base")
        session.add(base)
        session.flush()
        session.add_all(
            [
                ModelVersion(name="reward-1", kind="reward", parent_id=base.id),
                ModelVersion(name="dpo-1", kind="policy", parent_id=base.id),
                ModelVersion(name="dpo-2", kind="policy", parent_id=base.id),
            ]
        )

    # Nothing marked current (as after `train reward` and `train dpo`): the newest of each kind, as the cards say.
    lineage, svg, caption = _lineage(cli, tmp_path, "newest")
    assert {n["name"] for n in lineage["nodes"] if n["current"]} == {"smollm2-base", "reward-1", "dpo-2"}
    assert "★ marks the current model of each kind" in caption
    assert all(_star_glyph_drawn(svg, name) for name in ("smollm2-base", "reward-1", "dpo-2"))
    assert not _star_glyph_drawn(svg, "dpo-1") and "<!-- dpo-1 -->" in svg

    # A retrain marks dpo-1 current: the ★ moves to it, whatever is newer.
    with sessions.begin() as session:
        session.execute(update(ModelVersion).where(ModelVersion.name == "dpo-1").values(is_current=True))
    lineage, svg, _ = _lineage(cli, tmp_path, "marked")
    assert {n["name"] for n in lineage["nodes"] if n["current"]} == {"smollm2-base", "reward-1", "dpo-1"}
    assert _star_glyph_drawn(svg, "dpo-1") and not _star_glyph_drawn(svg, "dpo-2") and "<!-- dpo-2 -->" in svg


def test_a_current_model_older_than_the_newest_drawn_is_drawn(cli, sessions, tmp_path):
    from preflab.report.models import LINEAGE_LIMIT

    with sessions.begin() as session:
        session.add(ModelVersion(name="reward-kept", kind="reward", is_current=True))
        session.add_all([ModelVersion(name=f"policy-{i:02d}", kind="policy") for i in range(LINEAGE_LIMIT)])
    lineage, svg, _caption = _lineage(cli, tmp_path, "older")
    names = {n["name"]: n["current"] for n in lineage["nodes"]}
    assert names["reward-kept"] is True and names[f"policy-{LINEAGE_LIMIT - 1:02d}"] is True
    assert len(names) == LINEAGE_LIMIT + 1 and lineage["left_out"] == 0
    assert _star_glyph_drawn(svg, "reward-kept")
