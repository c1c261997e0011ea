/* teiresias communication profiler: an LD_PRELOAD interposer (Tiresias §3.3.1).
 *
 * Records, for a short profiling window, the communication of one training
 * process so the aggregator (profiler/aggregate.py) can find the job's
 * iteration period, bytes per iteration and skew (largest collective / all
 * collective bytes of an iteration).
 *
 * Two layers:
 *  - sockets: gloo (PyTorch on CPU) sends every message as one 48-byte header
 *    (nbytes, opcode, slot, offset, length, roffset: six size_t) followed by
 *    the payload, possibly over several partial writev() calls; the receiver
 *    reads the header then the payload with recv()/read(). The header's slot
 *    names the collective, so bytes are attributed to it. Only TCP sockets
 *    that carry a valid gloo header count: the rendezvous store (MASTER_PORT),
 *    DNS (UDP) and netlink never do, and are also excluded by type/port.
 *  - NCCL: ncclAllReduce & co are exported here; the real functions are
 *    resolved lazily on the first call, including when libnccl was loaded
 *    RTLD_LOCAL (dlsym(RTLD_NEXT) then fails): dlopen("libnccl.so.2",
 *    RTLD_NOLOAD) + dlsym("pncclX").
 *
 * Rules kept here:
 *  - nothing but libc/libdl; never call back into an intercepted function
 *    (internal work uses the resolved real pointers or syscall());
 *  - inert unless TEIRESIAS_PROFILE_DIR is set; the record file is created on
 *    the first relevant call, so children that never communicate leave none;
 *  - after the window (seconds, or iterations marked by tprof_mark_iteration)
 *    or at the size cap every wrapper is one flag test and a tail call;
 *  - errno is preserved across our own bookkeeping.
 *
 * Env: TEIRESIAS_PROFILE_DIR, TEIRESIAS_PROFILE_SECONDS (default 30),
 * TEIRESIAS_PROFILE_ITERS (default 0: no limit), TEIRESIAS_PROFILE_MAX_BYTES
 * (default 16 MiB per process), TEIRESIAS_PROFILE_IGNORE_PORTS (comma list,
 * added to MASTER_PORT), TEIRESIAS_NCCL_LIB (default libnccl.so.2).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tprof.h"

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

#define GLOO_HDR 48u      /* sizeof(gloo::transport::tcp::Op::preamble) */
#define MAX_FD 65536
#define MAX_PORTS 16

/* ---- real libc functions ------------------------------------------------ */
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*readv_fn)(int, const struct iovec *, int);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);
typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*recvfrom_fn)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*recvmsg_fn)(int, struct msghdr *, int);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef int (*socket_fn)(int, int, int);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*close_fn)(int);

static read_fn real_read;
static write_fn real_write;
static readv_fn real_readv;
static writev_fn real_writev;
static recv_fn real_recv;
static send_fn real_send;
static recvfrom_fn real_recvfrom;
static sendto_fn real_sendto;
static recvmsg_fn real_recvmsg;
static sendmsg_fn real_sendmsg;
static socket_fn real_socket;
static accept_fn real_accept;
static accept4_fn real_accept4;
static connect_fn real_connect;
static dup2_fn real_dup2;
static dup3_fn real_dup3;
static close_fn real_close;

