"""`make harnesses`: the pinned coding CLIs into a project-local npm folder, with a stamp file.

`python -m recipes.cli_harness.install FOLDER` checks Node (18 or newer; npm runs the CLIs' install scripts with it),
runs `npm install` of the pinned packages into FOLDER, runs Claude Code's install script itself when npm skipped it
(newer npm asks before running install scripts), checks each binary's `--version` and writes FOLDER/.installed.
Standard library only: it runs before the project's virtual environment exists.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from recipes.cli_harness.binaries import CLAUDE_CODE, CLIS, PLACEHOLDER_MAX_BYTES, Cli

MIN_NODE_MAJOR = 18
STAMP_FILE = ".installed"
NODE_FIX = ("install Node.js 18 or newer with npm (Debian/Ubuntu: apt-get install nodejs npm, or the NodeSource "
            "packages; elsewhere https://nodejs.org)")


def node_problem(version_text: str | None) -> str | None:
    """None when `node --version` printed a Node of MIN_NODE_MAJOR or newer; else what is wrong and what to install.
    `version_text` None: there is no `node` on PATH."""
    if version_text is None:
        return f"the coding CLIs need Node.js, and `node` is not on PATH: {NODE_FIX}"
    match = re.fullmatch(r"v?(\d+)\.\d+\.\d+\S*", version_text.strip())
    if match is None:
        return f"`node --version` printed {version_text.strip()!r}, not a version: {NODE_FIX}"
    if int(match.group(1)) < MIN_NODE_MAJOR:
        return f"Node.js {version_text.strip()} is too old for the coding CLIs: {NODE_FIX}"
    return None


def version_problem(cli: Cli, printed: str) -> str | None:
    """None when `BINARY --version` printed the pinned version."""
    if cli.version_text not in printed:
        return f"{cli.name}: --version printed {printed.strip()!r}, expected {cli.version_text!r}; reinstall"
    return None


def npm_command(folder: Path) -> list[str]:
    """npm's install of the pinned packages into `folder` (exact versions in its package.json)."""
    return ["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--save-exact", "--loglevel=error",
            *(cli.npm_spec() for cli in CLIS.values())]


def _node_version() -> str | None:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def install(folder: Path) -> None:
    """Install (or re-check) the pinned CLIs in `folder`; SystemExit with the reason on any failure."""
    if (problem := node_problem(_node_version())) is not None:
        raise SystemExit(problem)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STAMP_FILE).unlink(missing_ok=True)
    subprocess.run(npm_command(folder), check=True)
    claude = CLAUDE_CODE.binary(folder)
    if claude.is_file() and claude.stat().st_size <= PLACEHOLDER_MAX_BYTES:
        subprocess.run(["node", "install.cjs"], cwd=claude.parent.parent, check=True)
    for cli in CLIS.values():
        printed = subprocess.run([str(cli.binary(folder)), "--version"], capture_output=True, text=True,
                                 cwd=folder, env={"HOME": str(folder), "PATH": "/usr/bin:/bin"}).stdout
        if (problem := version_problem(cli, printed)) is not None:
            raise SystemExit(problem)
    (folder / STAMP_FILE).write_text("".join(f"{cli.npm_spec()}\n" for cli in CLIS.values()))


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m recipes.cli_harness.install FOLDER")
    install(Path(sys.argv[1]).resolve())


if __name__ == "__main__":
    main()
