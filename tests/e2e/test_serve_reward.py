"""`solrl serve-reward` as a user starts it: a process serving a reward on 127.0.0.1, which a run's scoring reaches
through `reward_models.<name>.url` with scores equal to in-process scores bit for bit, and which stops on SIGTERM
(the protocol, the retries and the errors in process: tests/unit/rewards/test_remote_reward.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from cli_processes import free_port
from repo_paths import ROOT
from reward_helpers import mixed_batch
from solrl_core.rewards.registry import clear_reward_cache, get_reward, score_images

pytestmark = pytest.mark.e2e


def test_a_served_reward_scores_a_batch_as_in_process(session_env):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "solrl", "serve-reward", "jpeg_compressibility", "--port",
                               str(port)], env=session_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1][-3000:]
            try:
                health = httpx.get(f"{url}/health").json()
                break
            except httpx.TransportError:
                time.sleep(0.2)
        images, prompts = mixed_batch()
        clear_reward_cache()
        _, per = score_images(images, prompts, {"jpeg_compressibility": 1.0},
                              models={"jpeg_compressibility": {"url": url}})
        here = get_reward("jpeg_compressibility")
        assert health["name"] == "jpeg_compressibility" and health["fingerprint"] == here.fingerprint()
        assert per["jpeg_compressibility"].tobytes() == here(images, prompts).tobytes()
    finally:
        clear_reward_cache()
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
    assert f"at {url}" in out and "reward_models: {jpeg_compressibility: {url: " in out
    assert "Traceback" not in err, err[-3000:]