/* Resolve on demand too: another library's constructor may call us first. */
static void *resolve_next(void **slot, const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    return f;
}
#define REAL(name)                                                          \
    ((__typeof__(real_##name))(LIKELY(real_##name != NULL)                  \
         ? (void *)real_##name                                              \
         : resolve_next((void **)&real_##name, #name)))

/* ---- configuration and global state --------------------------------------- */
static int g_enabled;                 /* TEIRESIAS_PROFILE_DIR set */
static atomic_int g_closed;           /* window over: pass through only */
static char g_dir[1024];
static uint64_t g_window_ns = 30ull * 1000000000ull;
static uint64_t g_iter_limit;         /* 0: no limit */
static uint64_t g_max_bytes = 16ull << 20;
static int g_ports[MAX_PORTS];
static int g_nports;

/* Record file: 0 none, 1 being created, 2 ready, 3 failed (stay inert). */
static atomic_int g_file_state;
static struct tprof_header *g_hdr;
static struct tprof_record *g_recs;
static size_t g_map_len;

/* Per-fd bookkeeping, allocated on first use (anonymous mmap, pages touched
 * only for fds that are used). */
enum fd_class { FD_UNKNOWN = 0, FD_GLOO = 1, FD_OTHER = 2 };
struct dir_state {
    uint64_t remaining;  /* bytes of the current message (header incl.) still to move */
    uint64_t hdr_left;   /* of which header bytes */
    uint64_t slot, length, offset, opcode;
    uint32_t hdr_got;    /* receive side: header bytes gathered so far */
    unsigned char hdr[GLOO_HDR];
};
struct fd_state {
    struct dir_state tx, rx;
};
static _Atomic(unsigned char *) g_class;       /* enum fd_class per fd */
static _Atomic(struct fd_state *) g_fds;

static _Atomic uint64_t g_nccl_seq;

/* ---- small helpers ------------------------------------------------------ */
static inline uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int active(void) {
    return g_enabled && !atomic_load_explicit(&g_closed, memory_order_relaxed);
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return dflt;
    char *end = NULL;
    double d = strtod(v, &end);
    if (end == v || d < 0) return dflt;
    return (uint64_t)d;
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return dflt;
    return atoi(v);
}

/* First of several launchers' variables that is set (torchrun, srun, MPI). */
static int env_first_int(const char *const *names, int dflt) {
    for (; *names != NULL; names++) {
        const char *v = getenv(*names);
        if (v != NULL && *v != '\0') return atoi(v);
    }
    return dflt;
}
static const char *const RANK_VARS[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
static const char *const WORLD_VARS[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
static const char *const LOCAL_VARS[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", NULL};

static void parse_ports(void) {
    g_nports = 0;
    int mp = env_int("MASTER_PORT", 0);
    if (mp > 0) g_ports[g_nports++] = mp;
    const char *v = getenv("TEIRESIAS_PROFILE_IGNORE_PORTS");
    while (v != NULL && *v != '\0' && g_nports < MAX_PORTS) {
        char *end = NULL;
        long p = strtol(v, &end, 10);
        if (end == v) break;
        if (p > 0 && p < 65536) g_ports[g_nports++] = (int)p;
        v = (*end == ',') ? end + 1 : end;
        if (*end != ',') break;
    }
}

static void *anon_map(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Lazily allocate the per-fd tables; a lost race frees its copy. */
static int ensure_tables(void) {
    if (LIKELY(atomic_load_explicit(&g_fds, memory_order_acquire) != NULL)) return 1;
    unsigned char *cls = anon_map(MAX_FD);
    struct fd_state *fds = anon_map(sizeof(struct fd_state) * MAX_FD);
    if (cls == NULL || fds == NULL) {
        if (cls) munmap(cls, MAX_FD);
        if (fds) munmap(fds, sizeof(struct fd_state) * MAX_FD);
        return 0;
    }
    unsigned char *expect_c = NULL;
    if (!atomic_compare_exchange_strong(&g_class, &expect_c, cls)) munmap(cls, MAX_FD);
    struct fd_state *expect_f = NULL;
    if (!atomic_compare_exchange_strong(&g_fds, &expect_f, fds))
        munmap(fds, sizeof(struct fd_state) * MAX_FD);
    return 1;
}

/* A socket fd was born or died: whatever we knew about this number is stale.
 * (libc closes fds internally without going through close(), so a cached
 * class must be dropped wherever a socket can appear on a reused number.) */
static inline void forget_fd(int fd) {
    if (fd < 0 || fd >= MAX_FD) return;
    unsigned char *cls = atomic_load_explicit(&g_class, memory_order_acquire);
    struct fd_state *fds = atomic_load_explicit(&g_fds, memory_order_acquire);
    if (cls != NULL) cls[fd] = FD_UNKNOWN;
    if (fds != NULL) memset(&fds[fd], 0, sizeof(fds[fd]));
}

static int port_ignored(const struct sockaddr_storage *ss) {
    int port = 0;
    if (ss->ss_family == AF_INET) port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
    else if (ss->ss_family == AF_INET6) port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    for (int i = 0; i < g_nports; i++)
        if (g_ports[i] == port) return 1;
    return 0;
}

/* Is fd a TCP (AF_INET/AF_INET6 stream) socket that is not the rendezvous
 * store? Cached per fd number until the number is reused. */
static int fd_is_data_tcp(int fd) {
    if (fd < 0 || fd >= MAX_FD || !ensure_tables()) return 0;
    unsigned char *cls = atomic_load_explicit(&g_class, memory_order_acquire);
    if (cls[fd] != FD_UNKNOWN) return cls[fd] == FD_GLOO;
    int saved = errno;
    int ok = 0, type = 0, domain = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM) {
        len = sizeof(domain);
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
            (domain == AF_INET || domain == AF_INET6)) {
            struct sockaddr_storage a, b;
            socklen_t la = sizeof(a), lb = sizeof(b);
            memset(&a, 0, sizeof(a));
            memset(&b, 0, sizeof(b));
            ok = 1;
            if (getsockname(fd, (struct sockaddr *)&a, &la) == 0 && port_ignored(&a)) ok = 0;
            if (getpeername(fd, (struct sockaddr *)&b, &lb) == 0 && port_ignored(&b)) ok = 0;
        }
    }
    errno = saved;
    cls[fd] = ok ? FD_GLOO : FD_OTHER;
    return ok;
}

/* A gloo preamble: six size_t. SEND_BUFFER/SEND_UNBOUND_BUFFER (0/1) carry
 * `length` payload bytes and nbytes = 48 + length; the NOTIFY_* ops (2/3)
 * carry none. Anything else is not gloo. Returns payload bytes or -1. */
static int64_t gloo_payload(const unsigned char *p, uint64_t *slot, uint64_t *length,
                            uint64_t *offset, uint64_t *opcode) {
    uint64_t f[6];
    memcpy(f, p, sizeof(f));
    const uint64_t nbytes = f[0], op = f[1], len = f[4];
    if (op > 3) return -1;
    if (op <= 1) {
        if (nbytes != GLOO_HDR + len) return -1;
    } else if (nbytes != GLOO_HDR) {
        return -1;
    }
    if (len > (1ull << 44)) return -1;
    *slot = f[2];
    *length = len;
    *offset = f[3];
    *opcode = op;
    return op <= 1 ? (int64_t)len : 0;
}

/* ---- record file ----------------------------------------------------------- */
static void sys_mkdirs(const char *path) {
    char buf[sizeof(g_dir)];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf)) return;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            syscall(SYS_mkdirat, AT_FDCWD, buf, 0700);
            buf[i] = c;
        }
    }
}

static void create_file(void) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_file_state, &expect, 1)) {
        /* Another thread is creating it: wait briefly (creation is a few syscalls). */
        for (int i = 0; i < 100000 && atomic_load(&g_file_state) == 1; i++) sched_yield();
        return;
    }
    int saved = errno;
    uint64_t cap = g_max_bytes > TPROF_HEADER_SIZE
                       ? (g_max_bytes - TPROF_HEADER_SIZE) / TPROF_RECORD_SIZE : 0;
    if (cap < 16) cap = 16;
    size_t len = TPROF_HEADER_SIZE + cap * TPROF_RECORD_SIZE;
    char host[32] = {0};
    gethostname(host, sizeof(host) - 1);
    int rank = env_first_int(RANK_VARS, -1);
    char path[sizeof(g_dir) + 128];
    sys_mkdirs(g_dir);
    snprintf(path, sizeof(path), "%s/rank%d-%s-%d.tprof", g_dir, rank, host, (int)getpid());
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    void *map = MAP_FAILED;
    if (fd >= 0) {
        /* 0644 whatever the umask: in a spool control folder the controller reads
         * it through the folder's group (teiresias/jobfiles.py, SHARED_FILE_MODE). */
        syscall(SYS_fchmod, fd, 0644);
        if (syscall(SYS_ftruncate, fd, (off_t)len) == 0)
            map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        syscall(SYS_close, fd);  /* not close(): that is ours */
    }
    if (map == MAP_FAILED) {
        atomic_store(&g_file_state, 3);
        atomic_store(&g_closed, 1);
        errno = saved;
        return;
    }
    struct tprof_header *h = map;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    memcpy(h->magic, TPROF_MAGIC, 8);
    h->version = TPROF_VERSION;
    h->header_size = TPROF_HEADER_SIZE;
    h->record_size = TPROF_RECORD_SIZE;
    h->state = TPROF_RECORDING;
    h->capacity = cap;
    h->count = 0;
    h->start_mono_ns = mono_ns();
    h->start_real_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    h->pid = (int32_t)getpid();
    h->rank = rank;
    h->world_size = env_first_int(WORLD_VARS, -1);
    h->local_rank = env_first_int(LOCAL_VARS, -1);
    h->window_ns = g_window_ns;
    h->slurm_restart = env_int("SLURM_RESTART_COUNT", -1);
    h->elastic_restart = env_int("TORCHELASTIC_RESTART_COUNT", -1);
    memcpy(h->host, host, sizeof(h->host) - 1);
    g_map_len = len;
    g_recs = (struct tprof_record *)((char *)map + TPROF_HEADER_SIZE);
    g_hdr = h;
    atomic_store(&g_file_state, 2);
    errno = saved;
}

