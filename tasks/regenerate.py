"""Prefect task of the 'regenerate' stage."""

from tasks.stage_task import make_stage_task

regenerate_task = make_stage_task("regenerate")
