/* gcollrun: starts N ranks of a program on this host without a scheduler.
 * What the parts share; each gcollrun_*.c holds one concern:
 *   gcollrun.c         options, the event loop, failure policy
 *   gcollrun_plan.c    the job's plan (computed or given) and its temp dir
 *   gcollrun_spawn.c   program lookup, rank environment, fork/exec
 *   gcollrun_endpoints.c  each rank's listening socket and the endpoints file
 *   gcollrun_output.c  --tag-output line buffering
 *   gcollrun_bind.c    --cpu-bind: each rank's CPUs */
#ifndef GCOLL_LAUNCHER_GCOLLRUN_H
#define GCOLL_LAUNCHER_GCOLLRUN_H

#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <sys/types.h>

#define GCOLLRUN_PROG "gcollrun"
#define GCOLLRUN_MAX_RANKS 1024
#define GCOLLRUN_ERRLEN 1024

/* Exit statuses of gcollrun itself (a failing rank's own status is passed
 * through, 128 + signal for a rank killed by a signal). */
enum {
  GCOLLRUN_EXIT_FAIL = 1,      /* plan, KVS or system failure */
  GCOLLRUN_EXIT_USAGE = 2,
  GCOLLRUN_EXIT_TIMEOUT = 124, /* --timeout passed, as timeout(1) */
  GCOLLRUN_EXIT_NOEXEC = 126,  /* program found but not executable */
  GCOLLRUN_EXIT_NOTFOUND = 127 /* program not found, as the shell */
};

/* "gcollrun: MESSAGE" on stderr, always one line. */
void gcollrun_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- plan (gcollrun_plan.c) -------------------------------------------- */

struct gcollrun_plan {
  char dir[PATH_MAX];          /* private temp dir, "" when --plan was given */
  char path[PATH_MAX];         /* what GCOLL_PLAN says */
  int nranks, nnodes;
  int *node_of;                /* per rank: node index in the plan */
  int *local_of;               /* per rank: index inside its node */
};

/* Computes the plan for nranks ranks over nnodes virtual nodes of topology
 * `topo` (NULL: cpu-only), ranks in blocks (gcollrun_block_layout), or
 * cyclic (rank r on node r mod nnodes, as srun -m cyclic), and
 * writes it to a fresh private directory, or
 * (plan_file != NULL) checks that the given plan has nranks ranks (and
 * nnodes nodes when nnodes > 0). Returns 0 or -1 with a one-line reason. */
int gcollrun_plan_prepare(struct gcollrun_plan *p, int nranks, int nnodes, int cyclic,
                          const char *topo, const char *plan_file, char *err, size_t errlen);
/* Block distribution of nranks over nnodes (1 <= nnodes <= nranks), as
 * Slurm's: node i gets nranks / nnodes ranks, one more when i < nranks mod
 * nnodes (7 over 3: 3, 2, 2). node_ranks has nnodes entries. */
void gcollrun_block_layout(int nranks, int nnodes, int *node_ranks);
/* Removes the temp dir (if any) and frees the tables. Idempotent. */
void gcollrun_plan_cleanup(struct gcollrun_plan *p);

/* ---- endpoints (gcollrun_endpoints.c) ------------------------------------ */

struct gcollrun_endpoints {
  int nranks;
  int *fd;                     /* per rank: its listening socket, -1 once handed over */
  char dir[PATH_MAX];          /* private dir when the plan's is not ours, else "" */
  char path[PATH_MAX];         /* the endpoints file, "" when none */
};

/* Binds one listening socket per rank of plan p (close-on-exec, on
 * GCOLL_SOCKET_IFADDR, else 127.0.0.1) and writes the endpoints file
 * (graph/endpoints.h) atomically beside the plan, or in a private dir when
 * the plan was given. 0, or -1 with one line in err (nothing left open). */
int gcollrun_endpoints_prepare(struct gcollrun_endpoints *e, const struct gcollrun_plan *p,
                               const char *job_key, char *err, size_t errlen);
/* Closes gcollrun's copy of rank's socket (once the rank holds its own). */
void gcollrun_endpoints_release(struct gcollrun_endpoints *e, int rank);
/* Closes what is left, removes the file (and the private dir). Idempotent. */
void gcollrun_endpoints_cleanup(struct gcollrun_endpoints *e);

/* ---- spawning (gcollrun_spawn.c) ---------------------------------------- */

/* Resolves PROGRAM as execvp would (a name with '/' is taken as is).
 * Returns 0, or GCOLLRUN_EXIT_NOTFOUND / GCOLLRUN_EXIT_NOEXEC with a
 * one-line reason. */
int gcollrun_find_program(const char *name, char *path, size_t pathlen, char *err,
                          size_t errlen);

/* ---- CPU binding (gcollrun_bind.c) --------------------------------------- */

enum gcollrun_bind {
  GCOLLRUN_BIND_AUTO = 0,      /* cores when there are enough CPUs, else none */
  GCOLLRUN_BIND_CORES,
  GCOLLRUN_BIND_NONE
};

/* "cores" or "none": 0, else -1. */
int gcollrun_bind_parse(const char *s, enum gcollrun_bind *out);
/* Splits the CPUs in allowed into nranks blocks of equal size (the first
 * CPUs-mod-nranks ranks one CPU more), hyperthreads of a core together,
 * into sets[0..nranks). 1 when the ranks are to be bound, 0 when not
 * (none, or auto with fewer CPUs than ranks), -1 with one line in err
 * (cores with fewer CPUs than ranks). */
int gcollrun_bind_plan(enum gcollrun_bind mode, int nranks, const cpu_set_t *allowed,
                       cpu_set_t *sets, char *err, size_t errlen);

/* What one rank gets in its environment besides the inherited one. */
struct gcollrun_rank_env {
  const char *plan_path;
  int rank, nranks, local_rank, node;
  const char *kvs_addr;
  const char *job_key;
  const char *endpoints_path;  /* NULL: no endpoints (the store alone) */
  int listen_fd;               /* this rank's inherited listener, -1: none */
  const cpu_set_t *cpus;       /* the CPUs it is bound to (GCOLL_CPU_BIND=cores), NULL: none */
};

struct gcollrun_child {
  pid_t pid;                   /* also its process group */
  int out_fd, err_fd;          /* read ends with --tag-output, else -1 */
};

/* Forks and execs one rank in its own process group, stdin from
 * /dev/null, and (tag) stdout/stderr into pipes. Returns 0, or the exit
 * status gcollrun should use with a one-line reason when the exec failed. */
int gcollrun_spawn(const char *path, char *const argv[], const struct gcollrun_rank_env *env,
                   int tag, struct gcollrun_child *child, char *err, size_t errlen);

/* ---- --tag-output (gcollrun_output.c) ----------------------------------- */

/* Lines longer than this are split: the prefix keeps each piece attributable
 * and memory stays bounded. */
#define GCOLLRUN_LINE_MAX 16384

struct gcollrun_stream {
  int fd;                      /* -1 once closed */
  int rank;
  int dest;                    /* 1 or 2 */
  size_t len;
  char buf[GCOLLRUN_LINE_MAX];
};

/* Reads what is available; writes every complete line as "[R] line".
 * Returns 0 while open, 1 at end of file (fd closed, rest flushed). */
int gcollrun_stream_pump(struct gcollrun_stream *s);
/* Flushes a final partial line (with a newline added) and closes. */
void gcollrun_stream_finish(struct gcollrun_stream *s);

#endif