static void close_window(uint32_t state) {
    if (atomic_exchange(&g_closed, 1)) return;
    if (g_hdr != NULL) __atomic_store_n(&g_hdr->state, state, __ATOMIC_RELEASE);
}

/* Claim a record slot; NULL when there is no file, the window is over or the
 * file is full. The caller fills it and publishes it with publish(). */
static struct tprof_record *claim(uint64_t t0) {
    if (UNLIKELY(atomic_load_explicit(&g_file_state, memory_order_acquire) != 2)) {
        create_file();
        if (atomic_load(&g_file_state) != 2) return NULL;
    }
    struct tprof_header *h = g_hdr;
    /* t0 may precede start_mono_ns: the call that created the file began first. */
    if (t0 > h->start_mono_ns && t0 - h->start_mono_ns >= g_window_ns) {
        close_window(TPROF_WINDOW_DONE);
        return NULL;
    }
    uint64_t i = __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
    if (i >= h->capacity) {
        __atomic_fetch_add(&h->dropped, 1, __ATOMIC_RELAXED);
        close_window(TPROF_FULL);
        return NULL;
    }
    return &g_recs[i];
}

static inline void publish(struct tprof_record *r, uint16_t kind) {
    __atomic_store_n(&r->kind, kind, __ATOMIC_RELEASE);  /* last: readers skip kind 0 */
}

