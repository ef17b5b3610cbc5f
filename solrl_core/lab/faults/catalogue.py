"""The cases: each one fault (or bad input), the command a user would run next, and what is due.

Every case works in its own folder `<out>/cases/<name>/` on its own copy of the reference run (`run/`), so cases
are independent. Command fields: {config} the reference config, {run} the case's run directory, {case} the case's
folder, {dead_url} an http URL on a loopback port where nothing listens; `env` values also {pythonpath}, the
catalogue's own PYTHONPATH (to put a case's plug-in module before it).

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

from solrl_core.config.packaged import CONFIGS_DIR

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
    timeout_s: float | None = None  # the first command's time limit (None: the catalogue's --timeout)
    pipe: str | None = None  # a shell pipeline the command's standard output goes into, e.g. "head -1"
    limits: tuple[tuple[str, int], ...] = ()  # `ulimit` options set for the command, e.g. (("-n", 32),)


def _stage(name: str, iteration: int = LAST, *extra: str) -> tuple[str, ...]:
    return ("stage", name, "--run-dir", "{run}", "--iteration", str(iteration), *extra)


def _bad_config(name: str, fault: str, text: str | None = None, data: bytes | None = None) -> Case:
    return Case(name, "input", fault, ("train", "{case}/bad.yaml", "--run-dir", "{case}/new", "--no-progress"),
                (("write", {"path": "{case}/bad.yaml", "text": text, "data": data}),))


def _damaged_by(name: str, fault: str, stopped: tuple[int, str | None] | None, steps: tuple[tuple[str, dict], ...],
                command: tuple[str, ...] = TRAIN, expect: str = "error") -> Case:
    """A run that stopped after stage `stopped[1]` of iteration `stopped[0]` (None: before its first stage; `stopped`
    None: a finished run), damaged by the damage.apply `steps`; then the user runs `command` (default: resume)."""
    interrupt = () if stopped is None else (("interrupt", {"iteration": stopped[0], "done": stopped[1]}),)
    return Case(name, "damage", fault, command, (*interrupt, *steps), expect, repair=True)


def _damaged(name: str, fault: str, stopped: tuple[int, str | None] | None, op: str, path: str,
             command: tuple[str, ...] = TRAIN, expect: str = "error") -> Case:
    """`path` damaged by `op` (see `_damaged_by`)."""
    return _damaged_by(name, fault, stopped, ((op, {"path": path}),), command, expect)


def _new_run(name: str, fault: str, *extra: str, **fields) -> Case:
    """A user starts a new run of the reference config in the case's folder, with `extra` arguments."""
    return Case(name, "input", fault, ("train", "{config}", "--run-dir", "{case}/new", "--no-progress", *extra),
                **fields)


