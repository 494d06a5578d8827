"""A key that does nothing in its pipeline is not accepted in silence: a WARNING at load names
the key and why (``[spark]`` keys under the local engine, a cluster's login or credentials when
every path is on the local disk)."""

from __future__ import annotations

import logging

import pytest

from operators.app.config import load_pipeline
from tests.cli.conftest import PipelineDir

HEAD = """\
engine = "{engine}"
[scan]
directory = "{scan}"
[sink]
file = "out/part-%FILENUM.txt"
"""


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('[filesystem]\nkerberos_principal = "e@X"\n', "[filesystem] kerberos_principal"),
        (
            '[filesystem]\nkerberos_principal = "e@X"\nkeytab = "etl.keytab"\n',
            "[filesystem] keytab",
        ),
        ('[filesystem]\ntoken = "abcdef"\n', "[filesystem] token"),
        ('[spark]\nconf = {"spark.driver.memory" = "2g"}\n', "[spark] conf"),
        ('[spark]\nmaster = "local[4]"\n', "[spark] master"),
        ("[spark]\nmax_files_per_trigger = 5\n", "[spark] max_files_per_trigger"),
    ],
)
def test_a_key_that_does_nothing_is_named_in_a_warning(
    pdir: PipelineDir, caplog: pytest.LogCaptureFixture, table: str, key: str
) -> None:
    config = pdir.write_config(HEAD.format(engine="local", scan="landing") + table)
    with caplog.at_level(logging.WARNING):
        load_pipeline(config)
    found = [w for w in warnings(caplog) if f"{key}: does nothing" in w]
    assert len(found) == 1, warnings(caplog)
    assert "abcdef" not in found[0]  # a credential's value is never echoed


def test_the_same_keys_where_they_act_say_nothing(
    pdir: PipelineDir, caplog: pytest.LogCaptureFixture
) -> None:
    spark = '[spark]\nconf = {"spark.driver.memory" = "2g"}\n'
    config = pdir.write_config(HEAD.format(engine="spark", scan="landing") + spark)
    # Kerberos goes with a path on a cluster, even with [filesystem] on the local disk.
    kerberos = '[filesystem]\nkerberos_principal = "etl@EXAMPLE.COM"\n'
    remote = pdir.write_config(
        HEAD.format(engine="local", scan="hdfs://nn:8020/landing") + kerberos, "remote.toml"
    )
    with caplog.at_level(logging.WARNING):
        load_pipeline(config)
        load_pipeline(remote)
    assert not [w for w in warnings(caplog) if "does nothing" in w]


def test_engine_local_on_the_command_line_counts(
    pdir: PipelineDir, caplog: pytest.LogCaptureFixture
) -> None:
    spark = '[spark]\nconf = {"spark.driver.memory" = "2g"}\n'
    config = pdir.write_config(HEAD.format(engine="spark", scan="landing") + spark)
    with caplog.at_level(logging.WARNING):
        load_pipeline(config, engine="local")
    assert any("[spark] conf: does nothing with engine = 'local'" in w for w in warnings(caplog))
