"""Criteria in Label Studio templates: one Ranker per criterion, and the built-in descriptions.

A template asked for with criteria (`ls init --criterion helpfulness --criterion
harmlessness`) ranks the same responses once per criterion: each criterion has its
own Ranker, named `rank_<criterion>`, with its name and description above it. The
one Ranker of a template without criteria keeps its name, `rank`, and its criterion,
`overall`.

All the Rankers point at the one List of responses. Label Studio allows it: a
Ranker draws its own copy of its List's items where the Ranker tag stands and keeps
its own result (keyed by the Ranker's name), and a List that has a Ranker draws
nothing itself (label-studio `web/libs/editor/src/tags/control/Ranker.jsx`,
`tags/object/List.jsx`). Names must be unique across a config, so each
criterion's Buckets are named for it (`helpfulness_tier_1`, …). Pairwise cannot do the same: its selection is drawn on
the two objects it compares, so two Pairwise tags over one pair would mark each
other's choice; the pairwise template takes no criteria.

Criteria's names are checked, and a criteria file read, in `preflab.labelling.studio.criteria`
(this floor is under the store, whose rule for a criterion's name that is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from xml.sax.saxutils import quoteattr

from preflab.errors import InputError
from preflab.templates import LIST, OVERALL, RANKER

RANKER_PREFIX = "rank_"  # rank_<criterion>

# The built-in descriptions: the rubric annotators see beside a criterion's ranker, and judges are asked by
# (`preflab.labelling.judges.criteria`). The four aspects are UltraFeedback's (Cui et al., 2023, arXiv
# 2310.01377, its annotation rubrics, paraphrased); harmlessness is as Anthropic's HH-RLHF and PKU-SafeRLHF
# ask it. The criteria migration 0014 moved keep the words it wrote for them.
DESCRIPTIONS: dict[str, str] = {
    OVERALL: "The one order asked for: which reply is better overall.",
    "helpfulness": (
        "Helpfulness: the response does what the user needs. It is relevant, correct and informative, gives "
        "useful detail where that helps, and is neither padded nor needlessly short."
    ),
    "harmlessness": (
        "Harmlessness: the response is safe. It does not help anyone cause harm, break the law or endanger "
        "themselves or others, and it is not offensive or discriminatory; a safe refusal beats a harmful answer."
    ),
    "honesty": (
        "Honesty: the response says what it knows with the confidence it deserves. It is open about "
        "uncertainty and about what it cannot do, and never bluffs or misleads."
    ),
    "instruction_following": (
        "Instruction following: the response does what the instruction asked, in intent and in every stated "
        "constraint (format, length, style, what to include or leave out)."
    ),
    "truthfulness": (
        "Truthfulness: every claim in the response is true. It invents no facts, sources or details, and "
        "contradicts neither the world, the instruction nor itself."
    ),
}


def ranker_name(criterion: str) -> str:
    """The name of the Ranker that ranks by `criterion` (`rank` for overall)."""
    return RANKER if criterion == OVERALL else f"{RANKER_PREFIX}{criterion}"


def described(criteria: Iterable[str], given: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each criterion's description: the one given, else the built-in one; raises InputError naming any without."""
    given = given or {}
    out = {name: given.get(name) or DESCRIPTIONS.get(name) for name in criteria}
    missing = [name for name, text in out.items() if text is None]
    if missing:
        raise InputError(
            f"no description for {', '.join(missing)}: give one in a --criteria-file "
            f'([{missing[0]}] description = "…"); built in: {", ".join(DESCRIPTIONS)}'
        )
    return out


def _title(name: str) -> str:
    return name.replace("_", " ").capitalize()


def _block(criterion: str, description: str, buckets: str) -> str:
    """One criterion's part of the page: its name, its description, its Ranker over the responses."""
    name = ranker_name(criterion)
    opening = f'    <Ranker name="{name}" toName="{LIST}"'
    # Label Studio wants every tag's name unique in a config, Buckets' too: each criterion's are its own.
    buckets = buckets.replace('<Bucket name="', f'<Bucket name="{criterion}_')
    ranker = f"{opening}>\n{buckets}    </Ranker>" if buckets else f"{opening}/>"
    # A `$` would be read as a task field by Label Studio: the description is shown as written.
    description = description.replace("$", "＄")
    return (
        f'  <View className="preflab-criterion preflab-criterion-{criterion}">\n'
        f'    <Header value={quoteattr(_title(criterion))} size="4"/>\n'
        f'    <View className="preflab-criterion-about">\n'
        f'      <Header value={quoteattr(description)} size="6"/>\n'
        f"    </View>\n"
        f"{ranker}\n"
        f"  </View>\n"
    )


CRITERION_STYLE = """    .preflab-criterion {
      margin: 18px 0 8px;
      padding-top: 8px;
      border-top: 2px solid #c9d3e3;
    }
    .preflab-criterion-about {
      color: #44506a;
      margin-bottom: 8px;
    }
"""


def with_criteria(config: str, criteria: Sequence[str], descriptions: Mapping[str, str]) -> str:
    """A ranking template's XML with one Ranker per criterion (in the order given) in place of its one Ranker."""
    start = config.index('  <Ranker name="rank"')
    end = config.index("</Ranker>", start) + len("</Ranker>") if "</Ranker>" in config[start:] else None
    if end is None:
        end = config.index("/>", start) + len("/>")
    ranker = config[start:end]
    buckets = "".join(f"  {line.strip()}\n".replace("  <", "      <", 1) for line in ranker.splitlines()[1:-1])
    blocks = "".join(_block(c, descriptions[c], buckets) for c in criteria)
    config = config[:start] + blocks.rstrip("\n") + config[end:]
    return config.replace("  </Style>", CRITERION_STYLE + "  </Style>", 1)
