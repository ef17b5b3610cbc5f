"""A run that failed before computing anything (a wrong tracking URI, say) takes a corrected config: its frozen
config.yaml is replaced, in one line; once a stage, the initial adapters or an evaluation exist, another config is
refused as before."""

from __future__ import annotations

import json

import pytest

from repo_paths import TINY
from solrl_core.config.schema import dump_config
from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.run.integrity import config_text
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config, prepare_run
from solrl_core.run.storage import write_json_atomic

WRONG = "tracking.uri=http://127.0.0.1:1"  # e.g. a tracking server that is not there
RIGHT = "tracking.uri=sqlite:///elsewhere.db"


@pytest.fixture
def failed_at_once(tmp_path):
    """A run directory whose first start froze the WRONG config and then failed: it left an unfinished attempt (a
    partial explore pool, the record of what it started from) and an MLflow run record."""
    run = RunDir(tmp_path / "run")
    prepare_run(run, load_config(TINY, [WRONG]))
    (run.partial_dir(0, "explore") / "pool.zarr").mkdir(parents=True)
    write_json_atomic(run.pending_path(0, "explore"), {"inputs": {}})
    write_json_atomic(run.run_json, {"tracking_uri": "http://127.0.0.1:1", "mlflow_run_id": "x"})
    return run


def test_a_run_that_computed_nothing_takes_the_new_config(failed_at_once, capsys):
    run = failed_at_once
    capsys.readouterr()
    prepare_run(run, load_config(TINY, [RIGHT]))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"solrl: replaced the config of {run.root}, which had computed nothing (differs at: tracking.uri)"]
    assert load_run_config(run).tracking.uri == "sqlite:///elsewhere.db"
    # what the old config's attempt left is gone: no partial pool resumed under the new config, a new MLflow run
    assert not run.iteration_dir(0).exists() and not run.run_json.exists()
    prepare_run(run, load_config(TINY, [RIGHT]))  # the same config again: resumed, nothing said
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("digest, refusal", [(True, "less than or equal to 1000000"), (False, "damaged")])
def test_a_frozen_config_that_no_longer_loads_is_replaced_while_nothing_was_computed(tmp_path, capsys, digest, refusal):
    """Frozen before integer settings had bounds (iterations 1e20), or damaged: replaced by a valid config."""
    run = RunDir(tmp_path / "run")
    prepare_run(run, load_config(TINY))
    body = dump_config(load_config(TINY))
    out_of_range = body.replace("iterations: 2\n", "iterations: 100000000000000000000\n")
    run.config_path.write_text(config_text(out_of_range) if digest else config_text(body).replace("seed: 0", "seed: 1"))
    with pytest.raises(SolrlError, match=refusal):
        load_run_config(run)
    prepare_run(run, load_config(TINY))
    assert "which had computed nothing (its frozen config did not load)" in capsys.readouterr().err
    assert load_run_config(run).iterations == 2


def _stage_manifest(run):
    run.stage_dir(0, "quantize").mkdir(parents=True)
    run.complete(0, "quantize", {})


def _commit_under_way(run):
    write_json_atomic(run.pending_path(0, "explore"), {"phase": "ready", "id": "x", "inputs": {}, "summary": {}})


def _initial_adapters(run):
    run.init_dir.mkdir()
    write_json_atomic(run.init_dir / "state.json", {"step": 0})


def _evaluation(run):
    run.eval_dir(0).mkdir(parents=True)
    write_json_atomic(run.eval_dir(0) / "metrics.json", {"step": 0})


@pytest.mark.parametrize("make, what", [
    (_stage_manifest, "quantize of iteration 0"),
    (_commit_under_way, "explore of iteration 0"),
    (_initial_adapters, "the initial adapters"),
    (_evaluation, "an evaluation"),
])
def test_once_anything_was_computed_another_config_is_refused(failed_at_once, make, what):
    run = failed_at_once
    make(run)
    frozen = run.config_path.read_text()
    with pytest.raises(SolrlError, match=f"differs at: tracking.uri\\) and has computed {what}; use the same config"):
        prepare_run(run, load_config(TINY, [RIGHT]))
    assert run.config_path.read_text() == frozen and json.loads(run.run_json.read_text())["mlflow_run_id"] == "x"
    prepare_run(run, load_config(TINY, [WRONG, "iterations=5"]))  # the same config, extended: resumed
    assert load_run_config(run).iterations == 5


def test_the_tracking_check_looks_at_the_new_config_of_a_run_it_will_replace(failed_at_once, tmp_path, monkeypatch):
    """Before a run starts, the MLflow store is checked: the one in run.json while the run keeps it, the new
    config's when the run computed nothing and takes the new config (which drops run.json)."""
    from solrl.flows.service_checks import check_tracking

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SolrlError, match=r"no MLflow server answers"):
        check_tracking(load_config(TINY, [WRONG]), failed_at_once)  # the same config: run.json's server, dead
    assert check_tracking(load_config(TINY, [RIGHT]), failed_at_once).endswith("elsewhere.db")
