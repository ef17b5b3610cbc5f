"""A vision-language model as a reward: each image is sent with a question to an OpenAI-compatible chat endpoint (what
`vllm serve` and SGLang serve at /v1), and the answer is read as a score (solrl_core/rewards/chat_answers.py).

The calls go through the `openai` client (its timeouts, and its retries with back-off on connection errors, 408, 409,
429 and 5xx: `retries`), `concurrency` at a time. A chat model fails in ways a scorer does not: it refuses (a
`refusal`, or a `content_filter` finish) or answers something the parser cannot read. Such an answer is never scored:
it is counted, asked again (another seed, at a temperature of at least RETRY_TEMPERATURE, since greedy decoding would
repeat it) up to `answer_retries` times, each batch that needed it reported in one line, and a batch still missing a
score stops the stage in one line with the counts and an example answer (a resumed stage scores only what is missing).

The fingerprint holds what decides the scores (the served model, template, parser, scale, sampling, image size), not
the endpoint's URL nor the key: a judge moved to another server keeps its committed scores.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.excerpts import cut, one_line
from solrl_core.redaction import redact
from solrl_core.rewards.base import Reward, RewardModelSpec
from solrl_core.rewards.chat_answers import ScoreRange, answer_parser

DEFAULT_TEMPLATE = ("This image was generated for the prompt: \"{prompt}\". Rate how well it matches the prompt and how "
                    "good it looks, from 1 (worst) to 10 (best). Answer with the number only.")
DEFAULT_RANGE = (1.0, 10.0)
RETRY_TEMPERATURE = 0.7
NO_KEY = "EMPTY"  # what a server without --api-key is sent (the client needs some key; vLLM's docs do the same)
OUTCOMES = ("scored", "refused", "unparsable")


@dataclass(frozen=True)
class Answer:
    score: float | None
    outcome: str  # one of OUTCOMES
    text: str


class ChatJudge(Reward):
    """A VLM's rating of each image for its prompt, through an OpenAI-compatible chat endpoint."""

    name = "chat_judge"
    title = "VLM judge"
    summary = "a vision-language model's rating through an OpenAI-compatible chat endpoint (vLLM, SGLang)"
    needs = "a chat endpoint"
    needs_server = True
    source = "e.g. `vllm serve Qwen/Qwen2.5-VL-7B-Instruct`, then reward_models.chat_judge.endpoint"
    spec_keys = frozenset({"endpoint", "model", "template", "parser", "score_range", "temperature", "max_tokens",
                           "image_size", "api_key_env", "answer_retries", "timeout_s", "retries", "concurrency"})
    default_batch_size = 16

    @classmethod
    def load(cls, spec: RewardModelSpec | None = None) -> ChatJudge:
        return cls(spec or RewardModelSpec())

    def __init__(self, spec: RewardModelSpec):
        import openai

        if not spec.endpoint:
            raise SolrlError(f"reward_models.{self.name}.endpoint: not set; give the chat server's base URL (vLLM: "
                             "http://HOST:8000/v1)")
        super().__init__(batch_size=spec.batch_size)
        self.endpoint = spec.endpoint.rstrip("/")
        self.where = redact(self.endpoint)
        low, high = spec.score_range or DEFAULT_RANGE  # both checked with the spec (RewardModelSpec)
        self.scale = ScoreRange(float(low), float(high))
        self.parser_name = spec.parser
        self.parse = answer_parser(spec.parser, self.scale)
        self.template = spec.template or DEFAULT_TEMPLATE
        self.temperature, self.max_tokens, self.image_size = spec.temperature, spec.max_tokens, spec.image_size
        self.answer_retries, self.concurrency = spec.answer_retries, spec.concurrency
        self.counts: Counter[str] = Counter()  # every answer this judge was given, by outcome (and "asked again")
        self._client = openai.OpenAI(base_url=self.endpoint, api_key=os.environ.get(spec.api_key_env) or NO_KEY,
                                     timeout=spec.timeout_s, max_retries=spec.retries)
        self.model = self._served_model(spec.model)

    def fingerprint(self) -> str:
        return json.dumps({"name": self.name, "model": self.model, "template": self.template,
                           "parser": self.parser_name, "score_range": [self.scale.low, self.scale.high],
                           "temperature": self.temperature, "max_tokens": self.max_tokens,
                           "image_size": self.image_size, "answer_retries": self.answer_retries,
                           "batch_size": self.batch_size}, sort_keys=True)

    # ---- scoring -----------------------------------------------------------------------------------------------
    def score_batch(self, images: np.ndarray, prompts: list[str], sources: np.ndarray | None = None) -> np.ndarray:
        urls = [[image_data_url(image, self.image_size) for image in row] for row in self.shown(images, sources)]
        answers: list[Answer | None] = [None] * len(images)
        todo = list(range(len(images)))
        batch = Counter()
        for attempt in range(self.answer_retries + 1):
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                got = list(pool.map(lambda i: self._ask(urls[i], prompts[i], attempt), todo))
            for i, answer in zip(todo, got):
                answers[i] = answer
                batch[answer.outcome] += 1
            todo = [i for i in todo if answers[i].score is None]
            if not todo:
                break
            batch["asked again"] += len(todo) if attempt < self.answer_retries else 0
        self.counts.update(batch)
        failed = [answers[i] for i in todo]
        if batch["refused"] or batch["unparsable"]:
            print(f"reward {self.name}: a batch of {len(images)}: {self._tally(batch)}"
                  f"{'' if failed else '; every image scored'}", file=sys.stderr, flush=True)
        if failed:
            kinds = Counter(answer.outcome for answer in failed)
            raise SolrlError(f"reward {self.name} at {self.where}: {len(failed)} of {len(images)} answers gave no score "
                             f"after {self.answer_retries + 1} tries ({self._tally(kinds)}; e.g. "
                             f"{cut(one_line(failed[0].text))!r}); fix the template or parser, or allow more "
                             "answer_retries")
        return np.asarray([answer.score for answer in answers], dtype=np.float64)

    def shown(self, images: np.ndarray, sources: np.ndarray | None) -> list[list[np.ndarray]]:
        """The images one question shows, per row: the image alone."""
        return [[image] for image in images]

    def _ask(self, image_urls: list[str], prompt: str, attempt: int) -> Answer:
        import openai

        temperature = self.temperature if attempt == 0 else max(self.temperature, RETRY_TEMPERATURE)
        content = [*({"type": "image_url", "image_url": {"url": url}} for url in image_urls),
                   {"type": "text", "text": self.template.replace("{prompt}", prompt)}]
        try:
            response = self._client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": content}], temperature=temperature,
                max_tokens=self.max_tokens, seed=attempt)
        except openai.APIStatusError as exc:
            raise SolrlError(f"reward {self.name} at {self.where}: HTTP {exc.status_code} "
                             f"({cut(one_line(str(exc.message)))})") from None
        except openai.APIError as exc:  # connection refused, timed out: after the client's own retries
            raise SolrlError(f"reward {self.name} at {self.where}: {type(exc).__name__}: {cut(one_line(str(exc)))} "
                             "(is the chat server running there?)") from None
        choice = response.choices[0]
        text = choice.message.content or ""
        if getattr(choice.message, "refusal", None) or choice.finish_reason == "content_filter":
            return Answer(None, "refused", choice.message.refusal or text)
        score = self.parse(text)
        return Answer(score, "scored" if score is not None else "unparsable", text)

    def _served_model(self, wanted: str | None) -> str:
        """The model to ask: `wanted` if the endpoint serves it, or the endpoint's only model."""
        import openai

        try:
            served = [model.id for model in self._client.models.list()]
        except openai.APIError as exc:
            cause = f"HTTP {exc.status_code}" if isinstance(exc, openai.APIStatusError) else type(exc).__name__
            raise SolrlError(f"reward {self.name}: cannot list the models at {self.where} ({cause}); is the chat "
                             "server running there?") from None
        if wanted is None and len(served) == 1:
            return served[0]
        if wanted is None or wanted not in served:
            need = "name one as reward_models.chat_judge.model" if wanted is None else f"not {wanted!r}"
            raise SolrlError(f"reward {self.name}: {self.where} serves {', '.join(served) or 'no model'}; {need}")
        return wanted

    @staticmethod
    def _tally(counts: Counter) -> str:
        return ", ".join(f"{counts[key]} {key}" for key in (*OUTCOMES, "asked again") if counts[key])


