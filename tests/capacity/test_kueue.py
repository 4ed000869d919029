"""Kueue's admission policy (capacity.kueue), its ordering rules worked by hand on small cohorts of L4s."""

from capacity.kueue import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAMATION,
    NEVER,
    Admitted,
    Queue,
    Workload,
    admit,
    ordinal,
)

L4 = "l4-24gb"
PROD, BEST = ("production", 1000), ("best-effort", 0)


def q(name, nominal, *, borrow=None, lend=None, weight=1.0, cohort="c"):
    return Queue(name, cohort, {L4: nominal}, {L4: borrow}, {L4: lend}, weight)


def wl(key, gpus, created, *, cls=BEST, admitted=False, at=None, preemption="LowerPriority"):
    queue = key.split("/")[0]
    return Workload(key, queue, cls[1], cls[0], L4, gpus, created, admitted, preemption, at)


def test_idle_quota_is_lent_and_the_borrower_names_its_lender():
    # acme (4) runs three 2-GPU replicas; globex (4) is idle. In queue order a1, a2 fill acme's 4, a3 borrows 2.
    plan = admit([q("acme", 4), q("globex", 4)], [wl("acme/a1", 2, 1), wl("acme/a2", 2, 2), wl("acme/a3", 2, 3)])
    assert plan.admitted == {
        "acme/a1": Admitted({}, new=True), "acme/a2": Admitted({}, new=True), "acme/a3": Admitted({"globex": 2}, new=True)}
    assert not plan.waiting and not plan.preempted


def test_the_lender_reclaims_from_the_most_recently_admitted_borrower_whatever_its_priority():
    # All 8 GPUs held by acme (nominal 4, borrowing 4). globex/g1 (production, 2) fits globex's idle nominal 4, so
    # it may reclaim. Candidates, most recently admitted first: a2 (at 20), a3 (at 15), a4 (at 12), a1 (at 10).
    held = [wl("acme/a1", 2, 1, admitted=True, at=10), wl("acme/a2", 2, 2, admitted=True, at=20),
            wl("acme/a3", 2, 3, admitted=True, at=15), wl("acme/a4", 2, 4, admitted=True, at=12)]
    plan = admit([q("acme", 4), q("globex", 4)], [*held, wl("globex/g1", 2, 30, cls=PROD)])
    assert set(plan.preempted) == {"acme/a2"}
    p = plan.preempted["acme/a2"]
    assert (p.by, p.kind) == ("globex/g1", IN_COHORT_RECLAMATION)
    assert p.reason == "preempted by globex/g1 (production 1000 > best-effort 0) to reclaim globex's nominal quota"
    assert plan.admitted["globex/g1"] == Admitted({}, new=True)
    # acme keeps a1, a3, a4 (6): in queue order a1 and a3 fill its 4, a4 borrows the 2 globex does not use.
    assert plan.admitted["acme/a3"] == Admitted({}, new=False)
    assert plan.admitted["acme/a4"] == Admitted({"globex": 2}, new=False)


def test_a_queue_within_its_nominal_quota_is_never_a_reclaim_candidate():
    # globex holds its own 4 (production); acme holds its 4. A new globex replica would need to borrow: it waits,
    # and acme's replicas (not borrowing) are untouched.
    held = [wl("acme/a1", 4, 1, admitted=True), wl("globex/g1", 4, 2, cls=PROD, admitted=True)]
    plan = admit([q("acme", 4), q("globex", 4)], [*held, wl("globex/g2", 1, 3, cls=PROD)])
    assert not plan.preempted
    assert plan.waiting["globex/g2"].reason == "1st in globex's queue; the cohort has no free L4"
    # acme (4) holds its 4, initech (2) holds 4 (borrowing 2 of idle globex's 2). globex reclaims its 2 from
    # initech, though acme's replica was admitted last: acme does not borrow.
    held = [wl("initech/i1", 2, 1, admitted=True, at=1), wl("initech/i2", 2, 2, admitted=True, at=2),
            wl("acme/a1", 4, 3, admitted=True, at=3)]
    plan = admit([q("acme", 4), q("initech", 2), q("globex", 2)], [*held, wl("globex/g", 2, 4, cls=PROD)])
    assert set(plan.preempted) == {"initech/i2"} and plan.admitted["globex/g"].new


