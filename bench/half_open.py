#!/usr/bin/env python3
"""Half-open HTTP requests against one listener: how many does it still hold after a while?

Opens N connections (default 2,000) to HOST:PORT, sends each half a request line
("GET /metrics HT") and nothing more, waits HOLD seconds (default 45), then counts the
connections the server has not closed. Also prints how many connections the server closed
at once (refused past its cap) and, with --pid, the server's resident memory before and after.

Usage: bench/half_open.py 127.0.0.1:39153 [--count 2000] [--hold 45] [--pid PID]
Loopback or a namespace of your own only.
"""

import argparse
import resource
import select
import socket
import sys
import time


def rss_kib(pid):
    if pid is None:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def fds(pid):
    if pid is None:
        return None
    import os

    return len(os.listdir(f"/proc/{pid}/fd"))


def closed(sock):
    """Whether the server closed `sock` (end of stream or reset); never blocks."""
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    if not p.poll(0):
        return False
    try:
        return sock.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError, OSError):
        return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", help="HOST:PORT")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--hold", type=float, default=45.0)
    ap.add_argument("--pid", type=int, help="the server's process, for its memory and descriptors")
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, a.count + 256)), hard))

    rss0, fds0 = rss_kib(a.pid), fds(a.pid)
    socks, failed = [], 0
    for _ in range(a.count):
        try:
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"GET /metrics HT")
            s.setblocking(False)
            socks.append(s)
        except OSError:
            failed += 1
    time.sleep(1)
    refused_at_once = sum(1 for s in socks if closed(s))
    rss1, fds1 = rss_kib(a.pid), fds(a.pid)
    print(f"opened {len(socks)} half-open requests ({failed} failed to connect); "
          f"closed by the server within 1 s: {refused_at_once}")
    deadline = time.monotonic() + a.hold
    while time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
    held = sum(1 for s in socks if not closed(s))
    rss2, fds2 = rss_kib(a.pid), fds(a.pid)
    print(f"after {a.hold:.0f} s: still held {held} of {len(socks)}")
    if a.pid is not None:
        print(f"server RSS KiB: before {rss0}, 1 s after opening {rss1}, after {a.hold:.0f} s {rss2}; "
              f"server descriptors: {fds0}, {fds1}, {fds2}")
    for s in socks:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
