"""Stage name -> Prefect task, in pipeline order."""

from tasks.explore import explore_task
from tasks.quantize import quantize_task
from tasks.regenerate import regenerate_task
from tasks.score import score_explore_task, score_final_task
from tasks.select import select_task
from tasks.update import update_task

STAGE_TASKS = {
    "quantize": quantize_task,
    "explore": explore_task,
    "score_explore": score_explore_task,
    "select": select_task,
    "regenerate": regenerate_task,
    "score_final": score_final_task,
    "update": update_task,
}
