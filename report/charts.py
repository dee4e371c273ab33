"""The page's charts: matplotlib figures written as inline SVG (no pyplot, no files, no fonts to fetch).

Each function takes a section's data (plain numbers, as `build_report` returns
them) and returns the `<svg>` element as a string; the Leaderboard and
Optimisation sections draw theirs beside their data, with this module's figure,
style and `to_svg`. matplotlib is imported inside the drawing functions only,
and each figure has an Agg canvas of its own, so no display or pyplot
state is touched. Text is drawn as paths, so the page needs no font; every chart
gets its own id salt, so the clip paths and markers of two charts on one page
never share an id.
"""

from __future__ import annotations

import io
import math
from typing import Any

from preflab.errors import ConfigError

KIND_COLOURS = {"base": "#9aa5b1", "reward": "#e8a33d", "policy": "#3b7dd8"}
# Sixteen colours told apart side by side (hue and lightness both vary): a stacked bar per source, a line per curve.
SOURCE_COLOURS = [
    "#3b7dd8",
    "#e8a33d",
    "#4caf7a",
    "#c75c8a",
    "#8a6fd1",
    "#5bb6c9",
    "#b08d57",
    "#9aa5b1",
    "#d64541",
    "#1f3a68",
    "#a8c545",
    "#f4d03f",
    "#6e3b1f",
    "#f39bc0",
    "#137a63",
    "#3d3d3d",
]
OTHER_COLOUR = "#d5dae0"
STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e6e9ee",
    "grid.linewidth": 0.8,
    "axes.axisbelow": True,
    "legend.frameon": False,
    "svg.fonttype": "path",
}


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(
            "the report draws its charts with matplotlib: pip install 'preflab[ml]' (or just matplotlib)"
        ) from None


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_svg(fig, name: str) -> str:
    """The figure as an `<svg>` element (no XML prolog), its ids salted with `name`."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": name}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _styled(draw):
    """Run a chart function with the page's matplotlib style."""

    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)

    wrapper.__doc__, wrapper.__name__ = draw.__doc__, draw.__name__
    return wrapper


def _thousands(ax, axis: str = "y") -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(MaxNLocator(integer=True))
    target.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def _week_ticks(ax, weeks: list[str]) -> None:
    step = max(1, math.ceil(len(weeks) / 12))
    ax.set_xticks(range(0, len(weeks), step))
    ax.set_xticklabels(weeks[::step], rotation=30 if len(weeks) > 4 else 0, ha="right" if len(weeks) > 4 else "center")
    pad = max(0.7, (6 - len(weeks)) / 2)  # a week or two: narrow bars, not slabs
    ax.set_xlim(-pad, len(weeks) - 1 + pad)
    _thousands(ax)


def source_colours(by_source: dict[str, list[int]]) -> list[tuple[str, list[int], str]]:
    """(label, values, colour) per source, in the given order, each source with a colour of its own.

    Past the palette's colours, the smallest sources are summed as one grey "other (n sources)" last:
    two sources sharing a colour would read as one.
    """
    kept = list(by_source)
    if len(kept) > len(SOURCE_COLOURS):
        kept = sorted(kept, key=lambda source: (-sum(by_source[source]), source))[: len(SOURCE_COLOURS) - 1]
    out = [
        (source, by_source[source], colour)
        for source, colour in zip([s for s in by_source if s in kept], SOURCE_COLOURS)
    ]
    rest = [values for source, values in by_source.items() if source not in kept]
    if rest:
        out.append((f"other ({len(rest)} sources)", [sum(week) for week in zip(*rest)], OTHER_COLOUR))
    return out


