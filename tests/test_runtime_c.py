"""The C runtime on its own: warnings-clean builds, the thread pool (under ASan/UBSan and TSan),
status messages, thread-count resolution, and .npy reading/writing against numpy."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from aotc.package.build import build_runtime_library

RUNTIME = Path(__file__).resolve().parents[1] / "runtime_c"
SOURCES = ["aotc_runtime.c", "aotc_pool.c", "aotc_npy.c"]
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]

POOL_TEST = r"""
#define _POSIX_C_SOURCE 200809L
#include "aotc_runtime.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { int *hits; void *ctx; } env_t;

static void mark(void *e, int64_t lo, int64_t hi) {
    env_t *env = (env_t *)e;
    int64_t i;
    for (i = lo; i < hi; ++i) env->hits[i] += 1;
}

/* A body that itself calls aotc_parallel_for: the nested loop runs inline. */
static void nested(void *e, int64_t lo, int64_t hi) {
    env_t *env = (env_t *)e;
    int64_t i;
    for (i = lo; i < hi; ++i) {
        env_t inner;
        inner.hits = env->hits + i * 10;
        inner.ctx = env->ctx;
        aotc_parallel_for(env->ctx, mark, &inner, 10);
    }
}

static int check(const int *hits, int64_t n, const char *what, int threads) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        if (hits[i] != 1) {
            printf("FAIL %s threads=%d n=%lld index %lld hit %d times\n", what, threads, (long long)n, (long long)i, hits[i]);
            return 1;
        }
    }
    return 0;
}

