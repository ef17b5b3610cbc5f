"""A VLM judge through an OpenAI-compatible chat endpoint (solrl_core/rewards/chat_judge.py), against a local stand-in
server that speaks the protocol (tests/support/chat_standin.py): answers read as scores on the judge's scale; refusals
and unparsable answers counted, asked again and reported, never scored; a busy server tried again, a missing one or a
missing model refused in one line; the key read from the environment variable the spec names and kept out of the
fingerprint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from solrl_core.errors import SolrlError
from solrl_core.rewards.chat_answers import ScoreRange, answer_parser
from solrl_core.rewards.chat_judge import DEFAULT_TEMPLATE, ChatJudge
from solrl_core.rewards.registry import clear_reward_cache, get_reward, parse_reward_models, score_images

from chat_standin import MODEL, ChatStandIn, expected_brightness_scores
from local_servers import serving
from reward_helpers import mixed_batch


@pytest.fixture(autouse=True)
def fresh_rewards(monkeypatch):
    monkeypatch.delenv("SOLRL_JUDGE_API_KEY", raising=False)
    clear_reward_cache()
    yield
    clear_reward_cache()


def judge(url: str, **spec) -> ChatJudge:
    return get_reward("chat_judge", {"chat_judge": {"endpoint": f"{url}/v1", **spec}})


def test_the_judge_scores_each_image_by_the_answer_on_its_scale():
    images, prompts = mixed_batch()
    standin = ChatStandIn()
    with serving(standin.app()) as url:
        total, per = score_images(images, prompts, {"chat_judge": 1.0},
                                  models={"chat_judge": {"endpoint": f"{url}/v1", "batch_size": 3}})
    assert per["chat_judge"].tolist() == expected_brightness_scores(images).tolist()
    assert total.tolist() == per["chat_judge"].tolist()
    assert len(standin.requests) == len(images)
    assert {(r["model"], r["temperature"], r["max_tokens"], r["seed"]) for r in standin.requests} == {(MODEL, 0.0, 16, 0)}
    questions = sorted(part["text"] for r in standin.requests for part in r["messages"][0]["content"]
                       if part["type"] == "text")
    assert questions == sorted(DEFAULT_TEMPLATE.replace("{prompt}", prompt) for prompt in prompts)


def test_images_go_at_the_size_asked_and_the_fingerprint_holds_what_decides_the_scores():
    images, prompts = mixed_batch(40)
    seen = []
    standin = ChatStandIn(answer=lambda image, question, body: seen.append(image.shape) or "5")
    with serving(standin.app()) as url:
        reward = judge(url, image_size=24, template="Rate {prompt}", parser="number", score_range=[0, 10])
        scores = reward(images[:2], prompts[:2])
    assert seen == [(24, 24, 3)] * 2 and scores.tolist() == [0.5, 0.5]
    printed = json.loads(reward.fingerprint())
    assert printed["model"] == MODEL and printed["template"] == "Rate {prompt}" and printed["image_size"] == 24
    assert url not in reward.fingerprint()


def test_answers_without_a_score_are_asked_again_and_reported(capsys):
    images, prompts = mixed_batch()
    bright = np.median([image.mean() for image in images])

    def shy(image, question, body):  # greedy answers are refusals (bright images) or garbage; sampled ones a rating
        if body["temperature"] > 0:
            return "7"
        return None if image.mean() > bright else "a lovely picture"

    standin = ChatStandIn(answer=shy)
    with serving(standin.app()) as url:
        reward = judge(url, batch_size=64)
        scores = reward(images, prompts)
    assert scores.tolist() == [6 / 9] * len(images)
    again = [r for r in standin.requests if r["temperature"] > 0]
    assert len(again) == len(images) and {r["seed"] for r in again} == {1}  # every first answer failed
    refused = sum(image.mean() > bright for image in images)
    assert reward.counts == {"scored": len(images), "refused": refused, "unparsable": len(images) - refused,
                             "asked again": len(images)}
    report = capsys.readouterr().err.strip().splitlines()
    assert report == [f"reward chat_judge: a batch of {len(images)}: {len(images)} scored, {refused} refused, "
                      f"{len(images) - refused} unparsable, {len(images)} asked again; every image scored"]


@pytest.mark.parametrize("answer, kind", [("I would rather not say", "unparsable"), ("42", "unparsable"),
                                          (None, "refused")])
def test_a_judge_that_never_gives_a_score_stops_in_one_line_never_a_zero(answer, kind):
    images, prompts = mixed_batch()
    standin = ChatStandIn(answer=lambda image, question, body: answer)
    with serving(standin.app()) as url, pytest.raises(SolrlError) as error:
        score_images(images[:3], prompts[:3], {"chat_judge": 1.0},
                     models={"chat_judge": {"endpoint": f"{url}/v1", "answer_retries": 1}})
    message = str(error.value)
    assert "\n" not in message and f"at {url}/v1: 3 of 3 answers gave no score after 2 tries" in message
    assert f"(3 {kind}; e.g. " in message and len(standin.requests) == 6


def test_a_busy_server_is_tried_again_then_answers():
    images, prompts = mixed_batch()
    standin = ChatStandIn(fail_first=2, fail_status=503)
    with serving(standin.app()) as url:
        scores = judge(url, retries=2)(images[:1], prompts[:1])
    assert scores.tolist() == expected_brightness_scores(images[:1]).tolist() and len(standin.requests) == 3


def test_a_server_that_stays_busy_ends_in_one_line_naming_it():
    images, prompts = mixed_batch()
    standin = ChatStandIn(fail_first=100, fail_status=503)
    with serving(standin.app()) as url, pytest.raises(SolrlError) as error:
        judge(url, retries=1)(images[:1], prompts[:1])
    assert str(error.value).startswith(f"reward chat_judge at {url}/v1: HTTP 503") and "\n" not in str(error.value)
    assert len(standin.requests) == 2


def test_no_server_or_a_model_it_does_not_serve_is_refused_at_load():
    with serving(ChatStandIn().app()) as url:
        pass  # stopped: nothing listens there now
    with pytest.raises(SolrlError, match=r"cannot list the models at .*; is the chat server running there\?"):
        judge(url, retries=0)
    with serving(ChatStandIn(models=("a-vl", "b-vl")).app()) as url:
        with pytest.raises(SolrlError, match="serves a-vl, b-vl; name one as reward_models.chat_judge.model"):
            judge(url)
        with pytest.raises(SolrlError, match="serves a-vl, b-vl; not 'c-vl'"):
            judge(url, model="c-vl")
        assert judge(url, model="b-vl").model == "b-vl"


def test_the_key_comes_from_the_variable_the_spec_names(monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-s3cret")
    headers = []
    standin = ChatStandIn()
    app = standin.app()

    @app.middleware("http")
    async def keep(request, call_next):
        headers.append(request.headers.get("authorization"))
        return await call_next(request)

    images, prompts = mixed_batch()
    with serving(app) as url:
        reward = judge(url, api_key_env="MY_JUDGE_KEY")
        reward(images[:1], prompts[:1])
    assert set(headers) == {"Bearer sk-s3cret"} and "s3cret" not in reward.fingerprint()


def test_an_endpoint_is_required():
    with pytest.raises(SolrlError, match="reward_models.chat_judge.endpoint: not set"):
        get_reward("chat_judge")


@pytest.mark.parametrize("parser, answer, score", [
    ("number", "8", 7 / 9), ("number", "Score: 8/10", 7 / 9), ("number", "10.0", 1.0), ("number", "0", None),
    ("number", "eleven", None), ("yes_no", "Yes.", 1.0), ("yes_no", " no, it is not", 0.0), ("yes_no", "maybe", None),
    ("regex:final score:\\s*([0-9.]+)", "It is red... Final score: 4", 3 / 9), ("regex:final score:\\s*([0-9.]+)", "4",
                                                                                None)])
def test_parsers_read_an_answer_or_give_none(parser, answer, score):
    assert answer_parser(parser, ScoreRange(1.0, 10.0))(answer) == score


@pytest.mark.parametrize("spec, message", [
    ({"parser": "stars"}, "parser: unknown parser 'stars' (known: number, yes_no, regex:PATTERN)"),
    ({"parser": "regex:score"}, "the pattern needs exactly one group"),
    ({"score_range": [10, 1]}, "score_range: needs [low, high] with low < high"),
    ({"endpoint": "localhost:8000"}, "endpoint: String should match pattern"),
    ({"api_key_env": "sk-abc123"}, "api_key_env: String should match pattern")])
def test_a_bad_judge_spec_is_refused_in_one_line(spec, message):
    with pytest.raises(SolrlError, match="^reward_models.chat_judge.") as error:
        parse_reward_models({"chat_judge": spec})
    assert message in str(error.value) and "\n" not in str(error.value)
