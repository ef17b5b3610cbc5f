"""Testing aids shipped with solrl (for its suite and for plug-in authors): `fake_cuda` runs GPU code paths on a CPU."""
