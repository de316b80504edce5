"""The deploy recipes stop cleanly the way they ship: the systemd units in
``deploy/systemd/`` and the Kubernetes Deployment in ``deploy/k8s/driver.yaml``.

There is no systemd here: each unit's ``ExecStart`` runs as written (only the install
paths, ``%i`` and the master URL replaced by this checkout's) as the leader of a new
session, and its stop is done as systemd does it for the unit's ``KillMode``: mixed and
process send ``KillSignal`` to the main process, control-group to every process of the
service; after ``TimeoutStopSec`` whatever is left would get SIGKILL, so nothing may be
left. The Deployment's container runs ``tini -- calving ARGS``: tini hands SIGTERM to
calving alone, and the pod is killed after ``terminationGracePeriodSeconds``. Each must
exit 0 with the one ``calving: stopped on SIGTERM after batch N`` line and no traceback.
Real broker and Spark (local master)."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from calving.ingest.kafka.producer import produce
from tests.ingest.conftest import REPO_ROOT, unique_name
from tests.ingest.test_cli_errors import (
    alive,
    cli_env,
    cmdline,
    descendants,
    json_records,
    wait_for_ledger,
    write_config,
)

SYSTEMD = REPO_ROOT / "deploy" / "systemd"
STOPPED = re.compile(r"^calving: stopped on SIGTERM after batch \d+$", re.MULTILINE)


class _UnitFile(configparser.ConfigParser):
    def optionxform(self, optionstr: str) -> str:
        return optionstr  # systemd's keys are case-sensitive


def unit(name: str) -> configparser.SectionProxy:
    parser = _UnitFile(interpolation=None, strict=False)
    parser.read_string((SYSTEMD / name).read_text())
    return parser["Service"]


def exec_start(service: configparser.SectionProxy, config: Path) -> list[str]:
    """The unit's ExecStart for this checkout: its install paths and instance replaced."""
    venv_bin = Path(sys.executable).parent
    line = (
        service["ExecStart"]
        .replace("/opt/calving/venv/bin/", f"{venv_bin}/")
        .replace("/opt/calving/src/", f"{REPO_ROOT}/")
        .replace("/etc/calving/%i.toml", str(config))
        .replace("spark://m1.example.com:7077", "local[1]")
    )
    argv = shlex.split(line)
    assert "%" not in line and "example.com" not in line, line
    return argv


def unit_env(service: configparser.SectionProxy) -> dict[str, str]:
    env = cli_env()
    for assignment in service.get("Environment", "").split():
        key, _, value = assignment.partition("=")
        env[key] = sys.executable if key == "PYTHON" else value
    return env


def start(argv: list[str], tmp: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    log = open(tmp / "cli.out", "w")  # noqa: SIM115 -- the process writes it; closed by GC
    return subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp,
        start_new_session=True,
    )  # fmt: skip


def pipeline(broker, tmp: Path) -> tuple[Path, str]:
    topic = unique_name("t")
    broker.create_topic(topic, 1)
    produce(broker.bootstrap_servers, topic, json_records(30))
    table = f"db.{unique_name('t')}"
    return write_config(tmp, bootstrap=broker.bootstrap_servers, topic=topic, table=table), table


def stop_like_systemd(proc: subprocess.Popen[str], service: configparser.SectionProxy) -> int:
    """Stop the service as systemd would; returns the main process's exit status. Fails
    if anything would have needed the final SIGKILL."""
    kill_mode = service.get("KillMode", "control-group")
    sig = signal.Signals[service.get("KillSignal", "SIGTERM")]
    timeout = float(service.get("TimeoutStopSec", "90"))
    group = descendants(proc.pid) | {proc.pid}
    if kill_mode in ("mixed", "process"):
        proc.send_signal(sig)
    else:
        for pid in alive(group):
            os.kill(pid, sig)
    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still running {timeout:.0f}s after {sig.name}") from None
    deadline = time.monotonic() + 30  # processes already exiting when the main one did
    while alive(group - {proc.pid}) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = alive(group - {proc.pid})
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left for SIGKILL: {[cmdline(p) for p in left]}"
    return status


def assert_one_clean_stop(out: str) -> None:
    assert len(STOPPED.findall(out)) == 1, out[-4000:]
    for noise in ("Traceback", "Py4J", "StreamFailedError", "calving: error"):
        assert noise not in out, out[-4000:]


