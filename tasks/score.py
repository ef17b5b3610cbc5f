"""Prefect tasks of the two score stages: proxy reward of the explore pool, final reward R of the training set."""

from tasks.stage_task import make_stage_task

score_explore_task = make_stage_task("score_explore")
score_final_task = make_stage_task("score_final")
