/* Starting ranks: program lookup, the rank's environment, fork/exec.
 *
 * Each rank runs in its own process group. A rank is often a wrapper
 * (a shell script starting python): signalling the group reaches the whole
 * rank, not just the wrapper. Ctrl-C on the terminal goes only to gcollrun's
 * foreground group, so each rank receives a signal once, forwarded by
 * gcollrun, instead of once from the terminal and again from us. The
 * price, ranks outliving a SIGKILLed gcollrun, is paid back with
 * PR_SET_PDEATHSIG. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/gcollrun.h"

extern char **environ;

static int is_executable_file(const char *path, int *why) {
  struct stat st;
  if (stat(path, &st) != 0) {
    *why = errno;
    return 0;
  }
  if (S_ISDIR(st.st_mode)) {
    *why = EISDIR;
    return 0;
  }
  if (access(path, X_OK) != 0) {
    *why = errno;
    return 0;
  }
  return 1;
}

int gcollrun_find_program(const char *name, char *path, size_t pathlen, char *err,
                          size_t errlen) {
  int why = ENOENT;
  if (strchr(name, '/') != NULL) {
    snprintf(path, pathlen, "%s", name);
    if (is_executable_file(path, &why)) return 0;
    snprintf(err, errlen, "%.512s: %s", name, strerror(why));
    return why == ENOENT || why == ENOTDIR ? GCOLLRUN_EXIT_NOTFOUND : GCOLLRUN_EXIT_NOEXEC;
  }
  const char *env = getenv("PATH");
  char *dirs = strdup(env && *env ? env : "/usr/local/bin:/usr/bin:/bin");
  int found_noexec = 0;
  if (dirs == NULL) {
    snprintf(err, errlen, "out of memory");
    return GCOLLRUN_EXIT_FAIL;
  }
  char *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    int n = snprintf(path, pathlen, "%s/%s", *d ? d : ".", name);
    if (n < 0 || (size_t)n >= pathlen) continue;
    if (is_executable_file(path, &why)) {
      free(dirs);
      return 0;
    }
    if (why == EACCES) found_noexec = 1;
  }
  free(dirs);
  if (found_noexec) {
    snprintf(err, errlen, "%.512s: permission denied", name);
    return GCOLLRUN_EXIT_NOEXEC;
  }
  snprintf(err, errlen, "%.512s: command not found", name);
  return GCOLLRUN_EXIT_NOTFOUND;
}

static int is_ours(const char *entry) {
  static const char *const names[] = {"GCOLL_PLAN=",   "GCOLL_RANK=",     "GCOLL_NRANKS=",
                                      "GCOLL_LOCAL_RANK=", "GCOLL_NODE=", "GCOLL_KVS_ADDR=",
                                      "GCOLL_JOB_KEY=", "GCOLL_SOCKET_IFADDR=",
                                      "GCOLL_ENDPOINTS=", "GCOLL_LISTEN_FD=", "GCOLL_CPU_BIND="};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strncmp(entry, names[i], strlen(names[i])) == 0) return 1;
  return 0;
}

#define NOURS 11

/* Every rank runs on this host: TCP between virtual nodes stays on
 * loopback, where the runtime alone would pick a network interface, unless
 * the user chose one. */
static const char *socket_ifaddr(void) {
  const char *v = getenv("GCOLL_SOCKET_IFADDR");
  return v != NULL && *v != '\0' ? v : "127.0.0.1";
}

/* The inherited environment minus any stale GCOLL_* of ours (a gcollrun
 * started from inside a rank must not leak its parent's job), plus this
 * rank's. Built before fork: the child only execs. */
static char **rank_environment(const struct gcollrun_rank_env *e) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + NOURS + 1, sizeof(*env));
  if (env == NULL) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!is_ours(environ[i])) env[k++] = environ[i];
  size_t first_ours = k;
  /* --no-plan: no GCOLL_PLAN at all (the user's is dropped with ours). */
  int ok = (e->plan_path == NULL || asprintf(&env[k++], "GCOLL_PLAN=%s", e->plan_path) >= 0) &&
           asprintf(&env[k++], "GCOLL_RANK=%d", e->rank) >= 0 &&
           asprintf(&env[k++], "GCOLL_NRANKS=%d", e->nranks) >= 0 &&
           asprintf(&env[k++], "GCOLL_LOCAL_RANK=%d", e->local_rank) >= 0 &&
           asprintf(&env[k++], "GCOLL_NODE=%d", e->node) >= 0 &&
           asprintf(&env[k++], "GCOLL_KVS_ADDR=%s", e->kvs_addr) >= 0 &&
           asprintf(&env[k++], "GCOLL_JOB_KEY=%s", e->job_key) >= 0 &&
           asprintf(&env[k++], "GCOLL_SOCKET_IFADDR=%s", socket_ifaddr()) >= 0 &&
           (e->endpoints_path == NULL ||
            asprintf(&env[k++], "GCOLL_ENDPOINTS=%s", e->endpoints_path) >= 0) &&
           (e->endpoints_path == NULL || e->listen_fd < 0 ||
            asprintf(&env[k++], "GCOLL_LISTEN_FD=%d", e->listen_fd) >= 0) &&
           (e->cpus == NULL || asprintf(&env[k++], "GCOLL_CPU_BIND=cores") >= 0);
  if (!ok) {
    env[k - 1] = NULL; /* asprintf leaves it undefined on failure */
    for (size_t i = first_ours; i < k - 1; i++) free(env[i]);
    free(env);
    return NULL;
  }
  env[k] = NULL;
  return env;
}

