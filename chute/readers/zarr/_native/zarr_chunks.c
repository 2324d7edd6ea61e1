/* Read and decompress zarr chunk files straight into a batch, without the GIL
 * (docs/design.md, "Zarr groups").
 *
 * One call works through jobs [0, n) together with the other threads calling it on the same
 * jobs: each takes the next job from a shared atomic counter, so threads stay busy until the
 * batch is done however the scheduler treats them. Job k reads the file `prefix chunks[k]
 * suffix` of the store (or, with prefix NULL, takes sources[k] from memory: what the
 * decompression bound measures) into this thread's reused buffer and decompresses it with
 * this thread's reused zstd context (both freed when the thread ends) into dests[k], which must come out exactly `nbytes` long; an uncompressed chunk
 * is read straight into dests[k]. Per Python call ctypes releases the GIL, so all of this --
 * opening, reading, decompressing -- runs in parallel.
 *
 * Chunk files must stay inside their store (docs/design.md, "Zarr groups"): the path is
 * relative to the store, opened as root_fd, and opened with openat2(RESOLVE_BENEATH), where the
 * kernel refuses any way out at no extra cost; where that call is missing (old kernels), the
 * path's realpath must start with real_root. A file refused either way is status OUTSIDE, and
 * the caller decides (an absolute symlink back inside is fine). Files are opened with
 * O_NONBLOCK (a FIFO opens at once) and anything but a regular file is NOT_REGULAR.
 *
 * libzstd is not linked: its functions come in as pointers taken from the library chute
 * found loaded (struct zstd_api), so the shim needs no headers. The declarations are zstd's
 * stable public ABI (zstd.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct zstd_api {
    void *(*create_dctx)(void);
    size_t (*decompress_dctx)(void *dctx, void *dst, size_t capacity, const void *src,
                              size_t size);
    unsigned (*is_error)(size_t code);
    size_t (*free_dctx)(void *dctx);
};

enum { OK = 0, MISSING = 1, IO_ERROR = 2, NOT_DECODABLE = 3, WRONG_SIZE = 4, OUTSIDE = 5,
       NOT_REGULAR = 6 };

struct store {
    int root_fd;           /* the store's folder */
    int beneath;           /* openat2(RESOLVE_BENEATH) works here (probed by the caller) */
    const char *root;      /* its path as given (relative paths are joined to it) */
    const char *real_root; /* its resolved path, ending in '/' */
};

struct open_how_ { /* linux/openat2.h */
    uint64_t flags, mode, resolve;
};

/* A descriptor of `relative` inside the store, or -1 with *code MISSING, IO_ERROR or OUTSIDE. */
static int open_inside(const struct store *store, const char *relative, int *code) {
    int fd;
#ifdef SYS_openat2
    if (store->beneath) {
        struct open_how_ how = {O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0, 0x08 /* RESOLVE_BENEATH */};
        fd = (int)syscall(SYS_openat2, store->root_fd, relative, &how, sizeof how);
        if (fd < 0)
            *code = errno == ENOENT ? MISSING : errno == EXDEV ? OUTSIDE : IO_ERROR;
        return fd;
    }
#endif
    char path[PATH_MAX], real[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", store->root, relative) >= (int)sizeof path) {
        *code = IO_ERROR;
        return -1;
    }
    if (realpath(path, real) == NULL) {
        *code = errno == ENOENT ? MISSING : IO_ERROR;
        return -1;
    }
    if (strncmp(real, store->real_root, strlen(store->real_root)) != 0) {
        *code = OUTSIDE;
        return -1;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        *code = errno == ENOENT ? MISSING : IO_ERROR;
    return fd;
}

static __thread void *dctx;       /* this thread's zstd context, kept for its life */
static __thread char *buffer;     /* this thread's read buffer */
static __thread size_t capacity;

/* Both are freed when their thread ends (a key's destructor runs while the thread's own
 * variables still exist): a program that starts a new reading thread per epoch or per
 * Pipeline would otherwise keep one context and one buffer per thread it ever had. */
static size_t (*free_dctx)(void *);
static pthread_key_t thread_end_key;
static pthread_once_t thread_end_once = PTHREAD_ONCE_INIT;

static void thread_end(void *unused) {
    (void)unused;
    if (dctx != NULL && free_dctx != NULL)
        free_dctx(dctx);
    dctx = NULL;
    free(buffer);
    buffer = NULL;
    capacity = 0;
}

static void make_thread_end_key(void) { pthread_key_create(&thread_end_key, thread_end); }

static void free_at_thread_end(void) {
    pthread_once(&thread_end_once, make_thread_end_key);
    if (pthread_getspecific(thread_end_key) == NULL)
        pthread_setspecific(thread_end_key, (void *)1);
}

static int read_file(const struct store *store, const char *path, char *into, size_t limit,
                     size_t *size) {
    int code;
    int fd = open_inside(store, path, &code);
    if (fd < 0)
        return code;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return IO_ERROR;
    }
    if (!S_ISREG(st.st_mode)) { /* a FIFO would block the read forever; a folder is no chunk */
        close(fd);
        return NOT_REGULAR;
    }
    size_t want = (size_t)st.st_size;
    if (into == NULL) { /* into the thread's buffer, grown as needed */
        if (want > capacity) {
            char *grown = realloc(buffer, want);
            if (grown == NULL) {
                close(fd);
                return IO_ERROR;
            }
            buffer = grown;
            capacity = want;
            free_at_thread_end();
        }
        into = buffer;
    } else if (want != limit) { /* an uncompressed chunk of the wrong size */
        close(fd);
        *size = want;
        return WRONG_SIZE;
    }
    size_t done = 0;
    while (done < want) {
        ssize_t got = pread(fd, into + done, want - done, (off_t)done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        done += (size_t)got;
    }
    close(fd);
    *size = done;
    return done == want ? OK : IO_ERROR;
}

/* codec: 0 uncompressed, 1 zstd. status[k]: one of the enum above. */
int64_t chute_read_chunks(const struct zstd_api *api, int codec, const struct store *store,
                          const char *prefix,
                          const char *suffix, const int64_t *chunks, const char *const *sources,
                          const size_t *sizes, char *const *dests, size_t nbytes, int64_t n,
                          int64_t *next, int32_t *status) {
    char path[4096];
    int64_t done = 0;
    for (;;) {
        int64_t k = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
        if (k >= n)
            return done;
        done++;
        const char *src;
        size_t size;
        if (prefix != NULL) {
            if (snprintf(path, sizeof path, "%s%lld%s", prefix, (long long)chunks[k], suffix)
                    >= (int)sizeof path) {
                status[k] = IO_ERROR;
                continue;
            }
            int code = read_file(store, path, codec == 0 ? dests[k] : NULL, nbytes, &size);
            if (code != OK || codec == 0) {
                status[k] = code;
                continue;
            }
            src = buffer;
        } else {
            src = sources[k];
            size = sizes[k];
            if (codec == 0) {
                if (size != nbytes) {
                    status[k] = WRONG_SIZE;
                    continue;
                }
                memcpy(dests[k], src, size);
                status[k] = OK;
                continue;
            }
        }
        if (dctx == NULL) {
            free_dctx = api->free_dctx;
            if ((dctx = api->create_dctx()) == NULL) {
                status[k] = IO_ERROR;
                continue;
            }
            free_at_thread_end();
        }
        size_t written = api->decompress_dctx(dctx, dests[k], nbytes, src, size);
        if (api->is_error(written))
            status[k] = NOT_DECODABLE; /* corrupt, or larger than a chunk */
        else
            status[k] = written == nbytes ? OK : WRONG_SIZE;
    }
}
