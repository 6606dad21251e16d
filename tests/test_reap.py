#!/usr/bin/python3
"""test_reap.py - a rank that exits is lost at once, even while its parent has not reaped it.

    /usr/bin/python3 tests/test_reap.py BUILD_DIR

A launcher that waits for rank 0 before it looks at rank 1 (the `for p in procs:
p.join()` of many PyTorch scripts, or this one) leaves an exited rank 1 a zombie while
rank 0 runs: kill(pid, 0) still finds it. `test_fail peer_exit` has rank 1 leave after its
warm-up; rank 0's next all-reduce must fail with PEER_LOST within 2 s (test_fail checks),
over shm and ucx (which judge a local peer by its pid) and tcp. Before 2026-11-27 rank 0
waited for the zombie until WEFT_TIMEOUT on shm. Prints `test_reap.py: N passed, M failed`.
"""
import os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weftlib import check, free_port, summary

B = sys.argv[1] if len(sys.argv) > 1 else "build"


def job(transport):
    port = free_port()
    procs = []
    for r in (0, 1):
        env = dict(os.environ, WEFT_RANK=str(r), WEFT_WORLD_SIZE="2", WEFT_LOCAL_RANK=str(r),
                   WEFT_LOCAL_SIZE="2", WEFT_ADDR=f"127.0.0.1:{port}",
                   WEFT_SECRET="reap-test-secret", WEFT_TIMEOUT="20",
                   WEFT_TRANSPORT=transport)
        procs.append(subprocess.Popen([f"{B}/tests/test_fail", "peer_exit"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    # rank 0 first: rank 1 stays unreaped (a zombie) from its exit until rank 0 is done
    try:
        out0, _ = procs[0].communicate(timeout=60)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        out0, _ = procs[0].communicate()
    procs[1].communicate()
    ok = procs[0].returncode == 0 and "ok rank 0 after peer exit" in out0
    check(ok, f"{transport}: rank 1 exited and unreaped, rank 0 told at once: "
          + next((l for l in out0.splitlines() if "after peer exit" in l), "(no line)")[:160])
    if not ok:
        print(out0[-1500:])


if __name__ == "__main__":
    transports = ["shm", "tcp"]
    if os.path.exists(f"{B}/lib/libweft.so") and b"libucp.so.0" in open(f"{B}/lib/libweft.so", "rb").read():
        transports.append("ucx")
    for t in transports:
        job(t)
    sys.exit(summary("test_reap.py"))
