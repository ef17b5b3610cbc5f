"""A stand-in for an OpenAI-compatible chat server (what `vllm serve` answers at /v1): GET /v1/models and POST
/v1/chat/completions with an image attached, answered by a function of the image and the question, or scripted to
fail (a status for the first calls, refusals, unparsable answers). It records every request it was sent."""

from __future__ import annotations

import base64
import io
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from PIL import Image

MODEL = "standin-vl"


def brightness_rating(image: np.ndarray, question: str, body: dict) -> str:
    """An answer on the judge's default 1-10 scale: brighter images rate higher."""
    return str(1 + round(9 * float(image.mean()) / 255))


def expected_brightness_scores(images: np.ndarray) -> np.ndarray:
    """What the judge should read from `brightness_rating` answers: (rating - 1) / 9."""
    return np.array([(round(9 * float(image.mean()) / 255)) / 9 for image in images], dtype=np.float64)


@dataclass
class ChatStandIn:
    """answer(image, question, request body) gives the text of an answer; a `None` answer is a refusal. `fail_first` calls of
    /v1/chat/completions answer with `fail_status` instead."""

    answer: Callable[[np.ndarray, str, dict], str | None] = brightness_rating
    models: tuple[str, ...] = (MODEL,)
    fail_first: int = 0
    fail_status: int = 503
    requests: list[dict] = field(default_factory=list)
    calls: itertools.count = field(default_factory=itertools.count)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        def models() -> dict:
            return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "test"}
                                               for name in self.models]}

        @app.post("/v1/chat/completions")
        async def complete(request: Request) -> dict:
            body = await request.json()
            with self.lock:
                call = next(self.calls)
                self.requests.append(body)
            if call < self.fail_first:
                raise HTTPException(status_code=self.fail_status, detail="the model is loading")
            if body["model"] not in self.models:
                raise HTTPException(status_code=404, detail=f"model {body['model']} does not exist")
            image, question = _image_and_question(body["messages"])
            text = self.answer(image, question, body)
            message = ({"role": "assistant", "content": None, "refusal": "I can't help with that."} if text is None
                       else {"role": "assistant", "content": text})
            return {"id": f"chat-{call}", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

        return app


def _image_and_question(messages: list[dict]) -> tuple[np.ndarray, str]:
    parts = messages[-1]["content"]
    url = next(part["image_url"]["url"] for part in parts if part["type"] == "image_url")
    question = next(part["text"] for part in parts if part["type"] == "text")
    png = base64.b64decode(url.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")), question
