"""A reward scored by a reward server (`solrl serve-reward`, solrl_core/rewards/serving.py) instead of in this process:
what `reward_models.<name>.url` asks for, for any registered or plug-in reward.

At load the server's /health is asked for its reward's name and fingerprint: the name must be the config's, and the
fingerprint (the server's reward: files, batch size, device, dtype) becomes this reward's, so a stage's committed
scores are kept on resume only while the same scorer answers (solrl_core/stages/pool_scoring.py), and a scorer that
changes behind the URL mid-stage stops the stage. Images larger than the served reward's input size (the shortest
edge its own preprocessing first resizes to, /health's "input_size") are resized to it here, as that step would, so
the server receives and decodes less and scores the same bits. Scoring sends `batch_size` images a request (the
server's own batch size unless the spec sets one), at most `concurrency` requests at a time, each within `timeout_s`;
a connection error, a timeout, or a 408, 429 or 5xx answer is tried again after a back-off (doubling from BACKOFF_S,
or the server's Retry-After) up to `retries` more times, then the stage stops with one line naming the URL and the
cause. Never a zero, a NaN or a partial batch in place of a score.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.excerpts import cut, one_line
from solrl_core.rewards.base import Reward, RewardModelSpec
from solrl_core.rewards.preprocess import resize_shortest_pil
from solrl_core.rewards.wire import MEDIA_TYPE, TOKEN_VARIABLE, encode_request

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0


class RemoteReward(Reward):
    """The reward `name` as the server at `spec.url` scores it."""

    summary = "a reward scored by `solrl serve-reward` at reward_models.<name>.url"

    def __init__(self, name: str, spec: RewardModelSpec):
        self.name = name
        self.url = spec.url.rstrip("/")
        self.retries = spec.retries
        self.concurrency = spec.concurrency
        token = os.environ.get(TOKEN_VARIABLE)
        self._client = httpx.Client(timeout=spec.timeout_s, headers={"authorization": f"Bearer {token}"} if token
                                    else {}, limits=httpx.Limits(max_connections=spec.concurrency))
        served = self._call("GET", "/health").json()
        if served.get("name") != name:
            raise SolrlError(f"reward_models.{name}.url: {self.url} serves the reward {served.get('name')!r}, not "
                             f"{name!r}; point it at a `solrl serve-reward {name}`")
        self.served_fingerprint = str(served["fingerprint"])
        self.takes_videos = bool(served.get("takes_videos", False))
        self.edits = bool(served.get("edits", False))
        self.input_size = served.get("input_size")
        super().__init__(batch_size=spec.batch_size or int(served["batch_size"]))
        try:
            as_served = json.loads(self.served_fingerprint)
        except ValueError:  # a plug-in's own form
            as_served = self.served_fingerprint
        # the served reward's, not this client's: where it is served from does not change its scores
        self._fingerprint = json.dumps({"name": self.name, "served": as_served}, sort_keys=True)

    def fingerprint(self) -> str:
        return self._fingerprint

    def scores(self, images: np.ndarray, prompts: Sequence[str], progress: bool | None = None,
               sources: np.ndarray | None = None) -> np.ndarray:
        """The server's scores, `concurrency` batches in flight; a reward that scores edits is sent each image's
        sources beside it (at their own size: the served reward brings them to the image's)."""
        if self.edits and sources is None:
            raise SolrlError(f"reward {self.name} scores edits: it needs the prompts' source images (a JSONL prompt "
                             "set whose lines have \"images\", and an editing model)")
        images = np.asarray(images)
        if images.ndim == 5 and not self.takes_videos:  # frames picked here, as in process
            return self.frame_scores(images, prompts, progress)
        prompts = [str(p) for p in prompts]
        starts = list(range(0, len(images), self.batch_size))
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            out = list(pool.map(lambda start: self.score_batch(
                images[start:start + self.batch_size], prompts[start:start + self.batch_size],
                None if sources is None else np.asarray(sources[start:start + self.batch_size])), starts))
        return np.concatenate(out) if out else np.zeros(0, np.float64)

    def score_batch(self, images: np.ndarray, prompts: list[str], sources: np.ndarray | None = None) -> np.ndarray:
        answer = self._call("POST", "/score", content=encode_request(self.sent(images), prompts,
                                                                     sources if self.edits else None),
                            headers={"content-type": MEDIA_TYPE}).json()
        if answer.get("fingerprint") != self.served_fingerprint:
            raise SolrlError(f"reward {self.name} at {self.url}: the served reward changed while scoring (its "
                             "fingerprint differs from the one at the stage's start); run the stage again")
        scores = np.asarray(answer.get("scores"), dtype=np.float64)
        if scores.shape != (len(images),):
            raise SolrlError(f"reward {self.name} at {self.url}: {scores.size} scores for {len(images)} images")
        return scores

    def sent(self, images: np.ndarray) -> np.ndarray:
        """`images` as they are sent: at the served reward's input size where they are larger (a smaller image is
        sent as it is: the reward enlarges it itself)."""
        size = self.input_size
        if size is None or images.ndim != 4 or min(images.shape[1:3]) <= size:
            return images
        return np.stack([resize_shortest_pil(image, int(size)) for image in images])

    def _call(self, method: str, path: str, **kwargs):
        """The server's answer to one request, tried again on what passes (connection, timeout, 408/429/5xx)."""
        cause = ""
        for attempt in range(self.retries + 1):
            wait = min(BACKOFF_S * 2 ** attempt, MAX_BACKOFF_S)
            try:
                response = self._client.request(method, self.url + path, **kwargs)
            except httpx.TransportError as exc:  # refused, reset, timed out
                cause = one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            else:
                if response.status_code < 400:
                    return response
                cause = f"HTTP {response.status_code}" + _detail(response)
                if response.status_code not in RETRY_STATUS:
                    raise SolrlError(f"reward {self.name} at {self.url}{path}: {cause}")
                wait = _retry_after(response, wait)
            if attempt < self.retries:
                time.sleep(wait)
        raise SolrlError(f"reward {self.name} at {self.url}{path}: {cause} (gave up after {self.retries + 1} tries; "
                         f"is `solrl serve-reward {self.name}` running there?)")


def _detail(response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    return f" ({cut(one_line(str(detail)))})" if detail else ""


def _retry_after(response, default: float) -> float:
    try:
        return min(max(float(response.headers.get("retry-after", default)), 0.0), MAX_BACKOFF_S)
    except ValueError:
        return default
