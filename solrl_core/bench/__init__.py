"""The benchmark: the four families side by side on the same prompts, seeds and iteration count, and its report."""
