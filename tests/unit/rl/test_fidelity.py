import warnings

import numpy as np
import pytest
from scipy import stats

from solrl_core.rl.fidelity import ranking_fidelity


def test_identical_and_reversed_rankings():
    x = np.array([0.1, 0.5, 0.2, 0.9, 0.4])
    same = ranking_fidelity(x, 3 * x + 1)
    assert same["spearman"] == pytest.approx(1.0) and same["kendall"] == pytest.approx(1.0)
    rev = ranking_fidelity(x, -x)
    assert rev["spearman"] == pytest.approx(-1.0) and rev["kendall"] == pytest.approx(-1.0)


def test_against_scipy_on_random_data():
    rng = np.random.default_rng(0)
    proxy = rng.normal(size=60)
    final = proxy + rng.normal(size=60)
    prompts = np.repeat(np.arange(6), 10)
    out = ranking_fidelity(proxy, final, prompts)
    assert out["spearman"] == pytest.approx(stats.spearmanr(proxy, final).statistic)
    assert out["kendall"] == pytest.approx(stats.kendalltau(proxy, final).statistic)
    groups = [prompts == p for p in range(6)]
    assert out["spearman_within_prompt"] == pytest.approx(
        np.mean([stats.spearmanr(proxy[g], final[g]).statistic for g in groups])
    )
    assert out["kendall_within_prompt"] == pytest.approx(
        np.mean([stats.kendalltau(proxy[g], final[g]).statistic for g in groups])
    )
    assert out["n_prompt_groups"] == 6


def test_small_groups_are_skipped():
    proxy = np.array([1.0, 2.0, 3.0, 1.0, 2.0])
    final = np.array([1.0, 2.0, 3.0, 2.0, 1.0])
    out = ranking_fidelity(proxy, final, np.array([0, 0, 0, 1, 1]))
    assert out["spearman_within_prompt"] == pytest.approx(1.0)
    assert out["n_prompt_groups"] == 1


def test_undefined_gives_nan_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        constant = ranking_fidelity(np.ones(5), np.arange(5.0), np.zeros(5, dtype=int))
        short = ranking_fidelity(np.array([1.0, 2.0]), np.array([2.0, 1.0]))
    assert all(np.isnan(constant[k]) for k in ("spearman", "kendall", "spearman_within_prompt", "kendall_within_prompt"))
    assert np.isnan(short["spearman"]) and np.isnan(short["kendall"])
