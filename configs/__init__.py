"""The configs that ship with solrl, as package data: the demo, bench and pools configs, the family configs, the
official presets and the parts they extend. `solrl presets` lists them; `solrl_core.config.packaged` finds them.
This package holds no code: it is a package so that a wheel installs these files beside solrl_core."""
