"""Stage name -> Prefect task, in pipeline order, made from the stage table (solrl_core/stages/table.py)."""

from solrl_core.stages.table import STAGES
from tasks.stage_task import make_stage_task

STAGE_TASKS = {stage: make_stage_task(stage) for stage in STAGES}
audit_task = make_stage_task("audit")  # the optional full-fidelity audit (not one of the pipeline's STAGES)
