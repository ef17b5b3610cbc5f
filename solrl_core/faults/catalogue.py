"""The cases: each one fault (or bad input), the command a user would run next, and what is due.

Every case works in its own folder `<out>/cases/<name>/` on its own copy of the reference run (`run/`), so cases
are independent. Command fields: {config} the reference config, {run} the case's run directory, {case} the case's
folder, {dead_url} an http URL on a loopback port where nothing listens.

expect:
    error      a one-line error (exit non-zero, last line "solrl: error: ...", no traceback) and nothing changed;
               with `repair`, the repair the error names is then applied, the run resumed with `solrl train`, and
               its final checkpoint (and evaluation) must equal the reference run's
    success    the command succeeds and the run then equals the reference (after `then`, when given)
    either     a one-line error (then as `error` with repair) or a success that equals the reference
    interrupt  the command is signalled mid-run: it stops without a traceback (after SIGINT/SIGTERM with a last line
               "solrl: ..."), leaves no process behind and loses nothing; `solrl train` then resumes to the reference
"""

from __future__ import annotations

from dataclasses import dataclass

TRAIN = ("train", "{config}", "--run-dir", "{run}", "--no-progress")
LAST = 1  # the reference run's last iteration (it runs 2)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # input | damage | force | signal
    fault: str  # what is wrong, in words
    command: tuple[str, ...] = TRAIN  # the solrl arguments a user runs next
    prepare: tuple[tuple[str, dict], ...] = ()  # damage.apply steps, in order
    expect: str = "error"
    repair: bool = False
    env: tuple[tuple[str, str | None], ...] = ()  # environment changes for the command (None: unset)
    signal: tuple[str, str, bool] | None = None  # (signal name, run-relative glob to wait for, to the whole group)
    unprivileged: bool = False  # run without root's permission bypass (permission faults)
    locked: bool = False  # another process holds the run directory meanwhile
    gpu_absent: bool = False  # only meaningful on a machine without a CUDA GPU
    disk_full: bool = False  # the run directory is on a disk that fills up ({run} is its copy there)
    then: tuple[str, ...] | None = None  # a second command after a successful first one
    recomputed: tuple[str, ...] = ()  # run-relative files that the commands must have rewritten


def _stage(name: str, iteration: int = LAST, *extra: str) -> tuple[str, ...]:
    return ("stage", name, "--run-dir", "{run}", "--iteration", str(iteration), *extra)


def _bad_config(name: str, fault: str, text: str | None = None, data: bytes | None = None) -> Case:
    return Case(name, "input", fault, ("train", "{case}/bad.yaml", "--run-dir", "{case}/new", "--no-progress"),
                (("write", {"path": "{case}/bad.yaml", "text": text, "data": data}),))


def _damaged(name: str, fault: str, stopped: tuple[int, str | None] | None, op: str, path: str,
             command: tuple[str, ...] = TRAIN, expect: str = "error") -> Case:
    """`path` damaged by `op` in a run that stopped after stage `stopped[1]` of iteration `stopped[0]` (None: before
    its first stage; `stopped` None: a finished run); then the user runs `command` (default: resume)."""
    interrupt = () if stopped is None else (("interrupt", {"iteration": stopped[0], "done": stopped[1]}),)
    return Case(name, "damage", fault, command, (*interrupt, (op, {"path": path})), expect, repair=True)


_POOL = f"iter_{LAST:04d}/explore/pool.zarr"
_EXPLORE_SCORES = f"iter_{LAST:04d}/score_explore/rewards.zarr"
_SELECTION = f"iter_{LAST:04d}/select/selection.zarr"
_SAMPLES = f"iter_{LAST:04d}/regenerate/samples.zarr"
_FINAL_SCORES = f"iter_{LAST:04d}/score_final/rewards.zarr"
_QUANTIZE = f"iter_{LAST:04d}/quantize"
_CHECKPOINT0 = "iter_0000/update/checkpoint"
_EVAL = f"eval/step_{LAST + 1:04d}"
_NOT_UTF8 = b"name: faults\nprompts:\n  per_iteration: 2\n# caf\xe9 \xff\xfe\n"
_INSPECT = ("inspect", "--run-dir", "{run}", "--iteration")
_EVAL_LAST = ("eval", "--run-dir", "{run}", "--step", str(LAST + 1), "--quiet")

