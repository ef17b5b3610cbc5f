"""RL pieces of Sol-RL: the objectives (DiffusionNFT, Flow-GRPO) and their losses, seed selection, advantages,
ranking fidelity, the LoRA policy.

Import the submodules directly (``from solrl_core.rl.nft_loss import nft_loss``); this package file stays empty of
imports so that the light modules do not pull in diffusers/peft.
"""
