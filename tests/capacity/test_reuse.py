"""The reuse curve (capacity.reuse), worked by hand on small lookup streams of 16-token blocks."""

import math

from capacity.reuse import ReuseSample, estimate

A, B, C, D = 101, 102, 103, 104


def four_requests() -> ReuseSample:
    """R1 [A, B], R2 [A, B], R3 [C], R4 [A, B]; prompts of 40, 40, 20 and 40 tokens (140 in all)."""
    s = ReuseSample(block_size=16)
    s.observe([A, B], 40)  # both new: distances inf, inf
    s.observe([A, B], 40)  # A: only B used since, d = 1; then B: only A since, d = 1
    s.observe([C], 20)  # new
    s.observe([A, B], 40)  # A: B and C since, d = 2; B: C and A since, d = 2
    return s


def test_distances_are_the_distinct_blocks_used_since_and_a_block_needs_its_whole_prefix():
    s = four_requests()
    assert s.requests[1] == (40, (1, 1)) and s.requests[3] == (40, (2, 2))
    assert s.requests[0] == (40, (math.inf, math.inf))
    # An LRU of 1 block never holds A when it comes back; of 2, R2's two blocks hit (32 of 140 tokens); of 3, R4's too.
    assert s.hit_rate(1) == 0
    assert s.hit_rate(2) == 32 / 140
    assert s.hit_rate(3) == 64 / 140 == s.hit_rate(100)
    # A block after a miss cannot hit: [D, A] with D new. Stack before: C, A, B; D is pushed, A is 2 deep.
    s.observe([D, A], 40)
    assert s.requests[4] == (40, (math.inf, math.inf))
    # The last block of a prompt is always computed: 32 tokens in two full blocks, only the first can hit.
    s.observe([D, A], 32)  # D: A since, d = 1 (A's d = 1 too, but it is the last block)
    assert s.requests[5] == (32, (1,))
    assert s.hit_rate(2) == (32 + 16) / (140 + 40 + 32)


def test_the_knee_is_where_more_memory_buys_under_one_percent_and_estimates_read_the_curve_at_multiples():
    s = four_requests()
    assert s.sizes() == [2, 3]
    # The best rate (3 blocks and up) is 64/140; at 2 blocks it is 32/140 less, far over 1 %: the knee is 3.
    assert s.knee() == 3
    e = estimate(s, current_blocks=2)
    assert e.hit_rates == {0.5: 0.0, 1.0: 32 / 140, 2.0: 64 / 140, 4.0: 64 / 140}
    assert e.to_dict() == {"current_tokens": 32, "hit_rate": {"0.5x": 0.0, "1x": 0.2286, "2x": 0.4571, "4x": 0.4571},
                           "knee_tokens": 48}
    assert ReuseSample().knee() == 0 and ReuseSample().hit_rate(10) == 0.0


def test_the_sample_is_bounded_in_blocks_tracked_and_requests_kept():
    s = ReuseSample(block_size=16, max_tracked_blocks=2)
    s.observe([A, B], 40)
    s.observe([C], 20)  # the stack keeps B and C: A is forgotten
    s.observe([A], 20)
    assert s.requests[2] == (20, (math.inf,))
    kept = ReuseSample(max_requests=2, seed=3)
    for h in range(5):
        kept.observe([h], 20)
    assert (len(kept.requests), kept.seen) == (2, 5)
