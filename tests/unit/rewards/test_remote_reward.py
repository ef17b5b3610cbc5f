"""A reward served over HTTP (solrl_core/rewards/serving.py) and scored through `reward_models.<name>.url`
(solrl_core/rewards/remote.py): the served scores equal in-process scores bit for bit, images and videos; the served
reward's fingerprint is the run's, so a stage resumed after an outage scores only its missing rows; 408/429/5xx and
refused connections are tried again, then end in one line naming the URL and the cause, never a score in place of
one; a server beyond loopback needs its token."""

from __future__ import annotations

import json

import numpy as np
import pytest

from solrl.cli.main import main
from solrl_core.errors import SolrlError
from solrl_core.rewards import remote
from solrl_core.rewards.registry import clear_reward_cache, get_reward, score_images
from solrl_core.rewards.serving import build_app
from solrl_core.rewards.tiny import sample_batch, sample_edit_batch, write_tiny_checkpoints
from solrl_core.rewards.wire import TOKEN_VARIABLE, encode_request
from solrl_core.worlds import motion

from local_servers import serving
from reward_helpers import mixed_batch


@pytest.fixture(autouse=True)
def fresh_rewards(monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    clear_reward_cache()
    yield
    clear_reward_cache()


@pytest.mark.parametrize("name", ["embedded", "jpeg_compressibility"])
def test_served_scores_equal_in_process_scores_bit_for_bit(name):
    images, prompts = sample_batch(5, 48) if name == "embedded" else mixed_batch()  # embedded: its grammar's prompts
    here = get_reward(name)
    with serving(build_app(here)) as url:
        total, per = score_images(images, prompts, {name: 1.0}, models={name: {"url": url, "batch_size": 3}})
        served = get_reward(name, {name: {"url": url, "batch_size": 3}})
    expected = here(images, prompts)
    assert per[name].tobytes() == expected.tobytes() and total.tobytes() == expected.tobytes()
    assert json.loads(served.fingerprint()) == {"name": name, "served": json.loads(here.fingerprint())}


@pytest.fixture(scope="module")
def tiny_reward_files(tmp_path_factory):
    return write_tiny_checkpoints(tmp_path_factory.mktemp("tiny_rewards"))


@pytest.mark.parametrize("name", ["imagereward", "pickscore", "clipscore"])
def test_images_are_sent_at_the_rewards_input_size_and_score_the_same_bits(tiny_reward_files, name):
    """ImageReward and PickScore begin by resizing the shortest edge with PIL's bicubic (32 px for the tiny models):
    the client does it, the server receives 32 px images, the scores are in-process's bit for bit. CLIPScore resizes
    float tensors instead: it gets the images as generated."""
    squares, prompts = sample_batch(3, 64)
    wide = np.random.default_rng(5).integers(0, 256, (2, 64, 80, 3), dtype=np.uint8)
    batches = [(squares, prompts), (wide, ["a cat", "a red circle"])]
    here = get_reward(name, {name: tiny_reward_files[name]})
    expected = [here(images, texts) for images, texts in batches]
    received = []
    scores = here.scores

    def recording(batch, batch_prompts, progress=None, sources=None):
        received.extend(image.shape for image in batch)
        return scores(batch, batch_prompts, progress, sources)

    here.scores = recording
    with serving(build_app(here)) as url:
        for (images, texts), want in zip(batches, expected, strict=True):
            _, per = score_images(images, texts, {name: 1.0}, models={name: {"url": url}})  # the same batches
            assert per[name].tobytes() == want.tobytes()
    if name == "clipscore":
        assert here.input_size is None and received == [(64, 64, 3)] * 3 + [(64, 80, 3)] * 2
    else:
        assert here.input_size == 32 and received == [(32, 32, 3)] * 3 + [(32, 40, 3)] * 2


def test_a_served_video_reward_scores_videos_as_in_process():
    prompts = motion.train_prompts()[:5]
    videos = motion.render_batch(prompts, np.random.default_rng(0))
    here = get_reward("embedded_motion")
    with serving(build_app(here)) as url:
        _, per = score_images(videos, prompts, {"embedded_motion": 1.0}, models={"embedded_motion": {"url": url}})
    assert per["embedded_motion"].tobytes() == here(videos, prompts).tobytes()


@pytest.mark.parametrize("name", ["embedded_edit", "clip_edit"])
def test_a_served_edit_reward_gets_the_sources_and_scores_as_in_process(tiny_reward_files, name):
    import httpx

    images, prompts, sources = sample_edit_batch(4, 48)
    spec = {name: tiny_reward_files.get(name, {})}
    here = get_reward(name, spec)
    expected = here(images, prompts, sources=sources)
    with serving(build_app(here)) as url:
        # requests of 3 (the sources cut with their images) where the scores cannot depend on the batch: CLIP's do
        served = get_reward(name, {name: {"url": url, **({"batch_size": 3} if name == "embedded_edit" else {})}})
        assert served.edits
        assert served.scores(images, prompts, sources=sources).tobytes() == expected.tobytes()
        with pytest.raises(SolrlError, match=f"reward {name} scores edits: it needs the prompts' source images"):
            served.scores(images, prompts)
        bare = httpx.post(f"{url}/score", content=encode_request(images, prompts))  # a client that sends none
        assert bare.status_code == 400 and bare.json()["detail"] == f"reward {name} scores edits: send each image's sources"
    with serving(build_app(get_reward("jpeg"))) as url:
        extra = httpx.post(f"{url}/score", content=encode_request(images, prompts, sources))
        assert extra.status_code == 400 and extra.json()["detail"] == "reward jpeg does not score edits: send no sources"


class Flaky:
    """An ASGI app in front of the real one: its first `failures` calls to /score answer `status`, and every call
    after the first `answers` (when given)."""

    def __init__(self, app, failures: int, status: int = 503, answers: int | None = None):
        self.app, self.failures, self.status, self.answers, self.calls = app, failures, status, answers, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/score":
            self.calls += 1
            if self.calls <= self.failures or (self.answers is not None and self.calls > self.answers):
                await send({"type": "http.response.start", "status": self.status,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"detail": "busy"}'})
                return
        await self.app(scope, receive, send)


def test_a_busy_server_is_tried_again_and_then_scores():
    images, prompts = mixed_batch()
    flaky = Flaky(build_app(get_reward("jpeg_compressibility")), failures=2)
    with serving(flaky) as url:
        _, per = score_images(images, prompts, {"jpeg_compressibility": 1.0},
                              models={"jpeg_compressibility": {"url": url, "retries": 2}})
    assert flaky.calls == 3 and per["jpeg_compressibility"].tobytes() == get_reward("jpeg_compressibility")(
        images, prompts).tobytes()


@pytest.mark.parametrize("status", [503, 429])
def test_a_server_that_stays_busy_ends_in_one_line_naming_the_url_and_the_cause(status):
    images, prompts = mixed_batch()
    flaky = Flaky(build_app(get_reward("jpeg_compressibility")), failures=100, status=status)
    with serving(flaky) as url, pytest.raises(SolrlError) as error:
        score_images(images, prompts, {"jpeg_compressibility": 1.0},
                     models={"jpeg_compressibility": {"url": url, "retries": 1, "concurrency": 1}})
    message = str(error.value)
    assert "\n" not in message and f"{url}/score" in message and f"HTTP {status} (busy)" in message
    assert "gave up after 2 tries" in message and flaky.calls == 2  # the first batch's two tries, then no more


def test_no_server_at_the_url_ends_in_one_line_when_the_reward_loads():
    with serving(build_app(get_reward("jpeg"))) as url:
        pass  # stopped: nothing answers there any more
    with pytest.raises(SolrlError, match=rf"^reward jpeg at {url}/health: ConnectError.*gave up after 1 tries"):
        get_reward("jpeg", {"jpeg": {"url": url, "retries": 0}})


def test_inputs_the_reward_refuses_end_in_one_line_at_once():
    flaky = Flaky(build_app(get_reward("embedded")), failures=0)
    with serving(flaky) as url, pytest.raises(SolrlError, match=r"HTTP 422 \(prompt 'a horse' is outside") as error:
        score_images(np.zeros((1, 32, 32, 3), np.uint8), ["a horse"], {"embedded": 1.0},
                     models={"embedded": {"url": url}})
    assert flaky.calls == 1 and "\n" not in str(error.value)  # not tried again: the reward refuses the prompt


def test_a_server_of_another_reward_is_refused():
    with serving(build_app(get_reward("jpeg"))) as url, pytest.raises(SolrlError, match="serves the reward 'jpeg'"):
        get_reward("embedded", {"embedded": {"url": url}})


def test_a_bad_request_is_a_400_with_one_line():
    import httpx

    with serving(build_app(get_reward("jpeg"))) as url:
        bad = httpx.post(f"{url}/score", content=b"not safetensors")
        short = httpx.post(f"{url}/score", content=encode_request(np.zeros((2, 8, 8, 3), np.uint8), ["one prompt"]))
    assert bad.status_code == 400 and "not a scoring request" in bad.json()["detail"]
    assert short.status_code == 400 and "one prompt each" in short.json()["detail"]


def test_a_token_server_refuses_calls_without_it_and_scores_with_it(monkeypatch):
    images, prompts = mixed_batch()
    with serving(build_app(get_reward("jpeg"), token="s3cret-token")) as url:
        with pytest.raises(SolrlError, match="HTTP 401") as error:
            get_reward("jpeg", {"jpeg": {"url": url}})
        assert "s3cret" not in str(error.value)
        monkeypatch.setenv(TOKEN_VARIABLE, "s3cret-token")
        clear_reward_cache()
        _, per = score_images(images, prompts, {"jpeg": 1.0}, models={"jpeg": {"url": url}})
    assert per["jpeg"].tobytes() == get_reward("jpeg")(images, prompts).tobytes()


def test_a_url_must_be_http():
    with pytest.raises(SolrlError, match=r"reward_models\.jpeg\.url"):
        get_reward("jpeg", {"jpeg": {"url": "ftp://example.org/reward"}})


def test_serve_reward_beyond_loopback_needs_a_token(capsys):
    assert main(["serve-reward", "jpeg", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SOLRL_REWARD_TOKEN" in err[0] and "Traceback" not in err[0]


def test_a_stage_resumed_after_an_outage_scores_only_the_missing_rows(tmp_path):
    """The pool's scores committed batch by batch (solrl_core/stages/pool_scoring.py): a server that stops answering
    after 3 batches stops the scoring in one line with those 3 committed; a server started again (elsewhere: the
    fingerprint is the reward's, not the URL's) scores the other batches only, and the scores are the in-process
    ones."""
    from solrl_core.stages.pool_scoring import RowScorer, ScoreStore

    images, prompts = mixed_batch()
    spec = {"url": None, "batch_size": 2, "retries": 1, "concurrency": 1}
    here = get_reward("jpeg_compressibility")

    def score(app) -> tuple[ScoreStore, Exception | None]:
        with serving(app) as url:
            clear_reward_cache()
            rewards = {"jpeg_compressibility": get_reward("jpeg_compressibility",
                                                          {"jpeg_compressibility": {**spec, "url": url}})}
            store = ScoreStore(len(images), rewards, tmp_path / "scores.zarr")
            scorer = RowScorer(store, rewards, prompts, np.arange(len(images)), "the pool", lambda a, b: images[a:b])
            try:
                scorer.run(len(images))
            except SolrlError as exc:
                return store, exc
        return store, None

    down = Flaky(build_app(here), failures=0, answers=3)
    store, error = score(down)
    assert error is not None and "gave up after 2 tries" in str(error) and store.committed == {
        "jpeg_compressibility": 6}
    again = Flaky(build_app(here), failures=0)
    store, error = score(again)
    assert error is None and again.calls == (len(images) - 6 + 1) // 2  # the missing batches, each once
    assert store.values["jpeg_compressibility"].tobytes() == here(images, prompts).tobytes()