EDIT_TEMPLATE = ("The first image was edited by the instruction: \"{prompt}\"; the second image is the result. Rate "
                 "from 1 (worst) to 10 (best) how well the result follows the instruction while keeping everything of "
                 "the first image the instruction does not ask to change. Answer with the number only.")


class ChatEditJudge(ChatJudge):
    """A VLM's rating of an edit: each question shows the source image(s), then the edited image, with the instruction
    (its template's {prompt}); the reward_models.chat_edit_judge keys are chat_judge's."""

    name = "chat_edit_judge"
    title = "VLM edit judge"
    summary = ("a vision-language model's rating of an edit (the source, then the result, with the instruction) "
               "through an OpenAI-compatible chat endpoint")
    edits = True

    def __init__(self, spec: RewardModelSpec):
        super().__init__(spec)
        self.template = spec.template or EDIT_TEMPLATE

    def shown(self, images: np.ndarray, sources: np.ndarray | None) -> list[list[np.ndarray]]:
        """Per row, the prompt's source images (the black padding of a prompt with fewer sources left out), then the
        edited image."""
        return [[*(source for source in row if source.any()), image] for image, row in zip(images, sources)]


def image_data_url(image: np.ndarray, size: int | None = None) -> str:
    """A uint8 image (H, W, 3) as a PNG data URL, its longer side resized to `size` when given."""
    from PIL import Image

    picture = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8))
    if size is not None and max(picture.size) != size:
        scale = size / max(picture.size)
        picture = picture.resize((max(1, round(picture.width * scale)), max(1, round(picture.height * scale))),
                                 Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
