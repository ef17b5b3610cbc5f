"""``solrl doctor --gpu-bench``: measure a full-size backbone's transformer forward per explore precision.

Random weights from the shipped diffusers config (``solrl_core/models/model_configs``; nothing is downloaded), the
official skip names and min width of the planner's model (``planner.flops.get_model``), and each precision made
through the project's own ``models.quant.backends.apply_backend`` — the call the explore copy goes through. The model is
built directly in the run's dtype (no fp32 copy of it ever exists) and timed at the explore stage's batch size, both
read from the model's official preset (``preset_config``: ``model.dtype``, ``explore.batch_size``); ``batch``
overrides the batch. Per precision: seconds per forward of that batch, FLOPs counted with
``planner.flops.count_flops`` on a meta-device copy of the same model and call, achieved TFLOP/s; and the relative
output error of each native low-precision backend against its emulation (same inputs, same weights). Precisions
this machine cannot run are recorded with the backend's own reason. When the model does not fit, the block count
is halved until it does; the report says how many blocks ran.

The regenerate and update stages' transformer part (``stage_peaks``) attaches θ and θ_old as the update does
(``stages.checkpoints.attach_policy`` with the preset's LoRA settings), so θ has whatever dtype the update gives it.

Writes ``report.json`` (read by ``solrl plan --calibration``: ``device.planner_gpu``, ``throughput[p].tflops``)
and ``report.md``. Imports torch, diffusers and solrl_core only (no Prefect, no MLflow).
"""

from __future__ import annotations

import gc
import json
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import torch

from solrl_core.errors import SolrlError

PRECISIONS = ("bf16", "fp8", "nvfp4")
EMULATION = {"fp8": "fp8_emulated", "nvfp4": "nvfp4_emulated"}
BLOCK_KEYS = ("num_layers", "num_single_layers")  # diffusers' transformer block counts (FLUX has both)
PRESET_FAMILY = "sol_rl"  # the family whose explore copy runs in low precision: its preset gives the explore batch


def planner_gpu_of(device_name: str) -> str | None:
    """The ``planner.gpus`` key whose name appears in a CUDA device name ("NVIDIA H200" → "h200"), longest first."""
    from solrl_core.planner.gpus import GPUS

    name = device_name.lower().replace("-", " ")
    for key in sorted(GPUS, key=len, reverse=True):
        words = key.replace("rtx-", "rtx ").replace("-", " ")
        if words in name:
            return key
    return None


def preset_config(model: str):
    """The validated official preset (solrl_core/config/presets.py) of the planner model ``model``'s backbone, in the
    low-precision-explore family: where the bench reads the run's dtype, explore batch, micro-batch and LoRA settings.
    The reward part does not touch them (the model's first preset reward is taken: an editing model's an edit one)."""
    from solrl_core.config.loading import load_config
    from solrl_core.planner.flops import get_model
    from solrl_core.config.presets import model_rewards, preset_name

    backbone = get_model(model).backbone
    return load_config(preset_name(backbone, PRESET_FAMILY, model_rewards(backbone)[0]))


def _config(model: str, config_directory, overrides: dict | None) -> tuple[object, dict]:
    from solrl_core.models.model_configs import config_dir
    from solrl_core.planner.flops import get_model

    m = get_model(model)
    path = Path(config_dir(config_directory)) / m.spec.config_file
    if not path.is_file():
        raise SolrlError(f"model config not found: {path}")
    return m, {**json.loads(path.read_text()), **(overrides or {})}


def _blocks(config: dict) -> int:
    return sum(int(config.get(k, 0)) for k in BLOCK_KEYS)


def _with_blocks(config: dict, blocks: int) -> dict:
    """``config`` with at most ``blocks`` transformer blocks, taken in proportion from each block list."""
    total = _blocks(config)
    if blocks >= total:
        return config
    out = dict(config)
    left = blocks
    for k in BLOCK_KEYS:
        if k in config:
            n = max(1, min(left, round(blocks * int(config[k]) / total)))
            out[k], left = n, max(0, left - n)
    return out


