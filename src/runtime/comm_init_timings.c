/* The "init timings" INFO line (comm_init_timings.h). */
#include "runtime/comm_init_timings.h"

#include <stdio.h>

#include "kernels/wait.h"
#include "runtime/comm.h"

void gcoll_init_timings_start(struct gcoll_init_timings *t, const struct gcoll_bootstrap *bs) {
  *t = (struct gcoll_init_timings){.start_ns = gcoll_wait_now_ns()};
  if (bs != NULL && bs->opened_ns != 0 && bs->opened_ns < t->start_ns)
    t->start_ns = bs->opened_ns;
}

static double ms(uint64_t ns) { return (double)ns / 1e6; }

void gcoll_init_timings_log(const struct gcollComm *comm, const struct gcoll_init_timings *t) {
  uint64_t total = gcoll_wait_now_ns() - t->start_ns, requests, store_ns;
  char to[720];
  gcoll_bootstrap_requests(comm->bs, &requests, &store_ns, to, sizeof(to));
  uint64_t connect = t->connect_ns > t->connect_store_ns ? t->connect_ns - t->connect_store_ns : 0;
  uint64_t claimed = t->plan_ns + store_ns + connect + t->executor_ns;
  /* Clocks read at different moments can make the phases add up to a hair
   * more than the total; "other" is then 0, not a wrapped-around number. */
  uint64_t other = total > claimed ? total - claimed : 0;
  /* Where the peers' endpoints came from (issue 16): the plan's endpoints
   * file, or the store, and then why when the plan did bring some. */
  char from[400] = "";
  if (comm->bs->peer_routed)
    snprintf(from, sizeof(from), "; endpoints from the plan's endpoints file: %llu messages to "
             "%llu plan neighbours", (unsigned long long)comm->bs->peer_messages,
             (unsigned long long)comm->bs->peers);
  else if (comm->bs->endpoints_note[0] != '\0')
    snprintf(from, sizeof(from), "; endpoints from the store (%s)", comm->bs->endpoints_note);
  /* The progress thread's rounds so far (it is the process's, so a second
   * communicator's line counts the first's too): each is a wake-up that
   * took CPU from the ranks still starting. */
  char proxy[96] = "";
  if (comm->proxy != NULL) {
    struct gcoll_proxy_stats st;
    gcoll_proxy_get_stats(comm->proxy, &st);
    snprintf(proxy, sizeof(proxy), "; proxy thread %llu rounds, %llu asleep",
             (unsigned long long)st.rounds, (unsigned long long)st.sleeps);
  }
  gcoll_log_info(comm, "init timings: total %.2f ms = plan %.2f + bootstrap %.2f + connect %.2f "
                 "+ executor %.2f + other %.2f; bootstrap requests %llu: %s%s%s", ms(total),
                 ms(t->plan_ns), ms(store_ns), ms(connect), ms(t->executor_ns), ms(other),
                 (unsigned long long)requests, to, from, proxy);
}
