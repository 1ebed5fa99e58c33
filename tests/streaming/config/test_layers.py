"""The settings file under the environment: each process reads the same layers, a value from
either goes through the setting's one reader, and a refusal names where the value came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from liveviews.cdc.settings import CdcSettings
from liveviews.config.layers import environment
from liveviews.errors import ConfigurationError
from liveviews.gateway.settings import GatewaySettings
from liveviews.pipeline.settings import Settings


def write(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "liveviews.toml"
    path.write_text(text)
    return {"LV_CONFIG": str(path), "LV_DATA_DIR": str(tmp_path / "data")}


def test_the_file_sets_each_process_and_the_environment_overrides_it(tmp_path: Path) -> None:
    env = write(tmp_path, """
        port = 8123
        host = "0.0.0.0"
        log_partitions = 8
        publish_rate = "off"
        ws_compression = true
        cors_origins = ["https://a.example.com", "https://b.example.com"]
        cdc_slot = "shop"
        log_retention = "30d"
        [spark_conf]
        "spark.executor.memory" = "3g"
        "spark.eventLog.enabled" = "true"
    """)  # fmt: skip
    env["LV_PORT"] = "9000"
    gateway = GatewaySettings.from_env(env)
    assert (gateway.host, gateway.port, gateway.publish_rate) == ("0.0.0.0", 9000, 0.0)
    assert gateway.ws_compression is True
    assert gateway.cors_origins == ("https://a.example.com", "https://b.example.com")
    assert gateway.store.log_partitions == 8
    assert gateway.store.log_retention is not None and gateway.store.log_retention.age_ms
    assert gateway.store.spark_conf == {
        "spark.executor.memory": "3g",
        "spark.eventLog.enabled": "true",
    }
    assert CdcSettings.from_env(env).slot == "shop"
    layered = environment(env)
    assert layered.origin("LV_PORT") == "environment"
    assert layered.origin("LV_HOST") == "file"
    assert layered.origin("LV_WORKERS") == "default"


def test_without_a_file_the_environment_alone(tmp_path: Path) -> None:
    settings = Settings.from_env({"LV_DATA_DIR": str(tmp_path), "LV_CHANGE_SHARDS": "4"})
    assert settings.change_shards == 4 and settings.log_partitions == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port = \"eighty\"", "port in {file} must be a whole number, not 'eighty'."),
        ("publish_rate = -1", "publish_rate in {file} must be 0 (no limit) or more, not '-1'."),
        ("store_full_percent = 101", "store_full_percent in {file} must be from 1 to 100, not 101."),
        ("log_level = \"loud\"", "log_level in {file} must be debug, info, warning or error, not"),
        ("ws_compression = \"maybe\"", "ws_compression in {file} must be on or off"),
        ("prot = 8000", "the settings file {file} sets 'prot', which is no setting (did you mean "
                        "'port'?)"),
        ("port = { at = 1 }", "port in {file} must be a whole number, at least 0, not {{'at': 1}}."),
        ("spark_conf = 4", "spark_conf in {file} must be a table of Spark settings"),
        ("port = [1", "the settings file {file} is not valid TOML: "),
        ("config = \"other.toml\"", "the settings file {file} sets 'config', which is no setting"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_its_key_and_file(
    tmp_path: Path, text: str, message: str
) -> None:
    env = write(tmp_path, text)
    with pytest.raises(ConfigurationError) as refused:
        GatewaySettings.from_env(env)
    assert message.format(file=env["LV_CONFIG"]) in refused.value.message


def test_a_bad_environment_value_over_a_good_file_names_the_variable(tmp_path: Path) -> None:
    env = write(tmp_path, "port = 8000")
    env["LV_PORT"] = "x"
    with pytest.raises(ConfigurationError, match="LV_PORT must be a whole number, not 'x'"):
        GatewaySettings.from_env(env)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"names .*nowhere.toml, which does not exist"):
        Settings.from_env({"LV_CONFIG": str(tmp_path / "nowhere.toml")})
