#!/usr/bin/env bash
# test_symbols.sh - libweft.so exports exactly the API of include/weft.h, and a program
# linked against the build tree (-Lbuild/lib -lweft) starts and runs a collective.
#
#   bash tests/test_symbols.sh [BUILD]        (tests/run.sh runs it)
#
# Checks: every defined dynamic symbol of libweft.so is a weft_* function that weft.h
# (and, in a CUDA build, weft_cuda.h) declares; libweft_nccl.so, where built, exports nccl*
# names only (no internals such as weft_error, log_init, connect_all that would collide
# inside an application); every function weft.h declares is exported; the soname is
# libweft.so.0 and build/lib/libweft.so.0 exists; a C program built with
# `cc -Iinclude -Lbuild/lib -lweft` and run with LD_LIBRARY_PATH=build/lib all-reduces on
# 2 ranks; libweft needs no UCX library and, where UCX cannot load, WEFT_TRANSPORT=ucx is
# an error naming it while the other transports run. Ends "test_symbols.sh: N passed, N
# failed".
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}
LIB=$B/lib/libweft.so
PASS=0
FAIL=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_symbols.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

check() {   # check OK-STATUS MESSAGE
    if [ "$1" = 0 ]; then PASS=$((PASS + 1)); echo "ok - $2"
    else FAIL=$((FAIL + 1)); echo "FAIL - $2"; fi
}

[ -e "$LIB" ] || { echo "test_symbols.sh: $LIB missing (make lib)"; exit 2; }

# what weft.h declares: every identifier weft_xxx followed by "(" at a declaration
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TtWwDdBbRr]$/ { print $3 }' | sed 's/@.*//' |
    sort -u >"$TMP/exported"
# a CUDA build (weft_cuda_available exported) adds include/weft_cuda.h's stream calls
headers=include/weft.h
grep -qx weft_cuda_available "$TMP/exported" && headers="$headers include/weft_cuda.h"
grep -ohE '\bweft_[a-z0-9_]+\(' $headers | tr -d '(' | sort -u >"$TMP/api"

extra=$(comm -13 "$TMP/api" "$TMP/exported" | tr '\n' ' ')
check "$([ -z "$extra" ] && echo 0 || echo 1)" \
    "libweft.so exports nothing but weft.h's API ($(wc -l <"$TMP/exported") symbols)${extra:+; also: $extra}"
missing=$(comm -23 "$TMP/api" "$TMP/exported" | tr '\n' ' ')
check "$([ -z "$missing" ] && echo 0 || echo 1)" \
    "every function weft.h declares is exported ($(wc -l <"$TMP/api"))${missing:+; missing: $missing}"
for internal in weft_error weft_error_quiet log_init connect_all random_bytes engine_wait; do
    if grep -qx "$internal" "$TMP/exported"; then
        check 1 "internal $internal is exported"
    fi
done

