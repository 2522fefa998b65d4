"""The config reference page is generated from conf/ and the schema's checks, and current."""

from __future__ import annotations

from rs_lightning.app.config_reference import PAGE, accepted_values, main, render, yaml_keys
from tests.conftest import CONF, ROOT


def test_the_committed_page_is_what_conf_gives():
    # Stale after a change to conf/ or to the schema's checks: run
    # `rs-lightning config-reference` and commit docs/reference/config.md.
    assert (ROOT / PAGE).read_text() == render()
    assert main(["--check", "--out", str(ROOT / PAGE)]) == 0


def test_every_key_of_the_default_config_is_on_the_page(compose):
    from omegaconf import OmegaConf

    page = render()
    flat = OmegaConf.to_container(compose([]), resolve=False)

    def leaves(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict) and value:
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    missing = [key for key in leaves(flat) if f"`{key}`" not in page]
    assert not missing, missing


def test_comments_defaults_and_the_schemas_words_reach_the_page(tmp_path):
    keys = {k.path: k for k in yaml_keys(CONF / "train.yaml")}
    assert keys["learning.lr"].default == "0.0001" and keys["learning.lr"].kind == "number"
    assert keys["learning.target_update_period"].meaning == (
        "gradient updates between target-network copies")
    assert keys["alpha"].meaning.startswith("Utility U = alpha * E[Z]")
    accepted = accepted_values()
    assert accepted["alpha"] == ["in [0, 1]"]
    assert accepted["learning.on_non_finite"] == ["one of stop, skip"]
    assert "a positive integer" in accepted["learning.batch_size"]  # a key named in a loop
    # A stale page is refused with one line.
    stale = tmp_path / "config.md"
    stale.write_text(render().replace("`learning.lr`", "`learning.rate`"))
    assert main(["--check", "--out", str(stale)]) == 1


def test_a_null_default_has_the_type_the_schema_declares():
    # The YAML's null says nothing of the type: the schema's annotation does.
    keys = {k.path: k for k in yaml_keys(CONF / "train.yaml")}
    assert keys["ckpt_path"].kind == "text or null"  # Optional[str]
    assert keys["risk_conditioning.settings_per_batch"].kind == "integer or null"  # its class
    tqc = {k.path: k for k in yaml_keys(CONF / "agent" / "tqc.yaml", "agent.")}
    assert tqc["agent.target_entropy"].kind == "number or null"  # the agent's config class
    assert tqc["agent.kappa"].kind == "number"  # a value: its own type


def test_placeholders_in_comments_read_as_written_not_as_html():
    from tests.test_docs_pages import leaks

    page = render()
    assert not leaks(page)  # `<run>/seed_<s>/` was a tag that struck the text through
    assert "in &lt;run&gt;/seed_&lt;s&gt;/, as a run" in page


def test_outside_a_checkout_the_page_is_not_written_and_one_line_says_why(tmp_path, monkeypatch,
                                                                          capsys):
    monkeypatch.chdir(tmp_path)  # an installed package, run in a folder without docs/
    assert main([]) == 2
    assert capsys.readouterr().err.startswith("error: --out: docs/reference is not a folder")
    assert not any(tmp_path.iterdir())