static void log_sock(uint16_t kind, uint16_t flags, int fd, uint64_t t0, uint64_t t1,
                     uint64_t bytes, const struct dir_state *d) {
    struct tprof_record *r = claim(t0);
    if (r == NULL) return;
    uint64_t dur = t1 - t0;
    r->t_ns = t0 > g_hdr->start_mono_ns ? t0 - g_hdr->start_mono_ns : 0;
    r->dur_ns = dur > 0xffffffffull ? 0xffffffffu : (uint32_t)dur;
    r->flags = flags;
    r->bytes = bytes;
    r->slot = d->slot;
    r->msg_len = d->length;
    r->offset = d->offset;
    r->opcode = d->opcode;
    r->fd = fd;
    r->nranks = 0;
    publish(r, kind);
}

/* ---- socket accounting ----------------------------------------------------- */
static inline struct fd_state *fd_state_of(int fd) {
    if (fd < 0 || fd >= MAX_FD) return NULL;
    struct fd_state *fds = atomic_load_explicit(&g_fds, memory_order_acquire);
    return fds ? &fds[fd] : NULL;
}

/* Account `n` bytes that went out on fd; `first` is the start of what the
 * caller asked to send (iov[0]), used to spot a new gloo header. */
static void on_sent(int fd, const void *first, size_t first_len, ssize_t n, uint64_t t0,
                    uint64_t t1) {
    if (n <= 0) return;
    struct fd_state *s = fd_state_of(fd);
    if (s != NULL && s->tx.remaining > 0) {  /* continuation of a message */
        uint64_t moved = (uint64_t)n < s->tx.remaining ? (uint64_t)n : s->tx.remaining;
        uint64_t hdr = moved < s->tx.hdr_left ? moved : s->tx.hdr_left;
        s->tx.hdr_left -= hdr;
        s->tx.remaining -= moved;
        log_sock(TPROF_SOCK_SEND, 0, fd, t0, t1, moved - hdr, &s->tx);
        return;
    }
    if (first_len < GLOO_HDR || first == NULL) return;
    struct dir_state d = {0};
    int64_t payload = gloo_payload(first, &d.slot, &d.length, &d.offset, &d.opcode);
    if (payload < 0 || !fd_is_data_tcp(fd)) return;
    s = fd_state_of(fd);
    if (s == NULL) return;
    uint64_t total = GLOO_HDR + (uint64_t)payload;
    uint64_t moved = (uint64_t)n < total ? (uint64_t)n : total;
    uint64_t hdr = moved < GLOO_HDR ? moved : GLOO_HDR;
    s->tx = d;
    s->tx.remaining = total - moved;
    s->tx.hdr_left = GLOO_HDR - hdr;
    log_sock(TPROF_SOCK_SEND, TPROF_F_HEADER, fd, t0, t1, moved - hdr, &s->tx);
}

/* Account `n` bytes received into buf (of capacity cap). gloo reads the
 * header with a request of exactly the bytes it still lacks, then the payload. */
static void on_received(int fd, const void *buf, size_t cap, ssize_t n, uint64_t t0,
                        uint64_t t1) {
    if (n <= 0) return;
    struct fd_state *s = fd_state_of(fd);
    if (s != NULL && s->rx.remaining > 0) {
        uint64_t moved = (uint64_t)n < s->rx.remaining ? (uint64_t)n : s->rx.remaining;
        s->rx.remaining -= moved;
        log_sock(TPROF_SOCK_RECV, 0, fd, t0, t1, moved, &s->rx);
        return;
    }
    if (s != NULL && s->rx.hdr_got > 0) {  /* rest of a header that arrived in pieces */
        uint32_t need = GLOO_HDR - s->rx.hdr_got;
        if (cap != need || (size_t)n > need) { s->rx.hdr_got = 0; return; }
        memcpy(s->rx.hdr + s->rx.hdr_got, buf, (size_t)n);
        s->rx.hdr_got += (uint32_t)n;
        if (s->rx.hdr_got < GLOO_HDR) return;
        s->rx.hdr_got = 0;
        struct dir_state d = {0};
        int64_t payload = gloo_payload(s->rx.hdr, &d.slot, &d.length, &d.offset, &d.opcode);
        if (payload < 0) return;
        s->rx = d;
        s->rx.remaining = (uint64_t)payload;
        log_sock(TPROF_SOCK_RECV, TPROF_F_HEADER, fd, t0, t1, 0, &s->rx);
        return;
    }
    if (cap != GLOO_HDR) return;
    if ((size_t)n < GLOO_HDR) {  /* first piece of a header: only on known gloo fds */
        unsigned char *cls = atomic_load_explicit(&g_class, memory_order_acquire);
        if (s != NULL && cls != NULL && cls[fd] == FD_GLOO) {
            memcpy(s->rx.hdr, buf, (size_t)n);
            s->rx.hdr_got = (uint32_t)n;
        }
        return;
    }
    struct dir_state d = {0};
    int64_t payload = gloo_payload(buf, &d.slot, &d.length, &d.offset, &d.opcode);
    if (payload < 0 || !fd_is_data_tcp(fd)) return;
    s = fd_state_of(fd);
    if (s == NULL) return;
    s->rx = d;
    s->rx.remaining = (uint64_t)payload;
    log_sock(TPROF_SOCK_RECV, TPROF_F_HEADER, fd, t0, t1, 0, &s->rx);
}