@contextmanager
def default_dtype(dtype: torch.dtype):
    """Tensors created inside (parameters included) default to ``dtype``; the previous default is restored."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _build(config: dict, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """The diffusers transformer of ``config`` with random weights, created on ``device`` in ``dtype`` (the peak is
    the model in ``dtype``, never an fp32 model cast afterwards); ``.to`` then converts only what a module creates
    with an explicit dtype (small buffers), if anything."""
    import diffusers

    cls = getattr(diffusers, config["_class_name"])
    torch.manual_seed(0)
    with torch.device(device), default_dtype(dtype):
        model = cls.from_config(config)
    tensors = (*model.parameters(), *model.buffers())
    if any(t.is_floating_point() and t.dtype != dtype for t in tensors):
        model = model.to(dtype)
    return model.eval().requires_grad_(False)


def _inputs(kind: str, config: dict, image_tokens: int, text_tokens: int, device: str, dtype, batch: int = 1) -> dict:
    """Real random inputs shaped like ``planner.flops.example_inputs``' (ids zero, timestep 0.5)."""
    from solrl_core.planner.flops import example_inputs

    g = torch.Generator(device="cpu").manual_seed(1)
    out = {}
    for k, v in example_inputs(kind, config, image_tokens, text_tokens, batch).items():
        if not torch.is_tensor(v):  # e.g. Qwen-Image's img_shapes
            out[k] = v
            continue
        if k.endswith("_ids"):
            out[k] = torch.zeros(v.shape, device=device, dtype=dtype)
        elif k in ("timestep", "guidance"):
            out[k] = torch.full(v.shape, 0.5, device=device, dtype=dtype)
        else:
            out[k] = torch.randn(v.shape, generator=g).to(device=device, dtype=dtype)
    return out


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _time(call, device: str, repeats: int) -> float:
    """Median seconds of ``call()`` (the caller has run it once: the warm-up)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    from solrl_core.models.quant.linear import _rel_error

    return _rel_error(a.float(), b.float())


def _share_rate(flops: float, low: float, seconds: float, bf16: dict | None) -> float | None:
    """TFLOP/s of the replaced layers' share, solved from the planner's own split
    (``planner.cost_model.forward_seconds``: t = F_low / R(p) + (F − F_low) / R(bf16), R(bf16) measured); the whole
    forward's rate for bf16 itself. None when the share's time is not resolvable (t at or below the bf16 rest)."""
    if bf16 is None or low == flops:
        return flops / seconds / 1e12
    rest = (flops - low) / (bf16["tflops"] * 1e12)
    return low / (seconds - rest) / 1e12 if seconds > rest and low > 0 else None


def free_memory(device: str) -> None:
    """Give freed tensors' memory back (call it outside an ``except`` block: a live traceback keeps its frames)."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _meta_model(config: dict) -> torch.nn.Module:
    """The same transformer on the meta device (no memory): where the FLOPs are counted."""
    import diffusers

    with torch.device("meta"):
        return getattr(diffusers, config["_class_name"]).from_config(config)


def _time_compiled(explore: torch.nn.Module, call, eager_out: torch.Tensor, eager_seconds: float, device: str,
                   repeats: int, backend: str) -> dict:
    """The same copy compiled as a run compiles its sampling copies (``models.compiled``): the first call's seconds
    (the compile), seconds per forward after it, the speed-up over eager and the output's relative difference."""
    from solrl_core.models.compiled import compile_in_place, default_mode

    mode = default_mode(device)
    torch._dynamo.reset()  # each precision's copy compiles anew: its first call times its compile
    compile_in_place(explore, backend, mode)
    with torch.no_grad():
        start = time.perf_counter()
        out = call(explore)[0].detach()
        _sync(device)
        first = time.perf_counter() - start
        seconds = _time(lambda: call(explore), device, repeats)
    return {"backend": backend, "mode": mode if backend == "inductor" else None, "compile_seconds": first,
            "seconds_per_forward": seconds, "speedup": eager_seconds / seconds, "rel_error": _rel(out, eager_out)}


