"""Prefect task of the 'update' stage."""

from tasks.stage_task import make_stage_task

update_task = make_stage_task("update")
