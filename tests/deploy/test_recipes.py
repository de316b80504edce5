"""What the deploy recipes promise, checked by dry runs against a fake SPARK_HOME
(tests.deploy.fakes) and by reading the shipped config files; test_cluster.py checks the
same promises on a live cluster.

* web UIs bind to the configured host: Spark binds every web UI to $SPARK_LOCAL_IP, else
  to all interfaces (there is no spark.ui.host), so the scripts set SPARK_LOCAL_IP;
* the standalone REST submission server (on by default in Spark 4, unauthenticated) is
  off unless CALVING_SPARK_MASTER_REST=true;
* CALVING_SPARK_AUTH_SECRET turns spark.authenticate on, and the secret reaches Spark
  through the environment, never a command line;
* spark-submit.sh writes its zip outside the checkout, and the driver gets calving's
  log4j2 configuration and no console progress bar.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from calving.ingest.pipeline import DRIVER_DEFAULTS
from calving.ingest.spark_daemon import DAEMON_MODULE
from tests.deploy.checks import DEPLOY, REPO, env_file_values, yaml_parser
from tests.deploy.fakes import call_envs, calls, run

SECRET = "sekr1t-Value-for-the-test"


def java_opts(opts: str) -> dict[str, str]:
    """-Dkey=value options of a *_OPTS string, as a dict (a repeated key is an error)."""
    found: dict[str, str] = {}
    for key, value in re.findall(r"-D([\w.]+)=(\S*)", opts):
        assert key not in found, f"{key} given twice in {opts!r}"
        found[key] = value
    return found


# ---------------------------------------------------------------- master


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_master_ui_binds_to_the_master_host_and_rest_is_off(fake_spark: dict[str, str]) -> None:
    result = run("standalone/start-master.sh", fake_spark, SPARK_MASTER_HOST="10.1.2.3")
    assert result.returncode == 0, result.stderr
    [env] = call_envs(fake_spark)
    assert env["SPARK_LOCAL_IP"] == "10.1.2.3"
    opts = java_opts(env["SPARK_MASTER_OPTS"])
    assert opts["spark.master.rest.enabled"] == "false"
    assert "spark.authenticate" not in opts
    assert env["_SPARK_AUTH_SECRET"] == ""


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_master_keeps_an_explicit_spark_local_ip(fake_spark: dict[str, str]) -> None:
    result = run(
        "standalone/start-master.sh",
        fake_spark,
        SPARK_MASTER_HOST="m1.example.com",
        SPARK_LOCAL_IP="10.9.9.9",
    )
    assert result.returncode == 0, result.stderr
    assert call_envs(fake_spark)[0]["SPARK_LOCAL_IP"] == "10.9.9.9"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"CALVING_SPARK_MASTER_REST": "true"}, "true"),
        ({"CALVING_SPARK_MASTER_REST": "false"}, "false"),
        # An explicit -D in SPARK_MASTER_OPTS wins (and is not repeated).
        ({"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=true -Dx.y=1"}, "true"),
    ],
)
@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_the_rest_server_runs_only_when_asked(
    fake_spark: dict[str, str], extra: dict[str, str], expected: str
) -> None:
    result = run("standalone/start-master.sh", fake_spark, SPARK_MASTER_HOST="m1", **extra)
    assert result.returncode == 0, result.stderr
    opts = java_opts(call_envs(fake_spark)[0]["SPARK_MASTER_OPTS"])
    assert opts["spark.master.rest.enabled"] == expected


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_a_bad_rest_switch_is_refused(fake_spark: dict[str, str]) -> None:
    result = run("standalone/start-master.sh", fake_spark, CALVING_SPARK_MASTER_REST="maybe")
    assert result.returncode == 2
    assert "CALVING_SPARK_MASTER_REST" in result.stderr
    assert calls(fake_spark) == []


# ---------------------------------------------------------------- worker


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_worker_ui_binds_to_the_worker_host(fake_spark: dict[str, str]) -> None:
    result = run(
        "standalone/start-worker.sh", fake_spark, "spark://m1:7077", SPARK_WORKER_HOST="10.0.0.5"
    )
    assert result.returncode == 0, result.stderr
    assert call_envs(fake_spark)[0]["SPARK_LOCAL_IP"] == "10.0.0.5"


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_worker_binds_to_loopback_unless_told_otherwise(fake_spark: dict[str, str]) -> None:
    result = run("standalone/start-worker.sh", fake_spark, "spark://127.0.0.1:7077")
    assert result.returncode == 0, result.stderr
    assert call_envs(fake_spark)[0]["SPARK_LOCAL_IP"] == "127.0.0.1"  # the web UI
    [call] = calls(fake_spark)
    assert call[call.index("--host") + 1] == "127.0.0.1"  # RPC, and the advertised address


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_master_binds_to_loopback_unless_told_otherwise(fake_spark: dict[str, str]) -> None:
    result = run("standalone/start-master.sh", fake_spark)
    assert result.returncode == 0, result.stderr
    assert call_envs(fake_spark)[0]["SPARK_LOCAL_IP"] == "127.0.0.1"
    [call] = calls(fake_spark)
    assert call[call.index("--host") + 1] == "127.0.0.1"


# ---------------------------------------------------------------- spark.authenticate


@pytest.mark.parametrize(
    ("script", "args", "opts_var"),
    [
        ("standalone/start-master.sh", (), "SPARK_MASTER_OPTS"),
        ("standalone/start-worker.sh", ("spark://m1:7077",), "SPARK_WORKER_OPTS"),
    ],
)
@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_auth_secret_reaches_spark_by_environment_only(
    fake_spark: dict[str, str], script: str, args: tuple[str, ...], opts_var: str
) -> None:
    result = run(script, fake_spark, *args, CALVING_SPARK_AUTH_SECRET=SECRET)
    assert result.returncode == 0, result.stderr
    [env] = call_envs(fake_spark)
    assert java_opts(env[opts_var])["spark.authenticate"] == "true"
    assert env["_SPARK_AUTH_SECRET"] == SECRET
    [call] = calls(fake_spark)
    assert not any(SECRET in arg for arg in call), call
    assert SECRET not in env[opts_var]
    assert SECRET not in result.stdout + result.stderr


def test_guide_documents_authentication() -> None:
    guide = REPO / "docs" / "guides" / "spark-cluster.md"
    text = guide.read_text(encoding="utf-8")
    section = text[text.index("## Authentication") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section else section
    for needed in (
        "spark.authenticate",
        "CALVING_SPARK_AUTH_SECRET",
        '"spark.authenticate.secret" = "${env:CALVING_SPARK_AUTH_SECRET}"',
        "spark.network.crypto.enabled",
        "CALVING_SPARK_MASTER_REST",
    ):
        assert needed in section, needed


# ---------------------------------------------------------------- spark-submit.sh


def submit(fake_spark: dict[str, str], tmp_path: Path, *options: str, **extra: str) -> list[str]:
    config = tmp_path / "pipeline.toml"
    config.write_text("")
    result = run("spark-submit.sh", fake_spark, *options, "--", str(config), **extra)
    assert result.returncode == 0, result.stderr
    [call] = calls(fake_spark)
    return call


def confs(call: list[str]) -> list[str]:
    return [call[i + 1] for i, arg in enumerate(call) if arg == "--conf"]


def py_files_zip(call: list[str]) -> Path:
    return Path(call[call.index("--py-files") + 1].split(",")[0])


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_the_zip_is_built_outside_the_checkout(fake_spark: dict[str, str], tmp_path: Path) -> None:
    before = set((REPO / "build").rglob("*")) if (REPO / "build").exists() else set()
    zip_path = py_files_zip(submit(fake_spark, tmp_path))
    assert zip_path.parent == Path(fake_spark["HOME"]) / ".cache" / "calving" / "deploy"
    assert zip_path.is_file()
    after = set((REPO / "build").rglob("*")) if (REPO / "build").exists() else set()
    assert after == before, "spark-submit.sh wrote into the checkout"


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_the_zip_goes_to_xdg_cache_home(fake_spark: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "xdg"
    zip_path = py_files_zip(submit(fake_spark, tmp_path, XDG_CACHE_HOME=str(cache)))
    assert zip_path.parent == cache / "calving" / "deploy"


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_driver_has_no_progress_bar_unless_asked(
    fake_spark: dict[str, str], tmp_path: Path
) -> None:
    given = confs(submit(fake_spark, tmp_path))
    assert "spark.ui.showConsoleProgress=false" in given
    # A --conf of the user's comes later on the command line, so it wins.
    (tmp_path / "calls").unlink()
    given = confs(submit(fake_spark, tmp_path, "--conf", "spark.ui.showConsoleProgress=true"))
    assert given.index("spark.ui.showConsoleProgress=true") > given.index(
        "spark.ui.showConsoleProgress=false"
    )


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_driver_logs_through_calvings_log4j2(fake_spark: dict[str, str], tmp_path: Path) -> None:
    submit(fake_spark, tmp_path, SPARK_SUBMIT_OPTS="-Dmine=1")
    opts = call_envs(fake_spark)[0]["SPARK_SUBMIT_OPTS"]
    assert java_opts(opts) == {
        "log4j2.configurationFile": str(REPO / "config" / "log4j2.properties"),
        "mine": "1",
    }


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
@pytest.mark.parametrize("how", ["empty", "conf-dir"])
def test_driver_log4j2_can_be_left_to_spark(
    fake_spark: dict[str, str], tmp_path: Path, how: str
) -> None:
    if how == "empty":
        extra = {"CALVING_DRIVER_LOG4J2": ""}
    else:
        conf = tmp_path / "conf"
        conf.mkdir()
        (conf / "log4j2.properties").write_text("rootLogger.level = info\n")
        extra = {"SPARK_CONF_DIR": str(conf)}
    submit(fake_spark, tmp_path, **extra)
    assert "log4j2" not in call_envs(fake_spark)[0]["SPARK_SUBMIT_OPTS"]


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_a_missing_log4j2_file_is_refused(fake_spark: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text("")
    result = run(
        "spark-submit.sh", fake_spark, str(config), CALVING_DRIVER_LOG4J2=str(tmp_path / "none")
    )
    assert result.returncode == 2 and "CALVING_DRIVER_LOG4J2" in result.stderr
    assert calls(fake_spark) == []


@pytest.mark.parametrize(
    ("options", "extra", "expected"),
    [
        (("--conf", "spark.driver.host=10.0.0.7"), {}, "10.0.0.7"),
        (
            (
                "--conf",
                "spark.driver.host=d1.example",
                "--conf",
                "spark.driver.bindAddress=10.0.0.8",
            ),
            {},
            "10.0.0.8",
        ),
        (("--conf", "spark.driver.host=10.0.0.7"), {"SPARK_LOCAL_IP": "10.0.0.9"}, "10.0.0.9"),
        ((), {}, ""),
    ],
)
@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_driver_ui_binds_to_the_driver_address(
    fake_spark: dict[str, str],
    tmp_path: Path,
    options: tuple[str, ...],
    extra: dict[str, str],
    expected: str,
) -> None:
    submit(fake_spark, tmp_path, *options, **extra)
    assert call_envs(fake_spark)[0]["SPARK_LOCAL_IP"] == expected


# ---------------------------------------------------------------- which Python


def _checkout_copy(tmp_path: Path) -> Path:
    """deploy/ and what spark-submit.sh reads from the checkout (pyproject.toml, the
    packages it zips, config/log4j2.properties), copied without a .venv."""
    copy = tmp_path / "checkout"
    for name in ("deploy", "commit", "ingest"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "config").mkdir()
    shutil.copy(REPO / "config" / "log4j2.properties", copy / "config")
    shutil.copy(REPO / "pyproject.toml", copy)
    return copy


def _path_without_calving(tmp_path: Path) -> str:
    """A PATH whose python3 lacks pyspark and calving (a stand-in that fails to import
    them and answers anything else with its path)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python3 = bin_dir / "python3"
    python3.write_text(
        "#!/bin/sh\n"
        'case "$*" in *pyspark* | *calving*) echo "No module named pyspark" >&2; exit 1 ;; esac\n'
        'echo "$0"\n'
    )
    python3.chmod(0o755)
    return f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"


