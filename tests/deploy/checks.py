"""Checkers for the files under deploy/, kept apart from the tests so that each can be
shown to fail on a bad input (tests/deploy/test_deploy_files.py does both).

YAML: PyYAML when importable, else the ruamel.yaml parser that strictyaml vendors
(strictyaml comes with pyiceberg, a test dependency), else no parser: then only
``lenient_yaml_problems`` runs, a small check that refuses tabs, carriage returns and
unbalanced brackets or quotes, and is otherwise lenient.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

# ---------------------------------------------------------------- YAML


def yaml_parser() -> tuple[str | None, Callable[[str], list[Any]] | None]:
    """(name, load_all) of the first YAML parser available, or (None, None)."""
    try:
        import yaml

        return "PyYAML", lambda text: list(yaml.safe_load_all(text))
    except ImportError:
        pass
    try:
        from strictyaml.ruamel import YAML

        loader = YAML(typ="safe", pure=True)
        return "ruamel.yaml (vendored in strictyaml)", lambda text: list(loader.load_all(text))
    except Exception:  # noqa: BLE001 - any failure means: no parser
        return None, None


_BLOCK_SCALAR = re.compile(r"[|>][-+0-9]*\s*(#.*)?$")


def lenient_yaml_problems(text: str) -> list[str]:
    """Problems a YAML file must not have; lenient about everything else."""
    problems = []
    if "\t" in text:
        row = text[: text.index("\t")].count("\n") + 1
        problems.append(f"line {row}: tab character (YAML indentation must be spaces)")
    if "\r" in text:
        problems.append("carriage return (use LF line endings)")
    lines = text.split("\n")
    if not any(ln.strip() and not ln.lstrip().startswith("#") for ln in lines):
        problems.append("no content")
    block_indent: int | None = None  # inside a block scalar: its parent's indentation
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if block_indent is not None:
            if not stripped or indent > block_indent:
                continue
            block_indent = None
        if not stripped or stripped.startswith("#"):
            continue
        code = _strip_comment(stripped)
        if _BLOCK_SCALAR.search(code) and (":" in code or code.startswith("-")):
            block_indent = indent
            continue
        for open_, close in ("[]", "{}"):
            if code.count(open_) != code.count(close):
                problems.append(f"line {number}: unbalanced {open_}{close}")
        if _unbalanced_quotes(code):
            problems.append(f"line {number}: unbalanced quotes")
    return problems


def _strip_comment(line: str) -> str:
    """``line`` without a trailing `` # comment`` outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'" and (i == 0 or line[i - 1] in " :[{,-"):
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip()
    return line


def _unbalanced_quotes(code: str) -> bool:
    quote = None
    for i, ch in enumerate(code):
        if quote == '"':
            if ch == '"' and code[i - 1] != "\\":
                quote = None
        elif quote == "'":
            if ch == "'":
                quote = None
        elif ch in "\"'" and (i == 0 or code[i - 1] in " :[{,-"):
            quote = ch
    return quote is not None


# ---------------------------------------------------------------- secrets

