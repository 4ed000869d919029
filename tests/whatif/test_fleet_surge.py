"""The fleet replay shows the built-in autoscaler each scrape between its evaluations, as the control plane does:
a step in the load is scaled up at the scrape after it, past what the periodic evaluation's policy allows."""

from __future__ import annotations

from apps.whatif.fleet import Simulation
from apps.whatif.policies import Builtin, spec_rates
from bench.autoscale import BUILTIN_ITL_SPEC, MAX_REPLICAS, SLO, builtin_policy, engine_spec


def test_a_step_is_scaled_up_at_the_scrape_after_it_past_the_periodic_policys_limit():
    # 1.5 requests/s for 5 minutes, then 15/s, evenly spaced; 600-token prompts, 100 tokens out. Llama-3.1-8B on
    # an L4 (the benchmark's engine). At the evaluation at 300 s nothing of the step is seen yet; its scrape at
    # 305 s is. Without surges the evaluation at 315 s could go at most to max(2 n, n + 4) from the n at 300 s
    # (Kubernetes' default scale-up policy); with them the pool is past that already.
    arrivals = [i / 1.5 for i in range(450)] + [300 + i / 15 for i in range(900)]
    spec = engine_spec()
    timeline: list = []
    sim = Simulation(Builtin(builtin_policy(BUILTIN_ITL_SPEC), rates=spec_rates(spec)), arrivals,
                     [(600, 100)] * len(arrivals), spec, 6 / 60, 1, slo=SLO)
    sim.run("builtin", timeline)
    replicas = {round(t): n for t, n, _ in timeline}
    before = replicas[300]
    assert replicas[315] > max(2 * before, before + 4)
    assert replicas[315] <= MAX_REPLICAS