@_styled
def weekly_chart(weekly: dict[str, Any]) -> str:
    """Rankings per week stacked by source; prompts and candidates per week."""
    weeks = weekly["weeks"]
    sources = source_colours(weekly["rankings"])
    below = len(sources) > 5  # a long legend goes under the bars, not over them, and the figure grows for it
    fig = _figure(9.5, 3.2 + (0.17 * math.ceil(len(sources) / 4) if below else 0))
    left, right = fig.subplots(1, 2)
    bottom = [0] * len(weeks)
    for source, values, colour in sources:
        left.bar(range(len(weeks)), values, 0.7, bottom=bottom, label=source, color=colour)
        bottom = [b + v for b, v in zip(bottom, values)]
    left.set_title("Rankings added per week, by source")
    if below:
        fig.legend(*left.get_legend_handles_labels(), loc="outside lower left", ncol=4, fontsize=7.5)
    elif sources:
        left.legend(fontsize=8, loc="upper left")
    else:  # prompts imported, nothing ranked yet
        left.text(0.5, 0.5, "no rankings yet", transform=left.transAxes, ha="center", va="center", color="#616e7c")
    width = 0.38
    right.bar([i - width / 2 for i in range(len(weeks))], weekly["prompts"], width, label="prompts", color="#5bb6c9")
    right.bar(
        [i + width / 2 for i in range(len(weeks))], weekly["candidates"], width, label="candidates", color="#8a6fd1"
    )
    right.set_title("Prompts and candidates added per week")
    right.legend(fontsize=8, loc="upper left")
    for ax in (left, right):
        _week_ticks(ax, weeks)
        ax.set_xlabel("week starting")
        ax.grid(axis="x", visible=False)
    return to_svg(fig, "weekly")


