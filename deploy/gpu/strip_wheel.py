"""Repacks a wheel without the members under given path prefixes (and their RECORD lines), optionally uncompressed.

Stored (uncompressed) wheels let the bundle's xz compress them far better than zip's deflate (ray: 37 -> 19 MiB).
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path


def strip_wheel(source: Path, dest: Path, drop_prefixes: tuple[str, ...], stored: bool = False) -> tuple[int, int]:
    """Writes `dest` without the members starting with a prefix; returns (kept, dropped) member counts."""
    kept = dropped = 0
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(dest, "w", method) as out:
        for info in src.infolist():
            name = info.filename
            if name.startswith(drop_prefixes):
                dropped += 1
                continue
            data = src.read(info)
            if name.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not line.startswith(drop_prefixes)).encode()
            out.writestr(info, data, compress_type=method, compresslevel=None if stored else 9)
            kept += 1
    return kept, dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--drop", action="append", default=[], help="member path prefix to leave out (repeatable)")
    parser.add_argument("--stored", action="store_true", help="write members uncompressed (for an outer xz)")
    args = parser.parse_args()
    if args.source.resolve() == args.dest.resolve():
        raise SystemExit(f"dest {args.dest} is the source wheel; write the stripped wheel elsewhere")
    kept, dropped = strip_wheel(args.source, args.dest, tuple(args.drop), stored=args.stored)
    print(f"{args.dest}: kept {kept} members, dropped {dropped}, {args.dest.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