def test_only_the_smallest_set_of_borrowers_is_evicted():
    # acme (2) holds 1 + 2 + 1 = 4 GPUs, borrowing 2 of globex's 4; globex holds 2 and wants 2 more.
    # Candidates, most recently admitted first: a3 (1 GPU, at 30), a2 (2, at 20). Evicting a3 frees 1: not enough;
    # evicting a2 too frees 3; putting a3 back still leaves room for 2. So only a2 goes.
    held = [wl("acme/a1", 1, 1, admitted=True, at=10), wl("acme/a2", 2, 2, admitted=True, at=20),
            wl("acme/a3", 1, 3, admitted=True, at=30), wl("globex/g1", 2, 4, admitted=True, at=40)]
    plan = admit([q("acme", 2), q("globex", 4)], [*held, wl("globex/g2", 2, 50)])
    assert set(plan.preempted) == {"acme/a2"}
    assert plan.preempted["acme/a2"].reason.endswith("(best-effort 0 = best-effort 0) to reclaim globex's nominal quota")
    # acme now holds a1 and a3 (2 = its nominal): no borrowing left.
    assert plan.admitted["acme/a3"].borrowed == {}


def test_within_a_queue_a_higher_priority_evicts_the_lowest_most_recent_and_never_policy_waits():
    # The cohort is full: acme (4) holds two best-effort replicas, globex (4) its own 4.
    held = [wl("acme/b1", 2, 1, admitted=True, at=1), wl("acme/b2", 2, 2, admitted=True, at=2),
            wl("globex/g1", 4, 3, admitted=True)]
    queues = [q("acme", 4), q("globex", 4)]
    plan = admit(queues, [*held, wl("acme/p1", 2, 5, cls=PROD)])
    assert set(plan.preempted) == {"acme/b2"}
    assert plan.preempted["acme/b2"].kind == IN_CLUSTER_QUEUE
    assert plan.preempted["acme/b2"].reason == (
        "preempted by acme/p1 (production 1000 > best-effort 0) within acme's queue")
    plan = admit(queues, [*held, wl("acme/p1", 2, 5, cls=PROD, preemption=NEVER)])
    assert not plan.preempted and plan.waiting["acme/p1"].position == 1
    # Equal priority never preempts under LowerPriority.
    plan = admit(queues, [*held, wl("acme/b3", 2, 5)])
    assert not plan.preempted and "acme/b3" in plan.waiting


def test_borrowing_stops_at_the_borrowing_limit_and_at_the_lenders_lending_limit():
    # acme (2, may borrow 1) and an idle globex (4): a 4-GPU group would hold 4 > 2 + 1.
    plan = admit([q("acme", 2, borrow=1), q("globex", 4)], [wl("acme/big", 4, 1), wl("acme/small", 3, 2)])
    assert plan.waiting["acme/big"].reason == (
        "1st in acme's queue; acme's queue may hold at most 3 L4 (nominal 2 + borrowing limit 1) and holds 3")
    assert plan.admitted["acme/small"].borrowed == {"globex": 1}
    # globex lends at most 1 of its 4: acme (2) gets 3, not 4.
    plan = admit([q("acme", 2), q("globex", 4, lend=1)], [wl("acme/big", 4, 1), wl("acme/small", 3, 2)])
    assert plan.admitted["acme/small"].borrowed == {"globex": 1}
    assert plan.waiting["acme/big"].reason == "1st in acme's queue; the cohort has no free L4"
    # ...and the 3 GPUs globex keeps are its own even when acme borrowed first: globex/g takes 3 without evicting.
    plan = admit([q("acme", 2), q("globex", 4, lend=1)],
                 [wl("acme/small", 3, 2, admitted=True), wl("globex/g", 3, 3)])
    assert not plan.preempted and plan.admitted["globex/g"].new


