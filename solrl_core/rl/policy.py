"""The trained policy: two peft LoRA adapters on a frozen diffusers transformer.

``default`` holds θ (the only trainable parameters), ``old`` holds θ_old (the sampling policy), and the reference
policy is the base W0 with adapters disabled. Works for any diffusers ModelMixin with PeftAdapterMixin (SD3, FLUX,
SANA transformers).

θ and θ_old are float32 whatever the base's dtype (`MASTER_DTYPE`; AdamW's moments follow the parameters, the EMA is
kept in float32 too). peft creates adapters in the base layer's dtype, and in bf16 (8 significant bits) an AdamW step
of about lr = 3e-4 is of the order of half an ulp of a weight near 0.05: steps are rounded off or doubled, a bf16 θ
drifts from the fp32 one, and weight decay (lr·wd = 3e-8 relative) vanishes. The references keep the trainable LoRA
in fp32 too. A LoRA layer over a bf16 base still runs: peft's ``Linear.forward`` casts the layer's input to the
adapter's dtype, adds the fp32 low-rank term to the bf16 base output and casts the sum back to the base output's
dtype. Adapter files are therefore float32; files of another float dtype load too (cast on copy).

peft pitfalls handled here:
- diffusers' ``add_adapter`` activates the adapter just added, and peft's ``set_adapter`` / ``enable_adapters`` make
  the *active* adapter trainable and every other adapter frozen; ``disable_adapters`` freezes all of them. After every
  switch the flags are re-imposed: ``default`` trainable, ``old`` frozen, base frozen.
- Adapter parameters are named ``<module>.lora_A.<adapter>.weight`` in the model; the adapter-agnostic keys used for
  saving (peft's ``get_peft_model_state_dict`` format) drop the ``.<adapter>`` part.
- Targeted base weights move to ``<module>.base_layer.weight``; ``merged_state_dict`` maps them back.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from peft import LoraConfig
from peft.tuners.lora import LoraLayer
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

DEFAULT = "default"
OLD = "old"
ADAPTERS = (DEFAULT, OLD)
MASTER_DTYPE = torch.float32  # θ and θ_old, whatever the base weights' dtype (module docstring)
_INITS = {"gaussian": "gaussian", "kaiming": True}


def old_policy_eta(step: int, rate: float = 0.001, max_eta: float = 0.5) -> float:
    """η of the soft update θ_old ← η θ_old + (1 − η) θ after `step` optimizer steps."""
    return min(rate * step, max_eta)


def ema_decay(step: int, max_decay: float = 0.9) -> float:
    """Decay of the evaluation EMA of θ at optimizer step `step`."""
    return min((1 + step) / (10 + step), max_decay)


class LoraPolicy:
    """θ, θ_old and the reference on one transformer. Build with `LoraPolicy.attach`."""

    def __init__(self, transformer: torch.nn.Module, base_keys: list[str]):
        self.transformer = transformer
        self._base_keys = list(base_keys)
        self._active: str | None = DEFAULT
        self._params = {name: self._collect(name) for name in ADAPTERS}

    @classmethod
    def attach(
        cls,
        transformer: torch.nn.Module,
        targets: list[str],
        rank: int,
        alpha: float,
        init: str = "gaussian",
        seed: int = 0,
    ) -> "LoraPolicy":
        """Freeze `transformer`, add adapters ``default`` (seeded init) and ``old`` (an exact copy of it).

        `targets` are module-name suffixes as peft matches them (e.g. ``to_q``, ``to_out.0``, ``attn.qkv``);
        `init` is ``gaussian`` (A ~ N(0, 1/r), B = 0) or ``kaiming`` (peft's default); both start with ΔW = 0.
        Both adapters are `MASTER_DTYPE` (peft draws the init in fp32 and casts it to the base's dtype, so over a
        bf16 base the initial A is the bf16-rounded draw). The global torch RNG is left untouched.
        """
        if init not in _INITS:
            raise ValueError(f"unknown LoRA init {init!r}; expected one of {', '.join(_INITS)}")
        existing = set(getattr(transformer, "peft_config", {}) or {})
        if existing & set(ADAPTERS):
            raise ValueError(f"transformer already has adapter(s) {sorted(existing & set(ADAPTERS))}")
        base_keys = list(transformer.state_dict().keys())
        transformer.requires_grad_(False)

        def config() -> LoraConfig:
            return LoraConfig(
                r=rank, lora_alpha=alpha, lora_dropout=0.0, init_lora_weights=_INITS[init],
                target_modules=list(targets),
            )

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Already found a `peft_config`")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                transformer.add_adapter(config(), adapter_name=DEFAULT)
                transformer.add_adapter(config(), adapter_name=OLD)  # its init is overwritten below
        policy = cls(transformer, base_keys)
        if not policy._params[DEFAULT]:
            raise ValueError(f"LoRA targets {list(targets)} matched no module of {type(transformer).__name__}")
        with torch.no_grad():
            for p in (*policy._params[DEFAULT].values(), *policy._params[OLD].values()):
                p.data = p.data.to(MASTER_DTYPE)  # in place of the tensor: the Parameter objects stay the same
            for key, p_old in policy._params[OLD].items():
                p_old.copy_(policy._params[DEFAULT][key])
        policy._activate(DEFAULT)
        return policy

    # ----------------------------------------------------------------------------------------------- parameters
    def _lora_modules(self) -> Iterator[tuple[str, LoraLayer]]:
        for name, module in self.transformer.named_modules():
            if isinstance(module, LoraLayer):
                yield name, module

    def _collect(self, adapter_name: str) -> dict[str, torch.nn.Parameter]:
        """Adapter-agnostic key (peft's saved format) → parameter, in module order."""
        params: dict[str, torch.nn.Parameter] = {}
        for name, module in self._lora_modules():
            for layer_name in module.adapter_layer_names:
                container = getattr(module, layer_name)
                if adapter_name not in container:
                    continue
                entry = container[adapter_name]
                if isinstance(entry, torch.nn.Parameter):
                    params[f"{name}.{layer_name}"] = entry
                else:
                    for pname, p in entry.named_parameters():
                        params[f"{name}.{layer_name}.{pname}"] = p
        return params

    def named_adapter_parameters(self, adapter_name: str = DEFAULT) -> dict[str, torch.nn.Parameter]:
        """Ordered key → parameter of one adapter; keys are those of `adapter_state_dict`."""
        self._check_name(adapter_name)
        return dict(self._params[adapter_name])

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """θ: the ``default`` adapter's parameters, always in the same order."""
        return list(self._params[DEFAULT].values())

    def _enforce_grad_flags(self) -> None:
        for p in self._params[DEFAULT].values():
            p.requires_grad_(True)
        for p in self._params[OLD].values():
            p.requires_grad_(False)

    @staticmethod
    def _check_name(adapter_name: str) -> None:
        if adapter_name not in ADAPTERS:
            raise ValueError(f"unknown adapter {adapter_name!r}; expected one of {', '.join(ADAPTERS)}")

    # -------------------------------------------------------------------------------------------- activation
    @property
    def active(self) -> str | None:
        """The adapter forward passes use now, or None for the reference (adapters disabled)."""
        return self._active

    def _activate(self, adapter_name: str | None) -> None:
        if adapter_name is None:
            self.transformer.disable_adapters()
        else:
            self.transformer.set_adapter(adapter_name)
            self.transformer.enable_adapters()
        self._active = adapter_name
        self._enforce_grad_flags()

    def use(self, adapter_name: str) -> torch.nn.Module:
        """From now on forward passes use `adapter_name` (``old`` = θ_old as a LoRA branch beside W0, unmerged);
        returns the transformer, for a sampler that keeps it (the `adapter` context restores, this does not)."""
        self._check_name(adapter_name)
        self._activate(adapter_name)
        return self.transformer

    @contextmanager
    def adapter(self, adapter_name: str):
        """Forward passes inside use `adapter_name` (``default`` = θ, ``old`` = θ_old); restores on exit."""
        self._check_name(adapter_name)
        previous = self._active
        self._activate(adapter_name)
        try:
            yield self.transformer
        finally:
            self._activate(previous)

    @contextmanager
    def reference(self):
        """Forward passes inside use the frozen base W0 (adapters disabled); restores on exit."""
        previous = self._active
        self._activate(None)
        try:
            yield self.transformer
        finally:
            self._activate(previous)

    # ---------------------------------------------------------------------------------------------- updates
    @torch.no_grad()
    def soft_update_old(self, eta: float) -> None:
        """θ_old ← η·θ_old + (1 − η)·θ."""
        for key, p_old in self._params[OLD].items():
            p_old.mul_(eta).add_(self._params[DEFAULT][key], alpha=1 - eta)

    # ---------------------------------------------------------------------------------------------- saving
    def adapter_state_dict(self, adapter_name: str) -> dict[str, torch.Tensor]:
        """One adapter's weights, adapter-agnostic keys, contiguous CPU copies (ready for safetensors)."""
        self._check_name(adapter_name)
        tensors = get_peft_model_state_dict(self.transformer, adapter_name=adapter_name)
        if set(tensors) != set(self._params[adapter_name]):
            raise RuntimeError("peft's adapter state dict keys differ from the policy's adapter parameters")
        return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in tensors.items()}

    def load_adapter_state_dict(self, adapter_name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Load weights saved by `adapter_state_dict` (from either adapter) into `adapter_name`, in place; tensors
        of another float dtype (a bf16 file) are cast into the `MASTER_DTYPE` parameters."""
        self._check_name(adapter_name)
        params = self._params[adapter_name]
        missing, unexpected = set(params) - set(tensors), set(tensors) - set(params)
        if missing or unexpected:
            raise ValueError(
                f"adapter weights do not fit: {len(missing)} missing (e.g. {sorted(missing)[:1]}), "
                f"{len(unexpected)} unexpected (e.g. {sorted(unexpected)[:1]})"
            )
        for key, p in params.items():
            if tuple(tensors[key].shape) != tuple(p.shape):
                raise ValueError(f"adapter weight {key} has shape {tuple(tensors[key].shape)}, expected {tuple(p.shape)}")
        set_peft_model_state_dict(self.transformer, dict(tensors), adapter_name=adapter_name)
        if any(a is not b for a, b in zip(self._collect(adapter_name).values(), params.values())):
            raise RuntimeError("peft replaced adapter parameters while loading; optimizer references would go stale")
        if any(p.dtype != MASTER_DTYPE for p in params.values()):
            raise RuntimeError(f"peft changed the dtype of adapter {adapter_name} while loading")
        self._enforce_grad_flags()

    def lora_factors(self, adapter_name: str) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
        """Module name → (A, B, scaling) of one adapter: its layer adds scaling·B·A·x to the base output."""
        self._check_name(adapter_name)
        return {name: (module.lora_A[adapter_name].weight, module.lora_B[adapter_name].weight,
                       float(module.scaling[adapter_name]))
                for name, module in self._lora_modules() if adapter_name in module.lora_A}

    @torch.no_grad()
    def merged_weights(self, adapter_name: str, onto: torch.nn.Module | None = None) -> dict[str, torch.Tensor]:
        """Module name → W0 + ΔW(adapter) of each LoRA-targeted layer: new tensors on the layer's device in its base
        weight's dtype (the sum computed in float32), W0 itself untouched. With `onto` (a model with the same layer
        names and shapes: an explore sibling) its layers' weights W take W0's place: W + ΔW."""
        self._check_name(adapter_name)
        lora_modules = dict(self._lora_modules())
        if any(module.merged for module in lora_modules.values()):
            raise RuntimeError("some LoRA layers are merged into their base weights; unmerge them first")
        merged = {}
        for name, module in lora_modules.items():
            if adapter_name in module.lora_A:
                weight = (onto.get_submodule(name) if onto is not None else module.get_base_layer()).weight
                merged[name] = (weight.float() + module.get_delta_weight(adapter_name).float()).to(weight.dtype)
        return merged

    @torch.no_grad()
    def merged_state_dict(self, adapter_name: str) -> dict[str, torch.Tensor]:
        """The un-adapted model's state dict (original keys) with W0 + ΔW(adapter) on the LoRA-targeted layers
        (`merged_weights`).

        Loading it with ``load_state_dict`` into an adapter-free copy reproduces the forward with `adapter_name`.
        Tensors are CPU copies in the base weights' dtypes.
        """
        current = self.transformer.state_dict()
        lora_modules = {name for name, _ in self._lora_modules()}
        merged_layers = self.merged_weights(adapter_name)
        merged: dict[str, torch.Tensor] = {}
        for key in self._base_keys:
            module_name, _, leaf = key.rpartition(".")
            source = f"{module_name}.base_layer.{leaf}" if module_name in lora_modules else key
            if source not in current:
                raise RuntimeError(f"cannot find the base weight of {key} in the adapted model")
            weight = merged_layers[module_name] if leaf == "weight" and module_name in merged_layers else current[source]
            merged[key] = weight.detach().to("cpu", copy=True).contiguous()
        return merged


class EmaWeights:
    """EMA of θ for evaluation, kept in float32 beside the policy (starts as a copy of θ)."""

    def __init__(self, policy: LoraPolicy, max_decay: float = 0.9):
        self.max_decay = max_decay
        self._shadow = {
            k: p.detach().float().clone() for k, p in policy.named_adapter_parameters(DEFAULT).items()
        }

    @torch.no_grad()
    def update(self, policy: LoraPolicy, step: int) -> float:
        """ema ← d·ema + (1 − d)·θ with d = ema_decay(step); returns d."""
        decay = ema_decay(step, self.max_decay)
        for key, p in policy.named_adapter_parameters(DEFAULT).items():
            self._shadow[key].mul_(decay).add_(p.detach().float(), alpha=1 - decay)
        return decay

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The live float32 EMA tensors by key (shards, under a sharded full policy: solrl_core/rl/full_policy.py)."""
        return self._shadow

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Same keys as `LoraPolicy.adapter_state_dict`; contiguous CPU float32 copies."""
        return {k: v.to("cpu", copy=True).contiguous() for k, v in self._shadow.items()}

    def load_state_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        if set(tensors) != set(self._shadow):
            raise ValueError(f"EMA weights do not fit: expected {len(self._shadow)} keys, got {len(tensors)}")
        for key, value in tensors.items():
            if tuple(value.shape) != tuple(self._shadow[key].shape):
                raise ValueError(f"EMA weight {key} has shape {tuple(value.shape)}, expected {tuple(self._shadow[key].shape)}")
            self._shadow[key] = value.detach().float().to(self._shadow[key].device, copy=True)

    @contextmanager
    def swapped_in(self, policy: LoraPolicy):
        """Inside, the ``default`` adapter holds the EMA weights; θ is restored exactly on exit."""
        params = policy.named_adapter_parameters(DEFAULT)
        saved = {k: p.detach().clone() for k, p in params.items()}
        with torch.no_grad():
            for key, p in params.items():
                p.copy_(self._shadow[key])
        try:
            yield policy
        finally:
            with torch.no_grad():
                for key, p in params.items():
                    p.copy_(saved[key])
