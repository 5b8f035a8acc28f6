"""Gateway configuration: YAML, overrides on top, unknown keys and bad files are errors naming the problem."""

from __future__ import annotations

import pydantic
import pytest
import yaml

from gateway.config import load_gateway_config, policy_routing


def test_yaml_then_overrides(tmp_path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("port: 9000\nmax_body_bytes: 4096\npublic_url: http://gw.example:80/\n")
    config = load_gateway_config(path, port=9100, host=None)
    assert (config.port, config.max_body_bytes, config.host) == (9100, 4096, "127.0.0.1")
    assert config.base_url() == "http://gw.example:80"


def test_unknown_keys_are_errors(tmp_path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("max_body_byte: 10\n")
    with pytest.raises(pydantic.ValidationError, match="max_body_byte"):
        load_gateway_config(path)


def test_a_file_that_is_not_a_mapping_is_an_error(tmp_path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("- port\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        load_gateway_config(path)


def test_model_aliases_keep_the_files_order_and_side_models_are_a_list(tmp_path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("model_aliases:\n  'gpt-*': policy\n  'claude-*haiku*': small\n  'claude-*': policy\n"
                    "default_model: policy\nside_models: ['claude-*haiku*']\n")
    config = load_gateway_config(path)
    assert list(config.model_aliases.items()) == [("gpt-*", "policy"), ("claude-*haiku*", "small"),
                                                  ("claude-*", "policy")]
    assert (config.default_model, config.side_models) == ("policy", ["claude-*haiku*"])
    with pytest.raises(pydantic.ValidationError, match="side_models"):
        load_gateway_config(path, side_models="claude-*")


def test_a_training_runs_gateway_sends_harness_names_to_the_policy_and_marks_haiku_as_side(tmp_path) -> None:
    from gateway.records import ModelRecord
    from gateway.routing import Router, is_side_call

    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(policy_routing("policy"), sort_keys=False))
    config = load_gateway_config(path)
    records = [ModelRecord(name=name, base_url=f"http://{name}:1/v1", version=0, served_name=name)
               for name in ("policy", "other")]
    router = Router(records, aliases=config.model_aliases, default_model=config.default_model)
    for name in ("claude-opus-5-5", "claude-3-5-haiku-20241022", "gpt-5-codex", "o3", "codex-mini-latest"):
        assert router.resolve(name) == "policy", name
    assert router.resolve("other") == "other"
    assert is_side_call("messages", "claude-haiku-4-5", config.side_models)
    assert not is_side_call("messages", "claude-opus-5-5", config.side_models)
