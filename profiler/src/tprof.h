/* On-disk layout of the teiresias communication profiler's record files.
 *
 * One file per profiled process: <TEIRESIAS_PROFILE_DIR>/rank<R>-<host>-<pid>.tprof
 * = a 128-byte header followed by `capacity` fixed-size 64-byte records.
 * The file is mmap'ed MAP_SHARED, so what was written survives _exit() and
 * SIGKILL (the page cache owns it), which is what lets the aggregator tell a
 * killed job (state still RECORDING) from one that finished its window.
 *
 * profiler/records.py mirrors these structs; change both together and bump
 * TPROF_VERSION.
 */
#ifndef TEIRESIAS_TPROF_H
#define TEIRESIAS_TPROF_H

#include <stdint.h>

#define TPROF_MAGIC "TPROFv1"   /* 8 bytes with the NUL */
#define TPROF_VERSION 1u
#define TPROF_HEADER_SIZE 128u
#define TPROF_RECORD_SIZE 64u

/* header.state */
enum tprof_state {
    TPROF_RECORDING = 0,   /* window open; still this value after a kill */
    TPROF_WINDOW_DONE = 1, /* window closed by time or iteration count */
    TPROF_EXITED = 2,      /* process exited normally inside the window */
    TPROF_FULL = 3,        /* size cap reached before the window closed */
};

/* record.kind */
enum tprof_kind {
    TPROF_SOCK_SEND = 1,
    TPROF_SOCK_RECV = 2,
    TPROF_ITER_MARK = 3,   /* tprof_mark_iteration(), e.g. from the model hook */
    TPROF_NCCL_ALLREDUCE = 16,
    TPROF_NCCL_REDUCESCATTER = 17,
    TPROF_NCCL_ALLGATHER = 18,
    TPROF_NCCL_BROADCAST = 19,
    TPROF_NCCL_REDUCE = 20,
    TPROF_NCCL_SEND = 21,
    TPROF_NCCL_RECV = 22,
};

/* record.flags */
#define TPROF_F_HEADER 1u  /* this call carried a gloo message header */

struct tprof_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t record_size;
    uint32_t state;          /* enum tprof_state */
    uint64_t capacity;       /* records the file can hold */
    uint64_t count;          /* records claimed (atomic); may exceed capacity */
    uint64_t start_mono_ns;  /* CLOCK_MONOTONIC at file creation */
    uint64_t start_real_ns;  /* CLOCK_REALTIME at file creation */
    int32_t pid;
    int32_t rank;            /* $RANK (else SLURM_PROCID, MPI), -1 if unknown */
    int32_t world_size;      /* $WORLD_SIZE (else SLURM_NTASKS, MPI), -1 if unknown */
    int32_t local_rank;      /* $LOCAL_RANK (else SLURM_LOCALID, MPI), -1 if unknown */
    uint64_t iterations;     /* iteration marks seen */
    uint64_t window_ns;      /* configured window length */
    uint64_t dropped;        /* records lost to the size cap */
    int32_t slurm_restart;   /* $SLURM_RESTART_COUNT (requeues), -1 if unset */
    int32_t elastic_restart; /* $TORCHELASTIC_RESTART_COUNT (torchrun restarts), -1 */
    char host[24];
};

/* Socket records: bytes = payload bytes moved by this call (gloo header bytes
 * excluded); slot/msg_len/offset/opcode from the gloo header of the message
 * the bytes belong to.
 * NCCL records: bytes = count x type size (x nranks for AllGather and
 * ReduceScatter, whose count is per rank); slot = communicator handle;
 * msg_len = count; offset = datatype; opcode = per-process NCCL call number;
 * fd = root/peer; nranks = communicator size. */
struct tprof_record {
    uint64_t t_ns;     /* call start, ns since header.start_mono_ns */
    uint32_t dur_ns;   /* call duration, saturating */
    uint16_t kind;     /* enum tprof_kind; 0 = claimed but never completed */
    uint16_t flags;
    uint64_t bytes;
    uint64_t slot;
    uint64_t msg_len;
    uint64_t offset;
    uint64_t opcode;
    int32_t fd;
    int32_t nranks;
};

_Static_assert(sizeof(struct tprof_header) == TPROF_HEADER_SIZE, "header size");
_Static_assert(sizeof(struct tprof_record) == TPROF_RECORD_SIZE, "record size");

#endif
