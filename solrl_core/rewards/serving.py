"""Any registered reward served over HTTP (`solrl serve-reward`), on FastAPI and uvicorn: the libraries solrl already
runs for Prefect's server, so serving adds no package to the install (LitServe, the other candidate, would).

GET  /health  {"status": "ok", "name", "solrl" (the server's version), "fingerprint" (the loaded reward's: files,
              batch size, device, dtype), "batch_size", "takes_videos", "edits" (it scores edits: requests carry
              their sources), "input_size" (the shortest edge clients downsize images to, where that is the
              reward's own first step: Reward.input_size; else null)}
POST /score   a safetensors body (solrl_core/rewards/wire.py) -> {"scores", "fingerprint"}

The reward scores a request in its own batches (`Reward.scores`), one request at a time (a lock: one model on one
device). Given a token, every call must carry `Authorization: Bearer <token>` (compared in constant time); the token
is never logged. A malformed request is a 400, inputs the reward refuses (a prompt outside its grammar, say) a 422 (not
tried again), any other failure of the reward a 500 (tried again), each with a one-line `detail`.
"""

from __future__ import annotations

import hmac
import threading

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from solrl_core import __version__
from solrl_core.errors import SolrlError
from solrl_core.excerpts import one_line
from solrl_core.rewards.base import Reward
from solrl_core.rewards.wire import decode_request


def build_app(reward: Reward, token: str | None = None):
    """The FastAPI app serving `reward`."""
    fingerprint = reward.fingerprint()  # the loaded reward's, fixed while it is served
    health = {"status": "ok", "name": reward.name, "solrl": __version__, "fingerprint": fingerprint,
              "batch_size": reward.batch_size, "takes_videos": reward.takes_videos, "edits": reward.edits,
              "input_size": reward.input_size}
    app = FastAPI(title=f"solrl reward {reward.name}", version=__version__, docs_url=None, redoc_url=None)
    lock = threading.Lock()

    def authorised(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(status_code=401, detail="this reward server needs its bearer token "
                                "(SOLRL_REWARD_TOKEN on the client)")

    @app.get("/health", dependencies=[Depends(authorised)])
    def get_health() -> dict:
        return health

    def score(body: bytes) -> dict:
        try:
            images, prompts, sources = decode_request(body)
        except SolrlError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        if (sources is not None) != reward.edits:
            raise HTTPException(status_code=400, detail=(
                f"reward {reward.name} scores edits: send each image's sources" if reward.edits
                else f"reward {reward.name} does not score edits: send no sources"))
        with lock:
            try:
                scores = reward.scores(images, prompts, progress=False, sources=sources)
            except (SolrlError, ValueError) as exc:  # the inputs are what it refuses: asking again will not help
                raise HTTPException(status_code=422, detail=one_line(str(exc))) from None
            except Exception as exc:  # noqa: BLE001 - the client gets the reward's failure in one line
                raise HTTPException(status_code=500, detail=one_line(f"{type(exc).__name__}: {exc}")) from None
        return {"scores": [float(s) for s in scores], "fingerprint": fingerprint}

    @app.post("/score", dependencies=[Depends(authorised)])
    async def post_score(request: Request) -> dict:
        return await run_in_threadpool(score, await request.body())

    return app