# A key that names a credential.
_SECRET_WORD = (
    r"(?:password|passwd|secret|token|credential|private[-_.]?key|access[-_.]?key|api[-_.]?key)"
)
# key <sep> value, where the key contains a secret word; the value is quoted or bare.
_ASSIGNMENT = re.compile(
    r"""(?P<key>[A-Za-z0-9_.\-]*""" + _SECRET_WORD + r"""[A-Za-z0-9_.\-]*)["']?\s*[:=]\s*"""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s,;#`)]*)""",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(
    r"\b[a-z][a-z0-9+.\-]*://[^/\s:@'\"`]+:(?P<value>[^@\s/'\"`]+)@", re.IGNORECASE
)
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_PLACEHOLDER = re.compile(
    r"""^(?:
        |\$\{.*                # ${env:NAME}, ${NAME:?message}: substituted
        |\$\$?[A-Za-z_][A-Za-z0-9_]*  # $NAME, $$NAME (compose escape)
        |\$\(.*                 # $(command)
        |change-me[\w.\-]*      # env.example / Secret template placeholders
        |<[^>]*>                # <your-password>
        |\.\.\.|\*\*\*          # elided, masked
        |true|false|null|none
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
_SUBSTITUTION = re.compile(r"\$\{[^}]*\}")
# "name:key" of a Kubernetes Secret, as spark.kubernetes.*.secretKeyRef.* values are.
_SECRET_REF = re.compile(r"^[a-z0-9][a-z0-9.\-]*:[A-Za-z0-9._\-]+$")


def secret_findings(text: str, suffix: str = "") -> list[str]:
    """Lines of ``text`` that look like a literal secret. ``suffix`` is the file's
    extension: Markdown is checked in code (blocks and `spans`) only, and in comments of
    other files only keys that look like config keys (with . - _ or quotes) count, so
    that prose such as "# holds no secret: see below" is not a finding."""
    findings = []
    for number, raw, in_comment in _code_lines(text, suffix):
        # ${...} substitutions are placeholders whatever they contain (${X:?message}).
        line = _SUBSTITUTION.sub("${}", raw)
        for m in _ASSIGNMENT.finditer(line):
            key, value = m.group("key"), _unquote(m.group("value"))
            if in_comment and not re.search(r"[._\-]", key) and not _quoted_key(line, m):
                continue
            if _PLACEHOLDER.match(value):
                continue
            if "secretkeyref" in key.lower() and _SECRET_REF.match(value):
                continue
            findings.append(f"line {number}: {key} = {value!r}")
        for m in _URL_PASSWORD.finditer(line):
            if not _PLACEHOLDER.match(m.group("value")):
                findings.append(f"line {number}: password in URL {m.group(0)!r}")
        if _AWS_KEY_ID.search(line):
            findings.append(f"line {number}: AWS access key id")
        if _PRIVATE_KEY.search(line):
            findings.append(f"line {number}: private key")
    return findings


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _quoted_key(line: str, m: re.Match[str]) -> bool:
    start = m.start("key")
    return start > 0 and line[start - 1] in "\"'"


def _code_lines(text: str, suffix: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, text to check, whether it is a comment)."""
    if suffix == ".md":
        fenced = False
        for number, line in enumerate(text.split("\n"), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced:
                yield number, line, False
            else:
                for span in re.findall(r"`([^`]+)`", line):
                    yield number, span, False
        return
    comment_start = "#"
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        if stripped.startswith(comment_start):
            yield number, stripped, True
            continue
        # A trailing comment is checked as a comment.
        code, _, comment = line.partition(" #")
        yield number, code, False
        if comment:
            yield number, comment, True


# ---------------------------------------------------------------- compose


_RELATIVE = re.compile(r"(?<![\w./$-])(\.{1,2}/[\w.\-/]*|\.{1,2}(?=\s*$)|\.[A-Za-z][\w.\-]*)")


def relative_paths(text: str) -> list[str]:
    """Host paths written as ./x, ../x or .name in a compose file (bind mounts, build
    context, env_file), without a ``:container/path`` part; comment lines are skipped."""
    paths = []
    for line in text.split("\n"):
        if line.lstrip().startswith("#"):
            continue
        for m in _RELATIVE.finditer(line):
            token = m.group(1)
            paths.append(token.rstrip("/") if token.rstrip("/") else token)
    return paths


def missing_compose_paths(text: str, base: Path, allowed_missing: set[str]) -> list[str]:
    """Relative host paths of a compose file (see ``relative_paths``) that do not exist
    under ``base``, except those in ``allowed_missing`` (e.g. the uncommitted .env)."""
    return [p for p in relative_paths(text) if p not in allowed_missing and not (base / p).exists()]


def service_host_paths(service: dict[str, Any]) -> list[str]:
    """Host paths one parsed compose service refers to (relative or absolute)."""
    out: list[str] = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/", "~")):
                out.append(source)
        elif isinstance(volume, dict) and volume.get("type") == "bind":
            out.append(str(volume["source"]))
    env_files = service.get("env_file") or []
    for entry in [env_files] if isinstance(env_files, str) else env_files:
        out.append(entry["path"] if isinstance(entry, dict) else entry)
    build = service.get("build")
    if isinstance(build, str):
        out.append(build)
    elif isinstance(build, dict):
        context = build.get("context", ".")
        out.append(context)
        if "dockerfile" in build:
            out.append(str(Path(context) / build["dockerfile"]))
    return out


# ---------------------------------------------------------------- calving_app.py


def calls_cli_main_with_run(source: str) -> bool:
    """Whether the module, when run as a script, calls ``calving.calving.ingest.cli.main`` with a list
    that starts with "run" followed by ``*sys.argv[1:]``, and exits with its result."""
    tree = ast.parse(source)
    names = set()  # local names bound to calving.ingest.cli.main, or "calving.ingest.cli" modules
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "calving.ingest.cli":
            names |= {a.asname or a.name for a in node.names if a.name == "main"}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "calving.ingest.cli":
                    modules.add(a.asname or "calving.ingest.cli")

    def is_main(func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in names
        if isinstance(func, ast.Attribute) and func.attr == "main":
            return ast.unparse(func.value) in modules
        return False

    def good_args(call: ast.Call) -> bool:
        if len(call.args) != 1 or not isinstance(call.args[0], ast.List):
            return False
        elts = call.args[0].elts
        return (
            len(elts) == 2
            and isinstance(elts[0], ast.Constant)
            and elts[0].value == "run"
            and isinstance(elts[1], ast.Starred)
            and ast.unparse(elts[1].value) == "sys.argv[1:]"
        )

    for node in tree.body:
        if not (
            isinstance(node, ast.If)
            and "__name__" in ast.unparse(node.test)
            and "__main__" in ast.unparse(node.test)
        ):
            continue
        for inner in ast.walk(node):
            if (
                isinstance(inner, ast.Call)
                and ast.unparse(inner.func) in ("sys.exit", "exit", "SystemExit")
                and inner.args
                and isinstance(inner.args[0], ast.Call)
                and is_main(inner.args[0].func)
                and good_args(inner.args[0])
            ):
                return True
    return False


# ---------------------------------------------------------------- shell


def documented_header(text: str) -> str:
    """The leading comment block of a script (after the shebang)."""
    lines = text.split("\n")
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    return "\n".join(header)


_ENV_WITH_DEFAULT = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-=?+])")


def env_vars_with_defaults(text: str) -> set[str]:
    """Environment variables a script reads with a default or a check (${NAME:-x} ...)."""
    return set(_ENV_WITH_DEFAULT.findall(text))


def env_references(toml_text: str) -> set[str]:
    """NAME of every ${env:NAME} in a config file, comments excluded."""
    code = "\n".join(ln for ln in toml_text.split("\n") if not ln.lstrip().startswith("#"))
    return set(re.findall(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}", code))


def env_file_values(text: str) -> dict[str, str]:
    """KEY=value lines of an env file (comments and blank lines skipped)."""
    out = {}
    for line in text.split("\n"):
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out
