"""Step name -> Prefect task, in the order of an iteration (solrl_core/run/stage_table.py names them without
importing any stage; solrl_core/method.py says what each one does)."""

from solrl_core.run.stage_table import STAGES
from tasks.stage_task import make_stage_task

STAGE_TASKS = {stage: make_stage_task(stage) for stage in STAGES}
audit_task = make_stage_task("audit")  # the optional full-fidelity audit (not one of the pipeline's STAGES)