def _time_precisions(spec, config: dict, image_tokens: int, text_tokens: int, min_width: int, batch: int,
                     device: str, dtype: torch.dtype, precisions, repeats: int, compile_backend: str | None = None
                     ) -> tuple:
    """Build the model of ``config`` and time a forward of ``batch`` samples per precision, eager and, with
    ``compile_backend``, compiled; (the base model, the forward's FLOPs, the throughput rows, the relative errors).
    CUDA out-of-memory propagates (``measure`` halves)."""
    from solrl_core.planner.flops import count_flops, example_inputs
    from solrl_core.models.compiled import compilable
    from solrl_core.models.quant.backends import apply_backend, resolve_backend
    from solrl_core.stages.transformer_copies import weight_sharing_transformer

    base = _build(config, device, dtype)
    inputs = _inputs(spec.kind, config, image_tokens, text_tokens, device, dtype, batch)
    meta = _meta_model(config)
    meta_inputs = example_inputs(spec.kind, config, image_tokens, text_tokens, batch)

    def count(low_precision_names=()):
        return count_flops(meta, lambda: meta(**meta_inputs, return_dict=False), low_precision_names)

    flops = count().total
    cuda = torch.device(device).type == "cuda"
    outputs, throughput = {}, {}
    wanted = list(precisions) + [EMULATION[p] for p in precisions if p in EMULATION]
    if "bf16" not in wanted:
        wanted.insert(0, "bf16")  # the other precisions' rates are solved against it
    call = lambda mod: mod(**inputs, return_dict=False)  # noqa: E731
    for name in wanted:
        try:
            choice = resolve_backend(name, device)
        except SolrlError as exc:
            throughput[name] = {"skipped": str(exc)}
            continue
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        # the explore copy as the pipeline builds it: W0's module tree sharing its tensors, the eligible layers replaced
        explore = weight_sharing_transformer(SimpleNamespace(transformer=base))
        quant = apply_backend(explore, choice, spec.skip_names, min_width)
        replaced = [r.name for r in quant.layers if r.replaced]
        with torch.no_grad():
            outputs[name] = call(explore)[0].detach()  # also the warm-up of the timing
            _sync(device)
            seconds = _time(lambda: call(explore), device, repeats)
        low = count(replaced).low_precision if name != "bf16" else flops
        row = {"backend": choice.name, "impl": choice.impl, "reason": choice.reason, "seconds_per_forward": seconds,
               "seconds_per_sample": seconds / batch, "tflops_forward": flops / seconds / 1e12,
               "low_precision_flops": low, "replaced_layers": len(replaced)}
        row["tflops"] = _share_rate(flops, low, seconds, throughput.get("bf16"))
        # W0 + this precision's copy + one explore batch's forward: the transformer part of an explore process
        row["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
        if compile_backend and compilable(explore):  # not on fake tensors (the fake-CUDA tier)
            row["compiled"] = _time_compiled(explore, call, outputs[name], seconds, device, repeats, compile_backend)
        throughput[name] = row
        del explore
    errors = {}
    for native, emulated in EMULATION.items():
        if native in outputs and emulated in outputs:
            errors[f"{native}_vs_{emulated}"] = _rel(outputs[native], outputs[emulated])
    for name in outputs:
        if name != "bf16" and "bf16" in outputs:
            errors[f"{name}_vs_bf16"] = _rel(outputs[name], outputs["bf16"])
    return base, flops, throughput, errors


def measure(model: str = "flux1", device: str = "cuda", *, blocks: int | None = None, precisions=PRECISIONS,
            repeats: int = 3, batch: int | None = None, dtype: torch.dtype | None = None, run_config=None,
            config_directory=None, config_overrides: dict | None = None, image_tokens: int | None = None,
            text_tokens: int | None = None, min_width: int | None = None, micro_batch: int | None = None,
            compile_backend: str | None = "auto") -> dict:
    """The bench's measurements as a dict (see the module docstring). ``compile_backend``: also time each precision's
    copy compiled with this torch.compile backend (``auto``: inductor on a CUDA device, none on a CPU, where its
    compile takes minutes; None: eager only). ``blocks``: at most this many transformer
    blocks (None: the whole model, halved on out-of-memory). ``batch``, ``dtype``, ``micro_batch`` and the LoRA
    settings come from ``run_config`` (default: the model's official preset, ``preset_config``) unless given. The
    other keyword overrides shrink the model and the sample (tests run it on a CPU at tiny sizes); without them it
    is the full-size model at the official resolution."""
    from solrl_core.models.backbones.registry import backbone_spec
    from solrl_core.models.quant.backends import device_capability

    m, config = _config(model, config_directory, config_overrides)
    spec = m.spec
    run_cfg = run_config if run_config is not None else preset_config(m.key)
    batch_from = "asked" if batch else f"explore.batch_size of the {PRESET_FAMILY} preset"
    batch = batch or run_cfg.explore.batch_size
    dtype = dtype or getattr(torch, run_cfg.model.dtype)
    micro_batch = micro_batch or run_cfg.train.micro_batch
    image_tokens = image_tokens or spec.image_tokens
    text_tokens = text_tokens or spec.text_tokens
    min_width = spec.min_width if min_width is None else min_width
    if compile_backend == "auto":
        compile_backend = "inductor" if torch.device(device).type == "cuda" else None
    full = _blocks(config)
    n = min(blocks or full, full)
    cut = "asked" if n < full else None
    while True:
        cfg = _with_blocks(config, n)
        try:
            base, flops, throughput, errors = _time_precisions(spec, cfg, image_tokens, text_tokens, min_width,
                                                               batch, device, dtype, precisions, repeats,
                                                               compile_backend)
            break
        except torch.cuda.OutOfMemoryError:
            if n <= 1:
                raise SolrlError(f"{spec.title}: one transformer block at batch {batch} does not fit on {device} "
                                 "(pass a smaller --batch)") from None
        free_memory(device)
        n, cut = n // 2, "memory"

    bspec = backbone_spec(m.backbone)
    stages = None
    try:
        stages = stage_peaks(base, spec.kind, cfg, image_tokens, text_tokens, micro_batch, run_cfg, bspec.defaults,
                             device, dtype)
    except torch.cuda.OutOfMemoryError:
        pass
    if stages is None:
        free_memory(device)
        stages = {"micro_batch": micro_batch, "error": "out of memory"}
    del base
    free_memory(device)
    if torch.device(device).type == "cuda" and n == full and not config_overrides:
        stages["planner_gib"] = planner_stage_estimates(m.key)
        for row in throughput.values():
            if "impl" in row:  # measured: the planner's figure of the same backend beside it
                row["planner_gib"] = planner_copy_gib(m.key, row["backend"], row["impl"])
    cap = device_capability(device)
    name = torch.cuda.get_device_name(torch.device(device)) if cap is not None else "cpu"
    return {
        "solrl_doctor_report": 1,
        "device": {"device": device, "name": name, "capability": list(cap) if cap else None,
                   "planner_gpu": planner_gpu_of(name) if cap is not None else None,
                   "torch": torch.__version__},
        "model": {"key": m.key, "title": spec.title, "blocks": n, "blocks_total": full, "whole": n == full,
                  "cut_by": cut, "image_tokens": image_tokens, "text_tokens": text_tokens,
                  "dtype": str(dtype).split(".")[-1], "batch": batch, "batch_from": batch_from,
                  "flops_per_forward": flops, "flops_per_sample": flops / batch},
        "throughput": throughput,
        "rel_error": errors,
        "stages": stages,
    }


def stage_peaks(base: torch.nn.Module, kind: str, config: dict, image_tokens: int, text_tokens: int,
                micro_batch: int, run_cfg, defaults, device: str, dtype: torch.dtype) -> dict:
    """Peak memory of the transformer part of the regenerate and update stages at a micro-batch, built as the update
    builds it: ``stages.checkpoints.attach_policy`` (θ and θ_old with the run config's LoRA targets, rank, alpha and
    seed, whatever dtype it gives θ) on a module tree sharing ``base``'s weights (W0 held once); ``defaults``: the
    backbone's (its LoRA targets when the config names none). regenerate: θ_old as a branch, one forward without
    grad. update: θ, with gradient checkpointing when the run config has it, one forward and backward and an AdamW
    step. GiB from torch.cuda.max_memory_allocated (None off CUDA, where only the path runs); ``ok`` says each ran."""
    from solrl_core.stages.checkpoints import attach_policy
    from solrl_core.stages.update import enable_gradient_checkpointing

    cuda = torch.device(device).type == "cuda"
    # `base` is one diffusers transformer (of a model of experts, one expert's): no experts to pick LoRA targets in
    policy = attach_policy(run_cfg, SimpleNamespace(transformer=base, defaults=defaults, trained_experts=None))
    inputs = _inputs(kind, config, image_tokens, text_tokens, device, dtype, batch=micro_batch)
    peaks = {}
    for stage in ("regenerate", "update"):
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        if stage == "regenerate":
            with torch.no_grad():
                policy.use("old")(**inputs, return_dict=False)
        else:
            model = policy.use("default")
            if run_cfg.model.gradient_checkpointing:
                enable_gradient_checkpointing(model)
            model.train()
            optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-4)
            model(**inputs, return_dict=False)[0].float().square().mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            model.eval()
        peaks[stage] = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
    return {"micro_batch": micro_batch, "lora_rank": run_cfg.train.lora_rank,
            "theta_dtype": str(policy.trainable_parameters()[0].dtype).split(".")[-1], "peak_gib": peaks,
            "ok": sorted(peaks)}


