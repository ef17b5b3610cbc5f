"""The stages of one RL iteration: each a function from artifacts in the run directory to an artifact."""
