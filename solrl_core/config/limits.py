"""Upper bounds of the integer settings: of the run config (solrl_core/config/schema.py) and of the sections it passes on
to other modules (`reward_models`, solrl_core/rewards/base.py), kept here so both can read them without importing
each other."""

# Upper bounds of the integer settings. Far above any real run (the official ones: 48 prompts x 96 seeds, 28-40 ODE
# steps, batches of tens, hundreds of iterations on up to hundreds of GPUs), yet low enough that each value, and the
# counts the code forms from them (rows of a pool: prompts x seeds; optimizer steps: iterations x steps per
# iteration), fit the 64-bit integers of torch, zarr and Prefect's database: `iterations: 100000000000000000000` once
# made every Prefect listing of the server fail ("Integer exceeds 64-bit range"). A value past them is a typo.
MAX_ITERATIONS = 1_000_000  # iterations, optimizer steps per iteration, eval/audit periods, patience
MAX_SEEDS = 100_000  # seeds per prompt (explore and evaluation), K
MAX_PROMPTS = 100_000  # prompts per iteration, evaluation prompts, prompts of the grid
MAX_STEPS = 10_000  # ODE steps
MAX_BATCH = 65_536  # batch sizes, micro-batches, latents per VAE decode
MAX_RANK = 65_536  # LoRA rank (at most a layer's width)
MAX_WIDTH = 1_000_000  # a layer width, text tokens
MAX_SIDE = 65_536  # image side in pixels
MAX_FRAMES = 4_096  # frames of a video sample
MAX_PROCESSES = 1_024  # update processes per machine
MAX_NODES = 65_536  # machines of the update
MAX_SECONDS = 7 * 24 * 3600  # a timeout: a week
MAX_SEED = 2**63 - 1  # the largest int64
