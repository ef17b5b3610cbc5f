"""`solrl doctor`: what this machine can run (probe) and what it measures (GPU bench, report.json/md); the GPU
acceptance (`python -m solrl_core.doctor.acceptance`, docs/gpu.md): benches and short runs in one report."""