def _plugin(name: str, fault: str, module: str, code: str) -> Case:
    """A new run whose `model.kind` is `module:Thing`, a plug-in module of the user's (`code`, in the case's folder,
    on PYTHONPATH)."""
    return _new_run(name, fault, "--set", f"model.kind={module}:Thing",
                    prepare=(("write", {"path": f"{{case}}/{module}.py", "text": code}),),
                    env=(("PYTHONPATH", "{case}:{pythonpath}"),))


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
FAST_S = 60.0  # the time limit of a command due to refuse before its work: a wait past it is a hang
# 362 bytes whose aliases expand to 9**9 (387 million) strings
_ALIAS_BOMB = "# 387420489 strings\n" + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + \
    "".join(f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
_LONG_LINE = b"a red circle\n" + b"a blue square " * 750_000 + b"\n"  # one line of 10.5 MB
_LAST_DIR = f"iter_{LAST:04d}"

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
    # a forced re-run whose files are bit for bit the old ones keeps its id (#28): the later stages stay fresh, and
    # the resume ends identical to the reference (recomputing them: tests/unit/run/test_stale.py, with other bytes)
    Case("forced-stage-identical-keeps-later", "force", "explore forced again, bit-identical: nothing becomes stale",
         _stage("explore", LAST, "--force"), expect="success", then=TRAIN),
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
    # ---- issue #29 (names i29-*) --------------------------------------------------------------------------------
    # MLflow going away: the run's own copy of the store (own_store), then the store or the MLflow run taken away
    _damaged_by("i29-mlflow-store-deleted", "the run's MLflow store (sqlite file) deleted, then resume "
                "(documented: a new MLflow run in the same store)", (LAST, "score_final"),
                (("own_store", {}), ("delete", {"path": "{case}/mlruns.db"})), expect="either"),
    _damaged_by("i29-mlflow-run-deleted", "the run's MLflow run deleted (MLflow client, sqlite store), then resume "
                "(documented: a new MLflow run)", (LAST, "score_final"),
                (("own_store", {}), ("delete_mlflow_run", {})), expect="either"),
    _damaged_by("i29-mlflow-store-deleted-status", "the run's MLflow store deleted, then status (a report, not a "
                "failure)", None, (("own_store", {}), ("delete", {"path": "{case}/mlruns.db"})),
                ("status", "--run-dir", "{run}"), expect="success"),
    # settings that once passed validation and failed late
    _new_run("i29-set-lr-inf", "--set train.optimizer.lr=inf", "--set", "train.optimizer.lr=inf"),
    _new_run("i29-set-lr-huge", "--set train.optimizer.lr=1e30", "--set", "train.optimizer.lr=1e30"),
    _new_run("i29-set-betas-above-one", "--set train.optimizer.betas=[1.5, 0.9]",
             "--set", "train.optimizer.betas=[1.5, 0.9]"),
    _new_run("i29-set-seed-2-64", "--set seed=2**64", "--set", f"seed={2**64}"),
    _new_run("i29-set-seeds-per-prompt-huge", "--set explore.seeds_per_prompt=10**12",
             "--set", "explore.seeds_per_prompt=1000000000000"),
    _new_run("i29-set-steps-boolean", "--set explore.steps=true", "--set", "explore.steps=true"),
    _new_run("i29-set-reward-weights-zero", "every reward weight 0", "--set", "rewards.embedded=0"),
    _new_run("i29-set-resolution-33", "--set model.resolution=33 (not the embedded weights' side)",
             "--set", "model.resolution=33"),
    _new_run("i29-set-per-iteration-above-prompts", "prompts.per_iteration 1000, the prompt set has 100",
             "--set", "prompts.per_iteration=1000"),
    _new_run("i29-set-reward-batch-size-zero", "--set reward_models.embedded.batch_size=0",
             "--set", "reward_models.embedded.batch_size=0"),
    _new_run("i29-iterations-flag-huge", "--iterations 10**20 (the CLI flag)", "--iterations", str(10**20)),
    _bad_config("i29-config-only-extends-empty", "a config that is only `extends: []`", text="extends: []\n"),
    # preflight gaps
    _new_run("i29-prefect-url-not-a-url", "PREFECT_API_URL=notaurl", env=(("PREFECT_API_URL", "notaurl"),)),
    _new_run("i29-tracking-uri-unknown-scheme", "tracking.uri: foo://x", "--set", "tracking.uri=foo://x"),
    Case("i29-run-dir-dangling-symlink", "input", "--run-dir is a symbolic link to nowhere",
         ("train", "{config}", "--run-dir", "{case}/link", "--no-progress"),
         (("symlink", {"path": "{case}/link", "target": "{case}/gone/run"}),)),
    _plugin("i29-plugin-import-raises", "model.kind: a plug-in whose module raises at import", "badplugin_mod",
            'raise RuntimeError("badplugin_mod cannot be imported")\n'),
    _plugin("i29-plugin-import-exits-0", "model.kind: a plug-in whose module runs `raise SystemExit(0)` at import",
            "exitplugin_mod", "raise SystemExit(0)\n"),
    # run-directory oddities
    _damaged("i29-learning-curve-is-directory", "learning_curve.png is a directory (then train the finished run)",
             None, "replace_with_dir", "learning_curve.png"),
    _damaged("i29-lock-is-directory", "the run's .lock is a directory", (LAST, "select"), "replace_with_dir", ".lock"),
    _damaged("i29-manifests-is-file", "iteration 1's manifests/ is a file", (LAST, "select"), "replace_with_file",
             f"{_LAST_DIR}/manifests"),
    _damaged_by("i29-commit-journal-garbage", "a garbage regenerate.pending.json commit journal", (LAST, "select"),
                (("write", {"path": f"{_LAST_DIR}/manifests/regenerate.pending.json",
                            "data": b'{"phase": "in", \x00\xff garbage'}),)),
    _damaged("i29-explore-chunk-symlink-loop", "explore pool: an image chunk is a symbolic link to itself",
             (LAST, "explore"), "symlink_loop", f"{_POOL}/image/c.*"),
    _damaged_by("i29-manifest-files-removed", "the select stage's manifest without its `files` inventory",
                (LAST, "select"), (("edit_json", {"path": f"{_LAST_DIR}/manifests/select.json", "drop": "files"}),)),
    _damaged_by("i29-eval-metrics-edited", "an evaluation's metrics.json values edited (then eval)", None,
                (("edit_json", {"path": f"{_EVAL}/metrics.json",
                                "set": {"metrics.reward": 0.99, "metrics.embedded": 0.99}}),),
                _EVAL_LAST, expect="either"),
    _damaged("i29-update-metrics-deleted", "iteration 1's update/metrics.json deleted before it was logged",
             (LAST, "update"), "delete", f"{_LAST_DIR}/update/metrics.json"),
    _damaged_by("i29-run-config-user-copy-same", "the user's own config (extending the reference config, same "
                "values) copied over the run's config.yaml", (LAST, "select"),
                (("write", {"path": "config.yaml", "text": "# my config\nextends: {config}\n"}),), expect="either"),
    Case("i29-run-config-user-copy-preset", "damage", "the user's own full config extending the shipped demo.yaml "
         "copied over the run's config.yaml (the error only: its repair trains another config)", TRAIN,
         (("interrupt", {"iteration": LAST, "done": "select"}),
          ("write", {"path": "config.yaml", "text": f"name: faults\nextends: {CONFIGS_DIR / 'demo.yaml'}\n"
                     "iterations: 2\n"}))),
    Case("i29-run-config-deleted-other-config", "damage", "the run's config.yaml deleted, then resumed with another "
         "config (what following the error above with the user's own config does)",
         (*TRAIN, "--set", "train.lora_rank=8"),
         (("interrupt", {"iteration": LAST, "done": "select"}), ("delete", {"path": "config.yaml"}))),
    _damaged("i29-inspect-explore-chunk-truncated", "iteration 0's explore pool: a seed chunk truncated (then "
             "inspect --iteration 0)", None, "truncate", "iter_0000/explore/pool.zarr/seed/c.*", (*_INSPECT, "0")),
    # unbounded output and waits
    _bad_config("i29-config-alias-bomb", "a 362-byte YAML alias bomb as the config", text=_ALIAS_BOMB),
    Case("i29-prompt-line-10mb", "input", "a prompt file with one 10 MB line",
         ("train", "{case}/bad.yaml", "--run-dir", "{case}/new", "--no-progress"),
         (("write", {"path": "{case}/prompts.txt", "data": _LONG_LINE}),
          ("write", {"path": "{case}/bad.yaml", "text": "extends: {config}\nprompts:\n  train: {case}/prompts.txt\n"
                     "  per_iteration: 2\n"}))),
    Case("i29-config-is-fifo", "input", "the config path is a FIFO nothing writes to",
         ("train", "{case}/fifo.yaml", "--run-dir", "{case}/new", "--no-progress"),
         (("fifo", {"path": "{case}/fifo.yaml"}),), timeout_s=FAST_S),
    Case("i29-status-into-closed-pipe", "input", "`solrl status RUN | head -1` (the reader closes the pipe)",
         ("status", "--run-dir", "{run}"), expect="success", pipe="head -1"),
    Case("i29-status-into-pipe-closed-early", "input", "`solrl status RUN | true` (the pipe is closed before the "
         "first line: the same fault as above, without its race)", ("status", "--run-dir", "{run}"), expect="success",
         pipe="true"),
    # output paths: refused before the work
    Case("i29-pretrain-out-is-file", "input", "pretrain --out names a file", ("pretrain", "--out", "{case}/afile"),
         (("write", {"path": "{case}/afile", "text": "a file\n"}),), timeout_s=FAST_S),
    Case("i29-pretrain-out-unwritable", "input", "pretrain --out names a directory without write permission",
         ("pretrain", "--out", "{case}/ro"), (("mkdir", {"path": "{case}/ro"}), ("read_only", {"path": "{case}/ro"})),
         unprivileged=True, timeout_s=FAST_S),
    Case("i29-make-tiny-onto-file", "input", "make-tiny DIR where DIR is a file",
         ("make-tiny", "flux1", "{case}/afile"),
         (("write", {"path": "{case}/afile", "text": "a file\n"}),), timeout_s=FAST_S),
    # ---- issue #51 (names i51-*): resource limits, names that are paths, settings that do nothing ---------------
    _new_run("i51-open-files-32", "a hard limit of 32 open files (ulimit -n 32)", limits=(("-n", 32),),
             timeout_s=FAST_S),
    _new_run("i51-address-space-3g", "3 GiB of address space (ulimit -v), less than torch's libraries map",
             limits=(("-v", 3 * 1024 * 1024),), timeout_s=FAST_S),
    _new_run("i51-file-size-2m", "files of at most 2 MiB (ulimit -f 2048)", limits=(("-f", 2048),),
             timeout_s=FAST_S),
    _new_run("i51-run-name-parent", "a run name of ../../x (a path, not a name)", "--set", "name=../../x",
             timeout_s=FAST_S),
    _new_run("i51-run-name-rtl-override", "a run name holding a right-to-left override character",
             "--set", "name=run\u202egnp.exe", timeout_s=FAST_S),
    _bad_config("i51-config-duplicate-key", "a key written twice in one mapping (YAML keeps the last silently)",
                text="extends: {config}\niterations: 2\niterations: 3\n"),
    _bad_config("i51-config-nested-50000", "flow collections nested 50,000 levels deep",
                text="a: " + "[" * 50_000 + "]" * 50_000 + "\n"),
    _new_run("i51-cache-interval-zero", "a feature cache with an interval of 0",
             "--set", "explore.cache.kind=taylorseer", "--set", "explore.cache.options.cache_interval=0",
             timeout_s=FAST_S),
    Case("i51-calibrate-zero-prompts", "input", "calibrate-explore --prompts 0",
         ("calibrate-explore", "{config}", "--prompts", "0", "--out", "{case}/cal"), timeout_s=FAST_S),
    Case("i51-calibrate-min-spearman-above-one", "input", "calibrate-explore --min-spearman 1.5 (refused before the "
         "work)", ("calibrate-explore", "{config}", "--min-spearman", "1.5", "--out", "{case}/cal"), timeout_s=FAST_S),
    Case("i51-presets-write-unwritable", "input", "presets --write into a folder without write permission",
         ("presets", "--write", "demo", "{case}/ro/demo.yaml"), (("mkdir", {"path": "{case}/ro"}),
                                                       ("read_only", {"path": "{case}/ro"})),
         unprivileged=True, timeout_s=FAST_S),
)

KINDS = ("input", "damage", "force", "signal")
BY_NAME = {case.name: case for case in CASES}
