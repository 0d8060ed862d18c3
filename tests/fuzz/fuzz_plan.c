/* libFuzzer target for the plan readers: the whole-plan reader
 * (gcoll_plan_read_mem, then verify, write and in-memory rank views) and
 * the per-rank streaming loader (gcoll_plan_load_rank_view), which takes a
 * path, so the input is served from a memfd through /proc/self/fd/N.
 *
 * Beyond "never crash": a rank view that a reader returns must be safe to
 * index by its own counts; a verified plan must write and read back to the
 * same bytes; and where both readers accept a verified plan they must hand a
 * rank the same view (the header promises it). Violations abort so the
 * fuzzer records them. Built with replay_main.c it is the `make check`
 * corpus replayer. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gcoll_plan.h"
#include "graph/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Beyond this an input only slows the fuzzer: every reader limit that
 * matters (classes, channels, tuning rows) is reached in a few KiB. */
#define FUZZ_MAX_INPUT (1u << 20)

static void broken(const char *what, const char *why, int rank) {
  fprintf(stderr, "fuzz_plan: invariant broken (rank %d): %s: %s\n", rank, what, why);
  abort();
}

static int terminated(const char *s, size_t cap) { return memchr(s, '\0', cap) != NULL; }

/* Every count in a view bounds an array a runtime walks without checking. */
static void check_view(const struct gcoll_rank_view *v, int rank) {
  if (v->rank != rank) broken("view", "rank differs from the one asked for", rank);
  if (v->nranks < 1 || v->rank < 0 || v->rank >= v->nranks) broken("view", "rank range", rank);
  if (v->nnodes < 1 || v->node < 0 || v->node >= v->nnodes) broken("view", "node range", rank);
  if (v->local_nranks < 1 || v->local_rank < 0 || v->local_rank >= v->local_nranks)
    broken("view", "local rank range", rank);
  if (!terminated(v->host, sizeof(v->host)) || !terminated(v->topology, sizeof(v->topology)))
    broken("view", "host or topology not NUL-terminated", rank);
  if (v->nchannels < 0 || v->nchannels > GCOLL_MAX_CHANNELS)
    broken("view", "nchannels out of range", rank);
  for (int c = 0; c < v->nchannels; c++) {
    const struct gcoll_ring_link *r = &v->ring[c];
    const struct gcoll_tree_link *t = &v->tree[c];
    if (r->prev < 0 || r->prev >= v->nranks || r->next < 0 || r->next >= v->nranks)
      broken("view ring", "peer out of range", rank);
    if (!terminated(r->nic_in, sizeof(r->nic_in)) || !terminated(r->nic_out, sizeof(r->nic_out)))
      broken("view ring", "NIC name not NUL-terminated", rank);
    if (gcoll_edge_name(r->prev_edge) == NULL || gcoll_edge_name(r->next_edge) == NULL)
      broken("view ring", "edge kind has no name", rank);
    if (t->nchildren < 0 || t->nchildren > GCOLL_MAX_TREE_ARITY)
      broken("view tree", "nchildren out of range", rank);
    if (t->parent < -1 || t->parent >= v->nranks) broken("view tree", "parent out of range", rank);
    for (int k = 0; k < t->nchildren; k++)
      if (t->children[k] < 0 || t->children[k] >= v->nranks)
        broken("view tree", "child out of range", rank);
    if (!terminated(t->nic, sizeof(t->nic))) broken("view tree", "NIC not NUL-terminated", rank);
  }
  if (v->nvls_nheads < 0 || v->nvls_nheads > GCOLL_MAX_NVLS_HEADS)
    broken("view", "nvls_nheads out of range", rank);
  if (v->nvl_domain < -1 || v->nvl_domain >= v->nnodes ||
      (v->nvl_domain >= 0) != (v->nvl_domain_nnodes >= 1) || v->nvl_domain_nnodes > v->nnodes)
    broken("view", "NVLink domain out of range", rank);
  for (int h = 0; h < v->nvls_nheads; h++)
    if (v->nvls_heads[h] < 0 || v->nvls_heads[h] >= v->nranks)
      broken("view", "NVLS head out of range", rank);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    if (v->ntuning[c] < 0 || v->ntuning[c] > GCOLL_MAX_TUNING)
      broken("view", "ntuning out of range", rank);
    /* The lookup must be total over message sizes whatever the table says. */
    static const uint64_t sizes[] = {0, 1, 4096, 65536, 1u << 20, UINT64_MAX};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
      (void)gcoll_rank_view_tuning(v, (enum gcoll_coll)c, sizes[s]);
  }
}

