"""The coding CLIs, pinned, and where their native binaries are in a project-local npm folder (`make harnesses`).

The folder is $HARNESSRL_CLI_DIR, else `.harnesses/` in the project root. The harness runs each CLI's native binary
directly (no Node process stays resident): Claude Code's `bin/claude.exe` (its postinstall copies the platform binary
over a small placeholder) and Codex's vendored musl binary.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

CLI_DIR_ENV = "HARNESSRL_CLI_DIR"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER_MAX_BYTES = 4096  # Claude Code's bin/claude.exe before its install script replaced it
CODEX_TARGETS = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl",
                 "arm64": "aarch64-unknown-linux-musl"}


@dataclass(frozen=True)
class Cli:
    """One pinned CLI: its npm package, version, and its native binary inside the npm folder."""

    name: str  # the recipe's name
    package: str  # the npm package
    version: str  # the pinned version
    version_text: str  # what `BINARY --version` prints

    def npm_spec(self) -> str:
        return f"{self.package}@{self.version}"

    def binary(self, cli_dir: Path) -> Path:
        """The native binary under `cli_dir` (it may not exist: see `missing_binary`)."""
        modules = cli_dir / "node_modules"
        if self.name == CLAUDE_CODE.name:
            return modules / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
        target = CODEX_TARGETS.get(platform.machine(), f"{platform.machine()}-unknown-linux-musl")
        return modules / "@openai" / f"codex-linux-{_npm_arch()}" / "vendor" / target / "bin" / "codex"


CLAUDE_CODE = Cli("claude-code", "@anthropic-ai/claude-code", "2.1.328", "2.1.328 (Claude Code)")
CODEX = Cli("codex", "@openai/codex", "0.169.0", "codex-cli 0.169.0")
CLIS = {cli.name: cli for cli in (CLAUDE_CODE, CODEX)}


def _npm_arch() -> str:
    return {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def cli_dir() -> Path:
    """Where the CLIs are installed: $HARNESSRL_CLI_DIR, else the project's `.harnesses/`."""
    return Path(os.environ.get(CLI_DIR_ENV) or PROJECT_ROOT / ".harnesses").resolve()


def missing_binary(cli: Cli, binary: Path) -> str | None:
    """None when `binary` is the CLI's installed native binary, else what is wrong and how to fix it."""
    fix = (f"run `make harnesses` (installs {cli.npm_spec()} into the project's .harnesses/) or set "
           f"${CLI_DIR_ENV} to the npm folder that holds it")
    if not binary.is_file():
        return f"{cli.name}: no binary at {binary}; {fix}"
    if cli.name == CLAUDE_CODE.name and binary.stat().st_size <= PLACEHOLDER_MAX_BYTES:
        return (f"{cli.name}: {binary} is npm's placeholder (its install script did not run); "
                f"run `node install.cjs` in {binary.parent.parent} or `make harnesses`")
    if not os.access(binary, os.X_OK):
        return f"{cli.name}: {binary} is not executable; reinstall with `make harnesses`"
    return None


def installed_binary(name: str, folder: Path | None = None) -> Path:
    """The resolved native binary of the CLI `name`; FileNotFoundError naming the fix when it is not installed."""
    if name not in CLIS:
        raise KeyError(f"unknown CLI {name!r}; known: {', '.join(sorted(CLIS))}")
    cli = CLIS[name]
    binary = cli.binary(folder or cli_dir()).resolve()
    if (problem := missing_binary(cli, binary)) is not None:
        raise FileNotFoundError(problem)
    return binary
