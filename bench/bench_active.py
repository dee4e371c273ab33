"""Active selection against random: how many human rankings each strategy needs.

Usage: python bench/bench_active.py [--seeds 0 1 2 3 4] [--batch 20] [--rounds 13] [--pool 1500]

A simulated world with a hidden true preference. Each prompt has N=4 candidates,
each a feature vector x (d=12): the prompt's centre plus a spread that varies a
lot between prompts (log-normal: some candidate sets are near-duplicates, some
differ widely, as samples from one model do). The true reward is linear in x
plus an interaction term. A simulated annotator ranks a prompt's candidates by
Plackett–Luce on true reward / temperature (noisy, like people); three simulated
AI judges do the same with their own biased weights (for `disagreement`).

The loop, per strategy and seed: rank a first random batch; then repeatedly
retrain the reward model on every ranking so far (Bradley–Terry loss on all
pairs; a small SiLU MLP, 12 -> 32 -> 32 -> 1, whose last hidden layer is the
"last-layer features") and choose the next batch with preflab's own strategy
functions (`preflab.labelling.active.pick_*`); the simulated annotator ranks it.
Held-out accuracy: the share of held-out candidate pairs the reward model orders
as the true reward does.

Reported: accuracy vs human rankings per strategy (mean over seeds), and the
saving: how many fewer rankings a strategy needs to reach random's final
accuracy (per seed, against the same seed's random run; mean, std, min, max),
and on the seed-mean curves. A plot goes to bench/out/active.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from statistics import mean, pstdev

import numpy as np

N_CANDIDATES = 4
DIM = 12
STRATEGIES = ("random", "uncertainty", "uncertainty-gap", "diversity", "disagreement")


class World:
    """The hidden truth: prompts' candidate features, the true reward, the annotator and judges."""

    def __init__(self, seed: int, pool: int, held_out: int, temperature: float, spread_sigma: float = 0.9):
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.w = rng.normal(size=DIM) / np.sqrt(DIM) * 2.0
        self.temperature = temperature
        self.spread_sigma = spread_sigma
        self.pool = self._prompts(pool)
        self.test = self._prompts(held_out)
        # Judges: the true weights plus their own bias, less noisy than people. Their own
        # generator, so judging leaves the annotator's draws (and the first batch's labels) alone.
        self.judges = [self.w + rng.normal(size=DIM) / np.sqrt(DIM) * 1.0 for _ in range(3)]
        self.judge_rng = np.random.default_rng(seed + 10_000)

    def _prompts(self, n: int):
        centre = self.rng.normal(size=(n, 1, DIM))
        spread = np.exp(self.rng.normal(np.log(0.4), self.spread_sigma, size=(n, 1, 1)))
        return centre + spread * self.rng.normal(size=(n, N_CANDIDATES, DIM))

    def reward(self, x, w=None):
        w = self.w if w is None else w
        return x @ w + 0.5 * x[..., 0] * x[..., 1]

    def _rank(self, utilities, rng=None) -> list[list[int]]:
        """Plackett–Luce: pick the best by softmax, then the best of the rest, ... (tiers of one)."""
        left, order = list(range(len(utilities))), []
        while left:
            u = utilities[left] / self.temperature
            p = np.exp(u - u.max())
            pick = (rng or self.rng).choice(len(left), p=p / p.sum())
            order.append([left.pop(pick)])
        return order

    def annotate(self, prompt: int) -> list[list[int]]:
        return self._rank(self.reward(self.pool[prompt]))

    def judge(self, prompt: int, j: int) -> list[list[int]]:
        return self._rank(self.reward(self.pool[prompt], self.judges[j]) * 2.0, self.judge_rng)


def make_model(seed: int):
    import torch

    torch.manual_seed(seed)
    body = torch.nn.Sequential(torch.nn.Linear(DIM, 32), torch.nn.SiLU(), torch.nn.Linear(32, 32), torch.nn.SiLU())
    return body, torch.nn.Linear(32, 1)


