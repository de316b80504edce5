"""Every example in the documentation runs as printed (tests/docs/examples.py has the
rules): each page's ``run`` blocks, in order, in a fresh copy of the checkout whose
``.venv`` is this test run's virtualenv, from a shell with none of the test run's
environment (no PYSPARK_PYTHON, SPARK_LOCAL_IP, PYTHON or VIRTUAL_ENV; PATH without the
venv; HOME in the copy). The substitutions, and nothing else: ``localhost:9092`` becomes
the session broker's address (``kafka``), listed port numbers become free ones
(``ports=``). A block identical to one already run on another page (the README repeats
the quick start) runs once. Processes a page leaves behind are killed with its blocks'
process groups."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docs.examples import (
    ORDERS_TOPIC,
    PYTHON,
    Block,
    ExampleError,
    Mark,
    Page,
    orders_events,
    parse_mark,
    parse_page,
    problems,
    substitute,
)

REPO = Path(__file__).resolve().parents[2]


def _listed() -> list[str]:
    """The repository's files (tracked, and new ones git does not ignore)."""
    done = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return [name for name in done.stdout.splitlines() if (REPO / name).is_file()]


FILES = _listed()
PAGES = [parse_page(REPO / name, REPO) for name in sorted(FILES) if name.endswith(".md")]


def _runs() -> list[tuple[Page, list[Block]]]:
    """Each page with the blocks it runs (a block already run on an earlier page is left
    out)."""
    seen: set[tuple[str, str, Mark | None]] = set()
    out = []
    for page in PAGES:
        blocks = []
        for block in page.runnable:
            key = (block.language, block.text, block.mark)
            if key not in seen:
                seen.add(key)
                blocks.append(block)
        if blocks:
            out.append((page, blocks))
    return out


def _param(page: Page, blocks: list[Block]) -> Any:
    marks = [pytest.mark.integration]
    if any(b.mark is not None and b.mark.slow for b in blocks):
        marks.append(pytest.mark.slow)
    return pytest.param(page, blocks, id=str(page.path.relative_to(REPO)), marks=marks)


# ------------------------------------------------------------------- the marks


def test_every_block_has_a_language_and_every_example_a_mark() -> None:
    found = [problem for page in PAGES for problem in problems(page, REPO)]
    assert not found, "\n".join(found)


def test_there_are_runnable_examples() -> None:
    runs = {str(page.path.relative_to(REPO)) for page, _ in _runs()}
    assert {"docs/getting-started.md", "docs/guides/foreach-batch.md"} <= runs
    assert "docs/guides/spark-cluster.md" in runs


def test_the_marks_are_parsed_and_checked(tmp_path: Path) -> None:
    mark = parse_mark(
        'run expect="RESULT     PASS" expect=ok timeout=60 slow kafka ports=7077,8080', "x"
    )
    assert mark == Mark(True, "", ("RESULT     PASS", "ok"), 60.0, True, True, (7077, 8080))
    assert parse_mark("no-run needs a Docker daemon", "x").reason == "needs a Docker daemon"
    for bad in ("no-run", "run colour=red", "maybe"):
        with pytest.raises(ExampleError):
            parse_mark(bad, "x")
    page = tmp_path / "page.md"
    page.write_text(
        "```\nplain\n```\n\n```sh\necho unmarked\n```\n\n<!-- example: run -->\n```sh\n"
        "echo marked\n```\n\n  <!-- example: no-run a reason -->\n  ```python\n  print(1)\n"
        "  ```\n\n<!-- example: run -->\n```toml\n[a]\n```\n\n<!-- example: run -->\n"
        "```console\n$ ls\n```\n"
    )
    parsed = parse_page(page, tmp_path)
    assert [b.language for b in parsed.blocks] == ["", "sh", "sh", "python", "toml", "console"]
    assert parsed.blocks[3].text == "print(1)\n"
    assert problems(parsed, tmp_path) == [
        "page.md:1: a fenced block needs a language (`text` for output)",
        (
            "page.md:5: a sh block needs <!-- example: run ... --> or <!-- example: no-run "
            "REASON --> on the line before it"
        ),
        "page.md:20: only shell and Python blocks are examples",
        "page.md:25: a console block cannot run (sh or python can)",
    ]
    page.write_text("<!-- example: run -->\n\n```sh\necho x\n```\n")
    with pytest.raises(ExampleError, match="right before the opening fence"):
        parse_page(page, tmp_path)


