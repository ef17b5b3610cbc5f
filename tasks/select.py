"""Prefect task of the 'select' stage."""

from tasks.stage_task import make_stage_task

select_task = make_stage_task("select")
