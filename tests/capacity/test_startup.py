"""Start-up phases and the node cache's eviction, worked by hand from the stated defaults."""

import pytest

from capacity.gpus import GPUS
from capacity.modelcache import BudgetError, NodeDisk, check_budget, prefetch_nodes
from capacity.startup import cache_on_node, duration, phases, sentence

L4, H100 = GPUS["l4-24gb"], GPUS["h100-sxm-80gb"]


def test_an_8b_model_on_an_l4_from_each_cache():
    # 16 GB: downloaded at 200 MB/s = 80 s; read from the cluster cache at 2 GB/s = 8 s or from the node's disk at
    # 5 GB/s = 3.2 s; loaded over PCIe 4.0 x16 at 80 % of 31.5 GB/s = 25.2 GB/s: 16 / 25.2 = 0.63492 s; init 20 s.
    cold = phases(L4, 1, 16e9, "none")
    assert (cold.download_s, cold.read_s, cold.init_s) == (80.0, 8.0, 20.0)
    assert cold.load_s == pytest.approx(0.634920, abs=1e-5)
    assert cold.total_s == pytest.approx(108.634920, abs=1e-5)
    assert phases(L4, 1, 16e9, "cluster").total_s == pytest.approx(28.634920, abs=1e-5)
    assert phases(L4, 1, 16e9, "node").total_s == pytest.approx(23.834920, abs=1e-5)


def test_a_70b_model_on_four_h100s_loads_each_share_over_its_own_link():
    # 140 GB from the node's disk at 5 GB/s = 28 s; each of 4 ranks loads 35 GB over PCIe 5.0 at 80 % of 63 GB/s
    # = 50.4 GB/s: 0.69444 s; SGLang's init 15 s.
    node = phases(H100, 4, 140e9, "node", engine="sglang")
    assert node.read_s == 28.0 and node.init_s == 15.0
    assert node.load_s == pytest.approx(0.694444, abs=1e-5)
    assert node.total_s == pytest.approx(43.694444, abs=1e-5)


def test_readers_of_the_cluster_cache_share_its_aggregate_rate():
    # Three pods at once: 4 GB/s / 3 = 1.333 GB/s each (under one reader's 2 GB/s): 140 GB in 105 s.
    assert phases(H100, 4, 140e9, "cluster", readers=3).read_s == pytest.approx(105.0)
    # Two pods: 4 / 2 = 2 GB/s, one reader's own limit.
    assert phases(H100, 4, 140e9, "cluster", readers=2).read_s == pytest.approx(70.0)


def test_an_image_not_on_the_node_is_pulled_first():
    # 8 GB at 250 MB/s.
    assert phases(L4, 1, 16e9, "node", image_cached=False).pull_s == 32.0
    assert [name for name, _ in phases(L4, 1, 16e9, "node").as_list()] == ["read", "load", "init"]


def test_an_unknown_cache_is_refused():
    with pytest.raises(ValueError, match="unknown weights cache 'disk'"):
        phases(L4, 1, 16e9, "disk")


def test_the_service_page_sentence():
    cold, warm = phases(L4, 1, 16e9, "none"), phases(L4, 1, 16e9, "cluster")
    assert sentence(cold, warm) == "cold 1 m 49 s (download 16 GB at 200 MB/s), warm 29 s (read 16 GB at 2 GB/s, init 20 s)"
    assert duration(400) == "6 m 40 s" and duration(3900) == "1 h 5 m" and duration(32.4) == "32 s"


def test_the_cache_a_node_gives():
    label = "models.controlplane.io/llama"
    assert cache_on_node({label: "true"}, label, cluster_cache_filled=False) == "node"
    assert cache_on_node({}, label, cluster_cache_filled=True) == "cluster"
    assert cache_on_node({"models.controlplane.io/other": "true"}, label, cluster_cache_filled=False) == "none"


def test_the_least_recently_used_model_is_evicted():
    disk = NodeDisk(100)
    assert disk.admit("a", 40) == [] and disk.admit("b", 40) == []
    disk.touch("a")  # b is now the least recently used
    assert disk.admit("c", 40) == ["b"]
    assert list(disk.held) == ["a", "c"] and disk.used_bytes == 80


def test_models_in_use_are_never_evicted():
    disk = NodeDisk(100)
    disk.admit("a", 40)
    disk.admit("c", 40)
    # 20 free; a is pinned, so c goes: 60 free for 50.
    assert disk.plan("d", 50, pinned=frozenset({"a"})) == ["c"]
    with pytest.raises(BudgetError, match="without evicting models in use") as refused:
        disk.admit("d", 50, pinned=frozenset({"a", "c"}))
    assert refused.value.field == "model" and list(disk.held) == ["a", "c"]


def test_a_model_larger_than_the_budget_is_refused():
    with pytest.raises(BudgetError, match="larger than the node's cache budget"):
        NodeDisk(100).admit("huge", 150)


def test_a_budget_over_the_disk_is_refused_with_its_field():
    with pytest.raises(BudgetError, match="more than the node's disk") as refused:
        check_budget(3 * 10**12, 2 * 10**12)
    assert refused.value.field == "cache_budget_bytes"
    check_budget(2 * 10**12, 2 * 10**12)


def test_prefetch_picks_the_nodes_with_the_most_room():
    candidates = [("n1", 100), ("n2", 300), ("n3", 50), ("n4", 300)]
    assert prefetch_nodes(candidates, 2, 80) == ["n2", "n4"]
    assert prefetch_nodes(candidates, 9, 80) == ["n2", "n4", "n1"]