def _submit_from(copy: Path, env: dict[str, str], tmp_path: Path) -> Any:
    config = tmp_path / "pipeline.toml"
    config.write_text("")
    return subprocess.run(
        ["bash", str(copy / "deploy" / "spark-submit.sh"), "--", str(config)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_spark_submit_finds_the_python_of_the_calving_command(
    fake_spark: dict[str, str], tmp_path: Path
) -> None:
    """No PYTHON, no virtualenv, python3 without pyspark: the interpreter pip wrote into
    the installed `calving` command is used for the zip, the driver and the workers."""
    copy = _checkout_copy(tmp_path)
    tools = tmp_path / "installed"
    tools.mkdir()
    (tools / "calving").write_text(f"#!{sys.executable}\nimport calving\n")
    (tools / "calving").chmod(0o755)
    env = {k: v for k, v in fake_spark.items() if k not in ("PYTHON", "SPARK_HOME")}
    env["PATH"] = f"{tools}{os.pathsep}{_path_without_calving(tmp_path)}"
    env["SPARK_HOME"] = fake_spark["SPARK_HOME"]
    result = _submit_from(copy, env, tmp_path)
    assert result.returncode == 0, result.stderr
    [call] = calls(fake_spark)
    expected = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"spark.pyspark.python={expected}" in confs(call)
    assert f"spark.pyspark.driver.python={expected}" in confs(call)
    # The submitted workers may import calving only from the --py-files zip, after
    # their daemon starts: Spark's own daemon stays.
    assert not [c for c in confs(call) if c.startswith("spark.python.daemon.module=")]


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_spark_submit_prefers_the_checkouts_venv(
    fake_spark: dict[str, str], tmp_path: Path
) -> None:
    copy = _checkout_copy(tmp_path)
    (copy / ".venv").symlink_to(sys.prefix)
    env = {k: v for k, v in fake_spark.items() if k != "PYTHON"}
    env["PATH"] = _path_without_calving(tmp_path)
    result = _submit_from(copy, env, tmp_path)
    assert result.returncode == 0, result.stderr
    chosen = [c for c in confs(calls(fake_spark)[0]) if c.startswith("spark.pyspark.python=")]
    assert chosen == [f"spark.pyspark.python={copy}/.venv/bin/python"]


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_an_explicit_python_is_not_second_guessed(
    fake_spark: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in fake_spark.items() if k != "SPARK_HOME"}
    env["PATH"] = _path_without_calving(tmp_path)
    result = _submit_from(REPO, {**env, "PYTHON": "python3"}, tmp_path)
    assert result.returncode == 1
    assert "cannot import pyspark with python3" in result.stderr
    assert calls(fake_spark) == []


# ---------------------------------------------------------------- config/


def properties(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=") if "=" in line else line.partition(" ")
            out[key.strip()] = value.strip()
    return out


def test_log4j2_keeps_spark_at_warn_and_calving_at_info() -> None:
    props = properties(REPO / "config" / "log4j2.properties")
    assert props["rootLogger.level"] == "warn"
    levels = {
        props[key]: props[key.replace(".name", ".level")]
        for key in props
        if key.startswith("logger.") and key.endswith(".name")
    }
    assert levels["org.apache.spark"] == "warn"
    assert levels["calving"] == "info"
    assert all(level in ("warn", "error") for name, level in levels.items() if name != "calving")


def test_spark_defaults_turn_the_progress_bar_off() -> None:
    text = (REPO / "config" / "spark-defaults.conf").read_text(encoding="utf-8")
    settings = dict(
        line.split(None, 1) for line in text.splitlines() if line.strip() and line[0] != "#"
    )
    assert settings["spark.ui.showConsoleProgress"].strip() == "false"
    assert "spark.authenticate.secret" not in settings
    # calving run's sessions start their workers from calving's daemon; the defaults
    # file (read by spark-submit, whose workers may have calving only as --py-files,
    # which a daemon cannot import) leaves it to the user.
    assert DRIVER_DEFAULTS["spark.python.daemon.module"] == DAEMON_MODULE
    assert "spark.python.daemon.module" not in settings
    assert f"# spark.python.daemon.module                  {DAEMON_MODULE}" in text


# ---------------------------------------------------------------- compose and Kubernetes


def _load_yaml(path: Path) -> list[Any]:
    _, load_all = yaml_parser()
    if load_all is None:  # PyYAML is a test dependency: CI must never skip these
        missing = "no YAML parser importable (PyYAML or strictyaml's ruamel)"
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    return [d for d in load_all(path.read_text(encoding="utf-8")) if d is not None]


def _spark_conf(toml_text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
        import tomli as tomllib

    return dict(tomllib.loads(toml_text)["spark"]["conf"])


def test_compose_runs_spark_with_authentication() -> None:
    [compose] = _load_yaml(DEPLOY / "docker" / "compose.yaml")
    services = compose["services"]
    for name in ("spark-master", "spark-worker"):
        value = services[name]["environment"]["CALVING_SPARK_AUTH_SECRET"]
        assert value.startswith("${CALVING_SPARK_AUTH_SECRET:?"), (name, value)
    # The driver reads .env (env_file), where env.example names the same variable.
    assert ".env" in services["calving"]["env_file"]
    assert "CALVING_SPARK_AUTH_SECRET" in env_file_values(
        (DEPLOY / "docker" / "env.example").read_text(encoding="utf-8")
    )
    conf = _spark_conf((DEPLOY / "docker" / "pipeline.toml").read_text(encoding="utf-8"))
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.authenticate.secret"] == "${env:CALVING_SPARK_AUTH_SECRET}"
    assert conf["spark.ui.showConsoleProgress"] == "false"


def test_kubernetes_runs_spark_with_authentication() -> None:
    def secret_env(container: dict[str, Any]) -> dict[str, Any]:
        return {e["name"]: e.get("valueFrom") for e in container.get("env", [])}

    containers = []
    for name in ("spark-standalone.yaml", "driver.yaml"):
        for doc in _load_yaml(DEPLOY / "k8s" / name):
            if doc.get("kind") in ("Deployment", "StatefulSet"):
                containers += doc["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 3  # master, workers, driver
    for container in containers:
        ref = secret_env(container)["CALVING_SPARK_AUTH_SECRET"]["secretKeyRef"]
        assert ref == {"name": "calving-secrets", "key": "spark-auth-secret"}, container["name"]
    [configmap] = _load_yaml(DEPLOY / "k8s" / "pipeline-configmap.yaml")
    [toml_text] = configmap["data"].values()
    conf = _spark_conf(toml_text)
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.authenticate.secret"] == "${env:CALVING_SPARK_AUTH_SECRET}"