def test_only_the_documented_placeholders_are_substituted() -> None:
    text = "calving run x --bootstrap localhost:9092 # port 7077 and 17077, 8080\n"
    mark = Mark(True, kafka=True, ports=(7077, 8080))
    out = substitute(text, mark, "127.0.0.1:4242", {7077: 5001, 8080: 5002})
    assert out == "calving run x --bootstrap 127.0.0.1:4242 # port 5001 and 17077, 5002\n"
    assert substitute(text, Mark(True), None, {}) == text


# ------------------------------------------------------------------- running them


@pytest.fixture(scope="session")
def orders_broker(broker: Any) -> str:
    """The session broker with ``dbserver1.shop.orders`` filled (examples.orders_events)."""
    from calving.ingest.kafka.producer import produce

    records, _ = orders_events()
    broker.create_topic(ORDERS_TOPIC, 2)
    produce(broker.bootstrap_servers, ORDERS_TOPIC, [(*r, None) for r in records])
    return str(broker.bootstrap_servers)


def _copy_checkout(into: Path) -> Path:
    if sys.prefix == sys.base_prefix:
        pytest.fail("the examples run against the project's virtualenv: run pytest from .venv")
    checkout = into / "checkout"
    for name in FILES:
        target = checkout / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    (checkout / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return checkout


def _fresh_env(home: Path) -> dict[str, str]:
    """A new user's shell: PATH without this virtualenv, HOME in the copy."""
    venv_bins = {Path(sys.prefix, "bin").resolve(), Path(sys.executable).parent.resolve()}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    path = [p for p in path if Path(p).resolve() not in venv_bins]
    env = {
        k: os.environ[k] for k in ("LANG", "LC_ALL", "JAVA_HOME", "TMPDIR", "TZ") if k in os.environ
    }
    home.mkdir(parents=True, exist_ok=True)
    env.update(PATH=os.pathsep.join(path), HOME=str(home), USER=os.environ.get("USER", "calving"))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_groups(groups: list[int]) -> None:
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _run_block(
    block: Block, text: str, checkout: Path, env: dict[str, str], groups: list[int]
) -> str:
    assert block.mark is not None
    if block.language in PYTHON:
        script = checkout / f"docs_example_{block.path.stem}_{block.line}.py"
        script.write_text(text)
        argv = [str(checkout / ".venv" / "bin" / "python"), script.name]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", text]
    log = checkout / f"docs_example_{block.path.stem}_{block.line}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv,
            cwd=checkout,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        groups.append(proc.pid)
        try:
            code = proc.wait(timeout=block.mark.timeout)
        except subprocess.TimeoutExpired:
            _kill_groups([proc.pid])
            proc.wait()
            code = None
    output = log.read_text(errors="replace")
    where = block.where(REPO)
    assert code is not None, (
        f"{where}: still running after {block.mark.timeout:.0f}s\n{output[-4000:]}"
    )
    assert code == 0, f"{where}: exit status {code}\n{text}\n--- output ---\n{output[-6000:]}"
    for wanted in block.mark.expect:
        assert wanted in output, f"{where}: {wanted!r} not in the output\n{output[-4000:]}"
    return output


@pytest.mark.parametrize(("page", "blocks"), [_param(p, b) for p, b in _runs()])
def test_the_examples_run_as_printed(
    page: Page, blocks: list[Block], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    checkout = _copy_checkout(tmp_path)
    env = _fresh_env(tmp_path / "home")
    broker = None
    if any(b.mark is not None and b.mark.kafka for b in blocks):
        broker = request.getfixturevalue("orders_broker")
        for config in (checkout / "config").glob("*.toml"):
            config.write_text(config.read_text().replace("localhost:9092", broker))
    groups: list[int] = []
    try:
        for block in blocks:
            assert block.mark is not None
            ports = {port: _free_port() for port in block.mark.ports}
            text = substitute(block.text, block.mark, broker, ports)
            print(
                f"{block.where(REPO)}: substituted {'localhost:9092 -> ' + broker if broker and block.mark.kafka else 'nothing'}; ports {ports}"
            )
            _run_block(block, text, checkout, env, groups)
    finally:
        _kill_groups(groups)
