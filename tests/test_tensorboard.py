"""logger=tensorboard: the training and evaluation curves, the final evaluation's returns as
a histogram and its episode video, read back from the event files with TensorBoard's own
reader."""

from __future__ import annotations

import json

import pytest

from rs_lightning.app.train import run

pytest.importorskip("tensorboard")


def test_a_tensorboard_run_holds_its_curves_and_the_final_return_histogram(compose, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = compose(["agent=dqn", "debug=quick", "logger=tensorboard", "callbacks.progress_bar=false",
                   "trainer.max_steps=100", "trainer.log_every_n_steps=25",
                   "evaluation.every_n_steps=50", "evaluation.episodes=50",
                   "evaluation.episodes_during_training=20"])
    summary = run(cfg, tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"),
                              size_guidance={"histograms": 0, "images": 0})
    events.Reload()
    scalars = events.Tags()["scalars"]
    for tag in ("train/loss", "train/epsilon", "eval/utility", "eval/final_expectation"):
        assert tag in scalars, scalars
    assert [e.step for e in events.Scalars("train/loss")] == [25, 50, 75, 100]
    assert [e.step for e in events.Scalars("eval/utility")][:2] == [50, 100]
    (final,) = events.Scalars("eval/final_expectation")
    assert final.step == 100 and final.value == pytest.approx(summary["expectation"], rel=1e-6)
    (histogram,) = events.Histograms("eval/final_returns")
    stored = json.loads((tmp_path / "eval.json").read_text())["return_histogram"]
    assert histogram.histogram_value.num == 50
    assert list(histogram.histogram_value.bucket) == stored["counts"]
    assert histogram.histogram_value.sum == pytest.approx(50 * summary["expectation"])
    assert "eval/summary/text_summary" in events.Tags()["tensors"]  # the text table
    assert "figures/distributions" in events.Tags()["images"]
    # logger.video (the default): the episode's GIF, byte for byte, as an animated image
    (episode,) = events.Images("eval/episode")
    gif = (tmp_path / "episode.gif").read_bytes()
    assert episode.step == 100 and episode.encoded_image_string == gif
    assert gif[:4] == b"GIF8" and (episode.width, episode.height) == (192, 192)


def test_tensorboard_is_one_of_the_backends_a_bad_value_names(compose):
    from rs_lightning.config.schema import validate
    from rs_lightning.errors import ConfigError

    with pytest.raises(ConfigError, match="tensorboard"):
        validate(compose(["logger.backend=tensorbord"]))
