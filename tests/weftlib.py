"""weftlib.py - what weft's Python tests share: the pass/fail tally and a free port.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from weftlib import check, free_port, summary

check(ok, what) prints "ok - what" or "FAIL - what" and counts it; summary(name) prints
"NAME: N passed, M failed" (the line tests/run.sh shows) and gives the exit status;
failures() says how many so far; free_port(span) a loopback port for a rendezvous (run
as a script, it prints one: the shell tests' port).
"""
import random
import socket

_passed = _failed = 0


def check(ok, what):
    global _passed, _failed
    if ok:
        _passed += 1
    else:
        _failed += 1
    print(("ok - " if ok else "FAIL - ") + what, flush=True)
    return ok


def failures():
    return _failed


def summary(name):
    print(f"{name}: {_passed} passed, {_failed} failed", flush=True)
    return 1 if _failed else 0


def free_port(span=1):
    """A loopback port, and the span - 1 after it, that nothing is bound to now. It lies
    outside the kernel's ephemeral range (ip_local_port_range): a port from there (the
    kernel's pick for bind to port 0) can become an outgoing connection's local port
    between this probe and the job's bind, and one did ("bind: Address already in use").
    Below the range where it leaves room (12000 ports under its start), else above it. A
    race with another process's listener remains, as with any such probe."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    first, end = (lo - 12000, lo) if lo >= 13024 else (hi + 1, 65536)
    if end - first < span + 100:
        first, end = 1024, 65536        # no room outside the range: any port
    for _ in range(200):
        p = random.randrange(first, end - span + 1)
        try:
            for q in range(p, p + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
    raise RuntimeError(f"no free loopback port in [{first}, {end})")


if __name__ == "__main__":     # for the shell tests: python3 tests/weftlib.py [SPAN]
    import sys
    print(free_port(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
