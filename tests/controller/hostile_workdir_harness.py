"""A test harness that attacks its own working directory (what a policy's shell commands could do), then exits 0.

The task's "attack" is a list of steps run in the working directory, each [op, *args]: ["symlink", target, link],
["rename", source, destination], ["write", path, text], ["write_bytes", path, size], ["mkfifo", path],
["badname", directory], ["chmod", path, mode].
"""

import json
import os
import sys


def main() -> int:
    with open(os.environ["HARNESSRL_TASK"]) as f:
        task = json.load(f)
    for op, *args in task["attack"]:
        if op == "symlink":
            if os.path.lexists(args[1]):
                os.remove(args[1])
            os.symlink(args[0], args[1])
        elif op == "rename":
            os.rename(args[0], args[1])
        elif op == "write":
            with open(args[0], "w") as handle:
                handle.write(args[1])
        elif op == "write_bytes":
            with open(args[0], "wb") as handle:
                handle.write(b"a" * int(args[1]))
        elif op == "mkfifo":
            os.mkfifo(args[0])
        elif op == "badname":
            with open(os.fsencode(args[0]) + b"/bad\xff\xfe.py", "w") as handle:
                handle.write("x = 1\n")
        elif op == "chmod":
            os.chmod(args[0], int(args[1], 8))
    print("attacked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
