"""Gateway configuration: YAML, overrides on top, unknown keys and bad files are errors naming the problem."""

from __future__ import annotations

import pydantic
import pytest

from gateway.config import load_gateway_config


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
