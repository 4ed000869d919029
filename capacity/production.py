"""Production-shaped load: seeded requests with the burst structure and the length tails that published
measurements of LLM services report, for the autoscaler's benchmark (nothing is downloaded: the parameters are
stated here, the one definition of them).

Sources and what is taken from each:

- the Azure LLM inference traces of 2023, as the Splitwise paper describes them (Patel et al., ISCA 2024):
  coding prompts of median ~1,500 tokens and p95 ~7,300, outputs of median ~13; conversation prompts of median
  ~1,000, outputs of median ~130 (`AZURE_LENGTHS`: log-normal with those medians; the σ of the coding prompts
  fitted to the p95, ln(7,300 / 1,500) / 1.645 = 0.96; the other σ are assumed);
- BurstGPT (Wang et al., "BurstGPT: A Real-World Workload Dataset to Optimize LLM Serving Systems", arXiv
  2401.17644): request inter-arrival times of the services fit a Gamma distribution (a Weibull for some), far
  burstier than Poisson, with the burstiness varying over the day; request lengths follow a Zipf
  (power-law) distribution; response lengths are long-tailed.

Fitted against those findings, not to the trace itself (stated, not published figures): the inter-arrival
shape k (< 1 is burstier than Poisson's 1: the coefficient of variation of a Gamma renewal is 1 / √k), a
per-minute rate factor, log-normal with mean 1 and σ `minute_sigma` (the minute-to-minute swing), and the
Zipf tail's x_min and exponent a, P(X ≥ x) = (x / x_min)^−a, whose median is x_min · 2^(1/a).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# (median tokens, log-normal σ) of prompt and output lengths, the Azure LLM inference traces of 2023 (see above).
AZURE_LENGTHS = {"coding": {"prompt": (1500, 0.96), "output": (13, 1.0)},
                 "conversation": {"prompt": (1000, 0.8), "output": (130, 0.75)}}


@dataclass(frozen=True)
class ProductionShape:
    """One production-shaped load: arrivals as a renewal process (Gamma or Weibull inter-arrival times of shape
    `k` and mean 1 / rate) whose rate is scaled each minute by a log-normal factor, and lengths with long tails."""

    source: str
    rate_per_s: float  # mean arrivals per second over the trace
    interarrival: str  # "gamma" or "weibull"
    k: float  # the inter-arrival shape (1: Poisson for the Gamma; < 1: burstier)
    minute_sigma: float  # σ of the per-minute log-normal rate factor
    prompt: tuple[str, float, float]  # ("zipf", x_min, a) or ("lognormal", median, σ)
    output: tuple[str, float, float]

    def arrivals(self, hours: float, rng: random.Random) -> list[float]:
        """Arrival seconds over `hours`."""
        out, t, end = [], 0.0, hours * 3600
        while t < end:
            minute_end = min((math.floor(t / 60) + 1) * 60, end)
            sigma = self.minute_sigma
            rate = self.rate_per_s * math.exp(rng.gauss(-sigma * sigma / 2, sigma))
            while True:
                gap = _gap(self.interarrival, self.k, rate, rng)
                if t + gap >= minute_end:
                    t = minute_end
                    break
                t += gap
                out.append(t)
        return out

    def lengths(self, n: int, rng: random.Random) -> list[tuple[int, int]]:
        """(prompt, output) tokens of `n` requests."""
        return [(_length(self.prompt, rng), _length(self.output, rng)) for _ in range(n)]


def _gap(kind: str, k: float, rate: float, rng: random.Random) -> float:
    if kind == "gamma":
        return rng.gammavariate(k, 1.0 / (k * rate))
    return rng.weibullvariate(1.0 / (rate * math.gamma(1 + 1 / k)), k)


def _length(spec: tuple[str, float, float], rng: random.Random) -> int:
    kind, a, b = spec
    if kind == "zipf":  # inverse transform of P(X ≥ x) = (x / x_min)^−a
        return max(1, round(a * (1.0 - rng.random()) ** (-1.0 / b)))
    return max(1, round(rng.lognormvariate(math.log(a), b)))


PRODUCTION = {
    # Conversation (BurstGPT's ChatGPT conversation log): Gamma inter-arrivals of shape 0.3 (CV 1.8), minute
    # swings of σ 0.5; prompts with a Zipf tail from 400 tokens, a = 1.5 (median 635, p95 2,950: a conversation's
    # history rides along); responses log-normal, median 230, σ 0.8.
    "prod_conversation": ProductionShape("BurstGPT conversation log; lengths Zipf / long-tailed", 2.0, "gamma",
                                         0.3, 0.5, ("zipf", 400, 1.5), ("lognormal", 230, 0.8)),
    # Coding (the Azure 2023 coding trace's lengths) with Weibull inter-arrivals of shape 0.5 (CV 2.2) and minute
    # swings of σ 0.5: bursts at the scale of seconds that come and go within a cold start.
    "prod_coding": ProductionShape("Azure LLM inference 2023, coding; BurstGPT's Weibull arrivals", 1.0, "weibull",
                                   0.5, 0.5, ("lognormal", *AZURE_LENGTHS["coding"]["prompt"]),
                                   ("lognormal", *AZURE_LENGTHS["coding"]["output"])),
}