# the NCCL-API shim (CUDA builds): NCCL's names only, under NCCL's soname
SHIM=$B/lib/libweft_nccl.so
if [ -e "$SHIM" ]; then
    other=$(nm -D --defined-only "$SHIM" | awk '$2 ~ /^[TtWwDdBbRr]$/ { print $3 }' |
            sed 's/@.*//' | grep -v '^p\{0,1\}nccl' | tr '\n' ' ')
    n=$(nm -D --defined-only "$SHIM" | grep -c ' nccl')
    ssoname=$(readelf -d "$SHIM" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    check "$([ -z "$other" ] && [ "$n" -ge 30 ] && [ "$ssoname" = libnccl.so.2 ] &&
             [ -e "$B/lib/libnccl.so" ] && echo 0 || echo 1)" \
        "libweft_nccl.so exports $n nccl* symbols and nothing else${other:+ (also: $other)}, soname $ssoname, libnccl.so links to it"
    # NCCL's profiling names: pncclX for every ncclX, the same function (address)
    unpaired=$(nm -D --defined-only "$SHIM" | awk '$3 ~ /^p?nccl/ { a[$3] = $1 }
        END { for (s in a) if (s ~ /^nccl/ && a["p" s] != a[s]) printf "%s ", s;
              for (s in a) if (s ~ /^pnccl/ && !(substr(s, 2) in a)) printf "%s ", s }')
    np=$(nm -D --defined-only "$SHIM" | grep -c ' pnccl')
    check "$([ -z "$unpaired" ] && [ "$np" = "$n" ] && echo 0 || echo 1)" \
        "libweft_nccl.so exports pncclX at ncclX's address for each of its $n calls ($np pnccl*)${unpaired:+; unpaired: $unpaired}"
fi

soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "$([ "$soname" = libweft.so.0 ] && [ -f "$B/lib/libweft.so.0" ] && echo 0 || echo 1)" \
    "soname $soname, and $B/lib/libweft.so.0 exists"

# a program built against the build tree, as a user builds one
cat >"$TMP/prog.c" <<'EOF'
#include <stdio.h>
#include <weft.h>
int main(void)
{
    weft_comm_t *c;
    if (weft_comm_init(&c) != WEFT_OK) {
        fprintf(stderr, "init: %s\n", weft_last_error());
        return 1;
    }
    float x = (float)(weft_comm_rank(c) + 1);
    weft_status_t st = weft_allreduce(&x, &x, 1, WEFT_FLOAT32, WEFT_SUM, c);
    int n = weft_comm_size(c);
    weft_comm_destroy(c);
    if (st != WEFT_OK || x != (float)(n * (n + 1) / 2)) {
        fprintf(stderr, "allreduce: %s, %g\n", weft_status_str(st), x);
        return 1;
    }
    printf("sum %g\n", x);
    return 0;
}
EOF
# (a sanitizer build's library needs the program built with the sanitizer too: its
# runtime must come first among the libraries loaded)
SAN_FLAGS=""
readelf -d "$LIB" | grep -q 'NEEDED.*libasan' && SAN_FLAGS="-fsanitize=address,undefined"
# shellcheck disable=SC2086
if cc $SAN_FLAGS -Iinclude -o "$TMP/prog" "$TMP/prog.c" -L"$B/lib" -lweft 2>"$TMP/cc.err"; then
    out=$(LD_LIBRARY_PATH=$B/lib timeout 60 "$B/bin/weftrun" -n 2 "$TMP/prog" 2>&1)
    rc=$?
    needed=$(readelf -d "$TMP/prog" | sed -n 's/.*(NEEDED).*\[\(libweft[^]]*\)\].*/\1/p')
    check "$([ $rc = 0 ] && [ "$needed" = libweft.so.0 ] && echo 0 || echo 1)" \
        "a program linked with -L$B/lib -lweft needs $needed and runs on 2 ranks (exit $rc: $(echo "$out" | tr '\n' ' ' | cut -c1-120))"
else
    check 1 "a program links with -L$B/lib -lweft: $(head -c 300 "$TMP/cc.err")"
fi

# UCX is opened by the ucx transport when used, never linked (comm/ucx/ucx_api.h): no UCX
# library among libweft's dependencies, no UCX call left for the loader to bind.
ucxdeps=$(readelf -d "$LIB" | sed -n 's/.*(NEEDED).*\[\(libuc[pst][^]]*\)\].*/\1/p' | tr '\n' ' ')
ucxsyms=$(nm -D --undefined-only "$LIB" | awk '$2 ~ /^(ucp|ucs|uct|ucm)_/ { print $2 }' | tr '\n' ' ')
check "$([ -z "$ucxdeps$ucxsyms" ] && echo 0 || echo 1)" \
    "libweft.so needs no UCX library${ucxdeps:+ (needs: $ucxdeps)} and binds no UCX call${ucxsyms:+ (undefined: $ucxsyms)}"
# where UCX cannot load (hidden here by a mount namespace), the ucx transport is an error
# that names it, and the others run as before
UCP=$(ldconfig -p 2>/dev/null | awk '/libucp\.so\.0 / { print $NF; exit }')
if ! grep -q 'libucp\.so\.0' "$LIB"; then
    echo "skip - no UCX: weft is built without the ucx transport"
elif [ -z "$UCP" ] || [ ! -x "$TMP/prog" ] || ! unshare -m true 2>/dev/null; then
    echo "skip - no UCX: needs libucp.so.0 in the loader's cache and unshare -m (root)"
else
    hidden() {  # hidden TRANSPORT: the program on 2 ranks with libucp.so.0 unloadable
        unshare -m sh -c 'mount --bind /dev/null "$0" && exec "$@"' "$UCP" \
            env LD_LIBRARY_PATH="$B/lib" WEFT_TRANSPORT="$1" timeout 60 \
            "$B/bin/weftrun" -n 2 "$TMP/prog" 2>&1
    }
    out=$(hidden ucx); rc=$?
    check "$([ $rc != 0 ] && echo "$out" | grep -q 'ucx: cannot load UCX (libucp.so.0' && echo 0 || echo 1)" \
        "no UCX: WEFT_TRANSPORT=ucx fails naming libucp.so.0 (exit $rc: $(echo "$out" | grep -m1 'init:' | cut -c1-160))"
    out=$(hidden auto); rc=$?
    check "$([ $rc = 0 ] && echo 0 || echo 1)" \
        "no UCX: WEFT_TRANSPORT=auto runs on 2 ranks (exit $rc: $(echo "$out" | tr '\n' ' ' | cut -c1-120))"
fi

echo "test_symbols.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
