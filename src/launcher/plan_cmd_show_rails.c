/* gcoll-plan show: the NIC pair of every edge between nodes, and whether
 * it stays on one rail (leaf switch) or crosses the spine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"

static void nic_text(char *out, size_t len, const char *nic, int rail) {
  if (rail >= 0)
    snprintf(out, len, "%s/rail %d", nic[0] ? nic : "-", rail);
  else
    snprintf(out, len, "%s", nic[0] ? nic : "-");
}

static int same_rail(const char *a, int ra, const char *b, int rb) {
  return ra >= 0 && rb >= 0 ? ra == rb : strcmp(a, b) == 0;
}

/* One line per searched channel: the distinct (leaving NIC, entering NIC)
 * pairs of its ring's edges between nodes, in node order, with how many
 * edges each covers; plans of one class have one pair per channel. */
void cli_print_rails(const struct gcoll_plan *plan) {
  struct gcoll_rail_counts rc;
  gcoll_plan_rail_counts(plan, &rc);
  if (rc.ring_edges + rc.tree_edges == 0) return;
  printf("rails:     %d of %d ring edges and %d of %d tree edges between nodes change rails "
         "(cross the spine)\n", rc.ring_cross, rc.ring_edges, rc.tree_cross, rc.tree_edges);
  for (int s = 0; s < plan->nchannels / 2; s++) {
    enum { MAXP = 8 };
    const struct gcoll_intra_channel *from[MAXP], *to[MAXP];
    int count[MAXP], np = 0, more = 0;
    for (int i = 0; i < plan->nnodes; i++) {
      int n = plan->ring_node_order[i], m = plan->ring_node_order[(i + 1) % plan->nnodes];
      if (n == m || gcoll_plan_edge_between(plan, n, m) != GCOLL_EDGE_NET) continue;
      const struct gcoll_intra_channel *a = &plan->classes[plan->node_class[n]].graph.ch[s];
      const struct gcoll_intra_channel *b = &plan->classes[plan->node_class[m]].graph.ch[s];
      int j = 0;
      while (j < np && !(from[j] == a && to[j] == b)) j++;
      if (j == np && np == MAXP) {
        more++;
        continue;
      }
      if (j == np) {
        from[np] = a;
        to[np] = b;
        count[np++] = 0;
      }
      count[j]++;
    }
    if (np == 0) continue;
    printf("  ring %2d:", s);
    for (int j = 0; j < np; j++) {
      char x[64], y[64];
      nic_text(x, sizeof(x), from[j]->ring_nic_out_name, from[j]->ring_rail_out);
      nic_text(y, sizeof(y), to[j]->ring_nic_in_name, to[j]->ring_rail_in);
      printf("%s %s -> %s x%d%s", j ? "," : "", x, y, count[j],
             same_rail(from[j]->ring_nic_out_name, from[j]->ring_rail_out,
                       to[j]->ring_nic_in_name, to[j]->ring_rail_in) ? "" : " (cross-rail)");
    }
    if (more) printf(", %d more edges", more);
    printf("\n");
  }
}

/* The NIC pair of a rank's edge to another node: "mine -> theirs". */
void cli_print_nic_pair(const char *label, const char *mine, int my_rail, const char *theirs,
                        int their_rail, int via) {
  char x[64], y[64];
  nic_text(x, sizeof(x), mine, my_rail);
  nic_text(y, sizeof(y), theirs, their_rail);
  printf("  %s %s %s %s", label, x, strcmp(label, "in") == 0 ? "<-" : "->", y);
  if (!same_rail(mine, my_rail, theirs, their_rail)) printf(" (cross-rail)");
  if (via >= 0) printf(" via rank %d (PXN)", via);
}
