"""Canary analysis on generated samples: A/A rollouts and slower canaries judged step by step.

    .venv/bin/python bench/rollout.py [--runs N] [--seed S] [--confidence C] [--json]

Each rollout judges seeded samples (generated here, one per request, as a recorded window would hold them;
no engine runs) shaped like the demo's bursty chat load through the canary steps 5 %,
25 % and 50 % (passing the 50 % step promotes: the 100 % step is the promotion itself). A step is judged
over 5-minute windows by `apps.rollouts.analysis.analyse` with a 20 % tolerance and at least 100 requests
on each side; an inconclusive window extends the step (its samples are kept and the next window adds to
them) up to 4 times, then the rollout holds. `decide` turns each verdict into the action.

The load: arrivals at 4 requests/s, with a burst to 12/s for 30 s about every two minutes; prompt lengths
log-normal around 600 tokens (σ 0.9, 16…8,000), half the requests continuing a conversation with 30–90 %
of their prompt in the prefix cache; TTFT = (20 ms + queueing + 0.25 ms per token to prefill) × log-normal
noise (σ 0.25), the queueing a wait of mean 30 ms × the load factor for each request ahead on its pod (Poisson,
the load factor its mean; each sample carries it, so the analysis compares by load as on metered requests); ITL
25 ms growing with the load, noise σ 0.15; 0.2 % errors; a preemption for 2 % of the requests during bursts.
Both revisions see the same clock: each request goes to the canary with the step's weight, so bursts hit both.
A slower canary multiplies its TTFT and ITL.

Prints, and with `--json` ends with one JSON object:
{"aa": {"runs", "promoted"}, "slower_10": {"verdict"}, "slower_30": {"verdict"}, "bad_canary": null,
 "bad_canary_error": "...",
 "sweep": {"runs", "slower_10": {outcome: count, "windows_max"}, "slower_30": {...}, "slower_100": {...}}}
`aa` counts promotions among `--runs` seeded A/A rollouts; `slower_10` / `slower_30` are one rollout each
at `--seed`, and `sweep` counts the same over `--runs` seeds (with the most windows any rollout took), and
a 2× slower canary's outcomes on samples. `bad_canary` is one run in kubesim (bench/rollout_kubesim.py: a canary
whose engine steps take twice as long, at a 5 % step, judged window by window on measured requests):
{"rolled_back", "windows", "canary_request_share"}, `bad_canary_error` null; with `--skip-kubesim`, or when the
kubesim run fails, `bad_canary` is null and `bad_canary_error` says why.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from apps.rollouts.analysis import Action, Sample, StepState, Thresholds, analyse, decide

STEPS = (0.05, 0.25, 0.50)
WINDOW_S = 300
THRESHOLDS = Thresholds(tolerance=0.2, min_requests=100)
MAX_EXTENSIONS = 4
SKIPPED = "not run in kubesim (--skip-kubesim)"


class Load:
    """The seeded bursty chat load: one call per second of the shared clock."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.burst_left = 0

    def second(self) -> tuple[int, float]:
        """This second's arrivals and load factor (1 calm, 3 in a burst)."""
        if self.burst_left == 0 and self.rng.random() < 1 / 120:
            self.burst_left = 30
        load = 3.0 if self.burst_left else 1.0
        self.burst_left = max(self.burst_left - 1, 0)
        return _poisson(self.rng, 4.0 * load), load

    def sample(self, load: float, slowdown: float) -> Sample:
        rng = self.rng
        prompt = int(min(max(rng.lognormvariate(math.log(600), 0.9), 16), 8000))
        cached = int(prompt * rng.uniform(0.3, 0.9)) // 16 * 16 if rng.random() < 0.5 else 0
        if rng.random() < 0.002:
            return Sample(prompt_tokens=prompt, ttft_s=None, cached_tokens=cached, error=True)
        # Requests ahead on its pod, Poisson with the load factor as its mean, each a wait of mean 30 ms × the load
        # factor: 0.03 × load² on average.
        ahead = _poisson(rng, load)
        queueing = sum(rng.expovariate(1 / (0.03 * load)) for _ in range(ahead))
        ttft = (0.02 + queueing + 0.00025 * (prompt - cached)) * rng.lognormvariate(0, 0.25) * slowdown
        itl = 0.025 * (1 + 0.3 * (load - 1)) * rng.lognormvariate(0, 0.15) * slowdown
        preempted = 1 if load > 1 and rng.random() < 0.02 else 0
        return Sample(prompt_tokens=prompt, ttft_s=ttft, itl_s=itl, cached_tokens=cached, preemptions=preempted,
                      ahead=ahead)


