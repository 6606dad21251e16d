/*
 * mem.c - weft_mem_alloc: memory that the other ranks of a host can map.
 *
 * Each allocation is its own memfd, mapped shared. A peer that is told (base, size, fd,
 * serial) in a call's address exchange opens /proc/<owner pid>/fd/<fd> and maps the
 * same pages (comm/shm/shm_rma.c: its rptr), so a collective reads the owner's buffer in place.
 * Opening another process's fd needs the same permission as process_vm_readv, which is
 * why the tuner offers this only where single-copy access was agreed at init (cma_all).
 * Nothing is named in /dev/shm: the pages go away with the last fd and mapping, so a job
 * that dies leaves nothing behind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mem.h"
#include "status.h"
#include "weft.h"

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_region_t *mem_tab;
static size_t mem_n, mem_cap;
static uint32_t mem_serial;

/* free hooks: their own lock, held while they run (a hook takes its transport's lock,
 * which may be held around mem_lookup: never under mem_lock) */
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct { mem_free_hook_t fn; void *ctx; } hook_t;
static hook_t *hooks;
static int nhooks, hooks_cap;

int mem_free_hook_add(mem_free_hook_t fn, void *ctx)
{
    pthread_mutex_lock(&hook_lock);
    if (nhooks == hooks_cap) {
        int cap = hooks_cap ? 2 * hooks_cap : 8;
        hook_t *t = realloc(hooks, (size_t)cap * sizeof(*t));
        if (t == NULL) {
            pthread_mutex_unlock(&hook_lock);
            return -1;
        }
        hooks = t;
        hooks_cap = cap;
    }
    hooks[nhooks++] = (hook_t){ fn, ctx };
    pthread_mutex_unlock(&hook_lock);
    return 0;
}

void mem_free_hook_remove(mem_free_hook_t fn, void *ctx)
{
    pthread_mutex_lock(&hook_lock);
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].fn == fn && hooks[i].ctx == ctx) {
            hooks[i] = hooks[--nhooks];
            break;
        }
    pthread_mutex_unlock(&hook_lock);
}

/* fork(): a child's view of the regions becomes its own (MAP_PRIVATE over the same
 * memfd: copy on write, as malloc'd memory is); they were MAP_SHARED, so a data-loader
 * worker that wrote a tensor there wrote the parent's (before 2026-11-27). The child still
 * sees the parent's later writes to pages it has not written itself. Its copies of the
 * memfds are closed and the regions no longer offered to peers (fd -1, as plain memory):
 * a peer that mapped one would read the parent's pages, not the child's (before
 * 2026-11-28 a worker's single-copy all-reduce of such buffers summed the parent's). */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&hook_lock);
    pthread_mutex_lock(&mem_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&mem_lock);
    pthread_mutex_unlock(&hook_lock);
}

static void fork_child(void)
{
    for (size_t i = 0; i < mem_n; i++) {
        if (mem_tab[i].fd < 0)
            continue;           /* a child's child: already its own */
        mmap((void *)(uintptr_t)mem_tab[i].base, mem_tab[i].size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_FIXED, mem_tab[i].fd, 0);
        close(mem_tab[i].fd);
        mem_tab[i].fd = -1;
    }
    fork_parent();
}

static void atfork_install(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

weft_status_t weft_mem_alloc(void **ptr_p, size_t size)
{
    pthread_once(&atfork_once, atfork_install);
    if (ptr_p == NULL)
        return weft_error(WEFT_ERR_INVALID_ARG, "weft_mem_alloc: ptr_p is NULL");
    if (size == 0)
        return weft_error(WEFT_ERR_INVALID_ARG, "weft_mem_alloc: size is 0");
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    if (size > SIZE_MAX - page)
        return weft_error(WEFT_ERR_INVALID_ARG, "weft_mem_alloc: size %zu is too large", size);
    size_t bytes = (size + page - 1) / page * page;

    int fd = memfd_create("weft-mem", MFD_CLOEXEC);
    if (fd < 0)
        return weft_error(WEFT_ERR_SYSTEM, "weft_mem_alloc: memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        return weft_error(e == EINVAL || e == EFBIG ? WEFT_ERR_INVALID_ARG : WEFT_ERR_NO_MEMORY,
                          "weft_mem_alloc: cannot size %zu bytes: %s", bytes, strerror(e));
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_mem_alloc: cannot map %zu bytes: %s",
                          bytes, strerror(e));
    }
    /* the table grows in the same critical section that appends: another thread's
     * allocation in between must not take the room this one made */
    pthread_mutex_lock(&mem_lock);
    if (mem_n == mem_cap) {
        size_t cap = mem_cap ? 2 * mem_cap : 16;
        mem_region_t *t = realloc(mem_tab, cap * sizeof(*t));
        if (t == NULL) {
            pthread_mutex_unlock(&mem_lock);
            munmap(p, bytes);
            close(fd);
            return weft_error(WEFT_ERR_NO_MEMORY, "weft_mem_alloc: out of memory");
        }
        mem_tab = t;
        mem_cap = cap;
    }
    mem_tab[mem_n++] = (mem_region_t){ (uint64_t)(uintptr_t)p, bytes, fd, ++mem_serial };
    pthread_mutex_unlock(&mem_lock);
    *ptr_p = p;
    return WEFT_OK;
}

weft_status_t weft_mem_free(void *ptr)
{
    if (ptr == NULL)
        return WEFT_OK;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < mem_n; i++) {
        mem_region_t r = mem_tab[i];
        if (r.base != (uint64_t)(uintptr_t)ptr)
            continue;
        mem_tab[i] = mem_tab[--mem_n];
        pthread_mutex_unlock(&mem_lock);
        pthread_mutex_lock(&hook_lock);     /* registrations of it go first */
        for (int h = 0; h < nhooks; h++)
            hooks[h].fn(hooks[h].ctx, &r);
        pthread_mutex_unlock(&hook_lock);
        munmap(ptr, r.size);
        if (r.fd >= 0)
            close(r.fd);
        return WEFT_OK;
    }
    pthread_mutex_unlock(&mem_lock);
    return weft_error(WEFT_ERR_INVALID_ARG, "weft_mem_free: %p did not come from weft_mem_alloc",
                      ptr);
}

void mem_lookup(const void *ptr, mem_region_t *r)
{
    uint64_t a = (uint64_t)(uintptr_t)ptr;
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    if (ptr == NULL)
        return;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < mem_n; i++)
        if (mem_tab[i].fd >= 0 && a >= mem_tab[i].base && a - mem_tab[i].base < mem_tab[i].size) {
            *r = mem_tab[i];
            break;
        }
    pthread_mutex_unlock(&mem_lock);
}
