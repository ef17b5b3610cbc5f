"""RL pieces of Sol-RL: seed selection, advantages, the DiffusionNFT loss, ranking fidelity, the LoRA policy.

Import the submodules directly (``from solrl_core.rl.nft_loss import nft_loss``); this package file stays empty of
imports so that the light modules do not pull in diffusers/peft.
"""
