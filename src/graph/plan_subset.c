/* Plans for sub-communicators, derived from the parent's plan.
 *
 * A training job makes its groups (tensor-, data-, pipeline-parallel) from
 * the world, and every group runs on GPUs and NICs the world's plan already
 * placed. Searching again would need each node's topology at every group's
 * init, which a rank does not have (the plugin gathered them at job start),
 * and would cost a search per group. Restricting the parent instead keeps
 * what the search found: a ring through GPUs 0..7 visits GPUs 0, 2, 4, 6 in
 * the same order over the same links, and a GPU keeps the NIC the parent
 * paired it with (the parent channel that entered the node at that GPU
 * gives its NIC), so a group that drops a channel's entry GPU does not read
 * from a NIC next to a GPU it does not have. What the restriction cannot
 * know is whether a fresh search would find more channels for fewer GPUs;
 * it keeps the parent's channel count.
 *
 * Cost: O(parent nodes + members + child classes x channels x local ranks),
 * no topology, no search. */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct child_class {
  int parent_class;
  int nsel;
  const int *sel;   /* parent local ranks, in child order */
};

struct subset {
  const struct gcoll_plan *parent;
  const int *members;
  int n;
  int nnodes;
  int *node_parent;      /* child node -> parent node */
  int *node_first;       /* child node -> its first child slot */
  int *child_of_parent;  /* parent node -> child node, -1 */
  int *local;            /* child slot -> local rank on the parent node */
  int *member_at;        /* child slot -> member index (the child rank) */
  struct child_class cls[GCOLL_MAX_CLASSES];
  char *err;
  size_t errlen;
};

