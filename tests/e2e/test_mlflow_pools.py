"""Each iteration's candidate pool in MLflow (table with thumbnails, top/bottom grids, proxy-vs-final plot,
quantization report), the experiment's view, and the MLflow link that `solrl inspect` prints. The run is trained
without a tracking URI from one folder and inspected from another: the run directory's run.json leads to it."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pytest
from PIL import Image

from cli_processes import SMALLER_RUN, SMALLER_SETS
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.grids import Tile, grid_layout
from solrl_core.mlflow_links import TRAINING_VIEW
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import RunDir

COLUMNS = {"candidate", "prompt_index", "prompt", "seed", "proxy_reward", "final_reward", "selected", "thumbnail"}


@pytest.fixture(scope="module")
def trained(session_env, tmp_path_factory):
    """The tiny run, trained from its own folder with `tracking.uri` unset (so ./mlruns.db there)."""
    from cli_processes import solrl

    base = tmp_path_factory.mktemp("pools")
    (base / "trained_here").mkdir()
    run_dir = base / "tiny"
    solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(run_dir), "--no-progress",
          cwd=base / "trained_here")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["tracking_uri"] == f"sqlite:///{base / 'trained_here' / 'mlruns.db'}"
    mlflow.set_tracking_uri(info["tracking_uri"])
    return RunDir(run_dir), info


def _zarr(run: RunDir, iteration: int, stage: str, name: str, cols=None):
    return read_table(run.stage_dir(iteration, stage) / name, cols)


def _table(info: dict, path: str):
    return mlflow.MlflowClient().load_table(info["experiment_id"], path, run_ids=[info["mlflow_run_id"]])


def _download(run_id: str, path: str, dst) -> str:
    return mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=str(dst))


@pytest.mark.parametrize("iteration", [0, 1])
def test_every_iteration_has_its_pool_in_mlflow(trained, iteration, tmp_path):
    run, info = trained
    cfg = load_config(TINY, SMALLER_SETS)
    run_id, base = info["mlflow_run_id"], f"pool/iter_{iteration:04d}"
    n, p, k = cfg.explore.seeds_per_prompt, cfg.prompts.per_iteration, cfg.select.k

    table = _table(info, f"{base}/candidates.json")
    assert set(table.columns) == COLUMNS and len(table) == n * p
    pool, attrs = _zarr(run, iteration, "explore", "pool.zarr", ["prompt_index", "seed"])
    np.testing.assert_array_equal(table["seed"], pool["seed"])
    assert table["prompt"].tolist() == [attrs["prompts"][i] for i in pool["prompt_index"]]
    proxy = _zarr(run, iteration, "score_explore", "rewards.zarr", ["reward"])[0]["reward"]
    np.testing.assert_allclose(table["proxy_reward"], proxy, rtol=1e-6)
    chosen = _zarr(run, iteration, "select", "selection.zarr", ["candidate_index"])[0]["candidate_index"]
    assert sorted(np.flatnonzero(table["selected"]).tolist()) == sorted(chosen.tolist()) and len(chosen) == k * p
    # the final reward is there exactly for the regenerated seeds, and is the reward of that seed's sample
    assert sorted(np.flatnonzero(table["final_reward"].notna()).tolist()) == sorted(chosen.tolist())
    rows = _zarr(run, iteration, "regenerate", "samples.zarr", ["candidate_index"])[0]["candidate_index"]
    final = _zarr(run, iteration, "score_final", "rewards.zarr", ["reward"])[0]["reward"]
    np.testing.assert_allclose(table["final_reward"].to_numpy()[rows], final, rtol=1e-6)

    # top/bottom grid per prompt: K = k/2 best then K worst by proxy reward, 128-px tiles (32-px images x 4)
    images = _zarr(run, iteration, "explore", "pool.zarr", ["image"])[0]["image"]
    for prompt in range(p):
        grid = np.asarray(Image.open(_download(run_id, f"{base}/top_bottom/prompt_{prompt:04d}.png", tmp_path)))
        half, tile = k // 2, 128
        shown = [Tile(images[0], "")] * half
        layout = grid_layout([(attrs["prompts"][prompt], [*shown, None, *shown])], tile)  # best, gap, worst
        assert grid.shape == (layout.height, layout.width, 3)
        members = np.flatnonzero(pool["prompt_index"] == prompt)
        ranked = members[np.argsort(-proxy[members], kind="stable")]
        (bx, by), (wx, wy) = layout.rows[0][2][0], layout.rows[0][2][-1]
        np.testing.assert_array_equal(grid[by:by + tile, bx:bx + tile], images[ranked[0]].repeat(4, 0).repeat(4, 1))
        np.testing.assert_array_equal(grid[wy:wy + tile, wx:wx + tile], images[ranked[-1]].repeat(4, 0).repeat(4, 1))

    # each row's thumbnail is a stored image of that candidate (32 px pool images: under 64 px, kept as they are)
    for row, cell in enumerate(table["thumbnail"]):
        assert cell["type"] == "image" and cell["filepath"].startswith("table_images/")
        thumb = np.asarray(Image.open(_download(run_id, cell["filepath"], tmp_path / "thumbs")).convert("RGB"))
        np.testing.assert_array_equal(thumb, images[row])
        assert Image.open(_download(run_id, cell["compressed_filepath"], tmp_path / "thumbs")).format == "WEBP"

    scatter = Image.open(_download(run_id, f"{base}/proxy_vs_final.png", tmp_path))
    assert scatter.format == "PNG" and min(scatter.size) > 200

    report = json.loads((run.stage_dir(iteration, "quantize") / "report.json").read_text())
    logged = json.loads(open(_download(run_id, f"{base}/quantize_report.json", tmp_path)).read())
    assert logged == report  # per layer: replaced (low precision) or kept, and why
    assert sum(row["replaced"] for row in logged["layers"]) == logged["totals"]["layers_replaced"] > 0


def test_inspect_prints_the_mlflow_link_of_the_pool(trained, run_cli):
    run, info = trained
    out = run_cli("inspect", "--run-dir", str(run.root), "--iteration", "1").stdout
    url = (f"http://127.0.0.1:5000/#/experiments/{info['experiment_id']}/runs/{info['mlflow_run_id']}"
           f"/artifactPath/pool/iter_0001?{TRAINING_VIEW}")  # the training view: MLflow 3.17 opens GenAI's without
    assert f"mlflow ui --backend-store-uri {info['tracking_uri']} --host 127.0.0.1 --port 5000" in out
    assert url in out and "not logged yet" not in out
    link = json.loads(run_cli("inspect", "--run-dir", str(run.root), "--iteration", "1", "--json").stdout)["mlflow"]
    assert link["run_id"] == info["mlflow_run_id"] and link["artifact_path"] == "pool/iter_0001"
    assert link["url"] == url and link["logged"] is True
    # the artifact path of the link holds the pool
    listed = {a.path for a in mlflow.MlflowClient().list_artifacts(info["mlflow_run_id"], link["artifact_path"])}
    assert "pool/iter_0001/candidates.json" in listed


def test_experiment_opens_in_the_model_training_view(trained):
    run, info = trained
    tags = mlflow.MlflowClient().get_experiment(info["experiment_id"]).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_run_directory_finds_its_mlflow_run_from_any_folder(trained, run_cli, tmp_path):
    """`tracking.uri` unset: status, inspect and a resumed train elsewhere use the URI run.json recorded."""
    run, info = trained
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = json.loads(run_cli("status", "--run-dir", str(run.root), "--json", cwd=elsewhere).stdout)
    link = status["mlflow"]
    assert (link["run_id"], link["tracking_uri"]) == (info["mlflow_run_id"], info["tracking_uri"])
    link = json.loads(run_cli("inspect", "--run-dir", str(run.root), "--iteration", "0", "--json",
                              cwd=elsewhere).stdout)["mlflow"]
    assert (link["run_id"], link["tracking_uri"], link["logged"]) == (info["mlflow_run_id"], info["tracking_uri"], True)
    out = run_cli("train", str(TINY), *SMALLER_RUN, "--run-dir", str(run.root), "--no-progress", cwd=elsewhere).stdout
    assert f"--backend-store-uri {info['tracking_uri']} " in out
    assert json.loads((run.root / "run.json").read_text()) == info
    assert not (elsewhere / "mlruns.db").exists() and not (elsewhere / "mlartifacts").exists()
    runs = mlflow.search_runs([info["experiment_id"]], output_format="list")
    assert [r.info.run_id for r in runs] == [info["mlflow_run_id"]]


def test_logging_again_after_a_crash_does_not_duplicate_the_table(trained):
    from solrl.flows.tracking import log_iteration
    from solrl_core.run_config import load_run_config

    run, info = trained
    marker = run.iteration_dir(0) / "manifests" / "logged.json"
    marker.unlink()  # as if the process died after logging, before writing the marker
    log_iteration(run, load_run_config(run), 0)
    assert marker.is_file()
    cfg = load_config(TINY, SMALLER_SETS)
    table = _table(info, "pool/iter_0000/candidates.json")
    assert len(table) == cfg.explore.seeds_per_prompt * cfg.prompts.per_iteration


def test_tables_past_mlflows_tag_limit_are_still_written(trained):
    """MLflow lists a run's tables in one tag of at most 8000 characters; a full list must not break logging."""
    import pandas as pd
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    from solrl.flows.tracking import _log_table

    run, info = trained
    client = mlflow.MlflowClient()
    other = client.create_run(info["experiment_id"]).info.run_id
    full = json.dumps([{"path": f"pool/iter_{i:04d}/candidates.json", "type": "table"} for i in range(140)])
    nearly_full = full[: full.rindex("}", 0, 7990) + 1] + "]"  # ~135 tables listed, no room for one more
    assert 8000 - 60 < len(nearly_full) <= 8000
    client.set_tag(other, MLFLOW_LOGGED_ARTIFACTS, nearly_full)
    assert client.get_run(other).data.tags[MLFLOW_LOGGED_ARTIFACTS] == nearly_full
    _log_table(other, {"seed": [1, 2, 3], "selected": [True, False, True]}, "pool/iter_0140/candidates.json")
    assert client.get_run(other).data.tags[MLFLOW_LOGGED_ARTIFACTS] == nearly_full  # still valid JSON
    path = mlflow.artifacts.download_artifacts(run_id=other, artifact_path="pool/iter_0140/candidates.json")
    assert pd.read_json(path, orient="split")["seed"].tolist() == [1, 2, 3]
    client.set_terminated(other)
