"""Cost planner: FLOPs of the real backbones (counted on the meta device) x published GPU throughput x a stated
utilisation -> seconds per stage and per iteration of each family. See docs/planner.md."""

from solrl_core.planner.flops import ForwardFlops, decode_and_score_flops, forward_flops, get_model
from solrl_core.planner.gpus import DEFAULT_UTILISATION, GPUS, get_gpu
from solrl_core.planner.cost_model import (
    FAMILIES,
    Shapes,
    Throughput,
    format_plan,
    iteration_cost,
    official_shapes,
    plan,
    shapes_from_config,
)

__all__ = [
    "DEFAULT_UTILISATION", "FAMILIES", "GPUS", "ForwardFlops", "Shapes", "Throughput", "decode_and_score_flops",
    "format_plan", "forward_flops", "get_gpu", "get_model", "iteration_cost", "official_shapes", "plan",
    "shapes_from_config",
]