def _poisson(rng: random.Random, mean: float) -> int:
    count, total = 0, rng.expovariate(1.0)
    while total < mean:
        count += 1
        total += rng.expovariate(1.0)
    return count


def window(load: Load, weight: float, slowdown: float) -> tuple[list[Sample], list[Sample]]:
    """One analysis window's samples for (canary, stable)."""
    canary: list[Sample] = []
    stable: list[Sample] = []
    for _ in range(WINDOW_S):
        arrivals, factor = load.second()
        for _ in range(arrivals):
            to_canary = load.rng.random() < weight
            (canary if to_canary else stable).append(load.sample(factor, slowdown if to_canary else 1.0))
    return canary, stable


def rollout(seed: int, slowdown: float = 1.0, thresholds: Thresholds = THRESHOLDS) -> dict:
    """One rollout through the steps: its outcome (promoted, rolled_back or held) and its windows."""
    load = Load(random.Random(seed))
    windows = []
    for index, weight in enumerate(STEPS):
        canary: list[Sample] = []
        stable: list[Sample] = []
        inconclusive = 0
        while True:
            more_canary, more_stable = window(load, weight, slowdown)
            canary += more_canary
            stable += more_stable
            result = analyse(canary, stable, thresholds=thresholds)
            action = decide(result.verdict, StepState(last_step=index == len(STEPS) - 1,
                                                      inconclusive_count=inconclusive,
                                                      max_extensions=MAX_EXTENSIONS, when_exhausted=Action.HOLD))
            windows.append({"weight": weight, "verdict": str(result.verdict), "action": str(action),
                            "reason": result.reason})
            if action == Action.EXTEND:
                inconclusive += 1
                continue
            if action == Action.ADVANCE:
                break
            outcome = {Action.PROMOTE: "promoted", Action.ROLL_BACK: "rolled_back", Action.HOLD: "held"}[action]
            return {"outcome": outcome, "windows": windows}
    raise AssertionError("the last step always ends the rollout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--confidence", type=float, default=0.99,
                        help="of the lower bounds a metric must exceed to fail (default 0.99; 0.5 makes z = 0)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip-kubesim", action="store_true", help="leave out the 2x slower canary's run in kubesim")
    args = parser.parse_args()
    thresholds = replace(THRESHOLDS, confidence=args.confidence)

    aa = [rollout(seed, thresholds=thresholds) for seed in range(args.runs)]
    aa_promoted = sum(run["outcome"] == "promoted" for run in aa)
    rolled_back, held = (sum(run["outcome"] == outcome for run in aa) for outcome in ("rolled_back", "held"))
    print(f"A/A: {aa_promoted} of {args.runs} rollouts promoted (rolled back {rolled_back}, held {held})")
    for run in aa:
        if run["outcome"] != "promoted":
            last = run["windows"][-1]
            print(f"  {run['outcome']} at {last['weight']:.0%}: {last['reason']}")
    figures = {"aa": {"runs": args.runs, "promoted": aa_promoted}}
    sweep: dict = {"runs": args.runs}
    for key, slowdown in (("slower_10", 1.1), ("slower_30", 1.3), ("slower_100", 2.0)):
        one = rollout(args.seed, slowdown, thresholds)
        last = one["windows"][-1]
        print(f"canary {slowdown:.1f}× as slow (seed {args.seed}): {one['outcome']} after "
              f"{len(one['windows'])} window(s), the last at {last['weight']:.0%}: {last['reason']}")
        if key != "slower_100":  # the interface's 2x case is bad_canary, which runs in kubesim
            figures[key] = {"verdict": one["outcome"]}
        runs = [rollout(seed, slowdown, thresholds) for seed in range(args.seed, args.seed + args.runs)]
        outcomes = [run["outcome"] for run in runs]
        sweep[key] = {outcome: outcomes.count(outcome) for outcome in ("promoted", "rolled_back", "held")}
        sweep[key]["windows_max"] = max(len(run["windows"]) for run in runs)
        print(f"  over {args.runs} seeds: " + ", ".join(f"{k} {v}" for k, v in sweep[key].items()))
    bad_canary, bad_canary_error = None, SKIPPED
    if not args.skip_kubesim:
        print("bad canary in kubesim: a 2x slower engine at a 5 % step")
        try:
            from rollout_kubesim import run

            bad_canary, bad_canary_error = run(args.seed), None
        except Exception as exc:  # a figure not measured is reported as such, never invented
            bad_canary_error = f"the kubesim run failed: {exc!r}"
    print(f"bad canary: {bad_canary if bad_canary is not None else 'not measured (' + bad_canary_error + ')'}")
    figures.update(bad_canary=bad_canary, bad_canary_error=bad_canary_error, sweep=sweep)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
