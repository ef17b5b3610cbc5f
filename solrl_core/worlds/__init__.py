"""The embedded worlds: procedural images of shapes (`shapes`) and videos of them moving (`motion`), their prompts and
how to render one. The embedded models learn them (solrl_core/models/embedded/), the programmatic rewards score
against them (solrl_core/rewards/), the built-in prompt sets list them (solrl_core/prompts.py)."""
