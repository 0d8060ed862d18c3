/* A node's multi-node NVLink domain (topo.h, struct gcoll_nvl_domain):
 * equality and the cluster UUID's text form, shared by the YAML reader,
 * detection and the plan builder so all three spell a domain alike. */
#include "topo.h"

#include <ctype.h>
#include <string.h>

int gcoll_nvl_domain_equal(const struct gcoll_nvl_domain *a, const struct gcoll_nvl_domain *b) {
  return a->set && b->set && a->clique == b->clique && strcmp(a->cluster, b->cluster) == 0;
}

/* 8-4-4-4-12 hex digits: the form NVML's 16 bytes print as, and the only
 * one accepted, so two spellings of one cluster never make two domains. */
int gcoll_nvl_domain_set_cluster(struct gcoll_nvl_domain *d, const char *uuid) {
  if (uuid == NULL || strlen(uuid) != GCOLL_UUID_TEXT - 1) return -1;
  for (int i = 0; i < GCOLL_UUID_TEXT - 1; i++) {
    int dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uuid[i] != '-' : !isxdigit((unsigned char)uuid[i])) return -1;
  }
  for (int i = 0; i < GCOLL_UUID_TEXT; i++) d->cluster[i] = (char)tolower((unsigned char)uuid[i]);
  return 0;
}