@_styled
def heatmap_chart(heatmap: dict[str, Any]) -> str:
    """Annotator × annotator pairwise agreement, by pseudonym; grey where two never shared a pair."""
    import numpy as np
    from matplotlib import colormaps

    labels, size = heatmap["labels"], len(heatmap["labels"])
    values = np.array([[np.nan if v is None else v for v in row] for row in heatmap["agreement"]], dtype=float)
    side = max(4.5, 0.42 * size + 2.8)
    fig = _figure(side + 1.2, side)
    ax = fig.subplots()
    cmap = colormaps["RdYlGn"].with_extremes(bad="#eef0f3")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=1)
    ax.set_xticks(range(size))
    ax.set_yticks(range(size))
    ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
    ax.set_yticklabels(labels, fontsize=8)
    for tick_x, tick_y, kind in zip(ax.get_xticklabels(), ax.get_yticklabels(), heatmap["kinds"]):
        if kind != "human":
            tick_x.set_color("#6a3fb5")
            tick_y.set_color("#6a3fb5")
    ax.grid(False)
    if size <= 16:
        for i in range(size):
            for j in range(size):
                if not np.isnan(values[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{values[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=7.5,
                        color="black" if 0.25 < values[i, j] < 0.8 else "white",
                    )
    fig.colorbar(image, ax=ax, shrink=0.7, label="pairwise agreement")
    ax.set_title("Agreement between annotators (people in black, AI in purple)")
    return to_svg(fig, "heatmap")


def tension_chart(tension: list[dict[str, Any]]) -> str:
    """Criterion × criterion: the share of the pairs both order that they order oppositely; grey where none."""
    import numpy as np
    from matplotlib import colormaps

    labels = sorted({row["a"] for row in tension} | {row["b"] for row in tension})
    index, size = {name: i for i, name in enumerate(labels)}, len(labels)
    values = np.full((size, size), np.nan)
    for row in tension:
        values[index[row["a"]], index[row["b"]]] = values[index[row["b"]], index[row["a"]]] = row["share"]
    fig = _figure(max(4.0, 0.6 * size + 3), max(3.2, 0.6 * size + 2.2))
    ax = fig.subplots()
    image = ax.imshow(np.ma.masked_invalid(values), cmap=colormaps["Reds"].with_extremes(bad="#eef0f3"), vmin=0, vmax=1)
    ax.set_xticks(range(size))
    ax.set_yticks(range(size))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_yticklabels(labels, fontsize=8)
    ax.grid(False)
    for i in range(size):
        for j in range(size):
            if not np.isnan(values[i, j]):
                colour = "white" if values[i, j] > 0.6 else "black"
                ax.text(j, i, f"{values[i, j]:.0%}", ha="center", va="center", fontsize=8, color=colour)
    fig.colorbar(image, ax=ax, shrink=0.7, label="pairs ordered oppositely")
    ax.set_title("How often two criteria disagree on the same pair")
    return to_svg(fig, "tension")


JUDGE_BARS = (
    ("swap_consistency", "swap consistency"),
    ("first_position_rate", "first position wins"),
    ("longer_wins", "longer answer wins"),
    ("human_agreement", "agreement with people"),
)


def judges_has_chart(judges: list[dict[str, Any]]) -> bool:
    return any(j.get(key) is not None for j in judges for key, _ in JUDGE_BARS)


@_styled
def judges_chart(judges: list[dict[str, Any]]) -> str:
    """Per judge, a dot per measure: swap consistency, position and length bias, agreement with people."""
    measures = [(key, label) for key, label in JUDGE_BARS if any(j.get(key) is not None for j in judges)]
    fig = _figure(8.5, 1.3 + 0.45 * len(judges))
    ax = fig.subplots()
    styles = [("#3b7dd8", "o"), ("#e8a33d", "s"), ("#c75c8a", "D"), ("#4caf7a", "^")]
    for m, (key, label) in enumerate(measures):
        points = [(j[key], i) for i, j in enumerate(judges) if j.get(key) is not None]
        colour, marker = styles[m % len(styles)]
        ax.scatter(
            [x for x, _ in points], [y for _, y in points], s=55, color=colour, marker=marker, label=label, zorder=3
        )
    ax.axvline(0.5, color="#555", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(judges)))
    ax.set_yticklabels([f"{j['judge']} ({j['kind']})" for j in judges], fontsize=8)
    ax.set_ylim(len(judges) - 0.5, -0.5)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("rate (dashed: 0.5, no preference)")
    ax.set_title("Judges: consistency, biases and agreement with people")
    fig.legend(loc="outside lower center", ncol=len(measures), fontsize=8)
    return to_svg(fig, "judges")


def _layout(nodes: list[dict[str, Any]]) -> dict[int, tuple[float, float]]:
    """(x, y) per node: x is the depth; each layer is centred and ordered by its parents' places."""
    by_depth: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        by_depth.setdefault(node["depth"], []).append(node)
    place: dict[int, tuple[float, float]] = {}
    for depth in sorted(by_depth):
        layer = sorted(by_depth[depth], key=lambda n: (place.get(n["parent"], (0, 0))[1] * -1, n["id"]))
        for i, node in enumerate(layer):
            place[node["id"]] = (depth, (len(layer) - 1) / 2 - i)
    return place


@_styled
def lineage_chart(lineage: dict[str, Any]) -> str:
    """Model versions as boxes from base models (left) to what was trained from them, coloured by kind."""
    nodes = lineage["nodes"]
    place = _layout(nodes)
    depth = max(x for x, _ in place.values())
    rows = max(sum(1 for n in nodes if n["depth"] == d) for d in range(depth + 1))
    fig = _figure(min(12.0, 2.6 * (depth + 1) + 1), max(2.2, 0.62 * rows + 0.9))
    ax = fig.subplots()
    ax.axis("off")
    boxes = {}
    for node in nodes:
        x, y = place[node["id"]]
        text = node["name"] if len(node["name"]) <= 22 else node["name"][:21] + "…"
        boxes[node["id"]] = ax.text(
            x,
            y,
            text + ("  ★" if node["current"] else ""),
            ha="center",
            va="center",
            fontsize=8,
            color="white" if node["kind"] == "policy" else "#1f2933",
            fontweight="bold" if node["current"] else "normal",
            bbox={
                "boxstyle": "round,pad=0.4",
                "facecolor": KIND_COLOURS.get(node["kind"], "#cbd2d9"),
                "edgecolor": "#1f2933" if node["current"] else "white",
                "linewidth": 1.6,
            },
        )
    for edge in lineage["edges"]:
        (x0, y0), (x1, y1) = place[edge["from"]], place[edge["to"]]
        # Arrows run from box edge to box edge (matplotlib clips them at the boxes).
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "-|>",
                "color": "#7b8794",
                "lw": 1.1,
                "shrinkA": 3,
                "shrinkB": 3,
                "patchA": boxes[edge["from"]].get_bbox_patch(),
                "patchB": boxes[edge["to"]].get_bbox_patch(),
            },
        )
        label = edge["label"] + (f" · iteration {edge['iteration']}" if edge["iteration"] is not None else "")
        if label:
            ax.text(
                (x0 + x1) / 2,
                (y0 + y1) / 2 + 0.08,
                label,
                ha="center",
                va="bottom",
                fontsize=7.5,
                color="#52606d",
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
            )
    ax.set_xlim(-0.55, depth + 0.55)
    ax.set_ylim(-rows / 2 - 0.1, rows / 2 + 0.1)
    handles = [_patch(colour, kind) for kind, colour in KIND_COLOURS.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, 1.12), ncol=3, fontsize=8)
    return to_svg(fig, "lineage")


def _patch(colour: str, label: str):
    from matplotlib.patches import Patch

    return Patch(facecolor=colour, label=label)