def test_units_hand_sigterm_to_the_driver_alone():
    """Both units stop with SIGTERM to their main process (KillMode=mixed), with time
    for a batch to finish."""
    for name in ("calving-run.service", "calving-submit.service"):
        service = unit(name)
        assert service["KillMode"] == "mixed", name
        assert service.get("KillSignal", "SIGTERM") == "SIGTERM", name
        assert float(service["TimeoutStopSec"]) >= 60, name


@pytest.mark.integration
@pytest.mark.slow
def test_systemd_calving_run_unit_stops_cleanly(broker, tmp_path):
    service = unit("calving-run.service")
    config, table = pipeline(broker, tmp_path)
    proc = start(exec_start(service, config), tmp_path, unit_env(service))
    wait_for_ledger(config, tmp_path, table, proc)
    status = stop_like_systemd(proc, service)
    out = (tmp_path / "cli.out").read_text()
    assert status == 0, out[-4000:]
    assert_one_clean_stop(out)


@pytest.mark.integration
@pytest.mark.slow
def test_systemd_spark_submit_unit_stops_cleanly(broker, tmp_path):
    """spark-submit.sh in client mode: the SIGTERM reaches the script, which hands it to
    the calving driver (the JVM's Python child); the JVM follows it out."""
    service = unit("calving-submit.service")
    config, table = pipeline(broker, tmp_path)
    env = unit_env(service) | {"CALVING_BUILD_DIR": str(tmp_path / "build")}
    proc = start(exec_start(service, config), tmp_path, env)
    wait_for_ledger(config, tmp_path, table, proc)
    status = stop_like_systemd(proc, service)
    out = (tmp_path / "cli.out").read_text()
    assert status == 0, out[-4000:]
    assert_one_clean_stop(out)


@pytest.mark.integration
@pytest.mark.slow
def test_spark_submit_script_stops_cleanly_on_a_group_signal(broker, tmp_path):
    """``kill -TERM -PGID`` / ``timeout`` around spark-submit.sh: spark-submit runs in a
    session of its own, so only the script gets the signal and hands it on."""
    service = unit("calving-submit.service")
    config, table = pipeline(broker, tmp_path)
    env = unit_env(service) | {"CALVING_BUILD_DIR": str(tmp_path / "build")}
    proc = start(exec_start(service, config), tmp_path, env)
    wait_for_ledger(config, tmp_path, table, proc)
    children = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGTERM)
    status = proc.wait(timeout=180)
    out = (tmp_path / "cli.out").read_text()
    assert status == 0, out[-4000:]
    assert_one_clean_stop(out)
    deadline = time.monotonic() + 30
    while alive(children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(children), [cmdline(p) for p in alive(children)]


@pytest.mark.integration
@pytest.mark.slow
def test_kubernetes_driver_stops_cleanly_within_the_grace_period(broker, tmp_path):
    """The Deployment's container: ``tini -- calving`` with the manifest's args; on pod
    deletion tini hands SIGTERM to calving alone, SIGKILL follows after
    terminationGracePeriodSeconds."""
    docs = list(yaml.safe_load_all((REPO_ROOT / "deploy" / "k8s" / "driver.yaml").read_text()))
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    grace = float(pod["terminationGracePeriodSeconds"])
    container = pod["containers"][0]
    assert "preStop" not in container.get("lifecycle", {}), "test the preStop hook too"
    entrypoint = (REPO_ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "calving"]' in entrypoint
    config, table = pipeline(broker, tmp_path)
    args = [str(config) if a == "/etc/calving/pipeline.toml" else a for a in container["args"]]
    argv = [str(Path(sys.executable).parent / "calving"), *args]
    proc = start(argv, tmp_path, cli_env())
    wait_for_ledger(config, tmp_path, table, proc)
    service = configparser.ConfigParser()
    service.read_dict(
        {"Service": {"KillMode": "mixed", "KillSignal": "SIGTERM", "TimeoutStopSec": grace}}
    )
    status = stop_like_systemd(proc, service["Service"])
    out = (tmp_path / "cli.out").read_text()
    assert status == 0, out[-4000:]
    assert_one_clean_stop(out)