CASES: tuple[Case, ...] = (
    # ---- bad inputs --------------------------------------------------------------------------------------------
    _bad_config("config-not-utf8", "config file is not UTF-8 text", data=_NOT_UTF8),
    _bad_config("config-empty", "config file is empty", text=""),
    _bad_config("config-not-mapping", "config file is a YAML list, not a mapping", text="- a\n- b\n"),
    _bad_config("config-yaml-syntax", "config file is not valid YAML", text="name: [unclosed\n"),
    _bad_config("config-unknown-key", "config has an unknown key", text="extends: {config}\nexplore:\n  seedz: 3\n"),
    _bad_config("config-bad-value", "config value of the wrong type", text="extends: {config}\niterations: many\n"),
    Case("config-missing", "input", "config file does not exist",
         ("train", "{case}/missing.yaml", "--run-dir", "{case}/new")),
    Case("config-is-directory", "input", "config path is a directory",
         ("train", "{case}", "--run-dir", "{case}/new")),
    Case("prompts-not-utf8", "input", "prompt file is not UTF-8 text",
         ("train", "{case}/bad.yaml", "--run-dir", "{case}/new", "--no-progress"),
         (("write", {"path": "{case}/prompts.txt", "data": b"a red circle\n\xff\xfe a blue square\n"}),
          ("write", {"path": "{case}/bad.yaml",
                     "text": "extends: {config}\nprompts:\n  train: {case}/prompts.txt\n"}))),
    Case("prompts-missing", "input", "prompt file does not exist",
         ("train", "{case}/bad.yaml", "--run-dir", "{case}/new", "--no-progress"),
         (("write", {"path": "{case}/bad.yaml", "text": "extends: {config}\nprompts:\n  train: {case}/none.txt\n"}),)),
    Case("set-unknown-key", "input", "--set names an unknown key", (*TRAIN, "--set", "explore.nope=1")),
    Case("set-bad-value", "input", "--set gives a value of the wrong type", (*TRAIN, "--set", "explore.steps=abc")),
    Case("set-malformed", "input", "--set without '='", (*TRAIN, "--set", "explore.steps")),
    Case("resume-other-config", "input", "resume with a config that differs from the frozen one",
         (*TRAIN, "--set", "explore.steps=5")),
    Case("run-dir-is-file", "input", "--run-dir is a regular file",
         ("train", "{config}", "--run-dir", "{case}/afile", "--no-progress"),
         (("write", {"path": "{case}/afile", "text": "not a directory\n"}),)),
    Case("run-dir-unwritable", "input", "resume in a run directory without write permission",
         prepare=(("read_only", {"path": "."}),), unprivileged=True),
    Case("run-dir-locked", "input", "another process holds the run directory", locked=True),
    Case("run-dir-missing", "input", "stage in a directory that is not a run",
         ("stage", "explore", "--run-dir", "{case}/new", "--iteration", "0")),
    Case("status-not-a-run", "input", "status of a folder that is not a run", ("status", "--run-dir", "{case}/empty"),
         (("mkdir", {"path": "{case}/empty"}),)),
    Case("unknown-stage", "input", "stage name that does not exist", _stage("explor", 0)),
    Case("train-iterations-negative", "input", "train --iterations -1",
         ("train", "{config}", "--run-dir", "{case}/new", "--iterations", "-1")),
    Case("stage-iteration-negative", "input", "stage --iteration -1", _stage("explore", -1)),
    Case("stage-iteration-out-of-range", "input", "stage --iteration beyond the run's iterations",
         _stage("quantize", 7)),
    Case("inspect-iteration-negative", "input", "inspect --iteration -1", (*_INSPECT, "-1")),
    Case("inspect-iteration-out-of-range", "input", "inspect --iteration beyond the run's iterations",
         (*_INSPECT, "5")),
    Case("eval-step-negative", "input", "eval --step -1", ("eval", "--run-dir", "{run}", "--step", "-1")),
    Case("eval-step-out-of-range", "input", "eval --step beyond the run's iterations",
         ("eval", "--run-dir", "{run}", "--step", "9")),
    Case("device-cuda-without-gpu", "input", "model.device: cuda on a machine without a GPU",
         ("train", "{config}", "--run-dir", "{case}/new", "--set", "model.device=cuda", "--no-progress"),
         gpu_absent=True),
    Case("prefect-api-dead", "input", "PREFECT_API_URL names a port where nothing listens",
         ("train", "{config}", "--run-dir", "{case}/new", "--no-progress"),
         env=(("PREFECT_API_URL", "{dead_url}/api"),)),
    Case("tracking-uri-dead", "input", "tracking.uri names an MLflow server port where nothing listens",
         ("train", "{config}", "--run-dir", "{case}/new", "--set", "tracking.uri={dead_url}", "--no-progress")),
    Case("tracking-sqlite-unwritable", "input", "tracking.uri is an sqlite store in a folder without write permission",
         ("train", "{config}", "--run-dir", "{case}/new", "--set", "tracking.uri=sqlite:///{case}/ro/mlruns.db",
          "--no-progress"),
         (("mkdir", {"path": "{case}/ro"}), ("read_only", {"path": "{case}/ro"})), unprivileged=True),
    Case("disk-full", "input", "the disk fills up while iteration 1 runs (a tmpfs with 2 MiB free)",
         prepare=(("interrupt", {"iteration": LAST, "done": None}),), disk_full=True),
    # ---- damaged artifacts: the run stopped after a stage, its artifact was damaged, the user resumes ------------
    _damaged("explore-chunk-deleted", "explore pool: an image chunk deleted", (LAST, "explore"), "delete",
             f"{_POOL}/image/c.*"),
    _damaged("explore-chunk-truncated", "explore pool: a latent chunk truncated", (LAST, "explore"), "truncate",
             f"{_POOL}/latent/c.*"),
    _damaged("explore-chunk-flipped", "explore pool: bytes flipped in an image chunk", (LAST, "explore"), "flip",
             f"{_POOL}/image/c.*"),
    _damaged("explore-metadata-truncated", "explore pool: an array's zarr.json truncated", (LAST, "explore"),
             "truncate", f"{_POOL}/seed/zarr.json"),
    _damaged("score-explore-chunk-truncated", "explore rewards: a chunk truncated", (LAST, "score_explore"), "truncate",
             f"{_EXPLORE_SCORES}/reward/c.*"),
    _damaged("select-chunk-deleted", "selection: a chunk deleted", (LAST, "select"), "delete",
             f"{_SELECTION}/selected/c.*"),
    _damaged("regenerate-chunk-flipped", "regenerated samples: bytes flipped in an image chunk", (LAST, "regenerate"),
             "flip", f"{_SAMPLES}/image/c.*"),
    _damaged("score-final-chunk-deleted", "final rewards: a chunk deleted", (LAST, "score_final"), "delete",
             f"{_FINAL_SCORES}/reward/c.*"),
    _damaged("quantize-report-truncated", "explore copy's report.json truncated", (LAST, "quantize"), "truncate",
             f"{_QUANTIZE}/report.json"),
    _damaged("checkpoint-adapters-truncated", "iteration 0's checkpoint: adapters.safetensors truncated",
             (LAST, None), "truncate", f"{_CHECKPOINT0}/adapters.safetensors"),
    _damaged("checkpoint-optimizer-deleted", "iteration 0's checkpoint: optimizer.safetensors deleted",
             (LAST, None), "delete", f"{_CHECKPOINT0}/optimizer.safetensors"),
    _damaged("checkpoint-state-truncated", "iteration 0's checkpoint: state.json truncated", (LAST, None),
             "truncate", f"{_CHECKPOINT0}/state.json"),
    _damaged("final-checkpoint-flipped", "the last checkpoint: bytes flipped in adapters.safetensors (then eval)",
             None, "flip", f"iter_{LAST:04d}/update/checkpoint/adapters.safetensors", _EVAL_LAST),
    _damaged("manifest-truncated", "the select stage's manifest truncated", (LAST, "select"), "truncate",
             f"iter_{LAST:04d}/manifests/select.json"),
    _damaged("manifest-removed", "the select stage's manifest removed (the stage looks unfinished)",
             (LAST, "select"), "delete", f"iter_{LAST:04d}/manifests/select.json", expect="success"),
    _damaged("config-yaml-truncated", "the run's frozen config.yaml truncated", (LAST, "score_final"), "truncate",
             "config.yaml"),
    _damaged("run-json-truncated", "run.json (MLflow run id) truncated", (LAST, "score_final"), "truncate",
             "run.json"),
    _damaged("eval-metrics-truncated", "an evaluation's metrics.json truncated (then eval)", None, "truncate",
             f"{_EVAL}/metrics.json", _EVAL_LAST),
    _damaged("eval-samples-deleted", "an evaluation's samples.png deleted (then eval)", None, "delete",
             f"{_EVAL}/samples.png", _EVAL_LAST),
    _damaged("init-adapters-flipped", "initial adapters: bytes flipped", (0, "score_final"), "flip",
             "init/adapters.safetensors"),
    _damaged("text-cache-truncated", "a cached prompt embedding truncated", (LAST, "quantize"), "truncate",
             "text_cache/*/*.safetensors", expect="either"),
    # ---- --force ------------------------------------------------------------------------------------------------
    Case("forced-update-interrupted", "force", "forced update of the last iteration stopped by SIGTERM mid-way",
         _stage("update", LAST, "--force"), expect="interrupt",
         signal=("SIGTERM", f"iter_{LAST:04d}/update.partial", False)),
    Case("forced-update-bad-input", "force", "forced update whose input (final rewards) is damaged",
         _stage("update", LAST, "--force"), (("flip", {"path": f"{_FINAL_SCORES}/reward/c.*"}),), repair=True),
    Case("forced-stage-makes-later-stale", "force", "explore forced again: the later stages must be recomputed",
         _stage("explore", LAST, "--force"), expect="success", then=TRAIN,
         recomputed=tuple(f"iter_{LAST:04d}/manifests/{s}.json"
                          for s in ("score_explore", "select", "regenerate", "score_final", "update"))),
    # ---- signals: train stopped while iteration 1 runs; then resumed ----------------------------------------------
    Case("train-sigint", "signal", "Ctrl-C (SIGINT to the process group) during explore",
         prepare=(("interrupt", {"iteration": LAST, "done": None}),), expect="interrupt",
         signal=("SIGINT", f"iter_{LAST:04d}/explore*", True)),
    Case("train-sigterm", "signal", "SIGTERM to the train process during explore",
         prepare=(("interrupt", {"iteration": LAST, "done": None}),), expect="interrupt",
         signal=("SIGTERM", f"iter_{LAST:04d}/explore*", False)),
    Case("train-sigkill", "signal", "SIGKILL to the train process during explore",
         prepare=(("interrupt", {"iteration": LAST, "done": None}),), expect="interrupt",
         signal=("SIGKILL", f"iter_{LAST:04d}/explore*", False)),
    Case("train-sigkill-own-server", "signal", "SIGKILL to train during explore, no PREFECT_API_URL (own server)",
         prepare=(("interrupt", {"iteration": LAST, "done": None}),), expect="interrupt",
         env=(("PREFECT_API_URL", None),), signal=("SIGKILL", f"iter_{LAST:04d}/explore*", False)),
    Case("stage-sigint", "signal", "Ctrl-C during a forced explore stage", _stage("explore", LAST, "--force"),
         expect="interrupt", signal=("SIGINT", f"iter_{LAST:04d}/explore.partial", True)),
)

KINDS = ("input", "damage", "force", "signal")
BY_NAME = {case.name: case for case in CASES}
