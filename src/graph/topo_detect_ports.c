/* Health of a node's RDMA ports at detection, from what verbs reports.
 *
 * Verbs gives a port's state and the rate it trained to, not the rate it
 * was built for. The ports of a GPU node are one model on one fabric, so
 * the fastest active port's rate stands for the line rate of all: a port
 * that trained lower (a bad cable, a switch port forced down) is slow, and
 * a port that is not active is down. Both stay in the topology, marked,
 * so that plans leave them out and say so. Kept apart from the verbs
 * calls so that it runs in tests on machines without RDMA devices. */
#include "topo.h"

void gcoll_port_health(const double *rate, const int *active, int n, double *line_gbps,
                       double *active_gbps) {
  double line = 0;
  for (int i = 0; i < n; i++)
    if (active[i] && rate[i] > line) line = rate[i];
  /* No active port tells the rate: a figure that plans can use, while the
   * ports stay down anyway. */
  if (!(line > 0)) line = 100.0;
  for (int i = 0; i < n; i++) {
    line_gbps[i] = line;
    active_gbps[i] = active[i] && rate[i] > 0 && rate[i] < line ? rate[i] : 0;
  }
}
