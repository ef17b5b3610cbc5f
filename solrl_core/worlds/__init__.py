"""The embedded worlds: procedural images of shapes (`shapes`), videos of them moving (`motion`) and edits of them
(`edits`: a source scene, an instruction, the target scene), their prompts and how to render one. The embedded models
learn them (solrl_core/models/embedded/), the programmatic rewards score against them (solrl_core/rewards/; edits:
rewards/embedded_edit.py), the built-in prompt sets list them (solrl_core/prompts.py)."""
