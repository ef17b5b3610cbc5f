import numpy as np
import pytest
import torch

from solrl_core.config.loading import validate_config
from solrl_core.rl.selection import SELECTION_MODES, kept_per_prompt, select_candidates


def _data(seed=0, groups=4, size=12):
    rng = np.random.default_rng(seed)
    prompts = rng.permutation(np.repeat(np.arange(groups) * 10 + 3, size))  # interleaved, non-contiguous ids
    rewards = rng.normal(size=len(prompts))
    return rewards, prompts


def _reference_order(rewards, prompts, prompt):
    members = [i for i in range(len(rewards)) if prompts[i] == prompt]
    return sorted(members, key=lambda i: (-rewards[i], i))  # best first, ties: lower index first


def test_modes_tuple():
    assert set(SELECTION_MODES) == {"best_worst", "random", "top", "all", "extremes_random"}


@pytest.mark.parametrize("k", [2, 6, 12])
def test_best_worst_matches_sorted_reference(k):
    rewards, prompts = _data()
    chosen = select_candidates(rewards, prompts, k, "best_worst")
    expected = []
    for p in np.unique(prompts):
        order = _reference_order(rewards, prompts, p)
        expected += order[: k // 2] + order[len(order) - k // 2 :]
    assert chosen.tolist() == sorted(expected)


def test_top_matches_reference():
    rewards, prompts = _data(1)
    chosen = select_candidates(rewards, prompts, 5, "top")
    expected = sorted(i for p in np.unique(prompts) for i in _reference_order(rewards, prompts, p)[:5])
    assert chosen.tolist() == expected


def test_ties_are_broken_by_index():
    rewards = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    prompts = np.zeros(6, dtype=int)
    assert select_candidates(rewards, prompts, 2, "best_worst").tolist() == [0, 5]
    assert select_candidates(rewards, prompts, 3, "top").tolist() == [0, 1, 2]


def test_random_is_reproducible_and_seed_dependent():
    rewards, prompts = _data(2, groups=3, size=30)
    a = select_candidates(rewards, prompts, 10, "random", torch.Generator().manual_seed(5))
    b = select_candidates(rewards, prompts, 10, "random", torch.Generator().manual_seed(5))
    c = select_candidates(rewards, prompts, 10, "random", torch.Generator().manual_seed(6))
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()
    assert len(set(a.tolist())) == 30
    for p in np.unique(prompts):
        assert (prompts[a] == p).sum() == 10


def test_extremes_random_keeps_extremes():
    rewards, prompts = _data(3, groups=2, size=20)
    chosen = select_candidates(rewards, prompts, 8, "extremes_random", torch.Generator().manual_seed(0))
    for p in np.unique(prompts):
        order = _reference_order(rewards, prompts, p)
        mine = set(chosen[prompts[chosen] == p].tolist())
        assert len(mine) == 8
        assert set(order[:2]) | set(order[-2:]) <= mine
    again = select_candidates(rewards, prompts, 8, "extremes_random", torch.Generator().manual_seed(0))
    assert chosen.tolist() == again.tolist()


def test_all_returns_everything():
    rewards, prompts = _data(4)
    assert select_candidates(rewards, prompts, 0, "all").tolist() == list(range(len(rewards)))


def test_errors():
    rewards, prompts = _data(5, groups=2, size=6)
    with pytest.raises(ValueError, match="exceeds"):
        select_candidates(rewards, prompts, 8, "best_worst")
    with pytest.raises(ValueError, match="even"):
        select_candidates(rewards, prompts, 3, "best_worst")
    with pytest.raises(ValueError, match="unknown selection mode"):
        select_candidates(rewards, prompts, 2, "worst")
    with pytest.raises(ValueError, match="Generator"):
        select_candidates(rewards, prompts, 2, "random")
    bad = rewards.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        select_candidates(bad, prompts, 2, "top")


def test_a_rule_of_your_own_package_is_a_select_mode(tmp_path, monkeypatch):
    from solrl_core.errors import ConfigError, SolrlError
    from solrl_core.rl.selection import selection_rule

    (tmp_path / "myrules.py").write_text(
        "from solrl_core.rl.selection import SelectionRule\n\n"
        "class Worst(SelectionRule):\n"
        "    name, summary = 'worst', 'the K worst'\n\n"
        "    @staticmethod\n"
        "    def pick(order, members, k, generator):\n"
        "        return [order[len(order) - k:]]\n\n"
        "class Greedy(SelectionRule):\n"
        "    name, summary = 'greedy', 'one too many'\n\n"
        "    @staticmethod\n"
        "    def pick(order, members, k, generator):\n"
        "        return [order[: k + 1]]\n\n"
        "class NotARule:\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rewards, prompts = _data()
    chosen = select_candidates(rewards, prompts, 3, "myrules:Worst")
    for p in np.unique(prompts):
        expected = _reference_order(rewards, prompts, p)[-3:]
        assert sorted(c for c in chosen.tolist() if prompts[c] == p) == sorted(expected)
    assert kept_per_prompt(validate_config({"select": {"mode": "myrules:Worst", "k": 3}}).select, 8) == 3
    with pytest.raises(SolrlError, match="picked 4 candidates of prompt 3, not 3"):  # a plug-in's: one line
        select_candidates(rewards, prompts, 3, "myrules:Greedy")
    with pytest.raises(ConfigError, match="select.mode 'myrules:NotARule' is not a .*SelectionRule subclass"):
        selection_rule("myrules:NotARule")
    with pytest.raises(ConfigError, match="select.mode 'nomodule:Rule': cannot import module 'nomodule'"):
        validate_config({"select": {"mode": "nomodule:Rule"}})


def test_every_seed_rules_train_on_all_explored_seeds():
    cfg = validate_config({"family": "baseline", "select": {"mode": "all", "k": 2},
                           "explore": {"precision": "fp32"}, "regenerate": {"enabled": False}})
    assert kept_per_prompt(cfg.select, cfg.explore.seeds_per_prompt) == cfg.explore.seeds_per_prompt
