"""`solrl doctor`: what this machine can run (probe) and what it measures (GPU bench, report.json/md)."""