def test_a_group_is_admitted_whole_or_not_at_all_and_the_next_in_line_still_fits():
    # 3 L4s free in the cohort (acme 2 + globex 2, globex holding 1): a 4-GPU group waits whole;
    # the 2-GPU replica behind it is admitted (BestEffortFIFO), the 4-GPU group stays 1st and waits.
    queues = [q("acme", 2), q("globex", 2)]
    plan = admit(queues, [wl("globex/g", 1, 0, admitted=True), wl("acme/group", 4, 1), wl("acme/r", 2, 2)])
    assert "acme/group" not in plan.admitted
    assert plan.waiting["acme/group"].reason == "1st in acme's queue; the cohort has 1 free L4, it needs 4"
    assert plan.admitted["acme/r"] == Admitted({}, new=True)


def test_waiting_workloads_are_numbered_in_priority_then_creation_order():
    held = [wl("globex/g", 4, 0, cls=PROD, admitted=True), wl("acme/a", 4, 0, cls=PROD, admitted=True)]
    pending = [wl("acme/late", 1, 9, cls=PROD), wl("acme/early", 1, 5), wl("acme/later", 1, 7)]
    plan = admit([q("acme", 4), q("globex", 4)], [*held, *pending], capacity={L4: 8})
    assert {k: w.position for k, w in plan.waiting.items()} == {"acme/late": 1, "acme/early": 2, "acme/later": 3}
    assert plan.waiting["acme/later"].reason == "3rd in acme's queue; the cohort has no free L4"


def test_the_nodes_cap_what_the_quotas_promise():
    # Nominal quotas add up to 8, but the nodes have 6 L4s.
    plan = admit([q("acme", 4), q("globex", 4)], [wl("acme/a", 4, 1), wl("globex/g", 4, 2)], capacity={L4: 6})
    assert "acme/a" in plan.admitted
    assert plan.waiting["globex/g"].reason == "1st in globex's queue; the cluster has 2 free L4"


def fair_run(weight_b):
    # acme (1, weight 1) and initech (1, weight weight_b) borrow from idle globex (4): 6 lendable in the cohort.
    queues = [q("acme", 1), q("initech", 1, weight=weight_b), q("globex", 4)]
    work = [wl(f"acme/a{i}", 1, 2 * i - 1) for i in range(1, 5)] + [wl(f"initech/b{i}", 1, 2 * i) for i in range(1, 6)]
    plan = admit(queues, work)
    return sorted(k for k in plan.admitted)


def test_fair_sharing_splits_the_lent_quota_by_weight():
    # Weighted share after admission = borrowed / 6 / weight; lowest first, ties by priority then creation.
    # Weights 1 and 3: a1, b1 (share 0), then b2 (1/18) < a2 (1/6), b3 (2/18) < a2, a2 (1/6, created 3) ties
    # b4 (3/18, created 8) and goes first, then b4 (3/18) < a3 (2/6). acme borrows 1, initech 3 (1 : 3).
    assert fair_run(3) == ["acme/a1", "acme/a2", "initech/b1", "initech/b2", "initech/b3", "initech/b4"]
    # Equal weights: a2 (1/6, created 3) before b2 (1/6, created 4), then b2, then a3 (2/6, 5) before b3 (6).
    assert fair_run(1) == ["acme/a1", "acme/a2", "acme/a3", "initech/b1", "initech/b2", "initech/b3"]


def test_a_queue_outside_any_cohort_says_its_own_quota_is_full():
    plan = admit([q("solo", 2, cohort="")], [wl("solo/a", 2, 1, admitted=True), wl("solo/b", 1, 2)])
    assert plan.waiting["solo/b"].reason == "1st in solo's queue; solo's queue has no free L4"


def test_an_unknown_queue_waits_with_its_name_and_ordinals_read_as_words():
    plan = admit([q("acme", 1)], [wl("nobody/x", 1, 1)])
    assert plan.waiting["nobody/x"].reason == "no queue named 'nobody'"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