static int run_loops(void *ctx, int threads) {
    static const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 13, 64, 100, 1000, 12345};
    int *hits = (int *)malloc(sizeof(int) * 12345);
    size_t s;
    int rep, failed = 0;
    env_t env;
    env.hits = hits;
    env.ctx = ctx;
    for (rep = 0; rep < 20 && !failed; ++rep) {
        for (s = 0; s < sizeof sizes / sizeof sizes[0] && !failed; ++s) {
            memset(hits, 0, sizeof(int) * 12345);
            aotc_parallel_for(ctx, mark, &env, sizes[s]);
            failed |= check(hits, sizes[s], "flat", threads);
        }
        memset(hits, 0, sizeof(int) * 1000);
        aotc_parallel_for(ctx, nested, &env, 100);
        failed |= check(hits, 1000, "nested", threads);
        if (rep % 5 == 0) { /* let the workers fall asleep, then wake them */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    free(hits);
    return failed;
}

int main(void) {
    static const int counts[] = {1, 2, 3, 4, 7};
    size_t i;
    int failed = 0, n = 0, cycle;
    aotc_pool *pool = NULL;

    failed |= run_loops(NULL, 1);
    for (i = 0; i < sizeof counts / sizeof counts[0]; ++i) {
        if (aotc_pool_create(&pool, counts[i]) != AOTC_OK) { printf("FAIL create %d\n", counts[i]); return 1; }
        if (aotc_pool_num_threads(pool) != counts[i]) { printf("FAIL num_threads\n"); return 1; }
        failed |= run_loops(pool, counts[i]);
        aotc_pool_destroy(pool);
    }
    for (cycle = 0; cycle < 20; ++cycle) { /* create/destroy without running anything */
        if (aotc_pool_create(&pool, 3) != AOTC_OK) return 1;
        aotc_pool_destroy(pool);
    }
    aotc_pool_destroy(NULL);
    if (aotc_pool_create(&pool, 0) != AOTC_ERR_BAD_ARGUMENT || pool != NULL) { printf("FAIL 0 threads\n"); failed = 1; }
    if (aotc_pool_create(NULL, 2) != AOTC_ERR_NULL_ARGUMENT) { printf("FAIL NULL out\n"); failed = 1; }

    /* thread count resolution */
    unsetenv("AOTC_NUM_THREADS");
    if (aotc_resolve_num_threads(3, 5, &n) != AOTC_OK || n != 3) { printf("FAIL explicit\n"); failed = 1; }
    if (aotc_resolve_num_threads(0, 5, &n) != AOTC_OK || n != 5) { printf("FAIL default\n"); failed = 1; }
    if (aotc_resolve_num_threads(0, 0, &n) != AOTC_OK || n < 1) { printf("FAIL online\n"); failed = 1; }
    setenv("AOTC_NUM_THREADS", "6", 1);
    if (aotc_resolve_num_threads(0, 5, &n) != AOTC_OK || n != 6) { printf("FAIL env\n"); failed = 1; }
    if (aotc_resolve_num_threads(2, 5, &n) != AOTC_OK || n != 2) { printf("FAIL explicit over env\n"); failed = 1; }
    setenv("AOTC_NUM_THREADS", "junk", 1);
    if (aotc_resolve_num_threads(0, 5, &n) != AOTC_OK || n != 5) { printf("FAIL bad env\n"); failed = 1; }
    if (aotc_resolve_num_threads(-1, 5, &n) != AOTC_ERR_BAD_ARGUMENT) { printf("FAIL negative\n"); failed = 1; }

    /* status messages */
    for (n = 0; n <= AOTC_ERR_INTERNAL; ++n)
        if (strcmp(aotc_status_message(n), "unknown status code") == 0) { printf("FAIL message %d\n", n); failed = 1; }
    if (strcmp(aotc_status_message(-3), "unknown status code") != 0) failed = 1;
    if (!failed) printf("OK\n");
    return failed;
}
"""

NPY_TOOL = r"""
#include "aotc_npy.h"
#include <stdio.h>
/* npy_copy IN OUT: read IN with aotc_npy_read and write it back with aotc_npy_write. */
int main(int argc, char **argv) {
    aotc_npy_array a;
    char err[512];
    if (argc != 3) return 3;
    if (aotc_npy_read(argv[1], &a, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); return 2; }
    if (a.dtype == 0) { fprintf(stderr, "unsupported dtype %s\n", a.descr); return 2; }
    if (aotc_npy_write(argv[2], a.dtype, a.rank, a.shape, a.data, a.num_bytes, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        aotc_npy_free(&a);
        return 2;
    }
    printf("%s %d\n", aotc_npy_dtype_name(a.dtype), (int)a.rank);
    aotc_npy_free(&a);
    return 0;
}
"""


def compile_c(tmp: Path, name: str, text: str, sources: list[str], flags: list[str],
              cc: str = "gcc") -> Path:
    src = tmp / f"{name}.c"
    src.write_text(text)
    exe = tmp / name
    cmd = [cc, *STRICT, *flags, f"-I{RUNTIME}", "-o", str(exe), str(src),
           *[str(RUNTIME / s) for s in sources], "-lpthread", "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


@pytest.mark.parametrize("cc", ["gcc", "aarch64-linux-gnu-gcc"])
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_runtime_compiles_warning_free(tmp_path: Path, cc: str, opt: str) -> None:
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} missing")
    for src in SOURCES:
        proc = subprocess.run([cc, *STRICT, opt, "-fPIC", "-c", "-o", str(tmp_path / "x.o"),
                               str(RUNTIME / src)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "flags",
    [["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
     ["-O1", "-g", "-fsanitize=thread"],
     ["-O1", "-g", "-fsanitize=thread", "-DAOTC_SPIN_NS=0"]],  # every wait goes to sleep
    ids=["asan-ubsan", "tsan", "tsan-nospin"],
)
def test_thread_pool(tmp_path: Path, flags: list[str]) -> None:
    exe = compile_c(tmp_path, "pool_test", POOL_TEST, ["aotc_runtime.c", "aotc_pool.c"], flags)
    run_sanitized(exe, flags)


WORKSPACE_TEST = r"""
#define _POSIX_C_SOURCE 200809L
#include "aotc_runtime.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A model without steps: only its workspace size matters here. */
static const char *cpu_ok(void) { return NULL; }

static int context_with(uint64_t size, unsigned char **out) {
    static aotc_model_desc desc;
    static aotc_model model;
    aotc_context *ctx = NULL;
    memset(&desc, 0, sizeof desc);
    desc.name = "w";
    desc.workspace_size = size;
    desc.workspace_align = AOTC_WORKSPACE_ALIGN;
    memset(&model, 0, sizeof model);
    model.desc = &desc;
    model.cpu_missing = cpu_ok;
    model.default_num_threads = 1;
    if (aotc_context_create(&model, NULL, &ctx, 1) != AOTC_OK) return 1;
    *out = (unsigned char *)aotc_context_workspace(ctx);
    memset(*out, 1, (size_t)size); /* every byte is usable */
    if (size >= ((uint64_t)2 << 20)) {
        /* print the mapping so that the test can find it in /proc/self/smaps */
        FILE *f = fopen("/proc/self/smaps", "r");
        char line[512];
        int mine = 0;
        if (f == NULL) { printf("no smaps\n"); aotc_context_destroy(ctx); return 0; }
        while (fgets(line, sizeof line, f) != NULL) {
            unsigned long lo, hi;
            if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && strchr(line, ' ') != NULL &&
                line[strcspn(line, " ") - 1] != ':') {
                mine = (uintptr_t)*out >= lo && (uintptr_t)*out < hi;
            } else if (mine && (strncmp(line, "AnonHugePages:", 14) == 0 ||
                                strncmp(line, "VmFlags:", 8) == 0)) {
                printf("workspace %s", line);
            }
        }
        fclose(f);
    }
    printf("align %lu\n", (unsigned long)((uintptr_t)*out & (~(uintptr_t)*out + 1))); /* low bit */
    aotc_context_destroy(ctx);
    return 0;
}

int main(void) {
    unsigned char *w;
    if (context_with(1000, &w) != 0) return 1;
    if (context_with((uint64_t)5 << 20, &w) != 0) return 1;
    printf("OK\n");
    return 0;
}
"""


def test_large_workspace_lies_in_huge_pages(tmp_path: Path) -> None:
    """A context's workspace of 2 MiB or more starts on a 2 MiB boundary and its mapping is
    advised as huge pages (VmFlags "hg"; whether the kernel grants them depends on its
    settings and free memory); a small one keeps the 64-byte alignment. Sanitizers clean."""
    flags = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    exe = compile_c(tmp_path, "workspace_test", WORKSPACE_TEST, ["aotc_runtime.c", "aotc_pool.c"],
                    flags)
    run_sanitized(exe, flags)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout
    aligns = [int(line.split()[1]) for line in out.splitlines() if line.startswith("align")]
    assert aligns[0] % 64 == 0 and aligns[1] % (2 << 20) == 0, out
    flags_line = [line for line in out.splitlines() if line.startswith("workspace VmFlags:")]
    if Path("/sys/kernel/mm/transparent_hugepage/enabled").exists():
        assert flags_line and " hg" in flags_line[0], out


def run_sanitized(exe: Path, flags: list[str]) -> None:
    """Run a C test program; it must print OK and no sanitizer may report (a TSan that cannot
    start on this kernel skips the test)."""
    env = {"ASAN_OPTIONS": "detect_leaks=1", "TSAN_OPTIONS": "halt_on_error=1"}
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    if "tsan" in " ".join(flags) and "FATAL: ThreadSanitizer" in proc.stderr:
        pytest.skip("ThreadSanitizer cannot run here: " + proc.stderr.splitlines()[0])
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def npy_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("npy")
    return compile_c(tmp, "npy_copy", NPY_TOOL, ["aotc_npy.c"],
                     ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"])


@pytest.mark.parametrize("dtype", ["<f4", "<f8", "<i8", "<i4", "|u1", "|i1", "|b1"])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4), (1, 1, 1, 1, 5)])
def test_npy_roundtrip(npy_copy: Path, tmp_path: Path, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    src, dst = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(src, x)
    proc = subprocess.run([str(npy_copy), str(src), str(dst)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    y = np.load(dst)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, x)
    raw = dst.read_bytes()
    header_len = int.from_bytes(raw[8:10], "little")
    assert (10 + header_len) % 64 == 0 and raw[9 + header_len : 10 + header_len] == b"\n"


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_header_versions(npy_copy: Path, tmp_path: Path, version: tuple[int, int]) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    src, dst = tmp_path / "a.npy", tmp_path / "b.npy"
    with open(src, "wb") as f:
        np.lib.format.write_array(f, x, version=version)
    proc = subprocess.run([str(npy_copy), str(src), str(dst)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(dst), x)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: np.save(p, np.asfortranarray(np.ones((2, 3), np.float32))), "Fortran-order"),
        (lambda p: np.save(p, np.ones(3, ">f4")), "big-endian"),
        (lambda p: np.save(p, np.ones(3, np.complex64)), "unsupported dtype <c8"),
        (lambda p: p.write_bytes(b"not an npy file at all"), "not a .npy file"),
        (lambda p: p.write_bytes(np.lib.format.magic(1, 0) + b"\x10\x00{'descr': '<f4'"), "truncated"),
        (lambda p: (np.save(p, np.ones(100, np.float32)), p.write_bytes(p.read_bytes()[:-8])), "truncated data"),
    ],
)
def test_npy_errors(npy_copy: Path, tmp_path: Path, make, message: str) -> None:
    src = tmp_path / "a.npy"
    make(src)
    proc = subprocess.run([str(npy_copy), str(src), str(tmp_path / "b.npy")], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Sanitizer" not in proc.stderr


def test_runtime_library_for_jit(tmp_path: Path) -> None:
    """libaotc_runtime.so exports the pool; a Python body sees contiguous ranges covering [0, n),
    cut into at least one chunk per thread (more when the pool balances dynamically)."""
    lib = ctypes.CDLL(str(build_runtime_library(tmp_path)))
    body_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    lib.aotc_pool_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.aotc_parallel_for.argtypes = [ctypes.c_void_p, body_t, ctypes.c_void_p, ctypes.c_int64]
    lib.aotc_pool_destroy.argtypes = [ctypes.c_void_p]
    ranges: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def body(env: int | None, lo: int, hi: int) -> None:
        with lock:
            ranges.append((lo, hi, threading.get_ident()))
        time.sleep(0.001)  # a slow chunk, so that the workers wake before the caller claims all

    callback = body_t(body)
    pool = ctypes.c_void_p()
    assert lib.aotc_pool_create(ctypes.byref(pool), 3) == 0
    for n in (1, 2, 10, 1001):
        ranges.clear()
        lib.aotc_parallel_for(pool, callback, None, n)
        spans = sorted((lo, hi) for lo, hi, _ in ranges)
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert min(n, 3) <= len(spans) <= n
    assert len({t for _, _, t in ranges}) >= 2  # the work really was spread over threads
    ranges.clear()
    lib.aotc_parallel_for(None, callback, None, 50)  # no pool: one inline call
    assert [(lo, hi) for lo, hi, _ in ranges] == [(0, 50)]
    lib.aotc_pool_destroy(pool)