def train(x_pool, labelled: dict[int, list[list[int]]], seed: int, steps: int = 300, bootstrap: bool = False):
    # SiLU, AdamW (0.1) and a small learning rate: Tanh or lr 1e-2 overfit badly here (held-out
    # accuracy fell with more steps), which would hide what the selection does.
    """A reward model trained from scratch with the Bradley–Terry loss on every labelled pair."""
    import torch

    rng = np.random.default_rng(seed)
    prompts = list(labelled)
    if bootstrap:
        prompts = list(rng.choice(prompts, size=len(prompts), replace=True))
    chosen, rejected = [], []
    for p in prompts:
        order = [t[0] for t in labelled[p]]
        for a in range(len(order)):
            for b in range(a + 1, len(order)):
                chosen.append(x_pool[p, order[a]])
                rejected.append(x_pool[p, order[b]])
    xc = torch.tensor(np.array(chosen), dtype=torch.float32)
    xr = torch.tensor(np.array(rejected), dtype=torch.float32)
    body, head = make_model(seed)
    params = list(body.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1.5e-3, weight_decay=0.1)
    for _ in range(steps):
        loss = -torch.nn.functional.logsigmoid(head(body(xc)) - head(body(xr))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return body, head


def run_model(model, x):
    """(scores, last-layer features) of candidate features x (..., DIM)."""
    import torch

    body, head = model
    with torch.no_grad():
        feats = body(torch.tensor(x, dtype=torch.float32))
        return head(feats)[..., 0].numpy(), feats.numpy()


def accuracy(world: World, model) -> float:
    scores, _ = run_model(model, world.test)
    truth = world.reward(world.test)
    right = total = 0
    for a in range(N_CANDIDATES):
        for b in range(a + 1, N_CANDIDATES):
            right += int(((scores[:, a] - scores[:, b]) * (truth[:, a] - truth[:, b]) > 0).sum())
            total += len(scores)
    return right / total


def choose(strategy: str, world: World, labelled, k: int, seed: int, judged) -> list[int]:
    """The next batch, chosen by preflab's strategy functions."""
    from preflab.labelling import active

    pool = [p for p in range(len(world.pool)) if p not in labelled]
    if strategy == "random":
        return [c.prompt_id for c in active.pick_random(pool, k, seed)]
    if strategy == "uncertainty":
        members = [
            run_model(train(world.pool, labelled, seed * 100 + m, bootstrap=True), world.pool[pool])[0]
            for m in range(4)
        ]
        scores = {p: [members[m][i].tolist() for m in range(4)] for i, p in enumerate(pool)}
        return [c.prompt_id for c in active.pick_uncertainty(scores, k)]
    model = train(world.pool, labelled, seed)
    scores, feats = run_model(model, world.pool)
    if strategy == "uncertainty-gap":
        return [c.prompt_id for c in active.pick_uncertainty({p: [scores[p].tolist()] for p in pool}, k)]
    if strategy == "diversity":
        return [
            c.prompt_id
            for c in active.pick_diversity(
                {p: feats[p] for p in pool},
                k,
                scores={p: scores[p].tolist() for p in range(len(world.pool))},
                labelled={p: feats[p] for p in labelled},
            )
        ]
    rankings = {p: judged[p] + [active.ranking_from_scores(range(N_CANDIDATES), scores[p].tolist())] for p in pool}
    return [c.prompt_id for c in active.pick_disagreement(rankings, k)]


def run(strategy: str, seed: int, args) -> list[tuple[int, float]]:
    world = World(seed, args.pool, args.held_out, args.temperature, args.spread_sigma)
    judged = (
        {p: [world.judge(p, j) for j in range(3)] for p in range(len(world.pool))}
        if strategy == "disagreement"
        else None
    )
    from preflab.labelling.active import pick_random

    # The first batch is random for every strategy (no reward model yet): the same prompts per seed.
    batch = [c.prompt_id for c in pick_random(range(len(world.pool)), args.batch, seed)]
    labelled: dict[int, list[list[int]]] = {}
    curve = []
    for round_ in range(args.rounds):
        for p in batch:
            labelled[p] = world.annotate(p)
        model = train(world.pool, labelled, seed)
        curve.append((len(labelled), accuracy(world, model)))
        if round_ + 1 < args.rounds:
            batch = choose(strategy, world, labelled, args.batch, seed * 1000 + round_, judged)
    return curve


def rankings_to_reach(curve: list[tuple[int, float]], target: float) -> float | None:
    """Rankings where the curve first reaches `target` (linear between measured points)."""
    for (n0, a0), (n1, a1) in zip([(0, 0.5), *curve[:-1]], curve):
        if a1 >= target:
            return n1 if a1 == a0 else n0 + (n1 - n0) * (target - a0) / (a1 - a0)
    return None


def plot(results, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for strategy, curves in results.items():
        xs = [n for n, _ in curves[0]]
        ys = np.array([[a for _, a in c] for c in curves])
        ax.plot(xs, ys.mean(0), marker="o", ms=3, label=strategy, lw=2.5 if strategy == "random" else 1.5)
        ax.fill_between(xs, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), alpha=0.15)
    ax.set_xlabel("human rankings (4 candidates each)")
    ax.set_ylabel("held-out pairwise accuracy")
    ax.set_title(f"active selection vs random, {len(args.seeds)} seeds (mean ± std)")
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=13)
    parser.add_argument("--pool", type=int, default=1500)
    parser.add_argument("--held-out", type=int, default=400)
    parser.add_argument("--temperature", type=float, default=0.5, help="The annotator's Plackett–Luce noise.")
    parser.add_argument(
        "--spread-sigma",
        type=float,
        default=0.9,
        help="How much the candidates' spread varies between prompts (log-normal sigma; 0: none).",
    )
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--plot", default="bench/out/active.png")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    strategies = ["random"] + [s for s in args.strategies if s != "random"]
    results: dict[str, list] = {s: [] for s in strategies}
    started = time.perf_counter()
    for seed in args.seeds:
        for strategy in strategies:
            t = time.perf_counter()
            results[strategy].append(run(strategy, seed, args))
            print(
                f"seed {seed} {strategy:<16} final acc {results[strategy][-1][-1][1]:.4f} "
                f"({time.perf_counter() - t:.1f}s)",
                flush=True,
            )
    budget = results["random"][0][-1][0]
    xs = [n for n, _ in results["random"][0]]
    print(f"\nheld-out accuracy (mean over seeds {args.seeds}) by human rankings:")
    print("rankings  " + "  ".join(f"{s:>15}" for s in strategies))
    for i, n in enumerate(xs):
        print(f"{n:>8}  " + "  ".join(f"{mean(c[i][1] for c in results[s]):>15.4f}" for s in strategies))
    summary = {}
    mean_curve = {s: [(n, mean(c[i][1] for c in results[s])) for i, n in enumerate(xs)] for s in strategies}
    random_final = mean_curve["random"][-1][1]
    print(f"\nsaving: fewer rankings than random's {budget} to reach random's final accuracy")
    for s in strategies[1:]:
        savings = []
        for seed_i in range(len(args.seeds)):
            need = rankings_to_reach(results[s][seed_i], results["random"][seed_i][-1][1])
            savings.append(1 - need / budget if need is not None else None)
        reached = [v for v in savings if v is not None]
        need_mean = rankings_to_reach(mean_curve[s], random_final)
        summary[s] = {
            "per_seed": savings,
            "mean": mean(reached) if reached else None,
            "std": pstdev(reached) if reached else None,
            "reached": f"{len(reached)}/{len(savings)}",
            "on_mean_curves": 1 - need_mean / budget if need_mean is not None else None,
            "final_accuracy": mean_curve[s][-1][1],
        }
        per = ", ".join("not reached" if v is None else f"{v:.0%}" for v in savings)
        on_mean = "not reached" if need_mean is None else f"{1 - need_mean / budget:.0%}"
        stats = (
            f"mean {mean(reached):.0%} ± {pstdev(reached):.0%}, min {min(reached):.0%}, max {max(reached):.0%}"
            if reached
            else "never"
        )
        print(
            f"  {s:<16} per seed [{per}]; {stats} (reached in {len(reached)}/{len(savings)} seeds); "
            f"on the seed-mean curves {on_mean}"
        )
    print(
        f"\nrandom's final accuracy {random_final:.4f} at {budget} rankings; wall {time.perf_counter() - started:.0f}s"
    )
    plot(results, args, Path(args.plot))
    print(f"plot: {args.plot}")
    print(json.dumps({"budget": budget, "random_final": random_final, "savings": summary}))


if __name__ == "__main__":
    main()