__attribute__((format(printf, 2, 3))) static int fail(struct subset *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, s->errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* Groups the members into child nodes, in the order nodes first appear
 * among them; each node's members keep their order. Members of one node
 * need not be adjacent (a group of ranks 0, 8, 1, 9 on two nodes): the
 * child then has a rank order, as cyclic jobs do. */
static int place_members(struct subset *s) {
  const struct gcoll_plan *p = s->parent;
  unsigned char *seen = calloc((size_t)p->nranks, 1);
  int *node_of = malloc((size_t)s->n * sizeof(int)), *count = calloc((size_t)s->n, sizeof(int));
  int rc = 0;
  if (seen == NULL || node_of == NULL || count == NULL) rc = fail(s, "out of memory");
  for (int i = 0; i < s->n && rc == 0; i++) {
    int r = s->members[i];
    int node = gcoll_plan_node_of_rank(p, r);
    if (r < 0 || r >= p->nranks || node < 0) {
      rc = fail(s, "member %d is rank %d, outside the plan's 0..%d", i, r, p->nranks - 1);
    } else if (seen[r]++) {
      rc = fail(s, "rank %d is a member twice (member %d)", r, i);
    } else {
      if (s->child_of_parent[node] < 0) {
        s->child_of_parent[node] = s->nnodes;
        s->node_parent[s->nnodes++] = node;
      }
      node_of[i] = s->child_of_parent[node];
      count[node_of[i]]++;
    }
  }
  for (int c = 0, at = 0; rc == 0 && c < s->nnodes; c++) {
    s->node_first[c] = at;
    at += count[c];
    count[c] = s->node_first[c];   /* from here: the next free slot */
  }
  for (int i = 0; rc == 0 && i < s->n; i++) {
    int slot = count[node_of[i]]++, parent_node = s->node_parent[node_of[i]];
    s->member_at[slot] = i;
    s->local[slot] = gcoll_plan_slot_of(p, s->members[i]) - p->node_first_rank[parent_node];
  }
  free(seen);
  free(node_of);
  free(count);
  return rc;
}

static int node_count(const struct subset *s, int node) {
  int end = node + 1 < s->nnodes ? s->node_first[node + 1] : s->n;
  return end - s->node_first[node];
}

static int same_selection(const struct child_class *c, int parent_class, const int *sel,
                          int nsel) {
  return c->parent_class == parent_class && c->nsel == nsel &&
         memcmp(c->sel, sel, (size_t)nsel * sizeof(*sel)) == 0;
}

static int is_identity(const int *v, int n, int full) {
  if (n != full) return 0;
  for (int i = 0; i < n; i++)
    if (v[i] != i) return 0;
  return 1;
}

/* "<topology>" for a whole node in order; else "<topology>:<GPUs>" on GPU
 * nodes ("dgx-h100:0-6:2" drives GPUs 0, 2, 4, 6), "<topology>:<local
 * ranks of the parent class>" on CPU nodes, so that `gcoll-plan show` says
 * what part of which node a class is; "<topology>:part<k>" where that does
 * not fit the name limit or is taken. <topology> is the parent's name up
 * to its own ':', so a split of a split names GPUs, not a chain of lists. */
static void child_class_name(const struct gcoll_plan *child, const struct gcoll_plan_class *pc,
                             const struct gcoll_plan_class *c, const int *sel, int index,
                             char *out) {
  if (is_identity(sel, c->nlocal, pc->nlocal)) {
    snprintf(out, GCOLL_PLAN_NAME_MAX, "%s", pc->name);
    return;
  }
  size_t base = strcspn(pc->name, ":");
  char *list = gcoll_ranklist_format(c->intra_edge == GCOLL_EDGE_P2P ? c->gpu : sel, c->nlocal);
  if (list != NULL && base + 1 + strlen(list) < GCOLL_PLAN_NAME_MAX) {
    memcpy(out, pc->name, base);
    out[base] = ':';
    memcpy(out + base + 1, list, strlen(list) + 1);
  } else {
    snprintf(out, GCOLL_PLAN_NAME_MAX, "%.*s:part%d", (int)(base < 48 ? base : 48), pc->name,
             index);
  }
  free(list);
  for (int k = 0; k < index; k++)
    if (strcmp(child->classes[k].name, out) == 0) {
      snprintf(out, GCOLL_PLAN_NAME_MAX, "%.*s:part%d", (int)(base < 48 ? base : 48), pc->name,
               index);
      break;
    }
}

/* The NIC the parent pairs with local rank `at` where it enters (what 0),
 * leaves (1) a ring, or ends a chain (2): the first parent channel that
 * does so at that GPU; `keep` when none does. Returns that channel, or -1. */
static int paired_nic(const struct gcoll_plan_class *pc, int S, int what, int at, int keep_index,
                      const char *keep_name, int keep_rail, int *index, char *name, int *rail) {
  *index = keep_index;
  *rail = keep_rail;
  snprintf(name, 32, "%s", keep_name);
  for (int s = 0; s < S; s++) {
    const struct gcoll_intra_channel *ch = &pc->graph.ch[s];
    int end = what == 0 ? ch->ring[0] : what == 1 ? ch->ring[pc->nlocal - 1] : ch->chain[0];
    if (end != at) continue;
    *index = what == 0 ? ch->ring_nic_in : what == 1 ? ch->ring_nic_out : ch->chain_nic;
    *rail = what == 0 ? ch->ring_rail_in : what == 1 ? ch->ring_rail_out : ch->chain_rail;
    snprintf(name, 32, "%s", what == 0   ? ch->ring_nic_in_name
                             : what == 1 ? ch->ring_nic_out_name
                                         : ch->chain_nic_name);
    return s;
  }
  return -1;
}

/* The child ring leaves by the NIC it enters by when the parent's ring
 * through that NIC does (a rail-aligned parent), so the child stays on one
 * rail; the exit then reaches the NIC as the parent's did: through the GPU
 * the parent sent through (PXN), which is the entry GPU next to the NIC,
 * when the child has it and does not end there, else directly. A
 * cross-rail parent keeps the exit GPU's own pairing. */
static void child_ring_out(const struct gcoll_plan_class *pc, int S, const int *sel,
                           const int *inv, int from, struct gcoll_intra_channel *ch, int nsel,
                           const struct gcoll_intra_channel *pch) {
  const struct gcoll_intra_channel *src = from >= 0 ? &pc->graph.ch[from] : pch;
  int aligned = src->ring_nic_in >= 0 && src->ring_nic_out >= 0 &&
                (src->ring_rail_in >= 0 && src->ring_rail_out >= 0
                     ? src->ring_rail_in == src->ring_rail_out
                     : strcmp(src->ring_nic_in_name, src->ring_nic_out_name) == 0);
  ch->ring_pxn = -1;
  if (!aligned) {
    paired_nic(pc, S, 1, sel[ch->ring[nsel - 1]], pch->ring_nic_out, pch->ring_nic_out_name,
               pch->ring_rail_out, &ch->ring_nic_out, ch->ring_nic_out_name, &ch->ring_rail_out);
    return;
  }
  ch->ring_nic_out = ch->ring_nic_in;
  ch->ring_rail_out = ch->ring_rail_in;
  snprintf(ch->ring_nic_out_name, sizeof(ch->ring_nic_out_name), "%s", ch->ring_nic_in_name);
  if (src->ring_pxn >= 0 && inv[src->ring_pxn] >= 0 && inv[src->ring_pxn] != ch->ring[nsel - 1])
    ch->ring_pxn = inv[src->ring_pxn];
}

static void restrict_order(const int *order, int nlocal, const int *inv, int *out) {
  int j = 0;
  for (int i = 0; i < nlocal; i++)
    if (inv[order[i]] >= 0) out[j++] = inv[order[i]];
}

static void derive_class(struct gcoll_plan *child, int k, const struct gcoll_plan_class *pc,
                         const int *sel, int nsel, int S, int multi_node) {
  struct gcoll_plan_class *c = &child->classes[k];
  int inv[GCOLL_MAX_LOCAL_RANKS];
  for (int i = 0; i < pc->nlocal; i++) inv[i] = -1;
  for (int j = 0; j < nsel; j++) inv[sel[j]] = j;
  memset(c, 0, sizeof(*c));
  c->hash = pc->hash;
  c->nlocal = nsel;
  c->intra_edge = pc->intra_edge;
  struct gcoll_intra_graph *g = &c->graph;
  g->nlocal = nsel;
  g->nchannels = S;
  g->ring_bw = pc->graph.ring_bw;
  g->net_bw = multi_node ? pc->graph.net_bw : 0;
  g->ring_worst_path = pc->graph.ring_worst_path;
  /* The node's NICs that are down stay down for its groups. */
  if (multi_node) {
    g->nleft_out = pc->graph.nleft_out;
    g->left_out_more = pc->graph.left_out_more;
    memcpy(g->left_out, pc->graph.left_out, sizeof(g->left_out));
  }
  for (int s = 0; s < S; s++) {
    const struct gcoll_intra_channel *pch = &pc->graph.ch[s];
    struct gcoll_intra_channel *ch = &g->ch[s];
    restrict_order(pch->ring, pc->nlocal, inv, ch->ring);
    restrict_order(pch->chain, pc->nlocal, inv, ch->chain);
    ch->ring_nic_in = ch->ring_nic_out = ch->chain_nic = -1;
    ch->ring_rail_in = ch->ring_rail_out = ch->chain_rail = ch->ring_pxn = -1;
    if (!multi_node) continue;  /* as a one-node search: no NICs */
    int from = paired_nic(pc, S, 0, sel[ch->ring[0]], pch->ring_nic_in, pch->ring_nic_in_name,
                          pch->ring_rail_in, &ch->ring_nic_in, ch->ring_nic_in_name,
                          &ch->ring_rail_in);
    child_ring_out(pc, S, sel, inv, from, ch, nsel, pch);
    paired_nic(pc, S, 2, sel[ch->chain[0]], pch->chain_nic, pch->chain_nic_name, pch->chain_rail,
               &ch->chain_nic, ch->chain_nic_name, &ch->chain_rail);
  }
  for (int h = 0; h < pc->graph.nvls_nheads; h++)
    if (inv[pc->graph.nvls_heads[h]] >= 0)
      g->nvls_heads[g->nvls_nheads++] = inv[pc->graph.nvls_heads[h]];
  if (pc->intra_edge == GCOLL_EDGE_P2P) {
    for (int j = 0; j < nsel; j++) c->gpu[j] = pc->has_gpu_map ? pc->gpu[sel[j]] : sel[j];
    c->has_gpu_map = !is_identity(c->gpu, nsel, nsel);
    c->has_gpu_busids = pc->has_gpu_busids;
    for (int j = 0; j < nsel && c->has_gpu_busids; j++)
      memcpy(c->gpu_busid[j], pc->gpu_busid[sel[j]], sizeof(c->gpu_busid[j]));
  }
  child_class_name(child, pc, c, sel, k, c->name);
}

/* Rails across the child's classes. Each class pairs its channel ends
 * with the NICs next to its own GPUs, so nodes that keep different GPUs
 * (GPUs 0, 2, 4, 6 of one node, all of another) may enter and leave a
 * channel on different rails, which crosses the spine between them. Where
 * the child's classes disagree on a channel's rail, every class takes the
 * parent's NIC for it instead (the parent is rail-aligned, so they then
 * agree): reading a NIC that is not next to the entry GPU costs less than
 * a spine crossing on every hop. */
static int ring_rail_key(const struct gcoll_intra_channel *ch, int in) {
  return in ? ch->ring_rail_in : ch->ring_rail_out;
}

static void take_parent_nics(struct gcoll_intra_channel *ch, const struct gcoll_intra_channel *pch,
                             const int *sel, int nsel, int parent_nlocal, int ring) {
  if (!ring) {
    ch->chain_nic = pch->chain_nic;
    ch->chain_rail = pch->chain_rail;
    memcpy(ch->chain_nic_name, pch->chain_nic_name, sizeof(ch->chain_nic_name));
    return;
  }
  int inv[GCOLL_MAX_LOCAL_RANKS];
  for (int i = 0; i < parent_nlocal; i++) inv[i] = -1;
  for (int j = 0; j < nsel; j++) inv[sel[j]] = j;
  ch->ring_nic_in = pch->ring_nic_in;
  ch->ring_nic_out = pch->ring_nic_out;
  ch->ring_rail_in = pch->ring_rail_in;
  ch->ring_rail_out = pch->ring_rail_out;
  memcpy(ch->ring_nic_in_name, pch->ring_nic_in_name, sizeof(ch->ring_nic_in_name));
  memcpy(ch->ring_nic_out_name, pch->ring_nic_out_name, sizeof(ch->ring_nic_out_name));
  ch->ring_pxn = pch->ring_pxn >= 0 && inv[pch->ring_pxn] >= 0 &&
                         inv[pch->ring_pxn] != ch->ring[nsel - 1]
                     ? inv[pch->ring_pxn]
                     : -1;
}

static void align_rails(struct subset *s, struct gcoll_plan *child, int S) {
  if (s->nnodes < 2 || child->nclasses < 2) return;
  for (int c = 0; c < S; c++)
    for (int ring = 0; ring < 2; ring++) {
      int agree = 1;
      for (int k = 0; k < child->nclasses && agree; k++) {
        const struct gcoll_intra_channel *a = &child->classes[k].graph.ch[c];
        const struct gcoll_intra_channel *b = &child->classes[0].graph.ch[c];
        if (ring)
          agree = ring_rail_key(a, 0) == ring_rail_key(b, 0) &&
                  ring_rail_key(a, 1) == ring_rail_key(b, 1) &&
                  strcmp(a->ring_nic_in_name, b->ring_nic_in_name) == 0;
        else
          agree = a->chain_rail == b->chain_rail &&
                  strcmp(a->chain_nic_name, b->chain_nic_name) == 0;
      }
      for (int k = 0; k < child->nclasses && !agree; k++) {
        const struct gcoll_plan_class *pc = &s->parent->classes[s->cls[k].parent_class];
        take_parent_nics(&child->classes[k].graph.ch[c], &pc->graph.ch[c], s->cls[k].sel,
                         s->cls[k].nsel, pc->nlocal, ring);
      }
    }
}

/* The child class of child node `node`, made on first use. */
static int class_for(struct subset *s, struct gcoll_plan *child, int node, int S,
                     int multi_node) {
  int pclass = s->parent->node_class[s->node_parent[node]];
  const int *sel = s->local + s->node_first[node];
  int nsel = node_count(s, node);
  for (int k = 0; k < child->nclasses; k++)
    if (same_selection(&s->cls[k], pclass, sel, nsel)) return k;
  if (child->nclasses >= GCOLL_MAX_CLASSES)
    return fail(s, "the members make more than %d distinct node classes (a node class is a "
                "topology and the local ranks taken from it)", GCOLL_MAX_CLASSES);
  int k = child->nclasses++;
  s->cls[k] = (struct child_class){.parent_class = pclass, .nsel = nsel, .sel = sel};
  derive_class(child, k, &s->parent->classes[pclass], sel, nsel, S, multi_node);
  return k;
}

static int fill_nodes(struct subset *s, struct gcoll_plan *child) {
  const struct gcoll_plan *p = s->parent;
  int S = p->nchannels / 2;
  for (int i = 0; i < s->nnodes; i++) {
    int k = class_for(s, child, i, S, s->nnodes > 1);
    if (k < 0) return -1;
    child->node_class[i] = k;
    child->node_first_rank[i] = s->node_first[i];
    const char *host = p->node_host != NULL ? p->node_host[s->node_parent[i]] : NULL;
    if (host == NULL)
      return fail(s, "the parent plan has no host name for node %d (a one-rank view cannot be "
                  "split)", s->node_parent[i]);
    if ((child->node_host[i] = strdup(host)) == NULL) return fail(s, "out of memory");
  }
  align_rails(s, child, S);
  int at = 0;
  for (int i = 0; i < p->nnodes; i++) {
    int c = s->child_of_parent[p->ring_node_order[i]];
    if (c >= 0) child->ring_node_order[at++] = c;
  }
  /* Nodes keep their NVLink domains, so the child's trees and edges use
   * NVLink where the parent's do. */
  if (p->node_domain == NULL) return 0;
  int *dom = malloc((size_t)s->nnodes * sizeof(int));
  if (dom == NULL) return fail(s, "out of memory");
  for (int i = 0; i < s->nnodes; i++) dom[i] = p->node_domain[s->node_parent[i]];
  int rc = gcoll_plan_set_domains(child, dom, s->err, s->errlen);
  free(dom);
  return rc;
}

struct gcoll_plan *gcoll_plan_subset(const struct gcoll_plan *parent, const int *members, int n,
                                     char *err, size_t errlen) {
  if (parent == NULL || members == NULL || n < 1 || n > parent->nranks) {
    snprintf(err, errlen, "%d members, a sub-plan needs 1 to %d", n,
             parent != NULL ? parent->nranks : 0);
    return NULL;
  }
  struct subset s = {.parent = parent, .members = members, .n = n, .err = err,
                     .errlen = errlen};
  struct gcoll_plan *child = NULL;
  s.node_parent = malloc((size_t)n * sizeof(int));
  s.node_first = malloc((size_t)n * sizeof(int));
  s.local = malloc((size_t)n * sizeof(int));
  s.member_at = malloc((size_t)n * sizeof(int));
  s.child_of_parent = malloc((size_t)parent->nnodes * sizeof(int));
  if (!s.node_parent || !s.node_first || !s.local || !s.member_at || !s.child_of_parent) {
    snprintf(err, errlen, "out of memory for %d members", n);
    goto out;
  }
  for (int i = 0; i < parent->nnodes; i++) s.child_of_parent[i] = -1;
  if (place_members(&s) != 0) goto out;
  child = gcoll_plan_new();
  if (child == NULL || gcoll_plan_alloc_nodes(child, s.nnodes) != 0) {
    snprintf(err, errlen, "out of memory for %d nodes", s.nnodes);
    goto fail;
  }
  child->nranks = n;
  child->nchannels = parent->nchannels;
  if (fill_nodes(&s, child) != 0 ||
      gcoll_plan_set_rank_order(child, s.member_at, err, errlen) != 0)
    goto fail;
  if (gcoll_plan_build_trees(child) != 0) {
    snprintf(err, errlen, "out of memory for the trees of %d nodes", s.nnodes);
    goto fail;
  }
  gcoll_plan_stamp(child, parent->job.id, parent->job.step);
  gcoll_plan_tune(child);
  char why[256];
  if (gcoll_plan_verify(child, why, sizeof(why)) != 0) {
    snprintf(err, errlen, "derived plan is inconsistent (a gcoll bug): %s", why);
    goto fail;
  }
  goto out;
fail:
  gcoll_plan_free(child);
  child = NULL;
out:
  free(s.node_parent);
  free(s.node_first);
  free(s.local);
  free(s.member_at);
  free(s.child_of_parent);
  return child;
}
