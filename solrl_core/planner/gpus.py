"""Published dense tensor-core throughput of the GPUs the planner knows, per precision.

All figures are peak **dense** TFLOPS (no 2:4 structured sparsity: vendor headline numbers "with sparsity" are
halved), per GPU, at the tensor-core path a training/inference framework uses (BF16 with FP32 accumulate). ``None``
means the precision has no native tensor-core path on that GPU: NVFP4 needs Blackwell (sm_100/sm_120), FP8 needs
Ada/Hopper or newer. Sources are named per entry; where sources disagree the comment says so.

A stated utilisation (``DEFAULT_UTILISATION``) turns peak into sustained throughput. It is one assumed number for
every GPU and precision — configurable, never fitted (see docs/planner.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solrl_core.errors import SolrlError

DEFAULT_UTILISATION = 0.4
"""Assumed sustained fraction of peak dense throughput (model FLOPs utilisation), every GPU and precision."""

PRECISIONS = ("bf16", "fp8", "nvfp4")


@dataclass(frozen=True)
class GPU:
    """One GPU: peak dense TFLOPS per precision (None = no native tensor-core support) and its memory per GPU as the
    datasheet gives it (in GB; taken as GiB, which is what the memory stacks hold: the driver reports a little less
    to a process, the CUDA context takes its share: fits.MARGIN_GIB)."""

    key: str
    title: str
    bf16: float
    fp8: float | None
    nvfp4: float | None
    source: str
    note: str = ""
    memory_gib: float = field(kw_only=True)

    def tflops(self, precision: str) -> float | None:
        if precision not in PRECISIONS:
            raise SolrlError(f"unknown precision '{precision}'; known: {', '.join(PRECISIONS)}")
        return getattr(self, precision)

    def native(self, precision: str) -> bool:
        return self.tflops(precision) is not None


GPUS: dict[str, GPU] = {
    g.key: g
    for g in (
        # NVIDIA DGX/HGX B200 datasheet: 72 PFLOPS FP8 and 144 PFLOPS FP4 per 8-GPU system, both "with sparsity"
        # -> per GPU dense 4.5 PF FP8, 9 PF FP4; BF16 2.25 PF dense (4.5 sparse). HGX B200 at 1000 W.
        GPU("b200", "NVIDIA B200 (HGX, 1000 W)", 2250.0, 4500.0, 9000.0,
            "NVIDIA DGX/HGX B200 datasheet (sparse figures halved)", memory_gib=180),
        # NVIDIA GB200 NVL72 datasheet: 1,440 PF FP4, 720 PF FP8, 360 PF BF16 per 72-GPU rack, with sparsity
        # -> per GPU dense 10 / 5 / 2.5 PF (B200 at 1200 W in the Grace superchip).
        GPU("gb200", "NVIDIA GB200 (per GPU, NVL72)", 2500.0, 5000.0, 10000.0,
            "NVIDIA GB200 NVL72 datasheet (rack / 72, sparse figures halved)", memory_gib=186),
        # NVIDIA HGX B300 (Blackwell Ultra): 144 PF FP4 with sparsity / 108 PF dense per 8 GPUs -> 13.5 PF dense
        # NVFP4; FP8 and BF16 as B200 (72 PF FP8, 36 PF BF16 sparse per 8 GPUs). Secondary sources list 13-14 PF.
        GPU("b300", "NVIDIA B300 (HGX, Blackwell Ultra)", 2250.0, 4500.0, 13500.0,
            "NVIDIA HGX B300 specifications (per 8-GPU board / 8, sparse figures halved)",
            "third-party tables give 13-14 PF dense NVFP4", memory_gib=288),
        # NVIDIA GB300 NVL72 datasheet: FP4 1,440 PF sparse / 1,080 PF dense, FP8 720 PF, BF16 360 PF (sparse)
        # per 72 GPUs -> 15 / 5 / 2.5 PF dense per GPU.
        GPU("gb300", "NVIDIA GB300 (per GPU, NVL72)", 2500.0, 5000.0, 15000.0,
            "NVIDIA GB300 NVL72 datasheet (rack / 72, sparse figures halved)", memory_gib=288),
        # NVIDIA H100 SXM datasheet: BF16 1,979 TF, FP8 3,958 TF, both with sparsity -> 989.4 / 1978.9 dense.
        GPU("h100", "NVIDIA H100 SXM", 989.4, 1978.9, None, "NVIDIA H100 datasheet (SXM, sparse figures halved)",
            memory_gib=80),
        # NVIDIA H200 datasheet: same tensor throughput as H100 SXM (same GH100 die, more/faster HBM).
        GPU("h200", "NVIDIA H200 SXM", 989.4, 1978.9, None, "NVIDIA H200 datasheet (SXM, sparse figures halved)",
            memory_gib=141),
        # NVIDIA A100 datasheet: BF16 312 TF dense (624 with sparsity); no FP8/FP4 tensor cores.
        GPU("a100", "NVIDIA A100 80GB SXM", 312.0, None, None, "NVIDIA A100 datasheet", memory_gib=80),
        # NVIDIA RTX PRO 6000 Blackwell (600 W Workstation/Server editions): 4,000 AI TOPS FP4 with sparsity;
        # dense 2,015 TF FP4, 1,007.6 TF FP8, 503.8 TF BF16 (full-rate FP32 accumulate on the professional card).
        GPU("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell (600 W)", 503.8, 1007.6, 2015.0,
            "NVIDIA RTX PRO 6000 Blackwell datasheet / RTX Blackwell architecture whitepaper (dense)",
            memory_gib=96),
        # NVIDIA GeForce RTX 5090: 3,352 AI TOPS FP4 with sparsity -> 1,676 TF dense FP4. GeForce runs FP16/BF16 and
        # FP8 with FP32 accumulate at half the FP16-accumulate rate (419 / 838 TF dense with FP16 accumulate):
        # 209.5 TF BF16, 419 TF FP8 here, the rates a BF16-accumulating-in-FP32 training stack sees.
        GPU("rtx-5090", "NVIDIA GeForce RTX 5090", 209.5, 419.0, 1676.0,
            "NVIDIA RTX Blackwell architecture whitepaper (dense, FP32 accumulate)",
            "FP16-accumulate rates are 2x the BF16/FP8 figures", memory_gib=32),
        # NVIDIA L40S datasheet: BF16 362.05 TF dense (733 sparse), FP8 733 TF dense (1,466 sparse); no FP4.
        GPU("l40s", "NVIDIA L40S", 362.05, 733.0, None, "NVIDIA L40S datasheet", memory_gib=48),
    )
}

GPU_ALIASES = {
    "b200-hgx": "b200",
    "h100-sxm": "h100",
    "h200-sxm": "h200",
    "a100-80gb": "a100",
    "rtx-pro-6000-blackwell": "rtx-pro-6000",
    "rtxpro6000": "rtx-pro-6000",
    "5090": "rtx-5090",
    "rtx5090": "rtx-5090",
}

PAPER_GPU = "b200"
"""The GPU assumed for the paper's measurements (not stated there as far as docs/method.md says; it is a Blackwell
NVFP4 paper and 8 GPUs per node, so an 8 x B200 HGX node is assumed)."""


def get_gpu(name: str) -> GPU:
    """The GPU called ``name`` (case-insensitive, ``_``/space = ``-``); SolrlError listing the known names."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = GPU_ALIASES.get(key, key)
    if key not in GPUS:
        raise SolrlError(f"unknown GPU '{name}'; known: {', '.join(GPUS)}")
    return GPUS[key]


def gpu_table_markdown() -> str:
    """The GPU table as Markdown (peak dense TFLOPS per precision, source)."""
    out = ["| GPU | key | BF16 | FP8 | NVFP4 | memory, GB | source |", "|---|---|---:|---:|---:|---:|---|"]
    fmt = lambda x: "–" if x is None else f"{x:,.0f}"  # noqa: E731
    for g in GPUS.values():
        note = f" ({g.note})" if g.note else ""
        out.append(f"| {g.title} | `{g.key}` | {fmt(g.bf16)} | {fmt(g.fp8)} | {fmt(g.nvfp4)} | {g.memory_gib:g} | "
                   f"{g.source}{note} |")
    return "\n".join(out)
