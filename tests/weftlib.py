"""weftlib.py - what weft's Python tests share: the pass/fail tally and a free port.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from weftlib import check, free_port, summary

check(ok, what) prints "ok - what" or "FAIL - what" and counts it; summary(name) prints
"NAME: N passed, M failed" (the line tests/run.sh shows) and gives the exit status;
failures() says how many so far.
"""
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


def free_port():
    """A loopback port nobody listens on now (the kernel's pick; a race with another
    process remains, as with any such probe)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