static void free_environment(char **env) {
  /* Inherited entries with our names were left out, so every one of ours
   * in env is a copy made here (GCOLL_PLAN is absent under --no-plan). */
  for (size_t i = 0; env[i] != NULL; i++)
    if (is_ours(env[i])) free(env[i]);
  free(env);
}

/* In the child: tells the parent why it did not exec (see exec_result)
 * and exits. Async-signal-safe. */
static void __attribute__((noreturn)) child_failed(int status_w, int e, int status) {
  ssize_t unused = write(status_w, &e, sizeof(e));
  (void)unused;
  _exit(status);
}

/* In the child between fork and exec: async-signal-safe calls only. */
static void __attribute__((noreturn))
exec_child(const char *path, char *const argv[], char **env, int devnull, int out_w, int err_w,
           int status_w, pid_t parent, int listen_fd, const cpu_set_t *cpus) {
  setpgid(0, 0);
  /* Before exec, so the program's first thread and all it starts inherit
   * it; a refusal (a CPU taken away meanwhile) is reported like a failed
   * exec. */
  if (cpus != NULL && sched_setaffinity(0, sizeof(*cpus), cpus) != 0)
    child_failed(status_w, -errno, GCOLLRUN_EXIT_FAIL); /* negative: not the exec's */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(GCOLLRUN_EXIT_FAIL); /* parent died before the prctl */
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  dup2(devnull, 0);
  if (out_w >= 0) dup2(out_w, 1);
  if (err_w >= 0) dup2(err_w, 2);
  /* Every rank's listener is close-on-exec; this rank keeps its own. */
  if (listen_fd >= 0) fcntl(listen_fd, F_SETFD, 0);
  execve(path, argv, env);
  child_failed(status_w, errno, GCOLLRUN_EXIT_NOEXEC);
}

static void close_pair(int p[2]) {
  if (p[0] >= 0) close(p[0]);
  if (p[1] >= 0) close(p[1]);
  p[0] = p[1] = -1;
}

/* Waits for the child's exec: EOF on the close-on-exec status pipe means
 * it happened, an errno means it did not (a negative one: the binding
 * before it failed). */
static int exec_result(int status_r) {
  int e = 0;
  ssize_t n;
  do n = read(status_r, &e, sizeof(e));
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof(e) ? e : 0;
}

int gcollrun_spawn(const char *path, char *const argv[], const struct gcollrun_rank_env *e,
                   int tag, struct gcollrun_child *child, char *err, size_t errlen) {
  int out[2] = {-1, -1}, errp[2] = {-1, -1}, status[2] = {-1, -1}, rc = GCOLLRUN_EXIT_FAIL;
  child->pid = -1;
  child->out_fd = child->err_fd = -1;
  char **env = rank_environment(e);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (env == NULL || devnull < 0 || pipe2(status, O_CLOEXEC) != 0 ||
      (tag && (pipe2(out, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0))) {
    snprintf(err, errlen, "rank %d: %s", e->rank, env ? strerror(errno) : "out of memory");
    goto out;
  }
  /* Signals stay blocked across fork so that our handlers never run in the
   * child (they would write into our self-pipe). */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0)
    exec_child(path, argv, env, devnull, out[1], errp[1], status[1], parent,
               e->endpoints_path != NULL ? e->listen_fd : -1, e->cpus);
  int fork_errno = errno;
  if (pid > 0) setpgid(pid, pid); /* both sides set it: no race with our first killpg */
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) {
    snprintf(err, errlen, "rank %d: fork: %s", e->rank, strerror(fork_errno));
    goto out;
  }
  close(status[1]);
  status[1] = -1;
  child->pid = pid;
  int exec_errno = exec_result(status[0]);
  if (exec_errno < 0) {
    snprintf(err, errlen, "rank %d: cannot bind it to its CPUs (--cpu-bind): %s", e->rank,
             strerror(-exec_errno));
    goto out;
  }
  if (exec_errno != 0) {
    snprintf(err, errlen, "rank %d: cannot execute %.512s: %s", e->rank, path,
             strerror(exec_errno));
    rc = exec_errno == ENOENT ? GCOLLRUN_EXIT_NOTFOUND : GCOLLRUN_EXIT_NOEXEC;
    goto out;
  }
  if (tag) {
    child->out_fd = out[0];
    child->err_fd = errp[0];
    out[0] = errp[0] = -1;
    fcntl(child->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(child->err_fd, F_SETFL, O_NONBLOCK);
  }
  rc = 0;
out:
  close_pair(out);
  close_pair(errp);
  close_pair(status);
  if (devnull >= 0) close(devnull);
  if (env) free_environment(env);
  return rc;
}
