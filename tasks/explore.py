"""Prefect task of the 'explore' stage."""

from tasks.stage_task import make_stage_task

explore_task = make_stage_task("explore")
