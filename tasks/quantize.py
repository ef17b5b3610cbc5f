"""Prefect task of the 'quantize' stage."""

from tasks.stage_task import make_stage_task

quantize_task = make_stage_task("quantize")
