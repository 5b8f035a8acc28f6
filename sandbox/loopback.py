"""Inside the sandbox: relay 127.0.0.1:PORT to the unix socket bound in, and run the command (stdlib only).

Usage: python -I -S loopback.py PORT SOCKET -- ARGV...  Exits with the command's status. What may pass is decided
outside, by the forwarder on the other end of SOCKET; this relay only moves bytes.
"""

import contextlib
import signal
import socket
import subprocess
import sys
import threading


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes from `source` to `sink` until either side closes."""
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def serve(listener: socket.socket, path: str) -> None:
    """Accept loopback connections; relay each to a new connection on `path`."""
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()


def main() -> int:
    port, path, separator, *argv = sys.argv[1:]
    if separator != "--" or not argv:
        print("usage: loopback.py PORT SOCKET -- ARGV...", file=sys.stderr)
        return 2
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    child = subprocess.Popen(argv)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: child.send_signal(received))
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