static inline const void *iov_first(const struct iovec *iov, int cnt, size_t *len) {
    for (int i = 0; i < cnt; i++) {
        if (iov[i].iov_len > 0) { *len = iov[i].iov_len; return iov[i].iov_base; }
    }
    *len = 0;
    return NULL;
}

/* Could this call move gloo bytes? Only then is it timed and inspected, so
 * file I/O pays a table lookup, not two clock reads. */
static inline int tx_maybe(int fd, size_t first_len) {
    if (first_len >= GLOO_HDR) return 1;
    struct fd_state *s = fd_state_of(fd);
    return s != NULL && s->tx.remaining > 0;
}

static inline int rx_maybe(int fd, size_t cap) {
    if (cap == GLOO_HDR) return 1;
    struct fd_state *s = fd_state_of(fd);
    return s != NULL && (s->rx.remaining > 0 || s->rx.hdr_got > 0);
}

/* ---- socket wrappers ------------------------------------------------------- */
EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    if (!active()) return REAL(writev)(fd, iov, cnt);
    size_t fl;
    const void *f = iov_first(iov, cnt, &fl);
    if (!tx_maybe(fd, fl)) return REAL(writev)(fd, iov, cnt);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(writev)(fd, iov, cnt);
    int e = errno;
    on_sent(fd, f, fl, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t write(int fd, const void *buf, size_t len) {
    if (!active() || !tx_maybe(fd, len)) return REAL(write)(fd, buf, len);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(write)(fd, buf, len);
    int e = errno;
    on_sent(fd, buf, len, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags) {
    if (!active() || !tx_maybe(fd, len)) return REAL(send)(fd, buf, len, flags);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(send)(fd, buf, len, flags);
    int e = errno;
    on_sent(fd, buf, len, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
                      const struct sockaddr *to, socklen_t tolen) {
    if (!active() || !tx_maybe(fd, len)) return REAL(sendto)(fd, buf, len, flags, to, tolen);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(sendto)(fd, buf, len, flags, to, tolen);
    int e = errno;
    on_sent(fd, buf, len, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    if (!active()) return REAL(sendmsg)(fd, msg, flags);
    size_t fl = 0;
    const void *f = msg ? iov_first(msg->msg_iov, (int)msg->msg_iovlen, &fl) : NULL;
    if (!tx_maybe(fd, fl)) return REAL(sendmsg)(fd, msg, flags);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(sendmsg)(fd, msg, flags);
    int e = errno;
    on_sent(fd, f, fl, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t read(int fd, void *buf, size_t len) {
    if (!active() || !rx_maybe(fd, len)) return REAL(read)(fd, buf, len);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(read)(fd, buf, len);
    int e = errno;
    on_received(fd, buf, len, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags) {
    if (!active() || (flags & MSG_PEEK) || !rx_maybe(fd, len)) return REAL(recv)(fd, buf, len, flags);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(recv)(fd, buf, len, flags);
    int e = errno;
    on_received(fd, buf, len, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
                        socklen_t *fromlen) {
    if (!active() || (flags & MSG_PEEK) || !rx_maybe(fd, len))
        return REAL(recvfrom)(fd, buf, len, flags, from, fromlen);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(recvfrom)(fd, buf, len, flags, from, fromlen);
    int e = errno;
    on_received(fd, buf, len, n, t0, mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
    if (!active()) return REAL(readv)(fd, iov, cnt);
    size_t fl;
    const void *f = iov_first(iov, cnt, &fl);
    if (!rx_maybe(fd, fl)) return REAL(readv)(fd, iov, cnt);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(readv)(fd, iov, cnt);
    int e = errno;
    /* A header is only recognised when it lands in the first buffer. */
    on_received(fd, f, fl, n > 0 && (size_t)n > fl && fl == GLOO_HDR ? (ssize_t)fl : n, t0,
                mono_ns());
    errno = e;
    return n;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
    if (!active() || (flags & MSG_PEEK)) return REAL(recvmsg)(fd, msg, flags);
    size_t fl = 0;
    const void *f = msg ? iov_first(msg->msg_iov, (int)msg->msg_iovlen, &fl) : NULL;
    if (!rx_maybe(fd, fl)) return REAL(recvmsg)(fd, msg, flags);
    uint64_t t0 = mono_ns();
    ssize_t n = REAL(recvmsg)(fd, msg, flags);
    int e = errno;
    on_received(fd, f, fl, n, t0, mono_ns());
    errno = e;
    return n;
}

/* ---- where socket fds are born or die: drop the cached class ------------- */
EXPORT int socket(int domain, int type, int protocol) {
    int fd = REAL(socket)(domain, type, protocol);
    if (g_enabled && fd >= 0) forget_fd(fd);
    return fd;
}

EXPORT int accept(int s, struct sockaddr *addr, socklen_t *len) {
    int fd = REAL(accept)(s, addr, len);
    if (g_enabled && fd >= 0) forget_fd(fd);
    return fd;
}

EXPORT int accept4(int s, struct sockaddr *addr, socklen_t *len, int flags) {
    int fd = REAL(accept4)(s, addr, len, flags);
    if (g_enabled && fd >= 0) forget_fd(fd);
    return fd;
}

EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    if (g_enabled) forget_fd(fd);
    return REAL(connect)(fd, addr, len);
}

EXPORT int dup2(int oldfd, int newfd) {
    int fd = REAL(dup2)(oldfd, newfd);
    if (g_enabled && fd >= 0) forget_fd(fd);
    return fd;
}

EXPORT int dup3(int oldfd, int newfd, int flags) {
    int fd = REAL(dup3)(oldfd, newfd, flags);
    if (g_enabled && fd >= 0) forget_fd(fd);
    return fd;
}

EXPORT int close(int fd) {
    if (g_enabled) forget_fd(fd);
    return REAL(close)(fd);
}

/* ---- iteration marks (called by profiler/model_hook.py through ctypes) --- */
EXPORT void tprof_mark_iteration(void) {
    if (!active() || atomic_load(&g_file_state) != 2) return;
    uint64_t t0 = mono_ns();
    struct tprof_record *r = claim(t0);
    if (r == NULL) return;
    memset(r, 0, sizeof(*r));
    r->t_ns = t0 > g_hdr->start_mono_ns ? t0 - g_hdr->start_mono_ns : 0;
    uint64_t it = __atomic_add_fetch(&g_hdr->iterations, 1, __ATOMIC_RELAXED);
    r->opcode = it;
    publish(r, TPROF_ITER_MARK);
    if (g_iter_limit > 0 && it >= g_iter_limit) close_window(TPROF_WINDOW_DONE);
}

/* The job is ending normally: keep what was recorded as complete (EXITED) and
 * stop. Called from Python's atexit by the model hook, because some torch
 * versions abort in C++ teardown ("terminate called without an active
 * exception") before this library's destructor could mark the file. */
EXPORT void tprof_finish(void) {
    if (atomic_load(&g_file_state) == 2 && g_hdr != NULL) {
        uint32_t expect = TPROF_RECORDING;
        __atomic_compare_exchange_n(&g_hdr->state, &expect, TPROF_EXITED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
    }
    atomic_store(&g_closed, 1);
}

/* 1 while recording (or waiting for the first relevant call), 0 otherwise. */
EXPORT int tprof_active(void) { return active(); }

/* ---- NCCL layer ------------------------------------------------------------ */
typedef int nccl_result;  /* ncclResult_t; ncclSuccess = 0, ncclInternalError = 3 */
typedef int nccl_dtype;
typedef void *nccl_comm;
typedef void *cuda_stream;

enum nccl_op_idx { N_ALLREDUCE, N_REDUCESCATTER, N_ALLGATHER, N_BROADCAST, N_REDUCE,
                   N_SEND, N_RECV, N_COMMCOUNT, N_COUNT };
static const char *const nccl_names[N_COUNT] = {
    "AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce", "Send", "Recv", "CommCount"};
static void *_Atomic nccl_real[N_COUNT];

/* Find the real libnccl function without ever returning our own export. */
static void *nccl_resolve(int idx, void *self) {
    void *f = atomic_load_explicit(&nccl_real[idx], memory_order_acquire);
    if (f != NULL) return f;
    char pname[64], name[64];
    snprintf(pname, sizeof(pname), "pnccl%s", nccl_names[idx]);
    snprintf(name, sizeof(name), "nccl%s", nccl_names[idx]);
    const char *lib = getenv("TEIRESIAS_NCCL_LIB");
    if (lib == NULL || *lib == '\0') lib = "libnccl.so.2";
    /* RTLD_LOCAL chains hide libnccl from RTLD_NEXT; NOLOAD finds the copy
     * already in the process (it never loads a second one). */
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL) {
        f = dlsym(h, pname);
        if (f == NULL || f == self) f = dlsym(h, name);
        dlclose(h);  /* drops only the reference NOLOAD added */
    }
    if (f == NULL || f == self) {
        f = dlsym(RTLD_NEXT, pname);
        if (f == NULL || f == self) f = dlsym(RTLD_NEXT, name);
    }
    if (f == self) f = NULL;
    if (f != NULL) atomic_store_explicit(&nccl_real[idx], f, memory_order_release);
    return f;
}

static size_t nccl_type_size(nccl_dtype t) {
    switch (t) {
        case 0: case 1: case 10: case 11: return 1;  /* int8, uint8, fp8 e4m3/e5m2 */
        case 6: case 9: return 2;                    /* half, bfloat16 */
        case 2: case 3: case 7: return 4;            /* int32, uint32, float */
        case 4: case 5: case 8: return 8;            /* int64, uint64, double */
        default: return 0;
    }
}

static int nccl_nranks(nccl_comm comm) {
    typedef nccl_result (*count_fn)(const nccl_comm, int *);
    extern nccl_result ncclCommCount(const nccl_comm, int *);
    count_fn f = (count_fn)nccl_resolve(N_COMMCOUNT, (void *)&ncclCommCount);
    int n = 0;
    if (f == NULL || f(comm, &n) != 0) return 0;
    return n;
}

static void log_nccl(uint16_t kind, uint64_t t0, uint64_t t1, size_t count, nccl_dtype dt,
                     nccl_comm comm, int peer, int per_rank) {
    if (!active()) return;
    int saved = errno;
    int nranks = nccl_nranks(comm);
    struct tprof_record *r = claim(t0);
    if (r != NULL) {
        uint64_t dur = t1 - t0;
        uint64_t bytes = (uint64_t)count * nccl_type_size(dt);
        if (per_rank && nranks > 0) bytes *= (uint64_t)nranks;
        r->t_ns = t0 > g_hdr->start_mono_ns ? t0 - g_hdr->start_mono_ns : 0;
        r->dur_ns = dur > 0xffffffffull ? 0xffffffffu : (uint32_t)dur;
        r->flags = 0;
        r->bytes = bytes;
        r->slot = (uint64_t)(uintptr_t)comm;
        r->msg_len = count;
        r->offset = (uint64_t)dt;
        r->opcode = atomic_fetch_add(&g_nccl_seq, 1) + 1;
        r->fd = peer;
        r->nranks = nranks;
        publish(r, kind);
    }
    errno = saved;
}

static void nccl_missing(const char *name) {
    static atomic_int warned;
    if (atomic_exchange(&warned, 1)) return;
    char msg[256];
    int n = snprintf(msg, sizeof(msg),
                     "teiresias profiler: nccl%s: real libnccl not found "
                     "(set TEIRESIAS_NCCL_LIB)\n", name);
    if (n > 0) syscall(SYS_write, 2, msg, (size_t)n);
}

#define NCCL_CALL(idx, self, type, ...)                                          \
    type f = (type)nccl_resolve(idx, (void *)&self);                             \
    if (f == NULL) { nccl_missing(nccl_names[idx]); return 3; }                  \
    if (!active()) return f(__VA_ARGS__);                                        \
    uint64_t t0 = mono_ns();                                                     \
    nccl_result rc = f(__VA_ARGS__);                                             \
    uint64_t t1 = mono_ns();

EXPORT nccl_result ncclAllReduce(const void *sb, void *rb, size_t count, nccl_dtype dt, int op,
                                 nccl_comm comm, cuda_stream st) {
    typedef nccl_result (*fn)(const void *, void *, size_t, nccl_dtype, int, nccl_comm, cuda_stream);
    NCCL_CALL(N_ALLREDUCE, ncclAllReduce, fn, sb, rb, count, dt, op, comm, st)
    log_nccl(TPROF_NCCL_ALLREDUCE, t0, t1, count, dt, comm, -1, 0);
    return rc;
}

EXPORT nccl_result ncclReduceScatter(const void *sb, void *rb, size_t recvcount, nccl_dtype dt,
                                     int op, nccl_comm comm, cuda_stream st) {
    typedef nccl_result (*fn)(const void *, void *, size_t, nccl_dtype, int, nccl_comm, cuda_stream);
    NCCL_CALL(N_REDUCESCATTER, ncclReduceScatter, fn, sb, rb, recvcount, dt, op, comm, st)
    log_nccl(TPROF_NCCL_REDUCESCATTER, t0, t1, recvcount, dt, comm, -1, 1);
    return rc;
}

EXPORT nccl_result ncclAllGather(const void *sb, void *rb, size_t sendcount, nccl_dtype dt,
                                 nccl_comm comm, cuda_stream st) {
    typedef nccl_result (*fn)(const void *, void *, size_t, nccl_dtype, nccl_comm, cuda_stream);
    NCCL_CALL(N_ALLGATHER, ncclAllGather, fn, sb, rb, sendcount, dt, comm, st)
    log_nccl(TPROF_NCCL_ALLGATHER, t0, t1, sendcount, dt, comm, -1, 1);
    return rc;
}

EXPORT nccl_result ncclBroadcast(const void *sb, void *rb, size_t count, nccl_dtype dt, int root,
                                 nccl_comm comm, cuda_stream st) {
    typedef nccl_result (*fn)(const void *, void *, size_t, nccl_dtype, int, nccl_comm, cuda_stream);
    NCCL_CALL(N_BROADCAST, ncclBroadcast, fn, sb, rb, count, dt, root, comm, st)
    log_nccl(TPROF_NCCL_BROADCAST, t0, t1, count, dt, comm, root, 0);
    return rc;
}

EXPORT nccl_result ncclReduce(const void *sb, void *rb, size_t count, nccl_dtype dt, int op,
                              int root, nccl_comm comm, cuda_stream st) {
    typedef nccl_result (*fn)(const void *, void *, size_t, nccl_dtype, int, int, nccl_comm,
                              cuda_stream);
    NCCL_CALL(N_REDUCE, ncclReduce, fn, sb, rb, count, dt, op, root, comm, st)
    log_nccl(TPROF_NCCL_REDUCE, t0, t1, count, dt, comm, root, 0);
    return rc;
}

EXPORT nccl_result ncclSend(const void *sb, size_t count, nccl_dtype dt, int peer, nccl_comm comm,
                            cuda_stream st) {
    typedef nccl_result (*fn)(const void *, size_t, nccl_dtype, int, nccl_comm, cuda_stream);
    NCCL_CALL(N_SEND, ncclSend, fn, sb, count, dt, peer, comm, st)
    log_nccl(TPROF_NCCL_SEND, t0, t1, count, dt, comm, peer, 0);
    return rc;
}

EXPORT nccl_result ncclRecv(void *rb, size_t count, nccl_dtype dt, int peer, nccl_comm comm,
                            cuda_stream st) {
    typedef nccl_result (*fn)(void *, size_t, nccl_dtype, int, nccl_comm, cuda_stream);
    NCCL_CALL(N_RECV, ncclRecv, fn, rb, count, dt, peer, comm, st)
    log_nccl(TPROF_NCCL_RECV, t0, t1, count, dt, comm, peer, 0);
    return rc;
}

/* Exported because the wrappers above shadow it for libraries that import it;
 * it must keep working for them. */
EXPORT nccl_result ncclCommCount(const nccl_comm comm, int *count) {
    typedef nccl_result (*fn)(const nccl_comm, int *);
    fn f = (fn)nccl_resolve(N_COMMCOUNT, (void *)&ncclCommCount);
    if (f == NULL) { nccl_missing("CommCount"); return 3; }
    return f(comm, count);
}

/* ---- life cycle ------------------------------------------------------------ */
/* A forked child must not write into its parent's file: it gets its own on
 * its own first relevant call. */
static void after_fork_child(void) {
    if (g_hdr != NULL) munmap(g_hdr, g_map_len);
    g_hdr = NULL;
    g_recs = NULL;
    atomic_store(&g_file_state, 0);
    atomic_store(&g_closed, 0);
    unsigned char *cls = atomic_load(&g_class);
    struct fd_state *fds = atomic_load(&g_fds);
    if (cls) memset(cls, 0, MAX_FD);
    if (fds) madvise(fds, sizeof(struct fd_state) * MAX_FD, MADV_DONTNEED);
}

__attribute__((constructor)) static void tprof_init(void) {
    const char *dir = getenv("TEIRESIAS_PROFILE_DIR");
    if (dir == NULL || *dir == '\0' || strlen(dir) >= sizeof(g_dir)) return;
    strcpy(g_dir, dir);
    double secs = 30.0;
    const char *s = getenv("TEIRESIAS_PROFILE_SECONDS");
    if (s != NULL && *s != '\0') {
        char *end = NULL;
        double v = strtod(s, &end);
        if (end != s && v > 0) secs = v;
    }
    g_window_ns = (uint64_t)(secs * 1e9);
    g_iter_limit = env_u64("TEIRESIAS_PROFILE_ITERS", 0);
    g_max_bytes = env_u64("TEIRESIAS_PROFILE_MAX_BYTES", 16ull << 20);
    parse_ports();
    /* libc symbols are safe to resolve now; NCCL's are not (see nccl_resolve). */
    (void)REAL(read); (void)REAL(write); (void)REAL(readv); (void)REAL(writev);
    (void)REAL(recv); (void)REAL(send); (void)REAL(recvfrom); (void)REAL(sendto);
    (void)REAL(recvmsg); (void)REAL(sendmsg); (void)REAL(socket); (void)REAL(accept);
    (void)REAL(accept4); (void)REAL(connect); (void)REAL(dup2); (void)REAL(dup3);
    (void)REAL(close);
    pthread_atfork(NULL, NULL, after_fork_child);
    g_enabled = 1;
}

__attribute__((destructor)) static void tprof_fini(void) {
    if (atomic_load(&g_file_state) == 2 && g_hdr != NULL &&
        __atomic_load_n(&g_hdr->state, __ATOMIC_ACQUIRE) == TPROF_RECORDING)
        __atomic_store_n(&g_hdr->state, TPROF_EXITED, __ATOMIC_RELEASE);
}