#define SAME(field) \
  do { if (a->field != b->field) broken("views differ", #field, a->rank); } while (0)
#define SAME_STR(field) \
  do { if (strcmp(a->field, b->field) != 0) broken("views differ", #field, a->rank); } while (0)

static void compare_views(const struct gcoll_rank_view *a, const struct gcoll_rank_view *b) {
  SAME(rank); SAME(nranks); SAME(node); SAME(nnodes); SAME(local_rank); SAME(local_nranks);
  SAME_STR(host); SAME_STR(topology); SAME(topology_hash); SAME(job_id); SAME(step_id);
  SAME(nchannels); SAME(nvls_nheads); SAME(nvl_domain); SAME(nvl_domain_nnodes);
  for (int c = 0; c < a->nchannels; c++) {
    SAME(ring[c].prev); SAME(ring[c].next); SAME(ring[c].prev_edge); SAME(ring[c].next_edge);
    SAME_STR(ring[c].nic_in); SAME_STR(ring[c].nic_out);
    SAME(tree[c].tree); SAME(tree[c].parent); SAME(tree[c].nchildren);
    SAME(tree[c].parent_edge); SAME_STR(tree[c].nic);
    for (int k = 0; k < a->tree[c].nchildren; k++) {
      SAME(tree[c].children[k]); SAME(tree[c].child_edge[k]);
    }
  }
  for (int h = 0; h < a->nvls_nheads; h++) SAME(nvls_heads[h]);
  for (int c = 0; c < GCOLL_NCOLLS; c++) {
    SAME(ntuning[c]);
    for (int r = 0; r < a->ntuning[c]; r++) {
      SAME(tuning[c][r].max_bytes); SAME(tuning[c][r].algo);
      SAME(tuning[c][r].proto); SAME(tuning[c][r].nchannels);
    }
  }
}

/* The streaming loader wants a path; a memfd gives one without touching
 * the file system. Reused across inputs: one descriptor for the whole run. */
static int input_fd = -1;
static char input_path[64];

static const char *serve_input(const uint8_t *data, size_t size) {
  if (input_fd < 0) {
    input_fd = memfd_create("gcoll-fuzz-plan", MFD_CLOEXEC);
    if (input_fd < 0) return NULL;
    snprintf(input_path, sizeof(input_path), "/proc/self/fd/%d", input_fd);
  }
  if (ftruncate(input_fd, 0) != 0) return NULL;
  size_t off = 0;
  while (off < size) {
    ssize_t n = pwrite(input_fd, data + off, size - off, (off_t)off);
    if (n <= 0) return NULL;
    off += (size_t)n;
  }
  return input_path;
}

/* Loads `rank` from the file; 0 and the view when the loader accepts. */
static int load_view(const char *path, int rank, struct gcoll_rank_view *v) {
  char err[512] = "";
  memset(v, 0, sizeof(*v));
  if (gcoll_plan_load_rank_view(path, rank, v, err, sizeof(err)) != 0) {
    if (err[0] == '\0') broken("error message", "loader failed without saying why", rank);
    return -1;
  }
  check_view(v, rank);
  return 0;
}

static int memory_view(const struct gcoll_plan *plan, int rank, struct gcoll_rank_view *v) {
  char err[512] = "";
  memset(v, 0, sizeof(*v));
  if (gcoll_plan_rank_view(plan, rank, v, err, sizeof(err)) != 0) {
    if (err[0] == '\0') broken("error message", "rank_view failed without saying why", rank);
    return -1;
  }
  check_view(v, rank);
  return 0;
}

/* Writes the plan to memory; NULL when it cannot be written. */
static char *write_plan(const struct gcoll_plan *plan, size_t *len, char *err, size_t errlen) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  if (f == NULL) return NULL;
  int rc = gcoll_plan_write_stream(plan, f, err, errlen);
  if (fclose(f) != 0) rc = -1;
  if (rc != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* A verified plan written out must read back, verify, and write the same
 * bytes again: otherwise `gcoll-plan generate` could emit files that ranks
 * reject or read differently. */
static void check_round_trip(const struct gcoll_plan *plan) {
  char err[512] = "";
  size_t len1 = 0, len2 = 0;
  char *first = write_plan(plan, &len1, err, sizeof(err));
  if (first == NULL) {
    fprintf(stderr, "fuzz_plan: write failed: %s\n", err);
    broken("round trip", "a verified plan cannot be written", -1);
  }
  struct gcoll_plan *again = gcoll_plan_read_mem(first, len1, "fuzz-roundtrip", err, sizeof(err));
  if (again == NULL) {
    fprintf(stderr, "fuzz_plan: re-read failed: %s\n", err);
    broken("round trip", "written plan does not read back", -1);
  }
  if (gcoll_plan_verify(again, err, sizeof(err)) != 0) {
    fprintf(stderr, "fuzz_plan: re-verify failed: %s\n", err);
    broken("round trip", "written plan no longer verifies", -1);
  }
  char *second = write_plan(again, &len2, err, sizeof(err));
  if (second == NULL || len1 != len2 || memcmp(first, second, len1) != 0)
    broken("round trip", "second write differs from the first", -1);
  free(second);
  gcoll_plan_free(again);
  free(first);
}

/* Ranks worth looking at: both ends, the middle and one picked by the data. */
static int pick_ranks(int nranks, size_t size, int *ranks) {
  int n = 0;
  ranks[n++] = 0;
  ranks[n++] = nranks - 1;
  ranks[n++] = nranks / 2;
  ranks[n++] = (int)(size % (size_t)nranks);
  return n;
}

static void exercise_plan(const struct gcoll_plan *plan, const char *path, size_t size) {
  char err[512] = "";
  int verified = gcoll_plan_verify(plan, err, sizeof(err)) == 0;
  if (!verified && err[0] == '\0') broken("error message", "verify failed without saying why", -1);

  char *scratch;
  size_t scratch_len = 0;
  if ((scratch = write_plan(plan, &scratch_len, err, sizeof(err))) != NULL) free(scratch);
  if (plan->nranks < 1) return;
  if (verified) check_round_trip(plan);

  struct gcoll_rank_view *mem = malloc(sizeof(*mem)), *file = malloc(sizeof(*file));
  if (mem == NULL || file == NULL) goto out;
  int ranks[4], n = pick_ranks(plan->nranks, size, ranks);
  for (int i = 0; i < n; i++) {
    int have_mem = memory_view(plan, ranks[i], mem) == 0;
    if (verified && !have_mem) broken("rank view", "verified plan refuses one of its ranks", ranks[i]);
    if (verified && have_mem && path != NULL && load_view(path, ranks[i], file) == 0)
      compare_views(mem, file);
  }
  if (memory_view(plan, -1, mem) == 0) broken("rank view", "accepted rank -1", -1);
  if (memory_view(plan, plan->nranks, mem) == 0)
    broken("rank view", "accepted rank == nranks", plan->nranks);
out:
  free(mem);
  free(file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512] = "";
  if (size > FUZZ_MAX_INPUT) return 0;
  const char *path = serve_input(data, size);

  /* The loader alone, on any bytes: what every rank runs at startup. */
  if (path != NULL) {
    struct gcoll_rank_view *v = malloc(sizeof(*v));
    if (v != NULL) {
      (void)load_view(path, 0, v);
      int r = (int)(size % 97);
      if (r != 0) (void)load_view(path, r, v);
      (void)load_view(path, -1, v);
      free(v);
    }
  }

  struct gcoll_plan *plan = gcoll_plan_read_mem((const char *)data, size, "fuzz", err, sizeof(err));
  if (plan == NULL) {
    if (err[0] == '\0') broken("error message", "reader failed without saying why", -1);
    return 0;
  }
  exercise_plan(plan, path, size);
  gcoll_plan_free(plan);
  return 0;
}