def planner_copy_gib(model_key: str, backend: str, impl: str) -> float:
    """The planner's W0 + the explore copy's replaced layers for `backend` through `impl` (planner/explore_copy.py),
    GiB."""
    from solrl_core.planner.explore_copy import ExploreBackend, ExploreCopy
    from solrl_core.planner.memory import memory_estimate

    est = memory_estimate(model_key, explore=ExploreCopy(ExploreBackend(backend, impl)))
    return est.gib["weights"] + est.explore_gib["quantized"]


def planner_stage_estimates(model_key: str) -> dict[str, float]:
    """`planner.memory`'s regenerate and update figures without what `stage_peaks` does not load (text encoders,
    VAE, reward): W0 + the two adapters; W0 + the LoRA training state + the micro-batch's activations."""
    from solrl_core.planner.memory import memory_estimate

    est = memory_estimate(model_key)
    return {"regenerate": est.regenerate_gib - est.beside_transformer_gib,
            "update": est.total_gib - est.beside_transformer_gib}


def _gib(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def format_markdown(report: dict) -> str:
    d, m = report["device"], report["model"]
    cap = f" sm_{d['capability'][0]}{d['capability'][1]}" if d["capability"] else ""
    blocks = "whole model" if m["whole"] else f"{m['blocks']} of {m['blocks_total']} blocks ({m['cut_by']})"
    out = [f"# solrl doctor --gpu-bench: {m['title']} on {d['name']}{cap}", "",
           f"Random weights, {blocks}, a batch of {m['batch']} samples ({m['batch_from']}) of {m['image_tokens']} "
           f"image + {m['text_tokens']} text tokens, {m['dtype']}; {m['flops_per_forward']:.4g} FLOP per forward. "
           f"Planner GPU: {d['planner_gpu'] or 'unknown (pass --planner-gpu)'}.", "",
           "TFLOP/s of the forward, and of the replaced layers' share solved against the bf16 rate (what the "
           "planner's calibration reads).", "",
           "Peak GiB: torch.cuda.max_memory_allocated over W0, the explore copy (sharing W0's tensors, its "
           "replaced layers new) and the batch's forward; planner GiB: W0 + those layers (planner.explore_copy), "
           "the rest is the forward's activations.", "",
           "| precision | implementation | ms / forward | ms / sample | TFLOP/s forward | TFLOP/s share | "
           "layers replaced | peak GiB | planner GiB |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in report["throughput"].items():
        if "skipped" in row:
            out.append(f"| {name} | not run: {row['skipped']} | | | | | | | |")
        else:
            share = "–" if row["tflops"] is None else f"{row['tflops']:.3g}"
            out.append(f"| {name} | {row['impl']} | {1e3 * row['seconds_per_forward']:.2f} | "
                       f"{1e3 * row['seconds_per_sample']:.2f} | {row['tflops_forward']:.3g} | {share} | "
                       f"{row['replaced_layers']} | {_gib(row['peak_gib'])} | {_gib(row.get('planner_gib'))} |")
    compiled = {name: row["compiled"] for name, row in report["throughput"].items() if "compiled" in row}
    if compiled:
        first = next(iter(compiled.values()))
        mode = f", mode {first['mode']}" if first["mode"] else ""
        out += ["", f"The same copies compiled as a run compiles its sampling copies (torch.compile, {first['backend']}"
                f"{mode}): the first call includes the compile; output difference against eager (‖c − e‖ / ‖e‖).", "",
                "| precision | compile s (first call) | ms / forward compiled | ms / forward eager | speed-up | "
                "difference |", "|---|---:|---:|---:|---:|---:|"]
        for name, c in compiled.items():
            eager = report["throughput"][name]["seconds_per_forward"]
            out.append(f"| {name} | {c['compile_seconds']:.1f} | {1e3 * c['seconds_per_forward']:.2f} | "
                       f"{1e3 * eager:.2f} | {c['speedup']:.2f}× | {c['rel_error']:.2g} |")
    st = report.get("stages", {})
    if st:
        planned = st.get("planner_gib", {})
        theta = f", θ in {st['theta_dtype']}" if "theta_dtype" in st else ""
        out += ["", f"Regenerate and update, transformer part, at the official micro-batch ({st['micro_batch']}"
                f"{theta}): θ_old as a LoRA branch on W0 (one forward, no grad); θ attached as the update attaches "
                "it, with its gradient checkpointing (forward, backward, AdamW step). The planner's figure counts the "
                "same parts (no text encoders, VAE, reward).", ""]
        if "error" in st:
            out.append(f"- not measured: {st['error']}")
        for stage in ("regenerate", "update"):
            if stage in st.get("peak_gib", {}):
                out.append(f"- {stage}: peak {_gib(st['peak_gib'][stage])} GiB; planner {_gib(planned.get(stage))} GiB")
    out += ["", "Relative output error (‖a − b‖ / ‖b‖, same inputs and weights):", ""]
    out += [f"- {k.replace('_vs_', ' vs ')}: {v:.4g}" for k, v in report["rel_error"].items()] or ["- none measured"]
    return "\n".join(out) + "\n"


def run_bench(out: str | Path, model: str = "flux1", device: str = "cuda", planner_gpu: str | None = None,
              **kwargs) -> dict:
    """Measure (``measure``) and write ``out``/report.json and report.md; one-line SolrlError without CUDA."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise SolrlError("solrl doctor --gpu-bench needs a CUDA GPU and this machine has none (run `solrl doctor`)")
    report = measure(model, device, **kwargs)
    if planner_gpu:
        from solrl_core.planner.gpus import get_gpu

        report["device"]["planner_gpu"] = get_gpu(planner_gpu).key
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(format_markdown(report))
    return report
